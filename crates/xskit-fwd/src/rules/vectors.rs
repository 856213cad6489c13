//! A rule list's shapes, from which its bit vectors are made ([`crate::rule_vectors`]), and
//! the rules a packet may match, found by them.

use std::sync::Arc;

use super::{Match, PacketKey, Prefix};
use crate::abi::{Field, PLAIN_WORDS, UNTAGGED_VLAN};
use crate::rule_vectors::{all, Candidates, Ranges, RuleShape, RuleVectors};
use crate::sets::PortSet;

/// The vectors of `rules`, whose port sets are `port_sets`.
pub(crate) fn build(rules: &[Match], port_sets: &[Arc<PortSet>]) -> RuleVectors {
    let runs: Vec<Option<Ranges>> = (0..port_sets.len())
        .map(|i| {
            let used = rules
                .iter()
                .any(|m| m.src_port_set == Some(i) || m.dst_port_set == Some(i));
            used.then(|| port_runs(&port_sets[i]))
        })
        .collect();
    let shapes: Vec<RuleShape> = rules
        .iter()
        .map(|m| RuleKeys::new(m).shape(&runs, port_sets))
        .collect();
    RuleVectors::build(&shapes)
}

/// `range` (a rule's, or all) within `set` (a port set's runs, if the rule names one).
fn clip(range: Option<(u16, u16)>, set: Option<&Ranges>) -> Ranges {
    let (lo, hi) = range.map_or((0, 65535), |(l, h)| (u32::from(l), u32::from(h)));
    match set {
        None => vec![(lo, hi)],
        Some(runs) => runs
            .iter()
            .filter(|&&(a, b)| b >= lo && a <= hi)
            .map(|&(a, b)| (a.max(lo), b.min(hi)))
            .collect(),
    }
}

/// A port set's ports as runs.
fn port_runs(set: &PortSet) -> Ranges {
    let mut runs: Ranges = Vec::new();
    for port in 0..=u16::MAX {
        if !set.contains(port) {
            continue;
        }
        match runs.last_mut() {
            Some((_, hi)) if *hi + 1 == u32::from(port) => *hi = u32::from(port),
            _ => runs.push((u32::from(port), u32::from(port))),
        }
    }
    runs
}

/// The ranges of an IPv4 prefix's first (`high`) or last 16 bits; all of them without one.
fn ipv4_half(prefix: Option<Prefix>, high: bool) -> Ranges {
    let Some(p) = prefix else {
        return all(1 << 16);
    };
    let (net, mask) = p.bits();
    let (net, mask) = ((net >> 96) as u32, (mask >> 96) as u32);
    let shift = if high { 16 } else { 0 };
    let (net, mask) = ((net >> shift) & 0xffff, (mask >> shift) & 0xffff);
    vec![(net, net | (!mask & 0xffff))]
}

/// What one rule asks of each field, from its [`Match`].
struct RuleKeys<'a> {
    m: &'a Match,
    /// The family its prefixes ask for, 0 for either; `None` when they disagree (it matches
    /// nothing).
    family: Option<u8>,
}

impl<'a> RuleKeys<'a> {
    fn new(m: &'a Match) -> Self {
        let (s, d) = (m.src.map(|p| p.family()), m.dst.map(|p| p.family()));
        let family = match (s, d) {
            (Some(a), Some(b)) if a != b => None,
            _ => Some(s.or(d).unwrap_or(0)),
        };
        RuleKeys { m, family }
    }

    fn takes(&self, family: u8) -> bool {
        self.family.is_some_and(|f| f == 0 || f == family)
    }

    fn length_named(&self) -> bool {
        self.m.length.is_some_and(|l| l != (0, u16::MAX))
    }

    /// Whether a packet without TCP, UDP or ICMP fields (all read as 0) satisfies them.
    fn takes_zero_l4(&self, port_sets: &[Arc<PortSet>]) -> bool {
        let in_set =
            |s: Option<usize>| s.is_none_or(|i| port_sets.get(i).is_some_and(|s| s.contains(0)));
        let m = self.m;
        m.src_ports.is_none_or(|(lo, _)| lo == 0)
            && m.dst_ports.is_none_or(|(lo, _)| lo == 0)
            && in_set(m.src_port_set)
            && in_set(m.dst_port_set)
            && m.tcp_flags.is_none_or(|f| f.matches(0))
            && m.icmp_type.is_none_or(|t| t == 0)
            && m.icmp_code.is_none_or(|c| c == 0)
    }

