//! What a rule matches, and the form the rules stage tries it in.
use std::sync::Arc;

pub use crate::prefix::Prefix;

use super::*;

/// What a rule matches; `None` matches anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Match {
    /// Source prefix.
    pub src: Option<Prefix>,
    /// Destination prefix.
    pub dst: Option<Prefix>,
    /// IP protocol (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6).
    pub protocol: Option<u8>,
    /// Source port range, inclusive.
    pub src_ports: Option<(u16, u16)>,
    /// Destination port range, inclusive.
    pub dst_ports: Option<(u16, u16)>,
    /// ICMP or ICMPv6 type.
    pub icmp_type: Option<u8>,
    /// ICMP or ICMPv6 code.
    pub icmp_code: Option<u8>,
    /// TCP flags that must be set and clear.
    pub tcp_flags: Option<TcpFlags>,
    /// The IP packet's length range, inclusive ([`PacketKey::ip_len`]).
    pub length: Option<(u16, u16)>,
    /// The VLAN ID of the outer tag.
    pub vlan: Option<u16>,
    /// The source address is in this set of the rule set ([`RuleSet::sets`]).
    pub src_set: Option<usize>,
    /// The destination address is in this set.
    pub dst_set: Option<usize>,
    /// The source port is in this port set ([`RuleSet::port_sets`]).
    pub src_port_set: Option<usize>,
    /// The destination port is in this port set.
    pub dst_port_set: Option<usize>,
}

/// TCP flags a rule asks for: those in `mask` must equal those in `value` (`"syn,!ack"`: SYN
/// set, ACK clear, the others any).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpFlags {
    /// The flags compared.
    pub mask: u8,
    /// What they must be.
    pub value: u8,
}

/// The flags' names in rules files, as tcpdump and nftables write them.
const TCP_FLAG_NAMES: [(&str, u8); 8] = {
    use xskit_wire::tcp::flags::*;
    [
        ("fin", FIN),
        ("syn", SYN),
        ("rst", RST),
        ("psh", PSH),
        ("ack", ACK),
        ("urg", URG),
        ("ece", ECE),
        ("cwr", CWR),
    ]
};

impl TcpFlags {
    /// Parses a comma-separated list of flag names, each set, or clear with a leading `!`:
    /// `"syn,!ack"`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut f = TcpFlags::default();
        for item in s.split(',') {
            let (clear, name) = match item.trim().strip_prefix('!') {
                Some(n) => (true, n.trim()),
                None => (false, item.trim()),
            };
            let bit = TCP_FLAG_NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|&(_, b)| b)
                .ok_or_else(|| {
                    format!(
                        "{name:?} is not a TCP flag: write names from fin, syn, rst, psh, ack, \
                         urg, ece, cwr, separated by commas, each with ! in front to ask for it \
                         clear (\"syn,!ack\")"
                    )
                })?;
            if f.mask & bit != 0 {
                return Err(format!("{s:?} names {name} twice"));
            }
            f.mask |= bit;
            if !clear {
                f.value |= bit;
            }
        }
        Ok(f)
    }

    /// True if `flags` has these.
    pub fn matches(self, flags: u8) -> bool {
        flags & self.mask == self.value
    }
}

impl std::fmt::Display for TcpFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = TCP_FLAG_NAMES.iter().filter(|(_, b)| self.mask & b != 0);
        let mut sep = "";
        for (name, bit) in names {
            let bang = if self.value & bit == 0 { "!" } else { "" };
            write!(f, "{sep}{bang}{name}")?;
            sep = ",";
        }
        Ok(())
    }
}

impl Match {
    /// True if the packet matches, the sets the match names being `sets` and `port_sets` (a
    /// set it names that is not there matches nothing).
    pub fn matches(
        &self,
        k: &PacketKey,
        sets: &[Arc<PrefixSet>],
        port_sets: &[Arc<PortSet>],
    ) -> bool {
        let (src, dst) = (u128::from_be_bytes(k.src), u128::from_be_bytes(k.dst));
        FastMatch::new(self, sets, port_sets).matches(k, src, dst)
    }
}

/// A set a rule names, as the rules stage tries it: absent when the index names no set.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SetCheck<T> {
    Any,
    In(Arc<T>),
    Missing,
}

impl<T> SetCheck<T> {
    fn new(index: Option<usize>, sets: &[Arc<T>]) -> Self {
        match index.map(|i| sets.get(i)) {
            None => SetCheck::Any,
            Some(Some(set)) => SetCheck::In(Arc::clone(set)),
            Some(None) => SetCheck::Missing,
        }
    }

