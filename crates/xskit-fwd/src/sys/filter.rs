//! The map values of the in-kernel filter (bpf/xdp_filter.c), laid out as the C structs.

/// One rule of the kernel filter, laid out as `struct rule`: addresses and masks in network
/// byte order as the program loads them from the packet. Built by
/// [`crate::rules::Match::kernel_rule`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelRule {
    pub(crate) addr: [u32; 4],
    pub(crate) mask: [u32; 4],
    pub(crate) saddr: [u32; 4],
    pub(crate) smask: [u32; 4],
    pub(crate) family: u8,
    pub(crate) protocol: u8,
    pub(crate) action: u8,
    /// Non-zero when the rule names a source prefix or source ports (the program compares
    /// the source only then).
    pub(crate) source: u8,
    pub(crate) port_lo: u16,
    pub(crate) port_hi: u16,
    pub(crate) sport_lo: u16,
    pub(crate) sport_hi: u16,
    /// [`crate::abi::Extra`] bits: which of the keys below the rule names.
    pub(crate) extra: u8,
    pub(crate) tcp_mask: u8,
    pub(crate) tcp_value: u8,
    pub(crate) icmp_type: u8,
    pub(crate) icmp_code: u8,
    /// Non-zero for a rate-limit rule: the filter's `policers` holds its bucket.
    pub(crate) police: u8,
    pub(crate) vlan: u16,
    pub(crate) len_lo: u16,
    pub(crate) len_hi: u16,
    /// The source set's index + 1, for [`crate::abi::Extra::SrcSet`].
    pub(crate) sset: u8,
    /// The destination set's, likewise.
    pub(crate) dset: u8,
    /// The source port set's index + 1, for [`crate::abi::Extra::PortSets`].
    pub(crate) spset: u8,
    /// The destination port set's, likewise.
    pub(crate) dpset: u8,
    /// Where the rule's state is kept (counter, rate limit, per-source keys), below
    /// [`crate::abi::RULE_SLOTS`]: a rule keeps its slot by name when the rules change.
    pub(crate) slot: u16,
    pub(crate) pad: u16,
}

impl KernelRule {
    /// This rule with its state kept in `slot`, for [`crate::filter::XdpFilter::set_rules_in_slots`].
    pub fn in_slot(mut self, slot: u16) -> Self {
        self.slot = slot;
        self
    }
}

/// `struct config`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ConfigRepr {
    pub(crate) rule_count: u32,
    pub(crate) default_action: u32,
    pub(crate) unclassifiable_action: u32,
    /// Non-zero on an active-backup bond's inactive member: everything is dropped.
    pub(crate) inactive: u32,
    /// ARP monitoring's targets in `arp_targets` (0: no monitoring).
    pub(crate) arp_targets: u32,
    /// Non-zero on an 802.3ad bond's member: slow protocol frames go to the kernel.
    pub(crate) lacp: u32,
    /// Non-zero when any of the three above is: no packet takes the program's plain path.
    pub(crate) duties: u32,
    /// The ids of [`crate::rule_vectors::SpecialVectors`], in its order.
    pub(crate) all_rules: u32,
    pub(crate) non_ip: u32,
    pub(crate) src6_none: u32,
    pub(crate) dst6_none: u32,
    /// Source sets', then destination sets'.
    pub(crate) set_rules: [u32; 2 * crate::abi::MAX_SETS],
    /// Which of the filter's two table sets this state is of.
    pub(crate) table: u32,
    /// Non-zero: the tag the filter tells its decisions under ([`crate::told`]).
    pub(crate) told_tag: u64,
}

impl ConfigRepr {
    /// Takes the special vectors' ids from `v`, written `offset` vectors into the filter's.
    pub(crate) fn set_vectors(&mut self, v: &crate::rule_vectors::SpecialVectors, offset: u32) {
        self.all_rules = v.all + offset;
        self.non_ip = v.non_ip + offset;
        self.src6_none = v.src6_none + offset;
        self.dst6_none = v.dst6_none + offset;
        let sets = v.set_rules[0].iter().chain(&v.set_rules[1]);
        for (to, &id) in self.set_rules.iter_mut().zip(sets) {
            *to = id + offset;
        }
    }
}