    /// The values of `field` the rule accepts.
    fn accepts(&self, field: Field, runs: &[Option<Ranges>]) -> Ranges {
        let m = self.m;
        let domain = field.domain();
        if self.family.is_none() {
            return Vec::new();
        }
        let ports = |range, set: Option<usize>| match set.map(|i| runs.get(i)) {
            None => clip(range, None),
            Some(Some(Some(r))) => clip(range, Some(r)),
            Some(_) => Vec::new(),
        };
        let one = |v: Option<u8>| v.map_or(all(domain), |v| vec![(u32::from(v), u32::from(v))]);
        match field {
            Field::Protocol => one(m.protocol),
            Field::SrcPort => ports(m.src_ports, m.src_port_set),
            Field::DstPort => ports(m.dst_ports, m.dst_port_set),
            Field::Src4High | Field::Src4Low | Field::Dst4High | Field::Dst4Low
                if !self.takes(4) =>
            {
                Vec::new()
            }
            Field::Src4High => ipv4_half(m.src, true),
            Field::Src4Low => ipv4_half(m.src, false),
            Field::Dst4High => ipv4_half(m.dst, true),
            Field::Dst4Low => ipv4_half(m.dst, false),
            Field::TcpFlags => match m.tcp_flags {
                None => all(domain),
                Some(f) => (0..256)
                    .filter(|&v| f.matches(v as u8))
                    .map(|v| (v, v))
                    .collect(),
            },
            Field::Icmp => self.icmp_ranges(),
            Field::Length if self.length_named() => {
                let (lo, hi) = m.length.unwrap_or_default();
                vec![(u32::from(lo), u32::from(hi))]
            }
            Field::Length => all(domain),
            Field::Vlan => match m.vlan {
                None => all(domain),
                Some(v) if usize::from(v) < UNTAGGED_VLAN => vec![(u32::from(v), u32::from(v))],
                Some(_) => Vec::new(),
            },
        }
    }

    /// `type << 8 | code` values: a type's 256 codes, or one code of every type, or one.
    fn icmp_ranges(&self) -> Ranges {
        match (self.m.icmp_type, self.m.icmp_code) {
            (None, None) => all(1 << 16),
            (Some(t), None) => vec![(u32::from(t) << 8, u32::from(t) << 8 | 255)],
            (t, Some(c)) => (0..=255u32)
                .filter(|&v| t.is_none_or(|t| u32::from(t) == v))
                .map(|v| (v << 8 | u32::from(c), v << 8 | u32::from(c)))
                .collect(),
        }
    }
}

/// True for the XDP filter's plain path's packets: untagged IPv4 TCP or UDP, not a later
/// fragment.
#[inline]
pub(super) fn is_plain(key: &PacketKey) -> bool {
    key.family == 4
        && key.vlan.is_none()
        && !key.later_fragment
        && (key.protocol == 6 || key.protocol == 17)
}

/// For a plain packet and at most 64 rules, the rules it may match as one word: one word per
/// field ANDed, as the XDP filter's plain path reads them; `None` for any other packet or
/// list, which [`candidates`] looks up.
#[inline]
pub(crate) fn plain_word(v: &RuleVectors, key: &PacketKey) -> Option<u64> {
    if !is_plain(key) {
        return None;
    }
    // As an array (empty beyond 64 rules: `None`), every field's index below is in bounds
    // by its type, and the compiler checks none of them.
    let words = <&[u64; PLAIN_WORDS]>::try_from(&*v.plain_words).ok()?;
    let (src4, dst4) = ipv4_addresses(key);
    let word = |field: Field, value: usize| words[field.word_base() + value];
    Some(
        word(Field::Protocol, usize::from(key.protocol))
            & word(Field::SrcPort, usize::from(key.src_port))
            & word(Field::DstPort, usize::from(key.dst_port))
            & word(Field::Src4High, src4 >> 16)
            & word(Field::Src4Low, src4 & 0xffff)
            & word(Field::Dst4High, dst4 >> 16)
            & word(Field::Dst4Low, dst4 & 0xffff)
            & word(Field::TcpFlags, usize::from(key.tcp_flags))
            & word(Field::Length, usize::from(key.ip_len)),
    )
}

