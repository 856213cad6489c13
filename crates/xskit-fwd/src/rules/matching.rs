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
        }
    }

    /// [`Match::matches`], with the key's addresses as `src` and `dst`.
    #[inline]
    pub(super) fn matches(&self, k: &PacketKey, src: u128, dst: u128) -> bool {
        self.matches_but_ports(k, src, dst) && self.ports_match(k)
    }

    #[inline]
    pub(super) fn matches_but_ports(&self, k: &PacketKey, src: u128, dst: u128) -> bool {
        !self.never
            && (self.family == 0 || self.family == k.family)
            && src & self.src.1 == self.src.0
            && dst & self.dst.1 == self.dst.0
            && self
                .protocol
                .is_none_or(|p| k.family != 0 && p == k.protocol)
    }

    #[inline]
    pub(super) fn ports_match(&self, k: &PacketKey) -> bool {
        (self.src_ports.0..=self.src_ports.1).contains(&k.src_port)
            && (self.dst_ports.0..=self.dst_ports.1).contains(&k.dst_port)
    }

    /// Whether the rule names ports (a range narrower than all of them).
    pub(super) fn has_ports(&self) -> bool {
        self.src_ports != (0, u16::MAX) || self.dst_ports != (0, u16::MAX)
    }
}
