//! What a forwarder's kernel filters carry to a successor that takes over: each rule's
//! counters, its rate limit's bucket and counts, its per-source buckets and the sources it
//! blocked, by the rule's name, as an apply keeps them. The successor loads its own
//! programs, so the state is copied into their maps (buckets and blocks, before they go on
//! the links) or added when read (counts: the predecessor's maps are read as long as the
//! successor runs, so that nothing its program counted in its last moments is lost).
//!
//! Carried only between filters built from the same program object: its maps' layout is
//! then the same. Rate limits policed in user space and the counts of sets' elements start
//! again.

use serde::{Deserialize, Serialize};

use crate::abi::{Slot, RULE_SLOTS};

/// Whose state it is: a rule, by name; or the default; or unclassifiable packets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RuleId {
    /// A rule, by its name.
    Named(String),
    /// The default action.
    Default,
    /// Packets no rule could classify.
    Unclassifiable,
}

/// What a rule counted in user space, summed over the workers, once they paused for a
/// handover: [packets, bytes, packets over the rate].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedUserCounts {
    /// Whose counts.
    pub rule: RuleId,
    /// Packets, bytes, packets over the rate.
    pub counts: [u64; 3],
}

/// What a forwarder's filters carry to its successor, beside the descriptors of their
/// maps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedRules {
    /// Each rule in force: its name and the kernel slot of its state.
    pub slots: Vec<(String, u16)>,
    /// Per interface, in [`crate::handover::HandedState::interfaces`]' order.
    pub filters: Vec<CarriedFilter>,
}

impl CarriedRules {
    /// The descriptors the filters' maps come in: each filter's, in order.
    pub fn descriptors(&self) -> usize {
        self.filters.iter().map(CarriedFilter::descriptors).sum()
    }
}

/// What one interface's filter carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedFilter {
    /// The program object it was built from (`program_id`): state is carried only into a
    /// filter built from the same.
    pub program: u64,
    /// What forwarders before it counted, by counter index: (index, packets, bytes), the
    /// ones not zero.
    pub counters: Vec<(u32, u64, u64)>,
    /// What forwarders before it counted of rate limits, by slot: (slot, [over the rate,
    /// dropped blocked, blocks, blocks refused]), the ones not zero.
    pub police: Vec<(u16, [u64; 4])>,
    /// Whether its per-source buckets' map comes (after its counters', rate-limit counts'
    /// and buckets' maps).
    pub sources: bool,
    /// Whether its blocked sources' map comes, last.
    pub blocked: bool,
}

impl CarriedFilter {
    /// How many descriptors its maps come in.
    pub fn descriptors(&self) -> usize {
        3 + usize::from(self.sources) + usize::from(self.blocked)
    }
}

/// A program object's identity: FNV-1a of its bytes, the same in every process and release.
pub(crate) fn program_id(object: &[u8]) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut hasher, object);
    std::hash::Hasher::finish(&hasher)
}

/// The slots whose state moves to the successor: (the predecessor's, the successor's) for
/// each rule of both by name.
pub(crate) fn slot_moves(before: &[(String, u16)], after: &[(String, u16)]) -> Vec<(u16, u16)> {
    let old: std::collections::HashMap<&str, u16> =
        before.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    after
        .iter()
        .filter_map(|(name, new)| old.get(name.as_str()).map(|&old| (old, *new)))
        .filter(|&(old, new)| usize::from(old) < RULE_SLOTS && usize::from(new) < RULE_SLOTS)
        .collect()
}

/// The counters that continue the predecessor's: (its index, the successor's), each moved
/// rule's, then the counters beside the rules (the default's, the drops'), which keep
/// their index.
pub(crate) fn counter_moves(slots: &[(u16, u16)]) -> Vec<(u32, u32)> {
    let rules = slots
        .iter()
        .map(|&(old, new)| (u32::from(old), u32::from(new)));
    let beside = Slot::ALL.iter().map(|s| (s.counter(), s.counter()));
    rules.chain(beside).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(pairs: &[(&str, u16)]) -> Vec<(String, u16)> {
        pairs.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    }

    #[test]
    fn state_follows_a_rule_by_name_to_its_slot_in_the_successor() {
        let before = named(&[("a", 0), ("b", 5), ("c", 2)]);
        let after = named(&[("c", 0), ("d", 1), ("b", 2)]);
        assert_eq!(slot_moves(&before, &after), vec![(2, 0), (5, 2)]);
        let counters = counter_moves(&slot_moves(&before, &after));
        assert_eq!(&counters[..2], &[(2, 0), (5, 2)]);
        assert!(counters.contains(&(Slot::Default.counter(), Slot::Default.counter())));
        assert_eq!(counters.len(), 2 + Slot::ALL.len());
    }

    #[test]
    fn a_slot_out_of_range_moves_nothing() {
        let before = named(&[("a", u16::MAX)]);
        assert!(slot_moves(&before, &named(&[("a", 0)])).is_empty());
    }

    #[test]
    fn the_program_id_is_fnv_1a() {
        // FNV-1a's published test vectors: the empty input and "a".
        assert_eq!(program_id(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(program_id(b"a"), 0xaf63_dc4c_8601_ec8c);
        let descriptors = CarriedFilter {
            program: 1,
            counters: Vec::new(),
            police: Vec::new(),
            sources: true,
            blocked: false,
        };
        assert_eq!(descriptors.descriptors(), 4);
    }
}
