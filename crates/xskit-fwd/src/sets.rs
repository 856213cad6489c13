//! Named sets of IPv4 and IPv6 prefixes (`[[set]]` in a rules file, `src = "@NAME"` in a
//! rule): read from a list of prefixes, kept as sorted disjoint address ranges that a lookup
//! searches in O(log n), and laid out for the kernel as a two-bit table of IPv4 /24 blocks
//! (one load decides an address in a /24 the set holds whole or not at all), a bitmap of the
//! 256 addresses of each /24 it holds in part (found by a rank: the table word's count of
//! partial /24s before it, plus those before the /24 in the word), and a trie for IPv6.

use foldhash::HashMap;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

use crate::abi::{
    Block, Sixteen, PORT_SET_WORDS, RECORD_WORDS, SET_BLOCK_WORDS, SET_SIXTEENS, SET_SUMMARY_WORDS,
};
use crate::prefix::Prefix;

/// Prefixes one set holds at most, counted as written (before duplicates are merged).
pub const MAX_SET_PREFIXES: usize = 1 << 22;

/// The largest set file read: 4 Mi prefixes with a comment on each line fit.
pub const MAX_SET_FILE_BYTES: u64 = 128 << 20;

/// Kernel memory the set tables of one filter take at most, estimated before loading.
pub const MAX_SET_KERNEL_BYTES: u64 = 1 << 30;

/// A set file's prefixes with their 1-based lines: one prefix or address a line; `#` and
/// `;` start a comment; blank lines are skipped.
fn set_file_items(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, line)| {
        let content = line.split(['#', ';']).next().unwrap_or("").trim();
        (!content.is_empty()).then_some((i + 1, content))
    })
}

/// The first address of each prefix a set file writes, in the file's order, duplicates kept
/// (a prefix written with host bits set gives its network's first address): what the
/// generator's `--src-list` sends from, so a flood's sources are spread over a set.
pub fn first_addresses(text: &str) -> Result<Vec<IpAddr>, SetLineError> {
    set_file_items(text)
        .map(|(line, item)| {
            Prefix::parse_lenient(item)
                .map(|(prefix, _)| prefix.network())
                .map_err(|message| SetLineError { line, message })
        })
        .collect()
}

/// The longest an element's timeout may be.
pub const MAX_ELEMENT_TIMEOUT: Duration = Duration::from_secs(365 * 86_400);

/// How a set's elements live and are counted, beyond their prefixes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetOptions {
    /// Elements written without a timeout of their own expire this long after `now_ns`.
    pub timeout: Option<Duration>,
    /// Each element counts, in the kernel, the packets whose address it holds on the side a
    /// rule asks (source for `src`, destination for `dst`).
    pub counters: bool,
    /// When the set was read (CLOCK_MONOTONIC nanoseconds): timeouts count from here.
    pub now_ns: u64,
}

/// The most elements [`PrefixSet::listed`] gives.
pub(crate) const MAX_LISTED: usize = 100_000;

/// A named set of prefixes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixSet {
    name: String,
    /// Disjoint, sorted, merged inclusive ranges of IPv4 addresses (of a set with
    /// timeouts, the elements that never expire).
    v4: Vec<(u32, u32)>,
    /// Likewise for IPv6.
    v6: Vec<(u128, u128)>,
    /// Its elements one by one, when it has timeouts or counters.
    tracked: Option<Box<Tracked>>,
    stats: SetStats,
}

/// An element of a set with timeouts or counters: a prefix and when it expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Element {
    /// 4 or 6.
    pub family: u8,
    /// The network, as a key's 16 address bytes taken as a big-endian number (IPv4 in the
    /// first 4).
    pub network: u128,
    /// The prefix length.
    pub len: u8,
    /// When it expires (CLOCK_MONOTONIC nanoseconds), or never.
    pub expires_ns: Option<u64>,
}

impl Element {
    /// The element as a prefix, for people.
    pub fn prefix(&self) -> Prefix {
        let addr = match self.family {
            4 => IpAddr::from(((self.network >> 96) as u32).to_be_bytes()),
            _ => IpAddr::from(self.network.to_be_bytes()),
        };
        Prefix {
            addr,
            len: self.len,
        }
    }
}

/// A set's elements kept one by one (a set with timeouts or counters): the kernel holds each
/// with its own expiry and count, and a lookup steps past an expired element to a shorter one.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Tracked {
    counters: bool,
    /// Every element, sorted, one per prefix (the longest-lived of a prefix written twice).
    elements: Vec<Element>,
    /// The elements that expire, by (family, length, network): their expiry.
    timed: HashMap<(u8, u8, u128), u64>,
    /// The lengths of the timed elements of IPv4 and of IPv6, longest first.
    timed_lengths: [Vec<u8>; 2],
}

impl Tracked {
    /// Takes `elements` (with duplicates); returns how many were duplicates.
    fn new(counters: bool, mut elements: Vec<Element>) -> (Self, usize) {
        // Per prefix, the one that never expires, else the latest.
        elements.sort_unstable_by_key(|e| {
            (
                e.family,
                e.network,
                e.len,
                e.expires_ns.is_none(),
                e.expires_ns,
            )
        });
        let written = elements.len();
        let mut out: Vec<Element> = Vec::with_capacity(written);
        for e in elements {
            match out.last_mut() {
                Some(last)
                    if (last.family, last.network, last.len) == (e.family, e.network, e.len) =>
                {
                    *last = e
                }
                _ => out.push(e),
            }
        }
        let timed: HashMap<_, _> = out
            .iter()
            .filter_map(|e| Some(((e.family, e.len, e.network), e.expires_ns?)))
            .collect();
        let mut timed_lengths = [Vec::new(), Vec::new()];
        for &(family, len, _) in timed.keys() {
            timed_lengths[usize::from(family == 6)].push(len);
        }
        for lengths in &mut timed_lengths {
            lengths.sort_unstable_by(|a, b| b.cmp(a));
            lengths.dedup();
        }
        let duplicates = written - out.len();
        let tracked = Tracked {
            counters,
            elements: out,
            timed,
            timed_lengths,
        };
        (tracked, duplicates)
    }

    /// True if a timed element that has not expired at `now_ns` holds `addr`.
    fn holds_timed(&self, family: u8, addr: u128, now_ns: u64) -> bool {
        self.timed_lengths[usize::from(family == 6)]
            .iter()
            .any(|&len| {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                self.timed
                    .get(&(family, len, addr & mask))
                    .is_some_and(|&expires| expires > now_ns)
            })
    }
}

/// What reading a set found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetStats {
    /// Prefixes written (addresses count as host prefixes).
    pub prefixes: usize,
    /// Of those, IPv6.
    pub ipv6: usize,
    /// Of those, with a timeout.
    pub timed: usize,
    /// Written with host bits set, and taken as their network (`10.0.0.1/8` as `10.0.0.0/8`).
    pub normalised: usize,
    /// Duplicates, or inside another prefix of the set: they add nothing. (In a set with
    /// timeouts or counters, only duplicates: each element is kept with its own.)
    pub covered: usize,
}