impl ConfigRepr {
    /// A bond member's settings, and `duties` that follows from them.
    pub(crate) fn set_duties(&mut self, inactive: bool, arp_targets: u32, lacp: bool) {
        self.inactive = u32::from(inactive);
        self.arp_targets = arp_targets;
        self.lacp = u32::from(lacp);
        self.duties = u32::from(inactive || arp_targets > 0 || lacp);
    }
}

/// `struct filter_state`: the configuration and the rules, the filter's one map value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StateRepr {
    pub(crate) config: ConfigRepr,
    /// The first `config.rule_count` are in force.
    pub(crate) rules: [KernelRule; crate::MAX_RULES],
    /// To [`crate::abi::STATE_BYTES`].
    pub(crate) pad: [u8; STATE_PAD],
}

/// The bytes that take the state to [`crate::abi::STATE_BYTES`].
const STATE_PAD: usize = crate::abi::STATE_BYTES
    - std::mem::size_of::<ConfigRepr>()
    - crate::MAX_RULES * std::mem::size_of::<KernelRule>();

impl StateRepr {
    /// An empty state, on the heap: it is too large for a thread's stack.
    pub(crate) fn boxed() -> Box<StateRepr> {
        let layout = std::alloc::Layout::new::<StateRepr>();
        // SAFETY: the layout is StateRepr's, of non-zero size; StateRepr is integers all
        // through (repr(C) structs and arrays of them), for which all zero bits are a valid
        // value, the one its Default would give; the Box frees it with the same layout.
        unsafe {
            let memory = std::alloc::alloc_zeroed(layout).cast::<StateRepr>();
            if memory.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Box::from_raw(memory)
        }
    }
}

/// `struct field_table`: a field's vector ids ([`crate::abi::Field`]).
pub(crate) type FieldTableRepr = [u32; crate::abi::FIELD_VALUES];

/// `struct plain_words`: the plain fields' vectors of one word, or past 64 rules their
/// plain path's vector ids ([`crate::abi::Field::word_base`]).
pub(crate) type PlainWordsRepr = [u64; crate::abi::PLAIN_WORDS];

/// `struct rule_addr`, a rule trie key without its prefix length: the field (0 source, 1
/// destination) and the IPv6 address.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct RuleAddrRepr {
    pub(crate) field: u32,
    pub(crate) addr: [u8; 16],
}

/// `struct set_addr`, a set trie key without its prefix length (aya's `lpm_trie::Key` adds
/// it): the set's index, and the IPv6 address.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct SetKeyRepr {
    pub(crate) set: u32,
    pub(crate) addr: [u8; 16],
}

/// `struct set_block`: a word of a set's /24 table and its rank.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SetBlockRepr {
    pub(crate) word: u64,
    pub(crate) rank: u64,
}

/// `struct sixteens_line`: the /16 index entries of a cache line.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SixteensLineRepr {
    pub(crate) e: [u32; crate::abi::SIXTEENS_LINE],
}

/// `struct element_key`'s data: a set key padded to 24 bytes, so that the trie's value
/// after it is 8-aligned (a count split over two cache lines makes its atomic add a split
/// lock).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct ElementKeyRepr {
    pub(crate) set: u32,
    pub(crate) addr: [u8; 16],
    pub(crate) pad: u32,
}

/// `struct set_element`: an element of a set with timeouts or counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SetElementRepr {
    /// CLOCK_MONOTONIC nanoseconds; 0: never.
    pub(crate) expires: u64,
    pub(crate) packets: u64,
    pub(crate) len: u32,
    pub(crate) counted: u32,
}

/// `struct set_bits`: the addresses of a /24 in a set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SetBitsRepr {
    pub(crate) bits: [u64; 4],
}

