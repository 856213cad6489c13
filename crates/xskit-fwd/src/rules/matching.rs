//! What a rule matches, and the form the rules stage tries it in.
use std::net::IpAddr;

use super::*;

/// An address prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// The address (host bits are clear in a parsed prefix, and ignored by matching).
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

impl Prefix {
    /// Parses `"198.51.100.0/24"`, `"2001:db8::/32"` or a lone address (a host prefix).
    /// A prefix with host bits set (`"10.0.0.1/8"`) is refused, saying which network and
    /// which host it could mean: a rule that silently widened a host to its network would
    /// drop far more than its author wrote. So is white space around it.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim() != s {
            return Err(format!(
                "{s:?} has white space around it: write {:?}",
                s.trim()
            ));
        }
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IPv4 or IPv6 address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|&l| l <= max)
                .ok_or_else(|| format!("prefix length {l:?} must be 0 to {max}"))?,
        };
        let prefix = Prefix { addr, len };
        let network = prefix.network();
        if network != addr {
            return Err(format!(
                "{s:?} has host bits set: write \"{network}/{len}\" for the network or \
                 \"{addr}/{max}\" for the one host"
            ));
        }
        Ok(prefix)
    }

    /// The prefix's address with its host bits cleared.
    pub fn network(&self) -> IpAddr {
        let (bits, _) = self.bits();
        match self.addr {
            IpAddr::V4(_) => {
                IpAddr::from(<[u8; 4]>::try_from(&bits.to_be_bytes()[..4]).unwrap_or_default())
            }
            IpAddr::V6(_) => IpAddr::from(bits.to_be_bytes()),
        }
    }

    pub(super) fn family(&self) -> u8 {
        if self.addr.is_ipv4() {
            4
        } else {
            6
        }
    }

    /// The prefix as (address, mask) over a key's 16 address bytes taken as a big-endian
    /// number (IPv4 in the first 4), host bits cleared.
    fn bits(&self) -> (u128, u128) {
        let (bytes, max) = match self.addr {
            IpAddr::V4(a) => {
                let mut b = [0; 16];
                b[..4].copy_from_slice(&a.octets());
                (b, 32)
            }
            IpAddr::V6(a) => (a.octets(), 128),
        };
        let len = u32::from(self.len).min(max);
        let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
        (u128::from_be_bytes(bytes) & mask, mask)
    }
}

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
    /// True if the packet matches.
    pub fn matches(&self, k: &PacketKey) -> bool {
        let (src, dst) = (u128::from_be_bytes(k.src), u128::from_be_bytes(k.dst));
        FastMatch::new(self).matches(k, src, dst)
    }
}

/// A [`Match`] as masks and ranges, compared with a key's addresses taken as 128-bit
/// numbers: what the rules stage tries, rule after rule, for every packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
}

impl FastMatch {
    pub(super) fn new(m: &Match) -> Self {
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
                || m.icmp_code.is_some(),
            vlan: m.vlan,
            length: m.length.unwrap_or((0, u16::MAX)),
            tcp_flags: m.tcp_flags.unwrap_or_default(),
            icmp_type: m.icmp_type,
            icmp_code: m.icmp_code,
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
            && (!self.extra || self.frame_extras_match(k))
    }

    /// The VLAN ID and the IP length.
    fn frame_extras_match(&self, k: &PacketKey) -> bool {
        self.vlan.is_none_or(|v| k.vlan == Some(v))
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
                    && self.icmp_code.is_none_or(|c| c == k.icmp_code))
    }

    /// Whether the rule names a key of the TCP, UDP or ICMP header (a port range narrower
    /// than all of them, TCP flags, an ICMP type or code).
    pub(super) fn needs_l4(&self) -> bool {
        self.src_ports != (0, u16::MAX)
            || self.dst_ports != (0, u16::MAX)
            || self.tcp_flags.mask != 0
            || self.icmp_type.is_some()
            || self.icmp_code.is_some()
    }
}
