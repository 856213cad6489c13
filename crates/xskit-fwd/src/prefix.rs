//! An IPv4 or IPv6 address prefix, as rules and sets write them.

use std::net::IpAddr;

/// An address prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// The address (host bits are clear in a parsed prefix, and ignored by matching).
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Prefix {
    /// Parses `"198.51.100.0/24"`, `"2001:db8::/32"` or a lone address (a host prefix).
    /// A prefix with host bits set (`"10.0.0.1/8"`) is refused, saying which network and
    /// which host it could mean: a rule that silently widened a host to its network would
    /// drop far more than its author wrote. So is white space around it.
    pub fn parse(s: &str) -> Result<Self, String> {
        let prefix = Self::parse_any(s)?;
        let network = prefix.network();
        if network != prefix.addr {
            let (addr, len) = (prefix.addr, prefix.len);
            let max = if addr.is_ipv4() { 32 } else { 128 };
            return Err(format!(
                "{s:?} has host bits set: write \"{network}/{len}\" for the network or \
                 \"{addr}/{max}\" for the one host"
            ));
        }
        Ok(prefix)
    }

    /// As [`Prefix::parse`], but a prefix with host bits set is taken as its network (as a
    /// set's published lists are read); true when it was.
    pub fn parse_lenient(s: &str) -> Result<(Self, bool), String> {
        let prefix = Self::parse_any(s)?;
        let network = prefix.network();
        Ok((
            Prefix {
                addr: network,
                len: prefix.len,
            },
            network != prefix.addr,
        ))
    }

    /// An address and a length, host bits as written.
    fn parse_any(s: &str) -> Result<Self, String> {
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
        Ok(Prefix { addr, len })
    }

    /// The first and last address of the prefix, as a key's 16 bytes taken as a big-endian
    /// number (IPv4 in the first 4).
    pub(crate) fn range(&self) -> (u128, u128) {
        let (addr, mask) = self.bits();
        (addr, addr | !mask)
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

    pub(crate) fn family(&self) -> u8 {
        if self.addr.is_ipv4() {
            4
        } else {
            6
        }
    }

    /// The prefix as (address, mask) over a key's 16 address bytes taken as a big-endian
    /// number (IPv4 in the first 4), host bits cleared.
    pub(crate) fn bits(&self) -> (u128, u128) {
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
