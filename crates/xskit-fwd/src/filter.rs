//! The kernel half of the forwarder: an XDP program that applies the rules it can decide
//! (source and destination prefixes, protocol, source and destination ports) before a packet
//! reaches user space, counts every rule, and redirects the rest to the queue's AF_XDP
//! socket.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use aya::maps::{Array, DevMap, HashMap, MapData, PerCpuArray, PerCpuValues};
use xskit::{Interface, Mode, ProgramObject, XdpProgram};
use xskit_os::sync::LockUnpoisoned;

use crate::abi::{Extra, Slot, TxMode, TxSetting, MAX_SETS};
use crate::bucket::Limit;
use crate::error::{Error, Result};
use crate::rule_vectors::RuleVectors;
pub use crate::set_tables::SetRoom;
use crate::set_tables::SetTables;
use crate::sets::{Element, PortSet, PrefixSet};
pub use crate::sys::filter::KernelRule;
use crate::sys::filter::{CounterRepr, PoliceCountRepr, PolicerRepr, SourceKeyRepr, StateRepr};
use crate::vector_tables::VectorTables;
use crate::MAX_RULES;

mod blocked;
mod carry;
use carry::Carried;

static FILTER_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_filter.o"));
static FILTER_FRAGS_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_filter_frags.o"));

/// How the filter spreads what it forwards in XDP over the other side's usable members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxSpread {
    /// Every packet out of one member: a plain interface (slot 0), or active-backup's
    /// active member.
    One {
        /// The member's slot among the usable ones.
        slot: usize,
    },
    /// balance-xor: slot `hash % usable`, the hash computed as `xskit_bond.h` does.
    Xor(xskit_bond::XmitHashPolicy),
    /// balance-rr: members in turn, counted per CPU.
    Rr {
        /// Packets on a member before the next one's turn.
        packets_per_slave: u32,
    },
}

pub use crate::abi::Action;

/// A prefix as the program compares it: its family, and four address and mask words in
/// network byte order (IPv4 in the first).
pub(crate) fn prefix_words(addr: IpAddr, len: u8) -> Result<(u8, [u32; 4], [u32; 4])> {
    let (bytes, max): (Vec<u8>, u8) = match addr {
        IpAddr::V4(a) => (a.octets().to_vec(), 32),
        IpAddr::V6(a) => (a.octets().to_vec(), 128),
    };
    if len > max {
        return Err(Error::PrefixTooLong { len, max });
    }
    let (mut words, mut masks) = ([0u32; 4], [0u32; 4]);
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let word_bits = u32::from(len).saturating_sub(i as u32 * 32).min(32);
        let mask = if word_bits == 0 {
            0
        } else {
            u32::MAX << (32 - word_bits)
        };
        let word = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        // The program compares words as loaded from the packet: network byte order.
        masks[i] = mask.to_be();
        words[i] = (word & mask).to_be();
    }
    Ok((if max == 32 { 4 } else { 6 }, words, masks))
}

/// A port range as the program compares it: every port when `None`.
pub(crate) fn port_range(ports: Option<(u16, u16)>) -> Result<(u16, u16)> {
    match ports {
        Some((lo, hi)) if lo > hi => Err(Error::EmptyPortRange { lo, hi }),
        Some(range) => Ok(range),
        None => Ok((0, u16::MAX)),
    }
}

/// A kernel rule is built from what a rule matches: [`crate::rules::Match::kernel_rule`].
impl KernelRule {
    /// What the filter does on a match.
    pub fn action(&self) -> Action {
        Action::from_index(self.action.into()).unwrap_or(Action::Redirect)
    }
}

/// What a rule's rate limit did, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoliceCount {
    /// Packets over the rate, dropped.
    pub over_rate: u64,
    /// Packets of blocked sources, dropped.
    pub blocked: u64,
    /// Sources blocked.
    pub blocks: u64,
    /// Blocks refused for want of room in the table (the source was only limited).
    pub refused: u64,
}

/// A source blocked now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedSource {
    /// The rule whose limit it went over.
    pub rule: usize,
    /// Its prefix, as the rule groups sources (`198.51.100.0/24`).
    pub source: String,
    /// Packets dropped since it was blocked.
    pub drops: u64,
    /// Nanoseconds until the block runs out.
    pub left_ns: u64,
}

