//! The XDP filter's prefix sets in the kernel: a /16 summary and index per set and the
//! records of /24 states the index points at, with their ranks, the bitmaps of the /24s a
//! set holds in part (mmapped arrays, stored a word at a time), and a trie of IPv6 prefixes,
//! all sized when the program is loaded.

use foldhash::{HashMap, HashMapExt, HashSet};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use aya::maps::lpm_trie::{Key as TrieKey, LpmTrie};
use aya::maps::{Array, MapData};
use xskit::XdpProgram;

use crate::abi::{
    TrieEntry, PORT_SET_WORDS, RECORD_WORDS, SET_BLOCK_WORDS, SET_SIXTEENS, SET_SUMMARY_WORDS,
    SIXTEENS_LINE,
};
use crate::error::{Error, Result};
use crate::sets::{Element, PortSet, PrefixSet, RecordSlots, SetRecords};
use crate::sys::filter::{
    ElementKeyRepr, SetBitsRepr, SetBlockRepr, SetElementRepr, SetKeyRepr, SixteensLineRepr,
};

/// Words of a /24 bitmap in `set_bitmaps`' memory.
const BITMAP_WORDS: usize = std::mem::size_of::<SetBitsRepr>() / 8;
/// Words of an entry of `set_blocks`' memory: the table's word, then its rank.
const BLOCK_ENTRY_WORDS: usize = std::mem::size_of::<SetBlockRepr>() / 8;

/// What the filter's set tables are loaded with room for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetRoom {
    /// Sets (a /24 block table each).
    pub sets: usize,
    /// IPv4 /24s held in part (a bitmap each), over all sets.
    pub partial_blocks: usize,
    /// IPv6 trie prefixes, over all sets.
    pub trie_entries: usize,
    /// Elements of the sets with timeouts or counters, over all sets.
    pub elements: usize,
    /// Port sets (a bitmap of 65,536 bits each).
    pub port_sets: usize,
    /// Per-source buckets of the rate limits kept per source.
    pub sources: usize,
    /// Blocked sources.
    pub blocked: usize,
    /// Rule bit vectors, for more than [`crate::abi::LINEAR_RULES`] rules.
    pub vectors: usize,
    /// The rules' IPv6 prefixes, in their vectors' trie.
    pub rule_prefixes: usize,
}

/// Entries of each kind (/24s held in part, IPv6 prefixes, elements with timeouts or
/// counters) a filter with sets has room for at least: a /24's bitmap takes 32 bytes, so
/// 4 MiB of bitmaps, and entries of the trie and the elements' table take memory only once
/// written.
pub(crate) const SET_ROOM: usize = 131_072;

impl SetRoom {
    /// Room for exactly `sets` and `port_sets` port sets.
    pub fn for_sets(sets: &[Arc<PrefixSet>], port_sets: usize) -> Self {
        let mut room = SetRoom {
            sets: sets.len(),
            port_sets,
            ..SetRoom::default()
        };
        for set in sets {
            let (partial, trie) = set.kernel_entries();
            room.partial_blocks += partial;
            room.trie_entries += trie;
            room.elements += set.kernel_elements();
        }
        room
    }

    /// This room, with room beside each kind of set entry the sets have for as many again,
    /// `SET_ROOM` at least: for elements added while the forwarder runs.
    pub fn to_grow(self) -> Self {
        let grow = |n: usize| {
            if self.sets > 0 {
                (2 * n).max(SET_ROOM)
            } else {
                n
            }
        };
        SetRoom {
            partial_blocks: grow(self.partial_blocks),
            trie_entries: grow(self.trie_entries),
            elements: grow(self.elements),
            ..self
        }
    }

    /// What the room holds, in words.
    fn describe(&self) -> String {
        format!(
            "{} sets with {} /24s held in part, {} IPv6 prefixes and {} elements with timeouts \
             or counters, {} port sets",
            self.sets, self.partial_blocks, self.trie_entries, self.elements, self.port_sets
        )
    }

    /// True if `other` fits in this room.
    fn holds(&self, other: &SetRoom) -> bool {
        other.sets <= self.sets
            && other.partial_blocks <= self.partial_blocks
            && other.trie_entries <= self.trie_entries
            && other.elements <= self.elements
            && other.port_sets <= self.port_sets
    }