/// `struct policer`: a rate-limit rule's bucket ([`crate::bucket::Bucket`]) and its arrival
/// time, which the program moves.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PolicerRepr {
    pub(crate) tat: u64,
    pub(crate) cost: u64,
    pub(crate) tolerance: u64,
    /// Nanoseconds a source over its rate stays blocked (0: not blocked).
    pub(crate) block: u64,
    pub(crate) bits: u32,
    /// The prefix lengths sources are grouped by, for a limit per source.
    pub(crate) v4_len: u8,
    pub(crate) v6_len: u8,
    pub(crate) pad: u16,
}

/// `struct police_count`: what a rule's rate limit did on one CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PoliceCountRepr {
    pub(crate) over_rate: u64,
    pub(crate) blocked: u64,
    pub(crate) blocks: u64,
    pub(crate) refused: u64,
}

/// `struct source_key`: a source in the per-source tables.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SourceKeyRepr {
    pub(crate) rule: u32,
    pub(crate) family: u32,
    /// Network byte order, as the program loads it (IPv4 in the first word).
    pub(crate) addr: [u32; 4],
}

/// `struct blocked_source`: a slot of the blocked table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BlockedRepr {
    /// CLOCK_MONOTONIC ns the block lasts until; 0 never used, and
    /// [`crate::abi::BLOCK_GONE`] and [`crate::abi::BLOCK_CLAIMED`].
    pub(crate) until: u64,
    pub(crate) drops: u32,
    /// The source, as [`SourceKeyRepr`] has it.
    pub(crate) rule: u16,
    pub(crate) family: u8,
    pub(crate) pad: u8,
    pub(crate) addr: [u32; 4],
}

impl BlockedRepr {
    /// The source it blocks.
    pub(crate) fn key(&self) -> SourceKeyRepr {
        SourceKeyRepr {
            rule: u32::from(self.rule),
            family: u32::from(self.family),
            addr: self.addr,
        }
    }
}

/// `struct counter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CounterRepr {
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
}