/// A line of a set that is not a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetLineError {
    /// 1-based line (for inline prefixes, 1-based position in the list).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// The set's entries as the kernel filter holds them: [`PrefixSet::kernel_layout`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetLayout {
    /// The set's /24 block table ([`SET_BLOCK_WORDS`] words), or empty when the set holds no
    /// IPv4 prefix (all [`Block::Out`]).
    pub blocks: Vec<u64>,
    /// The /24s the set holds in part ([`Block::Partial`]), ascending: the /24's number
    /// (its first address >> 8) and a bit for each of its 256 addresses (bit `a & 63` of word
    /// `(a & 255) >> 6` for address `a`).
    pub partial: Vec<(u32, [u64; 4])>,
    /// For each word of `blocks`, how many partial /24s the words before it hold: the index
    /// in `partial` of the word's first (`partial_rank` finds the others). Empty with
    /// `blocks`.
    pub ranks: Vec<u32>,
    /// The IPv6 ranges as trie prefixes: (address, length).
    pub trie: Vec<([u8; 16], u8)>,
    /// True for a set with timeouts or counters: its /24s are [`Block::Tracked`] where an
    /// element reaches, its trie prefixes are its IPv6 elements, and its elements decide.
    pub tracked: bool,
}

/// A set's IPv4 part as the kernel reads it ([`SetLayout::records`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetRecords {
    /// Two bits for each /16 ([`SET_SUMMARY_WORDS`] words): [`Block::Out`], [`Block::Full`],
    /// or [`Block::Partial`] to read its entry in `sixteens`.
    pub summary: Vec<u64>,
    /// An entry for each /16 ([`SET_SIXTEENS`]): its low two bits a [`Sixteen`].
    pub sixteens: Vec<u32>,
    /// The records of the /16s the entries send to them, in the order of their /16s:
    /// [`RECORD_WORDS`] block table words each.
    pub words: Vec<u64>,
    /// Each of `words`' rank, as [`SetLayout::ranks`].
    pub ranks: Vec<u32>,
    /// Each record's slot in the set's block table, as [`RecordSlots`] gave it.
    pub slots: Vec<u32>,
}

/// Where each /16 of a set that has a record keeps it in the set's block table, from one
/// layout of the set to the next: a change in place rewrites a /16's record where it was,
/// word by word, and a /16 that gains one takes a slot no /16 the kernel may still be sent to
/// uses, so that while a change is written a packet meets each /16 old or new.
#[derive(Clone, Debug, Default)]
pub struct RecordSlots {
    of: HashMap<u32, u32>,
    free: Vec<u32>,
    next: u32,
}

impl RecordSlots {
    /// The slots of the /16s `wanted`: each its own if it had one, else a free one. Slots
    /// of the /16s no longer wanted are free only from the next call (the kernel may read
    /// them until the new entries are written), unless the table has no other room.
    fn assign(&mut self, wanted: &[u32]) -> Vec<u32> {
        let mut of = HashMap::default();
        let mut freed: Vec<u32> = self
            .of
            .iter()
            .filter(|(sixteen, _)| wanted.binary_search(sixteen).is_err())
            .map(|(_, &slot)| slot)
            .collect();
        let slots = wanted
            .iter()
            .map(|&sixteen| {
                let slot = match self.of.get(&sixteen) {
                    Some(&slot) => slot,
                    None => self.free.pop().unwrap_or_else(|| {
                        if (self.next as usize) < SET_SIXTEENS {
                            self.next += 1;
                            self.next - 1
                        } else {
                            freed.pop().expect("no more /16s than slots")
                        }
                    }),
                };
                of.insert(sixteen, slot);
                slot
            })
            .collect();
        self.of = of;
        self.free.extend(freed);
        slots
    }
}

/// Eight block table words of a /16 whose 256 /24s are all [`Block::Full`].
const ALL_FULL: u64 = 0x5555_5555_5555_5555;

impl SetLayout {
    /// The set's /16 summary, index and the records it points at, from the block table: a
    /// /16 whose /24s are all [`Block::Out`] or all [`Block::Full`] is so; one whose
    /// addresses are one prefix longer than /16 (a set of scattered hosts: nearly every /16
    /// it reaches) is [`Sixteen::One`]; any other has a record. Empty without `blocks`.
    pub fn records(&self, slots: &mut RecordSlots) -> SetRecords {
        let mut out = SetRecords::default();
        if self.blocks.is_empty() {
            slots.assign(&[]);
            return out;
        }
        out.summary = vec![0; SET_SUMMARY_WORDS];
        out.sixteens = vec![0; SET_SIXTEENS];
        let mut recorded = Vec::new();
        for (i, words) in self.blocks.chunks(RECORD_WORDS).enumerate() {
            let (whole, entry) = if words.iter().all(|&w| w == 0) {
                (Block::Out, Sixteen::Out as u32)
            } else if words.iter().all(|&w| w == ALL_FULL) {
                (Block::Full, Sixteen::Full as u32)
            } else if let Some((low, len)) = self.lone_prefix(i) {
                let entry = Sixteen::One as u32 | u32::from(len - 16) << 2 | u32::from(low) << 16;
                (Block::Partial, entry)
            } else {
                recorded.push(i as u32);
                out.words.extend_from_slice(words);
                out.ranks
                    .extend_from_slice(&self.ranks[i * RECORD_WORDS..(i + 1) * RECORD_WORDS]);
                (Block::Partial, Sixteen::Record as u32)
            };
            out.summary[i / 32] |= (whole as u64) << ((i % 32) * 2);
            out.sixteens[i] = entry;
        }
        out.slots = slots.assign(&recorded);
        for (&sixteen, &slot) in recorded.iter().zip(&out.slots) {
            out.sixteens[sixteen as usize] |= slot << 2;
        }
        out
    }

