//! Decisions the XDP filter tells user space: in front of each packet it redirects to an
//! AF_XDP socket (the packet's XDP metadata, which AF_XDP delivers in front of the frame in
//! copy mode as in zero-copy), the filter writes the rule that decided it, when its plain
//! path decided it by one rule, a note on what it found of the packet's headers
//! ([`TellNote`]), and a tag naming the interface's filter and the rules it ran. A worker
//! running the same rules takes the rule as told instead of classifying the packet again,
//! and the note instead of reading its headers; any other tag, or none, and it classifies as
//! before.
//!
//! Why a stale tag cannot mislead: while a filter tells, it writes the tag in front of every
//! packet it redirects, so every frame it delivers carries its own. A driver that keeps no
//! XDP metadata never writes one, and the tag names the interface, so what another
//! interface's filter left in a shared UMEM's chunk does not pass for this one's. The tag
//! is keyed by a secret drawn once a process, so bytes of earlier packets left there cannot
//! be made to pass for it either.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::abi::{TellNote, NOT_TOLD, TOLD_LEN};

/// The process's secret key for tags.
fn key() -> &'static RandomState {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    KEY.get_or_init(RandomState::new)
}

/// The tag the filter of interface `ifindex` writes while it runs the rules numbered
/// `rules` ([`RulesId`]); never 0, which the filter reads as "tell nothing".
pub(crate) fn tag(ifindex: u32, rules: RulesId) -> u64 {
    key().hash_one((ifindex, rules.0)).max(1)
}

/// A decision the filter told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Told {
    /// The rule: an index below the rule count, or the rule count itself for the default.
    pub rule: usize,
    /// What the filter found of the packet's headers.
    pub note: TellNote,
}

/// The decision told in `front`, the bytes in front of a packet, if the filter that wrote
/// them carries `tag` (0: none is expected).
#[inline(always)]
pub(crate) fn rule(front: &[u8], tag: u64) -> Option<Told> {
    let meta: &[u8; TOLD_LEN] = front.last_chunk()?;
    let (rule, rest) = meta.split_first_chunk::<4>()?;
    let (note, rest) = rest.split_first_chunk::<4>()?;
    let written = u64::from_ne_bytes(*rest.last_chunk::<8>()?);
    let rule = u32::from_ne_bytes(*rule);
    (tag != 0 && written == tag && rule != NOT_TOLD).then(|| Told {
        rule: rule as usize,
        note: TellNote::from_index(u32::from_ne_bytes(*note)).unwrap_or(TellNote::Nothing),
    })
}

/// A number for one rule set as built, so that a filter's decisions are taken only by
/// workers running the very rules it ran. Rule sets equal in their rules compare equal
/// whatever their numbers.
#[derive(Clone, Copy, Debug, Eq)]
pub(crate) struct RulesId(u32);

impl RulesId {
    /// A number no rule set of this process had before (until 2^32 sets were built).
    pub(crate) fn fresh() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        RulesId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl PartialEq for RulesId {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told_with(rule: u32, note: u32, tag: u64) -> [u8; TOLD_LEN] {
        let mut m = [0u8; TOLD_LEN];
        m[..4].copy_from_slice(&rule.to_ne_bytes());
        m[4..8].copy_from_slice(&note.to_ne_bytes());
        m[8..].copy_from_slice(&tag.to_ne_bytes());
        m
    }

    fn told(rule: u32, tag: u64) -> [u8; TOLD_LEN] {
        told_with(rule, TellNote::Nothing as u32, tag)
    }

    fn rule_alone(front: &[u8], tag: u64) -> Option<usize> {
        rule(front, tag).map(|t| t.rule)
    }

    #[test]
    fn a_rule_is_taken_only_under_its_own_filters_tag() {
        let rules = RulesId::fresh();
        let t = tag(3, rules);
        assert_eq!(rule_alone(&told(5, t), t), Some(5));
        assert_eq!(rule_alone(&told(NOT_TOLD, t), t), None);
        assert_eq!(rule_alone(&told(5, t ^ 1), t), None);
        assert_eq!(rule_alone(&told(5, 0), t), None);
        assert_eq!(
            rule_alone(&told(5, 0), 0),
            None,
            "no tag expected, none taken"
        );
        // Only the bytes next to the packet count; too few, nothing.
        let mut longer = vec![9u8; 16];
        longer.extend_from_slice(&told(5, t));
        assert_eq!(rule_alone(&longer, t), Some(5));
        assert_eq!(rule_alone(&told(5, t)[1..], t), None);
        // Another interface, or other rules: another tag.
        assert_ne!(tag(4, rules), t);
        assert_ne!(tag(3, RulesId::fresh()), t);
        assert_eq!(tag(3, rules), t);
        assert_ne!(t, 0);
    }

    #[test]
    fn the_note_is_read_beside_the_rule_and_an_unknown_one_says_nothing() {
        let t = tag(3, RulesId::fresh());
        for &note in TellNote::ALL {
            let got = rule(&told_with(7, note as u32, t), t);
            assert_eq!(got, Some(Told { rule: 7, note }));
        }
        let unknown = TellNote::ALL.len() as u32;
        assert_eq!(
            rule(&told_with(7, unknown, t), t).map(|t| t.note),
            Some(TellNote::Nothing)
        );
    }
}