    /// True when the rule names no set, or `holds` says the set holds the packet's field.
    #[inline]
    fn admits(&self, holds: impl FnOnce(&T) -> bool) -> bool {
        match self {
            SetCheck::Any => true,
            SetCheck::In(set) => holds(set),
            SetCheck::Missing => false,
        }
    }

    fn is_any(&self) -> bool {
        matches!(self, SetCheck::Any)
    }
}

/// The rules' matches as the rules stage tries them, one per rule, and which of the first 64
/// a plain packet's word of candidates decides alone ([`FastMatch::word_decides`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct FastMatches {
    each: Vec<FastMatch>,
    /// Bit `i` set when rule `i`'s bit in a plain packet's word says whether it matches.
    word_decides: u64,
}

impl FastMatches {
    pub(super) fn new<'a>(
        matches: impl IntoIterator<Item = &'a Match>,
        sets: &[Arc<PrefixSet>],
        port_sets: &[Arc<PortSet>],
    ) -> Self {
        let each: Vec<FastMatch> = matches
            .into_iter()
            .map(|m| FastMatch::new(m, sets, port_sets))
            .collect();
        let word_decides = each
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, m)| m.word_decides())
            .fold(0, |word, (i, _)| word | 1 << i);
        FastMatches { each, word_decides }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.each.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.each.len()
    }

    pub(super) fn get(&self, i: usize) -> Option<&FastMatch> {
        self.each.get(i)
    }

    /// The first rule in a plain packet's word of candidates (`word`, as
    /// [`super::vectors::plain_word`] reads it) that `key` matches: a rule the word decides
    /// is taken as it is, any other confirmed by its match.
    #[inline]
    pub(super) fn first_in_word(&self, key: &PacketKey, word: u64) -> Option<usize> {
        // The first candidate decided by the word alone is the usual answer: taken before
        // anything the confirming walk needs is read.
        let first = word.trailing_zeros();
        if word != 0 && self.word_decides >> first & 1 != 0 {
            return Some(first as usize);
        }
        self.confirm_in_word(key, word)
    }

    /// [`FastMatches::first_in_word`] past a first candidate the word does not decide.
    #[inline(never)]
    fn confirm_in_word(&self, key: &PacketKey, word: u64) -> Option<usize> {
        let mut rest = word;
        while rest != 0 {
            let i = rest.trailing_zeros() as usize;
            if self.word_decides >> i & 1 != 0 {
                return Some(i);
            }
            let (src, dst) = (u128::from_be_bytes(key.src), u128::from_be_bytes(key.dst));
            if self.each.get(i).is_some_and(|m| m.matches(key, src, dst)) {
                return Some(i);
            }
            rest &= rest - 1;
        }
        None
    }

    /// Whether rule `i`'s bit in a plain packet's vectors decides it alone
    /// ([`FastMatch::word_decides`]).
    #[cfg(test)]
    pub(super) fn decides_alone(&self, i: usize) -> bool {
        self.each.get(i).is_some_and(FastMatch::word_decides)
    }
}

/// A [`Match`] as masks and ranges, compared with a key's addresses taken as 128-bit
/// numbers: what the rules stage tries, rule after rule, for every packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FastMatch {
    /// The family the rule's address prefixes ask for; 0 when it names no address.
    family: u8,
    /// The rule names prefixes of two families, which no packet has.
    never: bool,
    /// (address, mask) of the source and destination prefixes; a mask of 0 takes any.
    src: (u128, u128),
    dst: (u128, u128),
    protocol: Option<u8>,
    src_ports: (u16, u16),
    dst_ports: (u16, u16),
    /// The keys most rules leave out, compared only when `extra` says the rule names one.
    extra: bool,
    vlan: Option<u16>,
    length: (u16, u16),
    tcp_flags: TcpFlags,
    icmp_type: Option<u8>,
    icmp_code: Option<u8>,
    src_set: SetCheck<PrefixSet>,
    dst_set: SetCheck<PrefixSet>,
    src_port_set: SetCheck<PortSet>,
    dst_port_set: SetCheck<PortSet>,
}