    /// The one prefix /16 number `i` holds, as its address's low half and its length
    /// (17 to 32), when its addresses are exactly one such prefix; never in a set with
    /// timeouts or counters, whose elements decide.
    fn lone_prefix(&self, i: usize) -> Option<(u16, u8)> {
        let words = &self.blocks[i * RECORD_WORDS..(i + 1) * RECORD_WORDS];
        // The /24s in each state, a bit (the low one of their two, as in ALL_FULL) each.
        let slots = |state: fn(u64) -> u64| {
            let bits: [u64; RECORD_WORDS] = std::array::from_fn(|k| state(words[k]) & ALL_FULL);
            let count: u32 = bits.iter().map(|b| b.count_ones()).sum();
            let first = bits.iter().position(|&b| b != 0);
            let last = bits.iter().rposition(|&b| b != 0);
            let slot = |k: usize, bit: u32| k * 32 + bit as usize / 2;
            let first = first.map(|k| slot(k, bits[k].trailing_zeros()));
            let last = last.map(|k| slot(k, 63 - bits[k].leading_zeros()));
            (count as usize, first, last)
        };
        let full = slots(|w| w & !(w >> 1));
        let partial = slots(|w| (w >> 1) & !w);
        let tracked = slots(|w| w & (w >> 1));
        match (full, partial, tracked.0) {
            ((n, Some(first), Some(last)), (0, ..), 0) => {
                let lone = n.is_power_of_two() && first.is_multiple_of(n) && last == first + n - 1;
                lone.then(|| ((first << 8) as u16, 24 - n.trailing_zeros() as u8))
            }
            ((0, ..), (1, Some(slot), _), 0) => {
                let word = i * RECORD_WORDS + slot / 32;
                let rank = self.ranks[word] + partial_rank(self.blocks[word], (slot % 32) as u32);
                let bits = self.partial[rank as usize].1;
                lone_run(&bits).map(|(first, len)| ((slot << 8 | first) as u16, len))
            }
            _ => None,
        }
    }
}

/// The one prefix a /24's bitmap holds, as its first address's last byte and its length,
/// when its addresses are exactly one aligned run.
fn lone_run(bits: &[u64; 4]) -> Option<(usize, u8)> {
    let n: u32 = bits.iter().map(|w| w.count_ones()).sum();
    let k = bits.iter().position(|&w| w != 0)?;
    let first = k * 64 + bits[k].trailing_zeros() as usize;
    let run = first..first + n as usize;
    let held = |a: usize| bits[a / 64] >> (a % 64) & 1 == 1;
    let lone = n.is_power_of_two()
        && first.is_multiple_of(n as usize)
        && (0..256).all(|a| held(a) == run.contains(&a));
    lone.then(|| (first, 32 - n.trailing_zeros() as u8))
}

/// The kernel's form of a set with timeouts or counters: each /24 an element reaches is
/// [`Block::Tracked`] (asked of the elements' trie), each IPv6 element a trie prefix.
fn tracked_layout(elements: &[Element]) -> SetLayout {
    let mut layout = SetLayout {
        tracked: true,
        ..SetLayout::default()
    };
    for e in elements {
        if e.family == 6 {
            layout.trie.push((e.network.to_be_bytes(), e.len));
            continue;
        }
        if layout.blocks.is_empty() {
            layout.blocks = vec![0; SET_BLOCK_WORDS];
        }
        let lo = (e.network >> 96) as u32;
        let hi = lo | u32::MAX.checked_shr(u32::from(e.len)).unwrap_or(0);
        for block in (lo >> 8)..=(hi >> 8) {
            layout.blocks[(block >> 5) as usize] |= (Block::Tracked as u64) << ((block & 31) * 2);
        }
    }
    layout.ranks = vec![0; layout.blocks.len()];
    layout
}

/// A set's element: a prefix (host bits cleared, and true if there were some), then
/// optionally `timeout DURATION`.
fn parse_element(item: &str) -> Result<(Prefix, bool, Option<Duration>), String> {
    let mut words = item.split_whitespace();
    let (prefix, normalised) = Prefix::parse_lenient(words.next().unwrap_or(""))?;
    let timeout = match (words.next(), words.next(), words.next()) {
        (None, _, _) => None,
        (Some("timeout"), Some(t), None) => Some(crate::duration::parse_within(
            t,
            "timeout",
            (MAX_ELEMENT_TIMEOUT, "365d"),
        )?),
        _ => {
            return Err(format!(
                "{item:?}: after the prefix an element takes only \"timeout DURATION\" \
                 (\"198.51.100.0/24 timeout 10m\")"
            ))
        }
    };
    Ok((prefix, normalised, timeout))
}

impl PrefixSet {
    /// A set of the prefixes in `items`, each with the line it came from.
    pub fn from_items<'a>(
        name: &str,
        items: impl IntoIterator<Item = (usize, &'a str)>,
    ) -> Result<Self, SetLineError> {
        Self::from_items_with(name, items, SetOptions::default())
    }

    /// A set of the elements in `items` (a prefix, and `timeout DURATION` if it expires),
    /// each with the line it came from, kept as `options` say.
    pub fn from_items_with<'a>(
        name: &str,
        items: impl IntoIterator<Item = (usize, &'a str)>,
        options: SetOptions,
    ) -> Result<Self, SetLineError> {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        let mut elements = Vec::new();
        let mut stats = SetStats::default();
        for (line, item) in items {
            if stats.prefixes == MAX_SET_PREFIXES {
                return Err(SetLineError {
                    line,
                    message: format!(
                        "more than {MAX_SET_PREFIXES} prefixes: split the set, or merge its \
                         prefixes"
                    ),
                });
            }
            let (prefix, normalised, timeout) =
                parse_element(item).map_err(|message| SetLineError { line, message })?;
            stats.prefixes += 1;
            stats.normalised += usize::from(normalised);
            stats.ipv6 += usize::from(prefix.family() == 6);
            let expires_ns = timeout.or(options.timeout).map(|t| {
                options
                    .now_ns
                    .saturating_add(t.as_nanos().try_into().unwrap_or(u64::MAX))
            });
            stats.timed += usize::from(expires_ns.is_some());
            let (lo, hi) = prefix.range();
            elements.push(Element {
                family: prefix.family(),
                network: lo,
                len: prefix.len,
                expires_ns,
            });
            match (expires_ns, prefix.family()) {
                (Some(_), _) => {}
                (None, 4) => v4.push(((lo >> 96) as u32, (hi >> 96) as u32)),
                (None, _) => v6.push((lo, hi)),
            }
        }
        let covered = merge(&mut v4) + merge(&mut v6);
        let tracked = (options.counters || stats.timed > 0).then(|| {
            let (tracked, duplicates) = Tracked::new(options.counters, elements);
            stats.covered = duplicates;
            Box::new(tracked)
        });
        if tracked.is_none() {
            stats.covered = covered;
        }
        Ok(PrefixSet {
            name: name.to_string(),
            v4,
            v6,
            tracked,
            stats,
        })
    }