    /// The (map, max_entries) the program is loaded with.
    pub(crate) fn map_sizes(&self) -> [(&'static str, u32); 13] {
        let entries = |n: usize| u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        [
            ("set_blocks", entries(self.sets * SET_BLOCK_WORDS)),
            ("set_summary", entries(self.sets * SET_SUMMARY_WORDS)),
            (
                "set_sixteens",
                entries(self.sets * SET_SIXTEENS / SIXTEENS_LINE),
            ),
            ("set_bitmaps", entries(self.partial_blocks)),
            ("set_trie", entries(self.trie_entries)),
            ("set_elements", entries(self.elements)),
            ("port_sets", entries(self.port_sets * PORT_SET_WORDS)),
            ("source_buckets", entries(self.sources)),
            ("blocked", entries(self.blocked_slots())),
            // Twice each: a table set in force, and one to write the next rules in.
            ("vectors", entries(2 * self.vectors)),
            ("rule_trie", entries(2 * self.rule_prefixes)),
            // The fields' tables only with vectors to find: each takes half a MiB.
            (
                "field_ids",
                entries(2 * self.field_tables(crate::abi::Field::ALL.len())),
            ),
            ("plain_words", entries(2 * self.field_tables(1))),
        ]
    }

    /// The slots of the blocked table ([`crate::abi::block_slots`], and the
    /// [`crate::abi::BLOCK_PROBES`] - 1 past them a probe may reach), none without blocks.
    pub(crate) fn blocked_slots(&self) -> usize {
        match self.blocked {
            0 => 0,
            n => crate::abi::block_slots(n) + crate::abi::BLOCK_PROBES - 1,
        }
    }

    /// The read-only globals the program is loaded with: the slots of the blocked table a
    /// source's hash is taken to.
    pub(crate) fn globals(&self) -> [(&'static str, u32); 1] {
        let slots = crate::abi::block_slots(self.blocked);
        [("block_slots", u32::try_from(slots).unwrap_or(u32::MAX))]
    }

    /// `tables` when the room has vectors, else none.
    pub(crate) fn field_tables(&self, tables: usize) -> usize {
        if self.vectors > 0 {
            tables
        } else {
            0
        }
    }
}

/// A map call that failed, in words.
fn map_error(what: &'static str, e: impl std::error::Error) -> Error {
    Error::Filter {
        what,
        reason: xskit::error_chain(&e),
    }
}

/// The first `words` words of an array map, mapped; none when it is to hold none.
fn map_words<V: aya::Pod>(map: &Array<MapData, V>, words: usize) -> Result<Option<xskit_os::Mmap>> {
    if words == 0 {
        return Ok(None);
    }
    let fd = aya::maps::IterableMap::map(map).fd().as_fd();
    xskit_os::Mmap::shared(fd, words * 8, 0)
        .map(Some)
        .map_err(|e| map_error("mapping the set tables", e))
}

/// The tables of one loaded filter.
pub(crate) struct SetTables {
    room: SetRoom,
    /// Held for as long as its memory is mapped.
    _blocks_map: Array<MapData, SetBlockRepr>,
    /// `set_blocks`' memory (each table word beside its rank), when the filter has block
    /// tables.
    blocks: Option<xskit_os::Mmap>,
    _summary_map: Array<MapData, u64>,
    /// `set_summary`'s memory, likewise.
    summary: Option<xskit_os::Mmap>,
    _sixteens_map: Array<MapData, SixteensLineRepr>,
    /// `set_sixteens`' memory, likewise.
    sixteens: Option<xskit_os::Mmap>,
    _ports_map: Array<MapData, u64>,
    /// `port_sets`' memory, when the filter has port sets.
    ports: Option<xskit_os::Mmap>,
    /// The port set each bitmap holds.
    written_ports: Vec<Option<Arc<PortSet>>>,
    _bitmaps_map: Array<MapData, SetBitsRepr>,
    /// `set_bitmaps`' memory, when some set holds a /24 in part.
    bitmaps: Option<xskit_os::Mmap>,
    trie: LpmTrie<MapData, SetKeyRepr, u8>,
    /// The elements of sets with timeouts or counters.
    elements: LpmTrie<MapData, ElementKeyRepr, SetElementRepr>,
    /// `xskit_tracked_sets`: a bit for each side (source, destination) of a set with timeouts
    /// or counters that rules ask; not zero, it sends every packet to the general path, where
    /// they are asked.
    tracked_sets: Array<MapData, u32>,
    /// What it holds.
    tracked_mask: u32,
    /// The sides the rules in force ask of each set, as `xskit_tracked_sets` says them
    /// (none yet: every side).
    asked: Option<u32>,
    /// The set each table holds and where its bitmaps start, so that a change rewrites only
    /// the sets that changed or moved and removes the trie entries they lost.
    written: Vec<(Option<Arc<PrefixSet>>, usize)>,
    /// Where each set's /16s keep their records.
    record_slots: Vec<RecordSlots>,
}

impl SetTables {
    /// The tables of `program`, loaded with `room`.
    pub(crate) fn take(program: &XdpProgram, room: SetRoom) -> Result<Self> {
        let blocks_map: Array<MapData, SetBlockRepr> = program.take_map("set_blocks")?;
        let blocks = map_words(&blocks_map, room.sets * SET_BLOCK_WORDS * BLOCK_ENTRY_WORDS)?;
        let summary_map: Array<MapData, u64> = program.take_map("set_summary")?;
        let summary = map_words(&summary_map, room.sets * SET_SUMMARY_WORDS)?;
        let sixteens_map: Array<MapData, SixteensLineRepr> = program.take_map("set_sixteens")?;
        let sixteens = map_words(&sixteens_map, room.sets * SET_SIXTEENS / 2)?;
        let ports_map: Array<MapData, u64> = program.take_map("port_sets")?;
        let ports = map_words(&ports_map, room.port_sets * PORT_SET_WORDS)?;
        let bitmaps_map: Array<MapData, SetBitsRepr> = program.take_map("set_bitmaps")?;
        let bitmaps = map_words(&bitmaps_map, room.partial_blocks * BITMAP_WORDS)?;
        Ok(SetTables {
            room,
            _blocks_map: blocks_map,
            blocks,
            _summary_map: summary_map,
            summary,
            _sixteens_map: sixteens_map,
            sixteens,
            _ports_map: ports_map,
            ports,
            written_ports: vec![None; room.port_sets],
            _bitmaps_map: bitmaps_map,
            bitmaps,
            trie: program.take_map("set_trie")?,
            elements: program.take_map("set_elements")?,
            tracked_sets: program.take_map(".data.xskit_trk")?,
            tracked_mask: 0,
            asked: None,
            written: vec![(None, 0); room.sets],
            record_slots: vec![RecordSlots::default(); room.sets],
        })
    }

    /// Writes `sets`, port set `i` in bitmap `i`, a word at a time; bitmaps past them
    /// become empty.
    pub(crate) fn write_ports(&mut self, sets: &[Arc<PortSet>]) -> Result<()> {
        if sets.len() > self.room.port_sets {
            return Err(Error::SetsOutgrown {
                wanted: format!("{} port sets", sets.len()),
                room: self.room.describe(),
            });
        }
        let Some(map) = &self.ports else {
            return Ok(());
        };
        for i in 0..self.room.port_sets {
            let new = sets.get(i);
            if self.written_ports[i].as_ref() == new {
                continue;
            }
            let table = &map.words()[i * PORT_SET_WORDS..(i + 1) * PORT_SET_WORDS];
            for (j, word) in table.iter().enumerate() {
                let bits = new.map_or(0, |s| s.words()[j]);
                word.store(bits, Ordering::Relaxed);
            }
            self.written_ports[i] = new.cloned();
        }
        Ok(())
    }

    /// Writes `sets`, set `i` in table `i`; tables past them become empty.
    pub(crate) fn write(&mut self, sets: &[Arc<PrefixSet>]) -> Result<()> {
        let wanted = SetRoom::for_sets(sets, self.room.port_sets);
        if !self.room.holds(&wanted) {
            return Err(Error::SetsOutgrown {
                wanted: wanted.describe(),
                room: self.room.describe(),
            });
        }
        // A set's bits before its tables say TRACKED anywhere, cleared only after they no
        // longer do: the plain path, which does not ask the elements, never meets them in a
        // rule's question.
        let both = sets
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_tracked())
            .fold(0u32, |m, (i, _)| m | (0x1_0001 << i));
        let mask = self.asked.map_or(both, |asked| asked & both);
        self.set_tracked(self.tracked_mask | mask)?;
        // Each set's bitmaps follow the sets' before it.
        let mut first = 0;
        for i in 0..self.room.sets {
            let new = sets.get(i);
            if (self.written[i].0.as_ref(), self.written[i].1) != (new, first) {
                self.replace(i, new, first)?;
                self.written[i] = (new.cloned(), first);
            }
            first += new.map_or(0, |s| s.kernel_entries().0);
        }
        self.set_tracked(mask)
    }

    /// Before rules that ask the sides `asked` (bit `i`: set `i`'s sources, `16 + i`: its
    /// destinations) are put in force: those of sets with timeouts or counters join the
    /// asked ones.
    pub(crate) fn rules_ask(&mut self, asked: u32) -> Result<()> {
        let both = self.tracked_sides();
        self.set_tracked(self.tracked_mask | (asked & both))
    }

    /// After they are: only theirs are asked, for the packets' sides the rules ask.
    pub(crate) fn rules_asked(&mut self, asked: u32) -> Result<()> {
        self.asked = Some(asked);
        let both = self.tracked_sides();
        self.set_tracked(asked & both)
    }

    /// Both sides of every set written with timeouts or counters.
    fn tracked_sides(&self) -> u32 {
        self.written
            .iter()
            .enumerate()
            .filter(|(_, (s, _))| s.as_ref().is_some_and(|s| s.is_tracked()))
            .fold(0, |m, (i, _)| m | (0x1_0001 << i))
    }

    /// Writes `xskit_tracked_sets`.
    fn set_tracked(&mut self, mask: u32) -> Result<()> {
        if mask != self.tracked_mask {
            self.tracked_sets
                .set(0, mask, 0)
                .map_err(|e| map_error("writing which sets have timeouts or counters", e))?;
            self.tracked_mask = mask;
        }
        Ok(())
    }

    /// Set `i` becomes `new` (none: empty), its bitmaps from index `first`: the bitmaps and
    /// the new trie entries first, then the block table, each word's rank before the word,
    /// so that a /24 marked partial finds its bitmap; then the old trie entries it lacks are
    /// removed.
    fn replace(&mut self, i: usize, new: Option<&Arc<PrefixSet>>, first: usize) -> Result<()> {
        let layout = new.map(|s| s.kernel_layout()).unwrap_or_default();
        let set = i as u32;
        if let Some(map) = &self.bitmaps {
            let words = &map.words()[first * BITMAP_WORDS..];
            for (k, (_, bits)) in layout.partial.iter().enumerate() {
                for (w, &b) in words[k * BITMAP_WORDS..].iter().zip(bits) {
                    w.store(b, Ordering::Relaxed);
                }
            }
        }
        let element_keys = self.write_elements(set, new)?;
        let entry = if layout.tracked {
            TrieEntry::Tracked
        } else {
            TrieEntry::Member
        };
        let keys: Vec<_> = layout
            .trie
            .iter()
            .map(|&(addr, len)| TrieKey::new(32 + u32::from(len), SetKeyRepr { set, addr }))
            .collect();
        let values = vec![entry as u8; keys.len()];
        insert_all(&mut self.trie, &keys, &values, "writing a set's trie")?;
        let records = layout.records(&mut self.record_slots[i]);
        Self::store_records(self.blocks.as_ref(), i, &records, first as u64);
        // After the records, so that a /16 an entry sends to one finds it written, and the
        // summary after the entries, likewise.
        Self::store_sixteens(self.sixteens.as_ref(), i, &records.sixteens);
        Self::store_summary(self.summary.as_ref(), i, &records.summary);
        match self.written[i].0.clone() {
            Some(old) => self.remove_stale(set, &old, &element_keys, &keys),
            None => Ok(()),
        }
    }

    /// Removes what set `set` held as `old` and no longer holds: its elements not among
    /// `elements` and its trie entries not among `trie`, the keys just written.
    fn remove_stale(
        &mut self,
        set: u32,
        old: &PrefixSet,
        elements: &[TrieKey<ElementKeyRepr>],
        trie: &[TrieKey<SetKeyRepr>],
    ) -> Result<()> {
        let kept: HashSet<_> = elements
            .iter()
            .map(|k| (k.prefix_len(), k.data()))
            .collect();
        for e in old.elements() {
            let key = element_key(set, e);
            if !kept.contains(&(key.prefix_len(), key.data())) {
                self.elements
                    .remove(&key)
                    .map_err(|e| map_error("removing a set's element", e))?;
            }
        }
        let kept: HashSet<_> = trie.iter().map(|k| (k.prefix_len(), k.data())).collect();
        for &(addr, len) in &old.kernel_layout().trie {
            let key = TrieKey::new(32 + u32::from(len), SetKeyRepr { set, addr });
            if !kept.contains(&(key.prefix_len(), key.data())) {
                self.trie
                    .remove(&key)
                    .map_err(|e| map_error("removing a set's trie entry", e))?;
            }
        }
        Ok(())
    }

    /// Writes the elements of `new` (set `set`), if it has timeouts or counters, each with a
    /// zero count; returns their keys.
    fn write_elements(
        &mut self,
        set: u32,
        new: Option<&Arc<PrefixSet>>,
    ) -> Result<Vec<TrieKey<ElementKeyRepr>>> {
        let Some(new) = new else {
            return Ok(Vec::new());
        };
        let counted = u32::from(new.counts_elements());
        let keys: Vec<_> = new.elements().iter().map(|e| element_key(set, e)).collect();
        let values: Vec<_> = new
            .elements()
            .iter()
            .map(|e| SetElementRepr {
                expires: e.expires_ns.unwrap_or(0),
                packets: 0,
                len: u32::from(e.len),
                counted,
            })
            .collect();
        insert_all(
            &mut self.elements,
            &keys,
            &values,
            "writing a set's elements",
        )?;
        Ok(keys)
    }

    /// For each of `sets` (by index, as written), its elements with the packets the kernel
    /// counted on each: the elements' trie read whole, a system call per many thousand.
    pub(crate) fn element_counts(
        &self,
        sets: &[Arc<PrefixSet>],
    ) -> Result<Vec<Vec<(Element, u64)>>> {
        const WHAT: &str = "reading a set's elements";
        if sets.iter().all(|s| s.elements().is_empty()) {
            return Ok(vec![Vec::new(); sets.len()]);
        }
        let read = xskit::maps::lookup_batch::<TrieKey<ElementKeyRepr>, SetElementRepr>(
            aya::maps::IterableMap::map(&self.elements),
        );
        let packets: HashMap<_, _> = match read {
            Ok(all) => all
                .into_iter()
                .map(|(k, v)| ((k.prefix_len(), k.data()), v.packets))
                .collect(),
            Err(e) if batch_unsupported(&e) => self.element_packets_one_by_one(sets)?,
            Err(e) => return Err(map_error(WHAT, e)),
        };
        sets.iter()
            .enumerate()
            .map(|(i, set)| {
                set.elements()
                    .iter()
                    .map(|e| {
                        let key = element_key(i as u32, e);
                        match packets.get(&(key.prefix_len(), key.data())) {
                            Some(&n) => Ok((*e, n)),
                            None => Err(Error::Filter {
                                what: WHAT,
                                reason: format!(
                                    "element {} of set {i} is not in the kernel",
                                    e.prefix()
                                ),
                            }),
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// The packets on each element of `sets`, read an element a call: for a kernel without
    /// the batch command.
    fn element_packets_one_by_one(
        &self,
        sets: &[Arc<PrefixSet>],
    ) -> Result<HashMap<(u32, ElementKeyRepr), u64>> {
        let mut packets = HashMap::new();
        for (i, set) in sets.iter().enumerate() {
            for e in set.elements() {
                let key = element_key(i as u32, e);
                let value = self
                    .elements
                    .get(&key, 0)
                    .map_err(|err| map_error("reading a set's elements", err))?;
                packets.insert((key.prefix_len(), key.data()), value.packets);
            }
        }
        Ok(packets)
    }

    /// Set `i`'s words of `set_summary` (SET_SUMMARY_WORDS a set), or zeros when empty.
    fn store_summary(map: Option<&xskit_os::Mmap>, i: usize, words: &[u64]) {
        let Some(map) = map else { return };
        let table = &map.words()[i * SET_SUMMARY_WORDS..(i + 1) * SET_SUMMARY_WORDS];
        for (j, word) in table.iter().enumerate() {
            word.store(words.get(j).copied().unwrap_or(0), Ordering::Relaxed);
        }
    }

    /// Set `i`'s entries of `set_sixteens` (SET_SIXTEENS a set, two to a word), or zeros
    /// when empty.
    fn store_sixteens(map: Option<&xskit_os::Mmap>, i: usize, entries: &[u32]) {
        let Some(map) = map else { return };
        let size = SET_SIXTEENS / 2;
        let table = &map.words()[i * size..(i + 1) * size];
        for (j, word) in table.iter().enumerate() {
            let entry = |k: usize| entries.get(k).copied().unwrap_or(0).to_ne_bytes();
            let mut pair = [0u8; 8];
            pair[..4].copy_from_slice(&entry(2 * j));
            pair[4..].copy_from_slice(&entry(2 * j + 1));
            word.store(u64::from_ne_bytes(pair), Ordering::Relaxed);
        }
    }

    /// Set `i`'s records in `set_blocks` (SET_BLOCK_WORDS entries a set, RECORD_WORDS a
    /// record), each at its slot, its ranks counted from the set's first bitmap `first`; each
    /// rank is stored before its word. Slots no /16 has are left: nothing is sent there.
    fn store_records(map: Option<&xskit_os::Mmap>, i: usize, records: &SetRecords, first: u64) {
        let Some(map) = map else { return };
        let size = SET_BLOCK_WORDS * BLOCK_ENTRY_WORDS;
        let table = &map.words()[i * size..(i + 1) * size];
        let words = records.words.chunks_exact(RECORD_WORDS);
        let ranks = records.ranks.chunks_exact(RECORD_WORDS);
        for ((&slot, words), ranks) in records.slots.iter().zip(words).zip(ranks) {
            let at = slot as usize * RECORD_WORDS * BLOCK_ENTRY_WORDS;
            let entries = table[at..].chunks_exact(BLOCK_ENTRY_WORDS);
            for ((entry, &word), &rank) in entries.zip(words).zip(ranks) {
                entry[1].store(first + u64::from(rank), Ordering::Relaxed);
                entry[0].store(word, Ordering::Relaxed);
            }
        }
    }
}

/// Whether a batch command failed for want of support (a kernel or map type without it), so
/// that entries one at a time will do.
pub(crate) fn batch_unsupported(e: &xskit::SyscallError) -> bool {
    const ENOTSUPP: i32 = 524;
    matches!(
        e.os_error.raw_os_error(),
        Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP)
    )
}

/// Writes `keys[i]` with `values[i]` into `trie` (created or replaced): in batches of many
/// thousand a system call, or one a call where the kernel has no batch command for it.
fn insert_all<K: aya::Pod, V: aya::Pod>(
    trie: &mut LpmTrie<MapData, K, V>,
    keys: &[TrieKey<K>],
    values: &[V],
    what: &'static str,
) -> Result<()> {
    match xskit::maps::update_batch(aya::maps::IterableMap::map(trie), keys, values) {
        Ok(()) => Ok(()),
        Err(e) if batch_unsupported(&e) => {
            for (k, v) in keys.iter().zip(values) {
                trie.insert(k, *v, 0).map_err(|e| map_error(what, e))?;
            }
            Ok(())
        }
        Err(e) => Err(map_error(what, e)),
    }
}

/// Element `e` of set `set` as a key of `set_elements`: the set and family, the network.
fn element_key(set: u32, e: &Element) -> TrieKey<ElementKeyRepr> {
    let family_bit = u32::from(e.family == 6);
    TrieKey::new(
        32 + u32::from(e.len),
        ElementKeyRepr {
            set: set * 2 + family_bit,
            addr: e.network.to_be_bytes(),
            pad: 0,
        },
    )
}