impl FastMatch {
    pub(super) fn new(m: &Match, sets: &[Arc<PrefixSet>], port_sets: &[Arc<PortSet>]) -> Self {
        let (src_family, dst_family) = (m.src.map(|p| p.family()), m.dst.map(|p| p.family()));
        FastMatch {
            family: src_family.or(dst_family).unwrap_or(0),
            never: src_family.zip(dst_family).is_some_and(|(s, d)| s != d),
            src: m.src.map_or((0, 0), |p| p.bits()),
            dst: m.dst.map_or((0, 0), |p| p.bits()),
            protocol: m.protocol,
            src_ports: m.src_ports.unwrap_or((0, u16::MAX)),
            dst_ports: m.dst_ports.unwrap_or((0, u16::MAX)),
            extra: m.vlan.is_some()
                || m.length.is_some()
                || m.tcp_flags.is_some()
                || m.icmp_type.is_some()
                || m.icmp_code.is_some()
                || m.src_set.is_some()
                || m.dst_set.is_some()
                || m.src_port_set.is_some()
                || m.dst_port_set.is_some(),
            vlan: m.vlan,
            length: m.length.unwrap_or((0, u16::MAX)),
            tcp_flags: m.tcp_flags.unwrap_or_default(),
            icmp_type: m.icmp_type,
            icmp_code: m.icmp_code,
            src_set: SetCheck::new(m.src_set, sets),
            dst_set: SetCheck::new(m.dst_set, sets),
            src_port_set: SetCheck::new(m.src_port_set, port_sets),
            dst_port_set: SetCheck::new(m.dst_port_set, port_sets),
        }
    }

    /// [`Match::matches`], with the key's addresses as `src` and `dst`.
    #[inline]
    pub(super) fn matches(&self, k: &PacketKey, src: u128, dst: u128) -> bool {
        self.matches_but_l4(k, src, dst) && self.l4_matches(k)
    }

    /// Every key but those of the TCP, UDP or ICMP header, which a later fragment lacks.
    #[inline]
    pub(super) fn matches_but_l4(&self, k: &PacketKey, src: u128, dst: u128) -> bool {
        !self.never
            && (self.family == 0 || self.family == k.family)
            && src & self.src.1 == self.src.0
            && dst & self.dst.1 == self.dst.0
            && self
                .protocol
                .is_none_or(|p| k.family != 0 && p == k.protocol)
            && (!self.extra || self.frame_extras_match(k, src, dst))
    }

    /// The VLAN ID, the IP length and the sets.
    fn frame_extras_match(&self, k: &PacketKey, src: u128, dst: u128) -> bool {
        self.src_set.admits(|s| s.contains(k.family, src))
            && self.dst_set.admits(|s| s.contains(k.family, dst))
            && self.vlan.is_none_or(|v| k.vlan == Some(v))
            && (self.length == (0, u16::MAX)
                || k.family != 0 && (self.length.0..=self.length.1).contains(&k.ip_len))
    }

    /// The keys of the TCP, UDP or ICMP header: ports, TCP flags, ICMP type and code.
    #[inline]
    pub(super) fn l4_matches(&self, k: &PacketKey) -> bool {
        (self.src_ports.0..=self.src_ports.1).contains(&k.src_port)
            && (self.dst_ports.0..=self.dst_ports.1).contains(&k.dst_port)
            && (!self.extra
                || self.tcp_flags.matches(k.tcp_flags)
                    && self.icmp_type.is_none_or(|t| t == k.icmp_type)
                    && self.icmp_code.is_none_or(|c| c == k.icmp_code)
                    && self.src_port_set.admits(|s| s.contains(k.src_port))
                    && self.dst_port_set.admits(|s| s.contains(k.dst_port)))
    }

    /// Whether a plain packet's word of candidates (untagged IPv4 TCP or UDP, not a later
    /// fragment; [`super::vectors::plain_word`]) says by this rule's bit alone whether it
    /// matches: every key it names is one of the plain fields' tables, exact there. A rule
    /// naming a set, or an IPv6 prefix, is only a candidate and needs its match.
    fn word_decides(&self) -> bool {
        !self.never
            && matches!(self.family, 0 | 4)
            && self.src_set.is_any()
            && self.dst_set.is_any()
            && self.src_port_set.is_any()
            && self.dst_port_set.is_any()
    }

    /// Whether the rule names a key of the TCP, UDP or ICMP header (a port range narrower
    /// than all of them, TCP flags, an ICMP type or code).
    pub(super) fn needs_l4(&self) -> bool {
        self.src_ports != (0, u16::MAX)
            || self.dst_ports != (0, u16::MAX)
            || self.tcp_flags.mask != 0
            || self.icmp_type.is_some()
            || self.icmp_code.is_some()
            || !self.src_port_set.is_any()
            || !self.dst_port_set.is_any()
    }
}