    /// This set with the elements `added` (each a prefix, and in a set with timeouts or
    /// counters `timeout DURATION` if it expires; `timeout` for those without one of their
    /// own, timed from `now_ns`, CLOCK_MONOTONIC) and the prefixes `removed` taken out. In a set
    /// without timeouts or counters removing takes the addresses out, however they were
    /// written; in one with, an element goes as it was written, and one it does not hold is
    /// refused. Errors count the items 1-based, the added first.
    pub fn changed(
        &self,
        added: &[String],
        removed: &[String],
        timeout: Option<Duration>,
        now_ns: u64,
    ) -> Result<Self, SetLineError> {
        let at = |line: usize| move |message: String| SetLineError { line, message };
        let mut next = self.clone();
        let expiring = |t: Option<Duration>| {
            t.or(timeout)
                .map(|t| now_ns.saturating_add(t.as_nanos().try_into().unwrap_or(u64::MAX)))
        };
        let mut elements = self.elements().to_vec();
        for (i, item) in added.iter().enumerate() {
            let (prefix, _, t) = parse_element(item).map_err(at(i + 1))?;
            let expires_ns = expiring(t);
            if self.tracked.is_none() && expires_ns.is_some() {
                return Err(at(i + 1)(format!(
                    "set {:?} has no timeouts: its elements never expire (give the set a \
                     timeout in the rules file to have them)",
                    self.name
                )));
            }
            let (lo, hi) = prefix.range();
            match (&self.tracked, prefix.family()) {
                (Some(_), family) => elements.push(Element {
                    family,
                    network: lo,
                    len: prefix.len,
                    expires_ns,
                }),
                (None, 4) => next.v4.push(((lo >> 96) as u32, (hi >> 96) as u32)),
                (None, _) => next.v6.push((lo, hi)),
            }
            next.stats.prefixes += 1;
        }
        merge(&mut next.v4);
        merge(&mut next.v6);
        for (i, item) in removed.iter().enumerate() {
            let line = added.len() + i + 1;
            let (prefix, _) = Prefix::parse_lenient(item.trim()).map_err(at(line))?;
            let (lo, hi) = prefix.range();
            if self.tracked.is_some() {
                let before = elements.len();
                elements
                    .retain(|e| (e.family, e.network, e.len) != (prefix.family(), lo, prefix.len));
                if elements.len() == before {
                    return Err(at(line)(format!(
                        "{prefix} is not an element of set {:?}",
                        self.name
                    )));
                }
            } else if prefix.family() == 4 {
                subtract(&mut next.v4, ((lo >> 96) as u32, (hi >> 96) as u32));
            } else {
                subtract(&mut next.v6, (lo, hi));
            }
        }
        if let Some(t) = &self.tracked {
            next = Self::of_elements(&self.name, t.counters, elements);
        }
        Ok(next)
    }

    /// Its elements for people, at most `MAX_LISTED`: a set without timeouts or counters
    /// as the fewest prefixes that cover it; one with, each element, with the time it has
    /// left at `now_ns` (CLOCK_MONOTONIC) if it expires (`198.51.100.7 expires 59s`), the
    /// expired left out.
    pub fn listed(&self, now_ns: u64) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(t) = &self.tracked {
            for e in &t.elements {
                match e.expires_ns {
                    None => out.push(e.prefix().to_string()),
                    Some(at) if at > now_ns => out.push(format!(
                        "{} expires {}s",
                        e.prefix(),
                        (at - now_ns).div_ceil(1_000_000_000)
                    )),
                    Some(_) => {}
                }
            }
            out.truncate(MAX_LISTED);
            return out;
        }
        let v4 = self.v4.iter().flat_map(|&(lo, hi)| {
            cidrs(u128::from(lo)..=u128::from(hi), 32)
                .into_iter()
                .map(|(a, len)| format!("{}/{len}", std::net::Ipv4Addr::from(a as u32)))
        });
        let v6 = self.v6.iter().flat_map(|&(lo, hi)| {
            cidrs(lo..=hi, 128)
                .into_iter()
                .map(|(a, len)| format!("{}/{len}", std::net::Ipv6Addr::from(a)))
        });
        out.extend(v4.chain(v6).take(MAX_LISTED));
        out
    }

    /// A set with timeouts or counters holding `elements`.
    fn of_elements(name: &str, counters: bool, elements: Vec<Element>) -> Self {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for e in elements.iter().filter(|e| e.expires_ns.is_none()) {
            let (lo, hi) = e.prefix().range();
            match e.family {
                4 => v4.push(((lo >> 96) as u32, (hi >> 96) as u32)),
                _ => v6.push((lo, hi)),
            }
        }
        merge(&mut v4);
        merge(&mut v6);
        let stats = SetStats {
            prefixes: elements.len(),
            ipv6: elements.iter().filter(|e| e.family == 6).count(),
            timed: elements.iter().filter(|e| e.expires_ns.is_some()).count(),
            ..SetStats::default()
        };
        let (tracked, _) = Tracked::new(counters, elements);
        PrefixSet {
            name: name.to_string(),
            v4,
            v6,
            tracked: Some(Box::new(tracked)),
            stats,
        }
    }

    /// A set read from a file's text: one prefix or address a line; `#` and `;` start a
    /// comment (Spamhaus's lists put `; SBL...` after each prefix); blank lines are skipped.
    pub fn parse(name: &str, text: &str) -> Result<Self, SetLineError> {
        Self::from_items(name, set_file_items(text))
    }

    /// As [`PrefixSet::parse`], kept as `options` say; a line may give its element a
    /// timeout of its own (`198.51.100.0/24 timeout 10m`).
    pub fn parse_with(name: &str, text: &str, options: SetOptions) -> Result<Self, SetLineError> {
        Self::from_items_with(name, set_file_items(text), options)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What reading it found.
    pub fn stats(&self) -> SetStats {
        self.stats
    }

    /// True if the address `addr` of `family` (a key's 16 bytes as a big-endian number, IPv4
    /// in the first 4) is in the set now; never for family 0 (not IP).
    #[inline]
    pub fn contains(&self, family: u8, addr: u128) -> bool {
        let permanent = match family {
            4 => find(&self.v4, (addr >> 96) as u32),
            6 => find(&self.v6, addr),
            _ => return false,
        };
        permanent
            || self.tracked.as_ref().is_some_and(|t| {
                // The XDP program's clock, so that both decide alike.
                !t.timed.is_empty() && t.holds_timed(family, addr, xskit_os::monotonic_coarse_ns())
            })
    }

    /// As [`PrefixSet::contains`], at CLOCK_MONOTONIC `now_ns`: an element that expired by
    /// then is gone, and a shorter one that holds the address still answers.
    pub fn contains_at(&self, family: u8, addr: u128, now_ns: u64) -> bool {
        let permanent = match family {
            4 => find(&self.v4, (addr >> 96) as u32),
            6 => find(&self.v6, addr),
            _ => return false,
        };
        permanent
            || self
                .tracked
                .as_ref()
                .is_some_and(|t| t.holds_timed(family, addr, now_ns))
    }

    /// True if its elements are kept one by one, with timeouts or counters.
    pub fn is_tracked(&self) -> bool {
        self.tracked.is_some()
    }

    /// True if the kernel counts its elements' hits.
    pub fn counts_elements(&self) -> bool {
        self.tracked.as_ref().is_some_and(|t| t.counters)
    }

    /// Its elements one by one, when it has timeouts or counters; else none.
    pub fn elements(&self) -> &[Element] {
        self.tracked.as_ref().map_or(&[], |t| &t.elements)
    }

    /// True if it holds IPv4 prefixes (the kernel gives it a /24 block table).
    pub fn has_ipv4(&self) -> bool {
        !self.v4.is_empty() || self.elements().iter().any(|e| e.family == 4)
    }

    /// How many /24s it holds in part, and how many IPv6 trie prefixes it takes: the sizes of
    /// its kernel tables beside its block table.
    pub fn kernel_entries(&self) -> (usize, usize) {
        if let Some(t) = &self.tracked {
            return (0, t.elements.iter().filter(|e| e.family == 6).count());
        }
        let mut partial = 0;
        let mut last = None;
        self.walk_ipv4(|block, state, _| {
            if state == Block::Partial && last != Some(block) {
                partial += 1;
                last = Some(block);
            }
        });
        let trie = self
            .v6
            .iter()
            .map(|&(lo, hi)| cidrs(lo..=hi, 128).len())
            .sum();
        (partial, trie)
    }

    /// How many elements it puts in the kernel's table of elements with timeouts or
    /// counters (none unless it has them).
    pub fn kernel_elements(&self) -> usize {
        self.elements().len()
    }

    /// The set as the kernel holds it.
    pub fn kernel_layout(&self) -> SetLayout {
        if let Some(t) = &self.tracked {
            return tracked_layout(&t.elements);
        }
        let mut layout = SetLayout::default();
        if self.has_ipv4() {
            layout.blocks = vec![0; SET_BLOCK_WORDS];
        }
        self.walk_ipv4(|block, state, bits| {
            layout.blocks[(block >> 5) as usize] |= (state as u64) << ((block & 31) * 2);
            if state != Block::Partial {
                return;
            }
            // A /24 two ranges reach follows the first: the ranges are sorted.
            match layout.partial.last_mut() {
                Some((b, words)) if *b == block => {
                    words.iter_mut().zip(bits).for_each(|(w, n)| *w |= n);
                }
                _ => layout.partial.push((block, bits)),
            }
        });
        for &(lo, hi) in &self.v6 {
            for (addr, len) in cidrs(lo..=hi, 128) {
                layout.trie.push((addr.to_be_bytes(), len));
            }
        }
        let mut before = 0u32;
        layout.ranks = layout
            .blocks
            .iter()
            .map(|&word| {
                let rank = before;
                before += partial_rank(word, 32);
                rank
            })
            .collect();
        layout
    }

    /// Calls `f` with every /24 that holds set addresses, its state, and for a partial one
    /// the bits of the addresses one range puts in it.
    fn walk_ipv4(&self, mut f: impl FnMut(u32, Block, [u64; 4])) {
        for &(lo, hi) in &self.v4 {
            for b in (lo >> 8)..=(hi >> 8) {
                let (first, last) = (b << 8, b << 8 | 0xff);
                if lo <= first && last <= hi {
                    f(b, Block::Full, [0; 4]);
                    continue;
                }
                let mut bits = [0u64; 4];
                for a in lo.max(first)..=hi.min(last) {
                    bits[(a as usize & 255) >> 6] |= 1 << (a & 63);
                }
                f(b, Block::Partial, bits);
            }
        }
    }
}