/// A source key as the prefix it stands for, sources grouped by `limit`: an address alone
/// when the group is one address.
fn source_prefix(key: &SourceKeyRepr, limit: Option<&Limit>) -> String {
    let bytes: Vec<u8> = key.addr.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let per = limit.and_then(|l| l.per_source);
    let (addr, len, whole) = match key.family {
        6 => {
            let a: [u8; 16] = bytes.try_into().unwrap_or([0; 16]);
            (IpAddr::from(a), per.map_or(128, |p| p.v6_len), 128)
        }
        4 => (
            IpAddr::from([bytes[0], bytes[1], bytes[2], bytes[3]]),
            per.map_or(32, |p| p.v4_len),
            32,
        ),
        _ => return "not IP".to_string(),
    };
    if len >= whole {
        addr.to_string()
    } else {
        format!("{addr}/{len}")
    }
}

/// Packets and bytes that matched a rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleCounter {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

impl RuleCounter {
    fn plus(self, other: RuleCounter) -> RuleCounter {
        RuleCounter {
            packets: self.packets + other.packets,
            bytes: self.bytes + other.bytes,
        }
    }
}

impl PoliceCount {
    fn plus(self, o: PoliceCount) -> PoliceCount {
        PoliceCount {
            over_rate: self.over_rate + o.over_rate,
            blocked: self.blocked + o.blocked,
            blocks: self.blocks + o.blocks,
            refused: self.refused + o.refused,
        }
    }

    fn words(self) -> [u64; 4] {
        [self.over_rate, self.blocked, self.blocks, self.refused]
    }

    fn from_words([over_rate, blocked, blocks, refused]: [u64; 4]) -> PoliceCount {
        PoliceCount {
            over_rate,
            blocked,
            blocks,
            refused,
        }
    }
}

struct FilterMaps {
    tx_ports: DevMap<MapData>,
    tx_bond: Array<MapData, u32>,
    arp_targets: Array<MapData, u32>,
    inactive: bool,
    arp_target_count: u32,
    lacp: bool,
    state: Array<MapData, StateRepr>,
    /// What `state` holds: xskit is its only writer, so it is never read back.
    written: Box<StateRepr>,
    counters: PerCpuArray<MapData, CounterRepr>,
    policers: Array<MapData, PolicerRepr>,
    /// The limits written to `policers`, by slot: a bucket is rewritten (full again) only
    /// when its rule's limit changed or its slot was given to another rule.
    limits: std::collections::HashMap<u16, Limit>,
    police_counts: PerCpuArray<MapData, PoliceCountRepr>,
    /// The per-source buckets, when the filter was loaded with room for them.
    source_buckets: Option<HashMap<MapData, SourceKeyRepr, u64>>,
    /// The blocked sources, likewise.
    blocked: Option<blocked::BlockedTable>,
    /// The slot of each rule in force, in rule order.
    slots: Vec<u16>,
    /// The table set in force (`state`'s index), and the map that tells the program.
    in_force: u32,
    table_in_force: Array<MapData, u32>,
    unclassifiable: Action,
    sets: SetTables,
    vectors: VectorTables,
    /// What the forwarders before this one counted, when it took over.
    carried: Carried,
    /// The program object it was built from ([`crate::carry::program_id`]).
    program_id: u64,
}

/// The sets `rules` ask of, by side: bit `i` for set `i`'s sources, bit `16 + i` for its
/// destinations (the program's `xskit_tracked_sets`, of the sets with timeouts or counters).
fn sides_asked(rules: &[KernelRule]) -> u32 {
    let side = |named: bool, set: u8, shift: u32| match (named, set) {
        (true, 1..) => 1u32 << (shift + u32::from(set - 1) % MAX_SETS as u32),
        _ => 0,
    };
    rules.iter().fold(0, |asked, r| {
        asked
            | side(r.extra & Extra::SrcSet.bit() != 0, r.sset, 0)
            | side(r.extra & Extra::DstSet.bit() != 0, r.dset, 16)
    })
}

fn map_error(what: &'static str, e: impl std::error::Error) -> Error {
    Error::Filter {
        what,
        reason: xskit::error_chain(&e),
    }
}

impl FilterMaps {
    /// One counter, summed over CPUs.
    fn read(&self, index: u32) -> Result<RuleCounter> {
        let own = read_counter(&self.counters, index)?;
        Ok(own.plus(self.carried.counter(index)?))
    }