// SAFETY: KernelRule is repr(C), has no padding (4 x 16 + 4 + 8 + 6 + 6 + 4 bytes, all
// fields naturally aligned) and every bit pattern is a valid value, which is what aya::Pod
// requires.
unsafe impl aya::Pod for KernelRule {}
// SAFETY: u32s and an array of them, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for ConfigRepr {}
// SAFETY: repr(C) of Pod types whose sizes are multiples of the alignment of all (4), ending
// in bytes that take it to STATE_BYTES, a multiple of 4: no padding, any bit pattern valid.
unsafe impl aya::Pod for StateRepr {}
// SAFETY: two u64s, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for CounterRepr {}
// SAFETY: four u64s, a u32, two u8s and a u16, repr(C), 40 bytes with no padding, any bit
// pattern valid.
unsafe impl aya::Pod for PolicerRepr {}
// SAFETY: four u64s, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for PoliceCountRepr {}
// SAFETY: six u32s, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for SourceKeyRepr {}
// SAFETY: two u64s, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for BlockedRepr {}
// SAFETY: a u32 and 16 bytes, repr(C), 20 bytes with no padding, any bit pattern valid.
unsafe impl aya::Pod for SetKeyRepr {}
// SAFETY: four u64s, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for SetBitsRepr {}
// SAFETY: two u64s and two u32s, repr(C), 24 bytes with no padding, any bit pattern valid.
unsafe impl aya::Pod for SetElementRepr {}
// SAFETY: a u32, 16 bytes and a u32, repr(C), 24 bytes with no padding, any bit pattern valid.
unsafe impl aya::Pod for ElementKeyRepr {}
// SAFETY: two u64s, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for SetBlockRepr {}
// SAFETY: u32s, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for SixteensLineRepr {}
// SAFETY: a u32 and 16 bytes, repr(C), 20 bytes with no padding, any bit pattern valid.
unsafe impl aya::Pod for RuleAddrRepr {}
// SAFETY: u64s, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for crate::rule_vectors::RuleVector {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::mem::{offset_of, size_of};

    /// `bpftool btf dump` of the filter object: struct name -> (size, field -> bit offset),
    /// and the max_entries of each map.
    struct Btf {
        structs: HashMap<String, (usize, HashMap<String, usize>)>,
        max_entries: HashMap<String, usize>,
    }

    fn btf() -> Btf {
        let obj = concat!(env!("OUT_DIR"), "/xdp_filter.o");
        let out = std::process::Command::new("bpftool")
            .args(["btf", "dump", "file", obj])
            .output()
            .expect("bpftool runs (scripts/setup.sh installs it)");
        assert!(out.status.success(), "bpftool btf dump {obj} failed");
        let text = String::from_utf8(out.stdout).expect("utf-8");
        // [id] KIND 'name' attrs, then indented member lines.
        let mut types: HashMap<usize, (String, String, String)> = HashMap::new();
        let mut members: HashMap<usize, Vec<(String, usize, usize)>> = HashMap::new();
        let mut current = 0;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix('[') {
                let (id, rest) = rest.split_once("] ").expect("[id] KIND");
                current = id.parse().expect("type id");
                let (kind, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = rest.split('\'').nth(1).unwrap_or("").to_string();
                types.insert(current, (kind.to_string(), name, rest.to_string()));
            } else if let Some(m) = line.trim().strip_prefix('\'') {
                let (name, rest) = m.split_once('\'').expect("'member'");
                let field = |key: &str| {
                    rest.split_whitespace()
                        .find_map(|w| w.strip_prefix(key))
                        .and_then(|v| v.parse().ok())
                };
                if let (Some(ty), Some(bits)) = (field("type_id="), field("bits_offset=")) {
                    members
                        .entry(current)
                        .or_default()
                        .push((name.to_string(), ty, bits));
                }
            }
        }
        let attr = |rest: &str, key: &str| -> Option<usize> {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|v| v.trim_end_matches(',').parse().ok())
        };
        let mut structs = HashMap::new();
        let mut max_entries = HashMap::new();
        for (id, (kind, name, rest)) in &types {
            if kind == "STRUCT" && !name.starts_with('(') {
                let size = attr(rest, "size=").expect("struct size");
                let fields = members
                    .get(id)
                    .map(|m| m.iter().map(|(n, _, b)| (n.clone(), *b)).collect())
                    .unwrap_or_default();
                structs.insert(name.clone(), (size, fields));
            }
            if kind == "VAR" {
                // A map: VAR -> anonymous STRUCT whose max_entries is PTR -> ARRAY nr_elems=N.
                let def = attr(rest, "type_id=").expect("var type");
                let Some(entries) = members
                    .get(&def)
                    .and_then(|m| m.iter().find(|(n, _, _)| n == "max_entries"))
                else {
                    continue;
                };
                let ptr = &types[&entries.1].2;
                let array = attr(ptr, "type_id=").expect("pointer target");
                max_entries.insert(
                    name.clone(),
                    attr(&types[&array].2, "nr_elems=").expect("n"),
                );
            }
        }
        Btf {
            structs,
            max_entries,
        }
    }

    fn assert_layout(btf: &Btf, name: &str, size: usize, fields: &[(&str, usize)]) {
        let (c_size, c_fields) = &btf.structs[name];
        assert_eq!(*c_size, size, "size of struct {name}");
        assert_eq!(c_fields.len(), fields.len(), "fields of struct {name}");
        for (field, offset) in fields {
            assert_eq!(c_fields[*field], offset * 8, "offset of {name}.{field}");
        }
    }

    #[test]
    fn layouts_and_limits_match_the_compiled_c_program() {
        let btf = btf();
        assert_layout(
            &btf,
            "rule",
            size_of::<KernelRule>(),
            &[
                ("addr", offset_of!(KernelRule, addr)),
                ("mask", offset_of!(KernelRule, mask)),
                ("saddr", offset_of!(KernelRule, saddr)),
                ("smask", offset_of!(KernelRule, smask)),
                ("family", offset_of!(KernelRule, family)),
                ("protocol", offset_of!(KernelRule, protocol)),
                ("action", offset_of!(KernelRule, action)),
                ("source", offset_of!(KernelRule, source)),
                ("port_lo", offset_of!(KernelRule, port_lo)),
                ("port_hi", offset_of!(KernelRule, port_hi)),
                ("sport_lo", offset_of!(KernelRule, sport_lo)),
                ("sport_hi", offset_of!(KernelRule, sport_hi)),
                ("extra", offset_of!(KernelRule, extra)),
                ("tcp_mask", offset_of!(KernelRule, tcp_mask)),
                ("tcp_value", offset_of!(KernelRule, tcp_value)),
                ("icmp_type", offset_of!(KernelRule, icmp_type)),
                ("icmp_code", offset_of!(KernelRule, icmp_code)),
                ("slot", offset_of!(KernelRule, slot)),
                ("pad", offset_of!(KernelRule, pad)),
                ("police", offset_of!(KernelRule, police)),
                ("vlan", offset_of!(KernelRule, vlan)),
                ("len_lo", offset_of!(KernelRule, len_lo)),
                ("len_hi", offset_of!(KernelRule, len_hi)),
                ("sset", offset_of!(KernelRule, sset)),
                ("dset", offset_of!(KernelRule, dset)),
                ("spset", offset_of!(KernelRule, spset)),
                ("dpset", offset_of!(KernelRule, dpset)),
            ],
        );
    }

    #[test]
    fn policers_match_the_compiled_c_program() {
        let btf = btf();
        assert_layout(
            &btf,
            "policer",
            size_of::<PolicerRepr>(),
            &[
                ("tat", offset_of!(PolicerRepr, tat)),
                ("cost", offset_of!(PolicerRepr, cost)),
                ("tolerance", offset_of!(PolicerRepr, tolerance)),
                ("block", offset_of!(PolicerRepr, block)),
                ("bits", offset_of!(PolicerRepr, bits)),
                ("v4_len", offset_of!(PolicerRepr, v4_len)),
                ("v6_len", offset_of!(PolicerRepr, v6_len)),
                ("pad", offset_of!(PolicerRepr, pad)),
            ],
        );
        assert_layout(
            &btf,
            "police_count",
            size_of::<PoliceCountRepr>(),
            &[
                ("over_rate", offset_of!(PoliceCountRepr, over_rate)),
                ("blocked", offset_of!(PoliceCountRepr, blocked)),
                ("blocks", offset_of!(PoliceCountRepr, blocks)),
                ("refused", offset_of!(PoliceCountRepr, refused)),
            ],
        );
        assert_layout(
            &btf,
            "source_key",
            size_of::<SourceKeyRepr>(),
            &[
                ("rule", offset_of!(SourceKeyRepr, rule)),
                ("family", offset_of!(SourceKeyRepr, family)),
                ("addr", offset_of!(SourceKeyRepr, addr)),
            ],
        );
        assert_layout(
            &btf,
            "blocked_source",
            size_of::<BlockedRepr>(),
            &[
                ("until", offset_of!(BlockedRepr, until)),
                ("drops", offset_of!(BlockedRepr, drops)),
                ("rule", offset_of!(BlockedRepr, rule)),
                ("family", offset_of!(BlockedRepr, family)),
                ("pad", offset_of!(BlockedRepr, pad)),
                ("addr", offset_of!(BlockedRepr, addr)),
            ],
        );
        assert_eq!(btf.max_entries["policers"], crate::abi::RULE_SLOTS);
        assert_eq!(btf.max_entries["police_counts"], crate::abi::RULE_SLOTS);
    }

    #[test]
    fn set_keys_and_map_sizes_match_the_compiled_c_program() {
        let btf = btf();
        assert_layout(
            &btf,
            "set_block",
            size_of::<SetBlockRepr>(),
            &[
                ("word", offset_of!(SetBlockRepr, word)),
                ("rank", offset_of!(SetBlockRepr, rank)),
            ],
        );
        assert_layout(
            &btf,
            "sixteens_line",
            size_of::<SixteensLineRepr>(),
            &[("e", offset_of!(SixteensLineRepr, e))],
        );
        assert_layout(
            &btf,
            "set_bits",
            size_of::<SetBitsRepr>(),
            &[("bits", offset_of!(SetBitsRepr, bits))],
        );
        assert_layout(
            &btf,
            "element_key",
            size_of::<ElementKeyRepr>() + 4,
            &[
                ("prefixlen", 0),
                ("data", 4 + offset_of!(ElementKeyRepr, set)),
                ("pad", 4 + offset_of!(ElementKeyRepr, pad)),
            ],
        );
        assert_layout(
            &btf,
            "set_element",
            size_of::<SetElementRepr>(),
            &[
                ("expires", offset_of!(SetElementRepr, expires)),
                ("packets", offset_of!(SetElementRepr, packets)),
                ("len", offset_of!(SetElementRepr, len)),
                ("counted", offset_of!(SetElementRepr, counted)),
            ],
        );
        assert_layout(
            &btf,
            "set_addr",
            size_of::<SetKeyRepr>(),
            &[
                ("set", offset_of!(SetKeyRepr, set)),
                ("addr", offset_of!(SetKeyRepr, addr)),
            ],
        );
        assert_layout(
            &btf,
            "config",
            size_of::<ConfigRepr>(),
            &[
                ("rule_count", offset_of!(ConfigRepr, rule_count)),
                ("default_action", offset_of!(ConfigRepr, default_action)),
                (
                    "unclassifiable_action",
                    offset_of!(ConfigRepr, unclassifiable_action),
                ),
                ("inactive", offset_of!(ConfigRepr, inactive)),
                ("arp_targets", offset_of!(ConfigRepr, arp_targets)),
                ("lacp", offset_of!(ConfigRepr, lacp)),
                ("duties", offset_of!(ConfigRepr, duties)),
                ("all_rules", offset_of!(ConfigRepr, all_rules)),
                ("non_ip", offset_of!(ConfigRepr, non_ip)),
                ("src6_none", offset_of!(ConfigRepr, src6_none)),
                ("dst6_none", offset_of!(ConfigRepr, dst6_none)),
                ("set_rules", offset_of!(ConfigRepr, set_rules)),
                ("table", offset_of!(ConfigRepr, table)),
                ("told_tag", offset_of!(ConfigRepr, told_tag)),
            ],
        );
    }

    #[test]
    fn the_state_counters_and_rule_vectors_match_the_compiled_c_program() {
        let btf = btf();
        assert_layout(
            &btf,
            "rule_vector",
            size_of::<crate::rule_vectors::RuleVector>(),
            &[
                (
                    "summary",
                    offset_of!(crate::rule_vectors::RuleVector, summary),
                ),
                ("words", offset_of!(crate::rule_vectors::RuleVector, words)),
            ],
        );
        assert_layout(
            &btf,
            "field_table",
            size_of::<FieldTableRepr>(),
            &[("ids", 0)],
        );
        assert_layout(
            &btf,
            "plain_words",
            size_of::<PlainWordsRepr>(),
            &[("words", 0)],
        );
        assert_layout(
            &btf,
            "rule_addr",
            size_of::<RuleAddrRepr>(),
            &[
                ("field", offset_of!(RuleAddrRepr, field)),
                ("addr", offset_of!(RuleAddrRepr, addr)),
            ],
        );
        assert_layout(
            &btf,
            "filter_state",
            size_of::<StateRepr>(),
            &[
                ("config", offset_of!(StateRepr, config)),
                ("rules", offset_of!(StateRepr, rules)),
                ("pad", offset_of!(StateRepr, pad)),
            ],
        );
        assert_layout(
            &btf,
            "counter",
            size_of::<CounterRepr>(),
            &[
                ("packets", offset_of!(CounterRepr, packets)),
                ("bytes", offset_of!(CounterRepr, bytes)),
            ],
        );
        assert_eq!(btf.max_entries["state"], 2, "a state for each table set");
        assert!(
            btf.max_entries["counters"] == crate::abi::COUNTERS,
            "the counters map has a slot per rule and per abi::Slot"
        );
        assert_eq!(
            btf.max_entries["arp_targets"],
            xskit_bond::MAX_ARP_TARGETS,
            "ARP monitoring's targets"
        );
        assert_eq!(
            btf.max_entries["tx_ports"],
            xskit_bond::MAX_MEMBERS,
            "a slot per bond member"
        );
    }
}