/// A named set of TCP or UDP ports: a bit for each of the 65,536, as the kernel holds it too.
#[derive(Clone, PartialEq, Eq)]
pub struct PortSet {
    name: String,
    bits: Box<[u64; PORT_SET_WORDS]>,
}

impl std::fmt::Debug for PortSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortSet")
            .field("name", &self.name)
            .field("ports", &self.len())
            .finish()
    }
}

impl PortSet {
    /// The ports of the inclusive `ranges`.
    pub fn from_ranges(name: &str, ranges: &[(u16, u16)]) -> Self {
        let mut bits = Box::new([0u64; PORT_SET_WORDS]);
        for &(lo, hi) in ranges {
            for p in lo..=hi {
                bits[usize::from(p >> 6)] |= 1 << (p & 63);
            }
        }
        PortSet {
            name: name.to_string(),
            bits,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many ports it holds.
    pub fn len(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True when it holds no port.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if `port` is in the set.
    #[inline]
    pub fn contains(&self, port: u16) -> bool {
        self.bits[usize::from(port >> 6)] >> (port & 63) & 1 == 1
    }

    /// The bitmap the kernel holds: bit `p & 63` of word `p >> 6` for port `p`.
    pub fn words(&self) -> &[u64; PORT_SET_WORDS] {
        &self.bits
    }
}

/// How many of the first `slot` /24s of a block table word are [`Block::Partial`]: the two
/// bits of a partial /24 are `10`. The XDP program counts the same way (`in_set4`).
pub(crate) fn partial_rank(word: u64, slot: u32) -> u32 {
    let below = match slot {
        32.. => word,
        _ => word & ((1u64 << (slot * 2)) - 1),
    };
    ((below >> 1) & !below & 0x5555_5555_5555_5555).count_ones()
}

/// Sorts and merges overlapping or adjacent ranges; returns how many prefixes added nothing
/// (duplicates, or inside another: prefixes either nest or are apart).
fn merge<T: Copy + Ord + num_like::Step>(ranges: &mut Vec<(T, T)>) -> usize {
    ranges.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut covered = 0;
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for &(lo, hi) in ranges.iter() {
        match out.last_mut() {
            Some(last) if hi <= last.1 => covered += 1,
            Some(last) if last.1.next() == Some(lo) => last.1 = hi,
            _ => out.push((lo, hi)),
        }
    }
    *ranges = out;
    covered
}

/// `ranges` (sorted, disjoint) without the addresses `lo..=hi`.
fn subtract<T: Copy + Ord + num_like::Step>(ranges: &mut Vec<(T, T)>, (lo, hi): (T, T)) {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &(a, b) in ranges.iter() {
        if b < lo || a > hi {
            out.push((a, b));
            continue;
        }
        if let Some(before) = lo.prev().filter(|&p| a < lo && a <= p) {
            out.push((a, before));
        }
        if let Some(after) = hi.next().filter(|&n| b > hi && n <= b) {
            out.push((after, b));
        }
    }
    *ranges = out;
}

/// True if `a` is in one of the sorted disjoint `ranges`.
#[inline]
fn find<T: Copy + Ord>(ranges: &[(T, T)], a: T) -> bool {
    let i = ranges.partition_point(|r| r.1 < a);
    ranges.get(i).is_some_and(|r| r.0 <= a)
}

/// The fewest prefixes that cover `span` of a `width`-bit address space exactly, as
/// (address, length).
fn cidrs(span: RangeInclusive<u128>, width: u32) -> Vec<(u128, u8)> {
    let (mut lo, hi) = (*span.start(), *span.end());
    let mut out = Vec::new();
    loop {
        // The largest aligned block at `lo` that ends by `hi`.
        let mut bits = if lo == 0 {
            width
        } else {
            lo.trailing_zeros().min(width)
        };
        let last = |bits: u32| lo | u128::MAX.checked_shr(128 - bits).unwrap_or(0);
        while last(bits) > hi {
            bits -= 1;
        }
        out.push((lo, (width - bits) as u8));
        if last(bits) >= hi {
            return out;
        }
        lo = last(bits) + 1;
    }
}

/// The successor of an address, for merging adjacent ranges.
mod num_like {
    pub(super) trait Step: Sized {
        fn next(self) -> Option<Self>;
        fn prev(self) -> Option<Self>;
    }
    impl Step for u32 {
        fn next(self) -> Option<Self> {
            self.checked_add(1)
        }
        fn prev(self) -> Option<Self> {
            self.checked_sub(1)
        }
    }
    impl Step for u128 {
        fn next(self) -> Option<Self> {
            self.checked_add(1)
        }
        fn prev(self) -> Option<Self> {
            self.checked_sub(1)
        }
    }
}

/// The kernel memory sets would take, estimated before loading: room for a /24 block table
/// and its ranks (8 bytes a word each), a /16 summary and a /16 index (4 bytes a /16) per
/// set, a 32-byte bitmap per /24 held in part, and IPv6 trie nodes (an entry and about one
/// inner node each).
pub fn kernel_bytes(block_tables: usize, partial_blocks: usize, trie_entries: usize) -> u64 {
    const TRIE_ENTRY_BYTES: u64 = 2 * 96;
    block_tables as u64
        * (SET_BLOCK_WORDS as u64 * 16 + SET_SUMMARY_WORDS as u64 * 8 + SET_SIXTEENS as u64 * 4)
        + partial_blocks as u64 * 32
        + trie_entries as u64 * TRIE_ENTRY_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> PrefixSet {
        PrefixSet::parse("s", text).unwrap()
    }

    fn v4(a: &str) -> u128 {
        u128::from(u32::from(a.parse::<std::net::Ipv4Addr>().unwrap())) << 96
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn elements_added_and_addresses_taken_out_of_a_plain_set() {
        let s = set("203.0.113.0/24\n");
        let s = s
            .changed(&strings(&["198.51.100.7", "2001:db8::/64"]), &[], None, 0)
            .unwrap();
        assert!(s.contains(4, v4("198.51.100.7")) && !s.contains(4, v4("198.51.100.8")));
        let out = s
            .changed(
                &[],
                &strings(&["203.0.113.128/25", "2001:db8::/64"]),
                None,
                0,
            )
            .unwrap();
        assert!(out.contains(4, v4("203.0.113.127")), "the first half stays");
        assert!(!out.contains(4, v4("203.0.113.128")) && !out.contains(4, v4("203.0.113.255")));
        assert!(out.contains(4, v4("198.51.100.7")));
        let a6 = u128::from("2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap());
        assert!(s.contains(6, a6) && !out.contains(6, a6));
        let bad = s.changed(&strings(&["10.0.0.0/8 timeout 10m"]), &[], None, 0);
        assert!(bad.unwrap_err().message.contains("has no timeouts"));
        let bad = s.changed(&[], &strings(&["nope"]), None, 0).unwrap_err();
        assert_eq!(bad.line, 1);
    }

    #[test]
    fn subtracting_keeps_what_lies_either_side_to_the_ends_of_the_space() {
        let mut r = vec![(0u32, 10), (20, 30), (40, u32::MAX)];
        subtract(&mut r, (5, 25));
        assert_eq!(r, vec![(0, 4), (26, 30), (40, u32::MAX)]);
        subtract(&mut r, (0, 0));
        subtract(&mut r, (u32::MAX, u32::MAX));
        assert_eq!(r, vec![(1, 4), (26, 30), (40, u32::MAX - 1)]);
        subtract(&mut r, (0, u32::MAX));
        assert!(r.is_empty());
    }

    #[test]
    fn a_tracked_sets_elements_come_with_their_timeouts_and_go_as_written() {
        let options = SetOptions {
            counters: true,
            ..SetOptions::default()
        };
        let s = PrefixSet::from_items_with("t", [(1, "203.0.113.0/24")], options).unwrap();
        let now = xskit_os::monotonic_coarse_ns();
        let s = s
            .changed(&strings(&["198.51.100.7 timeout 1h"]), &[], None, now)
            .unwrap();
        assert_eq!(s.elements().len(), 2);
        assert!(s.elements().iter().any(|e| e.expires_ns.is_some()));
        assert!(s.contains(4, v4("198.51.100.7")) && s.counts_elements());
        let refused = s.changed(&[], &strings(&["203.0.113.0/25"]), None, now);
        assert!(refused.unwrap_err().message.contains("is not an element"));
        let out = s
            .changed(&[], &strings(&["203.0.113.0/24"]), None, now)
            .unwrap();
        assert!(!out.contains(4, v4("203.0.113.1")) && out.contains(4, v4("198.51.100.7")));
    }

    #[test]
    fn comments_blank_lines_and_spamhaus_lines_are_read() {
        let s = set("; Spamhaus DROP\n\n1.10.16.0/20 ; SBL256894\n  # note\n203.0.113.7\n");
        assert_eq!(s.stats().prefixes, 2);
        assert!(s.contains(4, v4("1.10.31.255")));
        assert!(!s.contains(4, v4("1.10.32.0")));
        assert!(s.contains(4, v4("203.0.113.7")));
        assert!(!s.contains(4, v4("203.0.113.8")));
        assert!(!s.contains(0, v4("203.0.113.7")));
        assert!(!s.contains(6, v4("203.0.113.7")));
    }

    #[test]
    fn host_bits_are_normalised_and_duplicates_counted() {
        let s = set("10.0.0.1/8\n10.0.0.0/8\n10.1.0.0/16\n2001:db8::1/32\n");
        let stats = s.stats();
        assert_eq!((stats.prefixes, stats.ipv6), (4, 1));
        assert_eq!((stats.normalised, stats.covered), (2, 2));
        assert!(s.contains(4, v4("10.255.0.1")));
        let a6: std::net::Ipv6Addr = "2001:db8:ffff::1".parse().unwrap();
        assert!(s.contains(6, u128::from(a6)));
    }

    #[test]
    fn a_bad_line_is_named() {
        let e = PrefixSet::parse("s", "10.0.0.0/8\n\n10.0.0.300\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("10.0.0.300"), "{}", e.message);
        let e = PrefixSet::parse("s", "\0\0garbage").unwrap_err();
        assert_eq!(e.line, 1);
    }

    #[test]
    fn a_port_set_holds_its_ranges() {
        let s = PortSet::from_ranges("p", &[(53, 53), (1900, 1901), (65535, 65535), (0, 0)]);
        assert_eq!(s.len(), 5);
        for p in [0, 53, 1900, 1901, 65535] {
            assert!(s.contains(p), "{p}");
        }
        for p in [1, 52, 54, 1899, 1902, 65534] {
            assert!(!s.contains(p), "{p}");
        }
    }

    #[test]
    fn cidrs_cover_a_range_exactly() {
        assert_eq!(cidrs(0..=u128::from(u32::MAX), 32), vec![(0, 0)]);
        assert_eq!(cidrs(0..=u128::MAX, 128), vec![(0, 0)]);
        assert_eq!(cidrs(5..=5, 32), vec![(5, 32)]);
        assert_eq!(cidrs(1..=6, 32), vec![(1, 32), (2, 31), (4, 31), (6, 32)]);
    }

    /// Whether the kernel finds `a` in the set of `layout`, looking as the XDP program does
    /// (`in_set4`): its /16's summary, its /16's entry, its /24's state in the record, then
    /// the rank of a partial /24.
    fn in_layout(layout: &SetLayout, records: &SetRecords, a: u32) -> bool {
        let whole = records.summary[(a >> 21) as usize] >> (((a >> 16) & 31) * 2) & 3;
        if whole != Block::Partial as u64 {
            return whole == Block::Full as u64;
        }
        let e = records.sixteens[(a >> 16) as usize];
        match e & 3 {
            k if k == Sixteen::Out as u32 => return false,
            k if k == Sixteen::Full as u32 => return true,
            k if k == Sixteen::One as u32 => {
                return (a ^ (e >> 16)) & (0xffff_0000 >> ((e >> 2) & 31)) & 0xffff == 0;
            }
            _ => {}
        }
        // The record at the entry's slot: `words` holds them in /16 order, `slots` says
        // where each went.
        let k = records
            .slots
            .iter()
            .position(|&s| s == e >> 2)
            .expect("a record's slot");
        let (block, word) = (a >> 8, k * RECORD_WORDS + ((a >> 13) & 7) as usize);
        let state = records.words[word] >> ((block & 31) * 2) & 3;
        if state != Block::Partial as u64 {
            return state == Block::Full as u64;
        }
        let index = records.ranks[word] + partial_rank(records.words[word], block & 31);
        let (b, bits) = layout.partial[index as usize];
        assert_eq!(b, block, "the rank finds the /24's own bitmap");
        bits[(a as usize & 255) >> 6] >> (a & 63) & 1 == 1
    }

    /// Every address of a few /24s: the layout's summary, records and bitmaps say what
    /// `contains` says.
    #[test]
    fn the_kernel_layout_agrees_with_contains() {
        let s = set(
            "198.51.100.0/25\n198.51.100.200/30\n198.51.100.255\n203.0.113.0/23\n\
             10.0.0.0/8\n192.168.7.9\n172.16.64.0/18\n172.17.0.8/29\n172.18.3.0/24\n\
             172.19.0.0/24\n172.19.2.0/24\n",
        );
        let layout = s.kernel_layout();
        let records = layout.records(&mut RecordSlots::default());
        for base in [
            "198.51.100.0",
            "198.51.101.0",
            "203.0.113.0",
            "203.0.114.0",
            "10.9.9.0",
            "100.64.0.0",
            "192.168.7.0",
            "192.168.8.0",
            "172.16.63.0",
            "172.16.64.0",
            "172.16.127.0",
            "172.16.128.0",
            "172.17.0.0",
            "172.18.3.0",
            "172.18.4.0",
            "172.19.0.0",
            "172.19.1.0",
            "172.19.2.0",
        ] {
            let base = u32::from(base.parse::<std::net::Ipv4Addr>().unwrap());
            for a in base..base + 256 {
                let held = s.contains(4, u128::from(a) << 96);
                assert_eq!(in_layout(&layout, &records, a), held, "{a:#x}");
            }
        }
        let kind = |a: &str| {
            let a = u32::from(a.parse::<std::net::Ipv4Addr>().unwrap());
            records.sixteens[(a >> 16) as usize] & 3
        };
        // 10/8 is held whole; 100.64/16 is out; a lone host, /18, /29 and /24 are one
        // prefix of their /16 (203.0.113.0/23 is 203.0.112.0/23 normalised); two /24s apart
        // or several prefixes need a record.
        assert_eq!(kind("10.9.9.9"), Sixteen::Full as u32);
        assert_eq!(kind("100.64.0.1"), Sixteen::Out as u32);
        for lone in [
            "192.168.7.9",
            "172.16.64.1",
            "172.17.0.9",
            "172.18.3.3",
            "203.0.113.1",
        ] {
            assert_eq!(kind(lone), Sixteen::One as u32, "{lone}");
        }
        for held in ["198.51.100.1", "172.19.0.1"] {
            assert_eq!(kind(held), Sixteen::Record as u32, "{held}");
        }
        assert_eq!(records.words.len(), 2 * RECORD_WORDS);
        // 198.51.100/24 is held in part by three ranges, 192.168.7/24 and 172.17.0/24 by one.
        assert_eq!(layout.partial.len(), 3);
        assert_eq!(s.kernel_entries(), (3, 0));
    }

    /// A /16 keeps its record's slot while the set changes around it; one that gains a
    /// record never takes a slot another /16 had in the layout before (the kernel may still
    /// be sent there), only one freed a change earlier.
    #[test]
    fn records_keep_their_slots_from_one_change_to_the_next() {
        // Two hosts in /16 10.n, in its /24 10.n.n: a record each, no two alike.
        let hosts = |ns: &[u32]| -> String {
            ns.iter()
                .map(|n| format!("10.{n}.{n}.1\n10.{n}.{n}.3\n"))
                .collect()
        };
        let mut slots = RecordSlots::default();
        let mut of = |ns: &[u32]| {
            let s = set(&hosts(ns));
            let layout = s.kernel_layout();
            let records = layout.records(&mut slots);
            // Records at slots out of /16 order still answer as `contains` does.
            for a in (1..=4u32)
                .flat_map(|n| (0x0a00_0000 | n << 16 | n << 8)..=(0x0a00_00ff | n << 16 | n << 8))
            {
                let held = s.contains(4, u128::from(a) << 96);
                assert_eq!(in_layout(&layout, &records, a), held, "{ns:?}: {a:#x}");
            }
            [1u32, 2, 3, 4].map(|n| {
                let e = records.sixteens[(0x0a00 | n) as usize];
                (e & 3 == Sixteen::Record as u32).then_some(e >> 2)
            })
        };
        assert_eq!(of(&[1, 3]), [Some(0), None, Some(1), None]);
        // 10.2/16 gains a record before 10.3/16's: 10.3/16 keeps slot 1.
        assert_eq!(of(&[1, 2, 3]), [Some(0), Some(2), Some(1), None]);
        // 10.1/16 loses its record, 10.4/16 gains one: not 10.1/16's slot, still read.
        assert_eq!(of(&[2, 3, 4]), [None, Some(2), Some(1), Some(3)]);
        // A change later, 10.1/16's old slot is free again.
        assert_eq!(of(&[1, 2, 3, 4]), [Some(0), Some(2), Some(1), Some(3)]);
    }

    /// A /16's one prefix only when its addresses are exactly an aligned run: not two
    /// /25s apart, nor a run of three /24s, nor an unaligned /23's worth.
    #[test]
    fn only_an_aligned_run_is_a_lone_prefix() {
        for (text, lone) in [
            ("10.1.2.0/25\n10.1.2.192/26\n", false),
            ("10.1.2.0/24\n10.1.3.0/24\n10.1.4.0/24\n", false),
            ("10.1.3.0/24\n10.1.4.0/24\n", false),
            ("10.1.4.0/24\n10.1.5.0/24\n", true),
            ("10.1.2.3\n10.1.2.4\n", false),
            ("10.1.2.4/31\n", true),
            ("10.1.0.0/17\n", true),
            ("10.1.128.0/17\n", true),
        ] {
            let s = set(text);
            let layout = s.kernel_layout();
            let records = layout.records(&mut RecordSlots::default());
            let e = records.sixteens[0x0a01];
            assert_eq!(e & 3 == Sixteen::One as u32, lone, "{text}");
            for a in 0x0a01_0000..=0x0a01_ffffu32 {
                let held = s.contains(4, u128::from(a) << 96);
                assert_eq!(in_layout(&layout, &records, a), held, "{text}: {a:#x}");
            }
        }
    }

    /// Many partial /24s in one table word and across words: each address finds its own
    /// /24's bitmap by rank.
    #[test]
    fn ranks_find_every_partial_block() {
        let text: String = (0..96u32)
            .filter(|i| i % 3 != 1)
            .map(|i| format!("10.0.{i}.7\n10.0.{i}.200/29\n"))
            .chain(["10.0.1.0/24\n".to_string()])
            .collect();
        let s = set(&text);
        let layout = s.kernel_layout();
        assert_eq!(layout.partial.len(), 64);
        for (i, &(block, _)) in layout.partial.iter().enumerate() {
            let word = (block >> 5) as usize;
            let rank = layout.ranks[word] + partial_rank(layout.blocks[word], block & 31);
            assert_eq!(rank as usize, i, "block {block:#x}");
        }
        assert_eq!(partial_rank(0b10_01_10_00, 4), 2);
        assert_eq!(partial_rank(0b10_01_10_00, 2), 1);
        assert_eq!(partial_rank(u64::MAX, 32), 0);
    }

    fn timed(text: &str, options: SetOptions) -> PrefixSet {
        PrefixSet::parse_with("t", text, options).unwrap()
    }

    /// An expired element is gone; a shorter one under it still answers, timed or not.
    #[test]
    fn an_expired_element_is_gone_and_a_shorter_live_one_still_matches() {
        let options = SetOptions {
            timeout: Some(Duration::from_secs(100)),
            counters: false,
            now_ns: 1_000,
        };
        let s = timed(
            "10.0.0.0/8 timeout 1s\n10.1.0.0/16 timeout 10s\n10.1.2.3 ; the set's 100s\n\
             192.0.2.0/24 timeout 1s\n2001:db8::/32\n2001:db8::1 timeout 1s\n",
            options,
        );
        assert!(s.is_tracked() && !s.counts_elements());
        assert_eq!(
            (s.stats().prefixes, s.stats().timed, s.stats().covered),
            (6, 6, 0)
        );
        let second = 1_000_000_000u64;
        let at = |a: &str, t: u64| s.contains_at(4, v4(a), 1_000 + t);
        assert!(at("10.1.2.3", 0) && at("10.9.9.9", 0) && at("192.0.2.1", 0));
        // The /8 and the /24 expired at 1 s; the /16 holds 10.1/16 to 10 s, the host to 100 s.
        assert!(!at("10.9.9.9", second) && !at("192.0.2.1", second));
        assert!(at("10.1.9.9", second) && at("10.1.2.3", second));
        assert!(!at("10.1.9.9", 10 * second) && at("10.1.2.3", 10 * second));
        assert!(!at("10.1.2.3", 100 * second));
        let v6 = |a: &str| u128::from(a.parse::<std::net::Ipv6Addr>().unwrap());
        assert!(s.contains_at(6, v6("2001:db8::1"), 1_000 + second));
        assert!(
            s.contains_at(6, v6("2001:db8::1"), 1_000 + 50 * second),
            "its /32 lives the set's 100 s"
        );
        assert!(!s.contains_at(6, v6("2001:db8::1"), 1_000 + 100 * second));
        assert!(!s.contains_at(6, v6("2001:db9::1"), 1_000));
        assert!(!s.contains_at(0, v4("10.1.2.3"), 1_000));
    }

    /// The kernel's form: every /24 an element reaches asks the elements, IPv6 elements are
    /// trie prefixes, nothing is merged; a prefix written twice keeps its longest life.
    #[test]
    fn a_tracked_set_is_laid_out_element_by_element() {
        let options = SetOptions {
            counters: true,
            ..SetOptions::default()
        };
        let s = timed(
            "198.51.100.0/23\n198.51.100.7\n198.51.100.7 timeout 5s\n2001:db8::/48\n",
            options,
        );
        assert!(s.counts_elements());
        assert_eq!(s.stats().covered, 1);
        let e: Vec<_> = s
            .elements()
            .iter()
            .map(|e| (e.prefix().to_string(), e.expires_ns))
            .collect();
        assert_eq!(
            e,
            [
                ("198.51.100.0/23".to_string(), None),
                ("198.51.100.7/32".to_string(), None),
                ("2001:db8::/48".to_string(), None)
            ]
        );
        let layout = s.kernel_layout();
        assert!(layout.tracked && layout.partial.is_empty());
        let block = |a: &str| {
            let b = u32::from(a.parse::<std::net::Ipv4Addr>().unwrap()) >> 8;
            layout.blocks[(b >> 5) as usize] >> ((b & 31) * 2) & 3
        };
        assert_eq!(block("198.51.100.0"), Block::Tracked as u64);
        assert_eq!(block("198.51.101.0"), Block::Tracked as u64);
        assert_eq!(block("198.51.102.0"), Block::Out as u64);
        assert_eq!(layout.trie.len(), 1);
        assert_eq!(s.kernel_entries(), (0, 1));
        assert_eq!(s.kernel_elements(), 3);
    }

    #[test]
    fn an_elements_words_after_its_prefix_are_a_timeout_or_refused() {
        for bad in [
            "10.0.0.0/8 timeout",
            "10.0.0.0/8 10m",
            "10.0.0.0/8 timeout 10m x",
        ] {
            let e = PrefixSet::parse("s", bad).unwrap_err();
            assert!(
                e.message.contains("timeout DURATION"),
                "{bad}: {}",
                e.message
            );
        }
        let e = PrefixSet::parse("s", "10.0.0.0/8 timeout 400d").unwrap_err();
        assert!(e.message.contains("1ms to 365d"), "{}", e.message);
    }
}