    /// One rule's rate-limit counts, summed over CPUs.
    fn read_police(&self, slot: u16) -> Result<PoliceCount> {
        let own = read_police(&self.police_counts, slot)?;
        Ok(own.plus(self.carried.police(slot)?))
    }

    /// Writes the configuration with `rule_count` rules in force, and the rules as they are.
    fn configure(&mut self, rule_count: usize, default: Action) -> Result<()> {
        let config = &mut self.written.config;
        config.rule_count = rule_count as u32;
        config.default_action = default as u32;
        config.unclassifiable_action = self.unclassifiable as u32;
        config.set_duties(self.inactive, self.arp_target_count, self.lacp);
        self.write("writing the filter's configuration")
    }

    /// Writes the state in force, in place: for settings beside the rules (each a word a
    /// packet reads whole), not for rules.
    fn write(&mut self, what: &'static str) -> Result<()> {
        self.write_set(self.in_force, what)
    }

    /// Writes the state as table set `set`'s.
    fn write_set(&mut self, set: u32, what: &'static str) -> Result<()> {
        self.written.config.table = set;
        // Borrowed: a copy of the state would take hundreds of KiB of the stack.
        #[allow(clippy::needless_borrows_for_generic_args)]
        self.state
            .set(set, &*self.written, 0)
            .map_err(|e| map_error(what, e))
    }

    /// Puts `rules` in force at once: written with their vectors in the table set not in
    /// force, which then is, by one word. A packet sees the old rules or the new, whole:
    /// the set not in force is rewritten only once no packet that found it in force is
    /// still being decided by it.
    fn install(
        &mut self,
        rules: &[KernelRule],
        vectors: Option<&RuleVectors>,
        default: Action,
    ) -> Result<()> {
        let next = 1 - self.in_force;
        xskit_os::wait_for_readers();
        if let Some(vectors) = vectors {
            let offset = self.vectors.write(vectors, next as usize)?;
            self.written.config.set_vectors(&vectors.special, offset);
        }
        self.written.rules[..rules.len()].copy_from_slice(rules);
        let config = &mut self.written.config;
        config.rule_count = rules.len() as u32;
        config.default_action = default as u32;
        config.unclassifiable_action = self.unclassifiable as u32;
        config.set_duties(self.inactive, self.arp_target_count, self.lacp);
        self.write_set(next, "updating the filter's rules")?;
        self.table_in_force
            .set(0, next, 0)
            .map_err(|e| map_error("putting the new rules in force", e))?;
        self.in_force = next;
        self.slots = rules.iter().map(|r| r.slot).collect();
        Ok(())
    }
}

/// The filter attached to an interface; AF_XDP sockets register with its
/// [`XdpFilter::program`]. Detached on drop.
pub struct XdpFilter {
    program: Arc<XdpProgram>,
    maps: Mutex<FilterMaps>,
}

impl std::fmt::Debug for XdpFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpFilter")
            .field("program", &self.program)
            .finish_non_exhaustive()
    }
}

impl XdpFilter {
    /// Attaches the filter to `iface`. It starts with no rules and the default action
    /// [`Action::Redirect`], so it behaves like xskit's redirect program until
    /// [`XdpFilter::set_rules`]. With `multi_buffer` the `xdp.frags` variant: for sockets
    /// bound with multi-buffer, links with an MTU above a page, and packets larger than a
    /// frame (GSO/GRO super-packets in SKB mode).
    pub fn attach(iface: &Interface, mode: Mode, multi_buffer: bool) -> Result<Self> {
        Self::attach_with_sets(iface, mode, multi_buffer, SetRoom::default())
    }

    /// [`XdpFilter::attach`], with room for the sets [`XdpFilter::set_sets`] will write.
    pub fn attach_with_sets(
        iface: &Interface,
        mode: Mode,
        multi_buffer: bool,
        room: SetRoom,
    ) -> Result<Self> {
        let (sizes, globals) = (room.map_sizes(), room.globals());
        let object = Self::object(multi_buffer)
            .with_sizes(&sizes)
            .with_globals(&globals);
        let id = crate::carry::program_id(object.elf);
        let program = XdpProgram::attach_object(iface, object, mode, multi_buffer)?;
        Self::over(program, room, id)
    }