/// The rules `key` may match, in order: every rule it matches, and rules it may not
/// that name a prefix set. A later fragment's missing fields take every rule. A plain
/// packet (untagged IPv4 TCP or UDP, not a later fragment) is looked up as the XDP
/// filter's plain path does ([`plain_candidates`]).
pub(crate) fn candidates<'a>(v: &'a RuleVectors, key: &PacketKey) -> Candidates<'a> {
    // A plain packet comes here only past WORD_RULES rules (plain_word decides it below),
    // where the plain path's own tables are.
    if is_plain(key) && !v.plain_ids.is_empty() {
        return plain_candidates(v, key);
    }
    let mut c = Candidates::default_for(v.special(v.special.all));
    let vlan = key.vlan.map_or(UNTAGGED_VLAN, usize::from);
    c.full(v.field(Field::Vlan, vlan));
    if key.family == 0 {
        c.full(v.special(v.special.non_ip));
        return c.start();
    }
    let icmp = usize::from(key.icmp_type) << 8 | usize::from(key.icmp_code);
    let (src, dst) = (u128::from_be_bytes(key.src), u128::from_be_bytes(key.dst));
    let (src4, dst4) = ((src >> 96) as usize, (dst >> 96) as usize);
    let values = [
        (Field::Protocol, usize::from(key.protocol)),
        (Field::Length, usize::from(key.ip_len)),
        (Field::SrcPort, usize::from(key.src_port)),
        (Field::DstPort, usize::from(key.dst_port)),
        (Field::TcpFlags, usize::from(key.tcp_flags)),
        (Field::Icmp, icmp),
        (Field::Src4High, src4 >> 16),
        (Field::Src4Low, src4 & 0xffff),
        (Field::Dst4High, dst4 >> 16),
        (Field::Dst4Low, dst4 & 0xffff),
    ];
    for (field, value) in values {
        let l4 = matches!(
            field,
            Field::SrcPort | Field::DstPort | Field::TcpFlags | Field::Icmp
        );
        let ipv4 = matches!(
            field,
            Field::Src4High | Field::Src4Low | Field::Dst4High | Field::Dst4Low
        );
        if (l4 && key.later_fragment) || (ipv4 && key.family != 4) {
            continue;
        }
        c.full(v.field(field, value));
    }
    if key.family == 6 {
        c.full(v.special(v.src6.lookup(src, v.special.src6_none)));
        c.full(v.special(v.dst6.lookup(dst, v.special.dst6_none)));
    }
    c.start()
}

/// A plain packet's candidates past WORD_RULES rules, found as the XDP filter's plain path
/// finds them ([`RuleVectors::plain_ids`]): the plain fields' vectors alone, and only the
/// words their summaries say hold a rule anchored at the packet's values.
fn plain_candidates<'a>(v: &'a RuleVectors, key: &PacketKey) -> Candidates<'a> {
    let mut c = Candidates::default_for(v.special(v.special.all));
    let (src4, dst4) = ipv4_addresses(key);
    let values = [
        (Field::Protocol, usize::from(key.protocol)),
        (Field::SrcPort, usize::from(key.src_port)),
        (Field::DstPort, usize::from(key.dst_port)),
        (Field::Src4High, src4 >> 16),
        (Field::Src4Low, src4 & 0xffff),
        (Field::Dst4High, dst4 >> 16),
        (Field::Dst4Low, dst4 & 0xffff),
        (Field::TcpFlags, usize::from(key.tcp_flags)),
        (Field::Length, usize::from(key.ip_len)),
    ];
    let mut words = 0;
    for (field, value) in values {
        let vector = v.special(v.plain_ids[field.base() + value]);
        words |= vector.summary;
        c.full(vector);
    }
    c.start_in(words)
}

/// An IPv4 packet's source and destination addresses, host order: their first four bytes.
#[inline]
fn ipv4_addresses(key: &PacketKey) -> (usize, usize) {
    let word = |a: &[u8; 16]| u32::from_be_bytes([a[0], a[1], a[2], a[3]]) as usize;
    (word(&key.src), word(&key.dst))
}

impl RuleKeys<'_> {
    /// The rule's shape, its port sets' ports being `runs`.
    fn shape(&self, runs: &[Option<Ranges>], port_sets: &[Arc<PortSet>]) -> RuleShape {
        let m = self.m;
        let v6 = |p: Option<Prefix>| {
            (
                p.is_some(),
                p.filter(|p| p.family() == 6).map(|p| (p.bits().0, p.len)),
            )
        };
        RuleShape {
            accepts: Field::ALL.iter().map(|&f| self.accepts(f, runs)).collect(),
            live: self.family.is_some(),
            takes_v6: self.takes(6),
            src6: v6(m.src),
            dst6: v6(m.dst),
            non_ip: self.family == Some(0)
                && m.protocol.is_none()
                && !self.length_named()
                && self.takes_zero_l4(port_sets),
            src_set: m.src_set,
            dst_set: m.dst_set,
        }
    }
}