    /// [`XdpFilter::attach_with_sets`] for the bpf_link `link` of a filter another process
    /// attached to `iface` and handed over: loaded, to be filled and given sockets while the
    /// other filter runs, then put in its place in one step ([`XdpProgram::take_over`],
    /// [`XdpProgram::put_on_link`]), keeping its mode. It starts as `attach_with_sets` does:
    /// no rules, every packet redirected to the sockets.
    pub fn take_over_with_sets(
        iface: &Interface,
        link: std::os::fd::OwnedFd,
        multi_buffer: bool,
        room: SetRoom,
    ) -> Result<Self> {
        let (sizes, globals) = (room.map_sizes(), room.globals());
        let object = Self::object(multi_buffer)
            .with_sizes(&sizes)
            .with_globals(&globals);
        let id = crate::carry::program_id(object.elf);
        let program = XdpProgram::take_over(iface, object, link, multi_buffer)?;
        Self::over(program, room, id)
    }

    /// A new descriptor of the link that attaches this filter, for a successor.
    pub fn link_fd(&self) -> Result<std::os::fd::OwnedFd> {
        Ok(self.program.link_fd()?)
    }

    fn object(multi_buffer: bool) -> ProgramObject<'static> {
        if multi_buffer {
            ProgramObject::new(FILTER_FRAGS_OBJ, "xskit_filter_frags")
        } else {
            ProgramObject::new(FILTER_OBJ, "xskit_filter")
        }
    }

    /// The filter over `program`, just attached, its maps taken and configured.
    fn over(program: XdpProgram, room: SetRoom, program_id: u64) -> Result<Self> {
        let sets = SetTables::take(&program, room)?;
        let mut maps = FilterMaps {
            tx_ports: program.take_map("tx_ports")?,
            tx_bond: program.take_map("tx_bond")?,
            arp_targets: program.take_map("arp_targets")?,
            inactive: false,
            arp_target_count: 0,
            lacp: false,
            state: program.take_map("state")?,
            written: StateRepr::boxed(),
            counters: program.take_map("counters")?,
            policers: program.take_map("policers")?,
            limits: std::collections::HashMap::new(),
            police_counts: program.take_map("police_counts")?,
            source_buckets: if room.sources > 0 {
                Some(program.take_map("source_buckets")?)
            } else {
                None
            },
            blocked: if room.blocked > 0 {
                Some(blocked::BlockedTable::new(program.take_map("blocked")?))
            } else {
                None
            },
            slots: Vec::new(),
            in_force: 0,
            table_in_force: program.take_map(".data.xskit_tbl")?,
            unclassifiable: Action::Drop,
            sets,
            vectors: VectorTables::take(&program, room.vectors, room.rule_prefixes)?,
            carried: Carried::default(),
            program_id,
        };
        maps.configure(0, Action::Redirect)?;
        Ok(XdpFilter {
            program: Arc::new(program),
            maps: Mutex::new(maps),
        })
    }

    /// The attached program: register sockets with it, watch it with `lost()`.
    pub fn program(&self) -> &Arc<XdpProgram> {
        &self.program
    }

    /// Makes the rules the next [`XdpFilter::set_rules`] puts in force tell user space, in
    /// front of each packet they redirect to it, the rule their plain path decided it by,
    /// under a tag of this interface and the rule set numbered `rules` (which they must be:
    /// [`crate::rules::KernelShare::tell_in`]); or (`None`) tell nothing. A worker running
    /// the same rules takes such a packet's rule as told.
    pub(crate) fn tell_as(&self, rules: Option<crate::told::RulesId>) {
        let ifindex = self.program.interface().index();
        let tag = rules.map_or(0, |id| crate::told::tag(ifindex, id));
        self.maps.lock_unpoisoned().written.config.told_tag = tag;
    }

    /// The tag the rules the next [`XdpFilter::set_rules`] puts in force tell under (0:
    /// none), as [`crate::rules::KernelShare::tell_in`] set it.
    pub fn told_tag(&self) -> u64 {
        self.maps.lock_unpoisoned().written.config.told_tag
    }

    /// Replaces the rules (evaluated in order, first match wins) and the default action while
    /// the program keeps running: at once, so that every packet meets the old rules or the
    /// new, whole (the rules are written in the table set not in force, which one word then
    /// puts in force). Rate limits ([`XdpFilter::set_limits`]) and sets are written in place,
    /// before. More than [`crate::abi::LINEAR_RULES`] rules need their `vectors`
    /// ([`crate::rules::RuleSet::vectors`]), made with their port sets as
    /// [`XdpFilter::set_port_sets`] wrote them.
    pub fn set_rules(
        &self,
        rules: &[KernelRule],
        vectors: Option<&RuleVectors>,
        default: Action,
    ) -> Result<()> {
        self.set_rules_in_slots(&in_order(rules), vectors, default)
    }

    /// [`XdpFilter::set_rules`] with each rule's state (counters, rate limit, per-source
    /// keys) in the slot its `slot` names (below [`crate::abi::RULE_SLOTS`], one rule a
    /// slot) rather than its index: a rule that keeps its slot keeps its state wherever it
    /// moves. Give a rule new to a slot a slot no rule in force uses, cleared first
    /// ([`XdpFilter::reset_slots`]).
    pub fn set_rules_in_slots(
        &self,
        rules: &[KernelRule],
        vectors: Option<&RuleVectors>,
        default: Action,
    ) -> Result<()> {
        check_slots(rules)?;
        if rules.len() > MAX_RULES {
            return Err(Error::TooManyRules {
                count: rules.len(),
                max: MAX_RULES,
            });
        }
        let linear = rules.len() <= crate::abi::LINEAR_RULES;
        if !linear && vectors.is_none_or(|v| v.rules() != rules.len()) {
            return Err(Error::Filter {
                what: "updating the filter's rules",
                reason: format!(
                    "{} rules need the bit vectors made for them (RuleSet::vectors)",
                    rules.len()
                ),
            });
        }
        let mut maps = self.maps.lock_unpoisoned();
        // The sides of the sets with timeouts or counters the new rules ask, asked from
        // before they are in force until the old rules are gone.
        let asked = sides_asked(rules);
        maps.sets.rules_ask(asked)?;
        maps.install(rules, vectors.filter(|_| !linear), default)?;
        maps.sets.rules_asked(asked)
    }

    /// Writes the rate-limit rules' limits, by rule index (`None` for a rule without one;
    /// [`crate::rules::KernelShare::kernel_limits`]), for rules put in force with
    /// [`XdpFilter::set_rules`]. Write them before the rules that use them ([`KernelRule`]'s
    /// `police`). A limit whose rule kept its index and rate keeps its state; any other starts
    /// full.
    pub fn set_limits(&self, limits: &[Option<Limit>]) -> Result<()> {
        let rules = in_order(&vec![KernelRule::default(); limits.len()]);
        self.set_limits_in_slots(&rules, limits)
    }

    /// [`XdpFilter::set_limits`] for rules put in force with
    /// [`XdpFilter::set_rules_in_slots`]: `limits[i]` for `rules[i]`, in its slot. A limit
    /// whose slot held the same limit keeps its state; any other starts full.
    pub fn set_limits_in_slots(
        &self,
        rules: &[KernelRule],
        limits: &[Option<Limit>],
    ) -> Result<()> {
        if limits.len() > MAX_RULES {
            return Err(Error::TooManyRules {
                count: limits.len(),
                max: MAX_RULES,
            });
        }
        let mut maps = self.maps.lock_unpoisoned();
        let mut written = std::collections::HashMap::new();
        for (r, l) in rules.iter().zip(limits) {
            let Some(l) = l else { continue };
            written.insert(r.slot, *l);
            if maps.limits.get(&r.slot) == Some(l) {
                continue;
            }
            let (v4_len, v6_len, block) = match l.per_source {
                Some(p) => (p.v4_len, p.v6_len, p.block.unwrap_or_default()),
                None => (32, 128, std::time::Duration::ZERO),
            };
            let value = PolicerRepr {
                tat: 0,
                cost: l.bucket.cost,
                tolerance: l.bucket.tolerance,
                block: u64::try_from(block.as_nanos()).unwrap_or(u64::MAX),
                bits: u32::from(l.bucket.bits),
                v4_len,
                v6_len,
                pad: 0,
            };
            maps.policers
                .set(u32::from(r.slot), value, 0)
                .map_err(|e| map_error("writing the rate limits", e))?;
        }
        maps.limits = written;
        Ok(())
    }

    /// Clears what `slots` kept for the rules that had them before (counters, rate-limit
    /// state and counts, per-source buckets and blocks), for rules new to them. Only for
    /// slots no rule in force uses.
    pub fn reset_slots(&self, slots: &[u16]) -> Result<()> {
        if slots.is_empty() {
            return Ok(());
        }
        let mut maps = self.maps.lock_unpoisoned();
        let cpus = nr_cpus()?;
        for &slot in slots {
            let i = u32::from(slot);
            let zero = PerCpuValues::try_from(vec![CounterRepr::default(); cpus])
                .map_err(|e| map_error("clearing a rule's counters", e))?;
            maps.counters
                .set(i, zero, 0)
                .map_err(|e| map_error("clearing a rule's counters", e))?;
            let zero = PerCpuValues::try_from(vec![PoliceCountRepr::default(); cpus])
                .map_err(|e| map_error("clearing a rule's rate-limit counts", e))?;
            maps.police_counts
                .set(i, zero, 0)
                .map_err(|e| map_error("clearing a rule's rate-limit counts", e))?;
            maps.limits.remove(&slot);
            maps.carried.forget(slot);
        }
        let stale = |k: &SourceKeyRepr| slots.contains(&(k.rule as u16));
        if let Some(table) = maps.source_buckets.as_mut() {
            let keys = keys_where(table.keys(), stale, "reading the per-source buckets")?;
            for k in keys {
                let _ = table.remove(&k);
            }
        }
        if let Some(table) = maps.blocked.as_mut() {
            table.remove_where(|rule| slots.contains(&(rule as u16)))?;
        }
        Ok(())
    }

    /// What each rule's rate limit did, in rule order (zeros for a rule without one).
    pub fn police_counters(&self) -> Result<Vec<PoliceCount>> {
        let maps = self.maps.lock_unpoisoned();
        maps.slots
            .iter()
            .map(|&slot| maps.read_police(slot))
            .collect()
    }

    /// The sources blocked now (CLOCK_MONOTONIC `now_ns`), most dropped first.
    pub fn blocked_sources(&self, now_ns: u64) -> Result<Vec<BlockedSource>> {
        let maps = self.maps.lock_unpoisoned();
        let Some(table) = maps.blocked.as_ref() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (key, drops, left_ns) in table.live(now_ns)? {
            // A block of a rule no longer in force: left to run out.
            let Some(rule) = maps.slots.iter().position(|&s| u32::from(s) == key.rule) else {
                continue;
            };
            out.push(BlockedSource {
                rule,
                source: source_prefix(&key, maps.limits.get(&(key.rule as u16))),
                drops,
                left_ns,
            });
        }
        out.sort_by_key(|b| std::cmp::Reverse(b.drops));
        Ok(out)
    }

    /// For each of `sets` (as [`XdpFilter::set_sets`] wrote them), its elements with the
    /// packets the kernel counted on each; none for a set without timeouts or counters.
    pub fn element_counts(&self, sets: &[Arc<PrefixSet>]) -> Result<Vec<Vec<(Element, u64)>>> {
        self.maps.lock_unpoisoned().sets.element_counts(sets)
    }

    /// Writes the sets the rules name by index ([`crate::rules::Match::src_set`]), in
    /// place: a set's bitmaps and IPv6 trie entries first, then its ranks and /24 table a
    /// word at a time, then the trie entries it lost are removed; sets that did not change
    /// or move are left alone. Within the room the filter was attached with.
    pub fn set_sets(&self, sets: &[Arc<PrefixSet>]) -> Result<()> {
        let mut maps = self.maps.lock_unpoisoned();
        maps.sets.write(sets)
    }

    /// Writes the port sets the rules name by index ([`crate::rules::Match::src_port_set`]),
    /// in place, a bitmap word at a time. Within the room the filter was attached with.
    pub fn set_port_sets(&self, sets: &[Arc<PortSet>]) -> Result<()> {
        let mut maps = self.maps.lock_unpoisoned();
        maps.sets.write_ports(sets)
    }

    /// What the filter does with packets it cannot classify (runts, headers cut short or
    /// lying, too many VLAN tags; see [`crate::rules::PacketKey::parse`]). [`Action::Drop`]
    /// until this is called. Counted in [`XdpFilter::unclassifiable_counter`].
    pub fn set_unclassifiable(&self, action: Action) -> Result<()> {
        let mut maps = self.maps.lock_unpoisoned();
        maps.unclassifiable = action;
        maps.written.config.unclassifiable_action = action as u32;
        maps.write("writing the filter's configuration")
    }

    /// Where [`Action::Forward`] sends packets: out of `target`, by XDP_REDIRECT through a
    /// devmap. On veth, the far end of `target`'s pair must be able to take XDP frames (an XDP
    /// program or GRO on it), or the kernel drops them.
    pub fn set_forward_target(&self, target: &Interface) -> Result<()> {
        self.set_forward_out(&[target.index()], TxSpread::One { slot: 0 })
    }

    /// Where [`Action::Forward`] sends packets: out of one of `usable` (ifindexes, in slot
    /// order; a bond's usable members, or one plain interface), picked by `spread`. Rewritten
    /// while the program runs: the members first, the count last, so a packet never sees a
    /// slot that is not written. None usable: forwarded packets are dropped and counted
    /// ([`Slot::NoMember`]).
    pub fn set_forward_out(&self, usable: &[u32], spread: TxSpread) -> Result<()> {
        if usable.len() > xskit_bond::MAX_MEMBERS {
            return Err(Error::Bond(xskit_bond::Error::MemberCount {
                count: usable.len(),
            }));
        }
        let mut maps = self.maps.lock_unpoisoned();
        const WHAT: &str = "setting where packets are forwarded";
        for (slot, &ifindex) in usable.iter().enumerate() {
            maps.tx_ports
                .set(slot as u32, ifindex, None, 0)
                .map_err(|e| map_error(WHAT, e))?;
        }
        let (mode, policy, active, per) = match spread {
            TxSpread::One { slot } => (TxMode::One as u32, 0, slot as u32, 0),
            TxSpread::Xor(policy) => (TxMode::Xor as u32, policy.id(), 0, 0),
            TxSpread::Rr { packets_per_slave } => (TxMode::Rr as u32, 0, 0, packets_per_slave),
        };
        for (setting, value) in [
            (TxSetting::Mode, mode),
            (TxSetting::Policy, policy),
            (TxSetting::Active, active),
            (TxSetting::RrPer, per),
            (TxSetting::Usable, usable.len() as u32),
        ] {
            maps.tx_bond
                .set(setting as u32, value, 0)
                .map_err(|e| map_error(WHAT, e))?;
        }
        Ok(())
    }

    /// Marks the interface as an active-backup bond's inactive member (everything arriving is
    /// dropped first and counted, [`Slot::Inactive`]), or not.
    pub fn set_inactive(&self, inactive: bool) -> Result<()> {
        self.edit_config(|maps| maps.inactive = inactive)
    }

    /// Marks the interface as an 802.3ad bond's member: slow protocol frames (LACP and
    /// marker PDUs, EtherType 0x8809, untagged) go to the kernel, where the bond's control
    /// path reads them, before anything else and whether the member is active or not;
    /// counted ([`Slot::Lacp`]).
    pub fn set_lacp(&self, lacp: bool) -> Result<()> {
        self.edit_config(|maps| maps.lacp = lacp)
    }

    /// Changes the bond settings kept beside the rules, and writes them to the program.
    fn edit_config(&self, edit: impl FnOnce(&mut FilterMaps)) -> Result<()> {
        let mut maps = self.maps.lock_unpoisoned();
        edit(&mut maps);
        let maps = &mut *maps;
        let (inactive, arp_targets, lacp) = (maps.inactive, maps.arp_target_count, maps.lacp);
        maps.written.config.set_duties(inactive, arp_targets, lacp);
        maps.write("writing the filter's configuration")
    }

    /// ARP monitoring: counts ARP packets from `targets` (at most
    /// [`xskit_bond::MAX_ARP_TARGETS`]) in [`XdpFilter::arp_alive_counter`], and consumes the
    /// replies to xskit's probes ([`xskit_bond::arp_probe`]). Empty turns it off.
    pub fn set_arp_targets(&self, targets: &[std::net::Ipv4Addr]) -> Result<()> {
        if targets.len() > xskit_bond::MAX_ARP_TARGETS {
            return Err(Error::Bond(xskit_bond::Error::ArpConfig {
                reason: format!(
                    "at most {} ARP targets, not {}",
                    xskit_bond::MAX_ARP_TARGETS,
                    targets.len()
                ),
            }));
        }
        {
            let mut maps = self.maps.lock_unpoisoned();
            for (i, t) in targets.iter().enumerate() {
                maps.arp_targets
                    .set(i as u32, u32::from_ne_bytes(t.octets()), 0)
                    .map_err(|e| map_error("writing the ARP targets", e))?;
            }
        }
        self.edit_config(|maps| maps.arp_target_count = targets.len() as u32)
    }

    /// ARP packets from the monitored targets that arrived here (a sign of life).
    pub fn arp_alive_counter(&self) -> Result<RuleCounter> {
        self.maps.lock_unpoisoned().read(Slot::ArpAlive.counter())
    }

    /// Packets the filter could not classify, whatever it then did with them.
    pub fn unclassifiable_counter(&self) -> Result<RuleCounter> {
        self.maps
            .lock_unpoisoned()
            .read(Slot::Unclassifiable.counter())
    }

    /// IPv6 packets with extension headers, which the filter sends to user space undecided
    /// (their protocol and ports lie behind a chain it does not walk).
    pub fn undecided_counter(&self) -> Result<RuleCounter> {
        self.maps.lock_unpoisoned().read(Slot::Undecided.counter())
    }

    /// Packets a `forward` rule would have sent on in XDP whose TCP or UDP checksum was partial:
    /// the filter sends them to user space, which finishes the checksum.
    pub fn partial_checksum_counter(&self) -> Result<RuleCounter> {
        self.maps
            .lock_unpoisoned()
            .read(Slot::PartialCsum.counter())
    }

    /// The counter of `slot`: every counter the filter keeps beside its rules (the named
    /// ones above are among these).
    pub fn slot_counter(&self, slot: Slot) -> Result<RuleCounter> {
        self.maps.lock_unpoisoned().read(slot.counter())
    }

    /// Packets and bytes per rule, in rule order, then the default action's as the last entry.
    pub fn rule_counters(&self) -> Result<Vec<RuleCounter>> {
        let maps = self.maps.lock_unpoisoned();
        let mut out = maps
            .slots
            .iter()
            .map(|&slot| maps.read(u32::from(slot)))
            .collect::<Result<Vec<_>>>()?;
        out.push(maps.read(Slot::Default.counter())?);
        Ok(out)
    }
}

/// Counter `index` of `counters`, summed over CPUs.
fn read_counter(counters: &PerCpuArray<MapData, CounterRepr>, index: u32) -> Result<RuleCounter> {
    let per_cpu = counters
        .get(&index, 0)
        .map_err(|e| map_error("reading rule counters", e))?;
    Ok(per_cpu
        .iter()
        .fold(RuleCounter::default(), |acc, c| RuleCounter {
            packets: acc.packets + c.packets,
            bytes: acc.bytes + c.bytes,
        }))
}

/// Slot `slot`'s rate-limit counts in `counts`, summed over CPUs.
fn read_police(counts: &PerCpuArray<MapData, PoliceCountRepr>, slot: u16) -> Result<PoliceCount> {
    let per_cpu = counts
        .get(&u32::from(slot), 0)
        .map_err(|e| map_error("reading the rate limits' counters", e))?;
    Ok(per_cpu
        .iter()
        .fold(PoliceCount::default(), |a, c| PoliceCount {
            over_rate: a.over_rate + c.over_rate,
            blocked: a.blocked + c.blocked,
            blocks: a.blocks + c.blocks,
            refused: a.refused + c.refused,
        }))
}

/// The keys `keys` yields that `wanted` accepts.
fn keys_where<E: std::error::Error>(
    keys: impl Iterator<Item = std::result::Result<SourceKeyRepr, E>>,
    wanted: impl Fn(&SourceKeyRepr) -> bool,
    what: &'static str,
) -> Result<Vec<SourceKeyRepr>> {
    let mut out = Vec::new();
    for k in keys {
        let k = k.map_err(|e| map_error(what, e))?;
        if wanted(&k) {
            out.push(k);
        }
    }
    Ok(out)
}

/// The CPUs per-CPU maps hold a value for.
fn nr_cpus() -> Result<usize> {
    aya::util::nr_cpus().map_err(|(_, e)| map_error("counting the CPUs", e))
}

/// `rules` with each in the slot of its index.
fn in_order(rules: &[KernelRule]) -> Vec<KernelRule> {
    let mut rules = rules.to_vec();
    for (i, r) in rules.iter_mut().enumerate() {
        r.slot = i as u16;
    }
    rules
}

/// Refuses rules whose slots are out of range or shared.
fn check_slots(rules: &[KernelRule]) -> Result<()> {
    let mut seen = vec![false; crate::abi::RULE_SLOTS];
    for r in rules {
        match seen.get_mut(usize::from(r.slot)) {
            Some(s) if !*s => *s = true,
            _ => {
                return Err(Error::Filter {
                    what: "updating the filter's rules",
                    reason: format!("rule slot {} is out of range or given twice", r.slot),
                })
            }
        }
    }
    Ok(())
}
