//! Forwarding rules: an ordered list read from TOML, matched on prefixes, protocol and ports,
//! split between the kernel (what XDP can decide) and user space (everything else), with
//! token-bucket rate limits.
//!
//! ```
//! use xskit_fwd::rules::{PacketKey, RuleSet, Verdict};
//! let rules = RuleSet::from_toml(r#"
//!     default = "forward"
//!     [[rule]]
//!     name = "no-dns"
//!     protocol = "udp"
//!     dst_port = 53
//!     action = "drop"
//! "#)?;
//! let key = PacketKey { family: 4, protocol: 17, dst_port: 53, ..PacketKey::default() };
//! assert_eq!(rules.classify(&key), Ok(Some(0)));
//! assert_eq!(rules.rules()[0].verdict(), Verdict::Drop);
//! # Ok::<(), xskit_fwd::rules::RulesError>(())
//! ```
//!
//! Matching is the same in both places: a prefix matches only IP packets of its family; ports
//! are TCP and UDP ports (a rule with ports needs `protocol = "tcp"` or `"udp"`), and only the
//! first fragment of a packet carries them: a later fragment that reaches a rule with ports
//! is unclassifiable (see [`RuleSet::classify`]).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use xskit_wire::offload::L4Checksum;
use xskit_wire::{checksum, ip_protocol, ipv4, ipv6, EtherType};

use crate::filter::{Action, KernelRule};

/// A rules file that could not be read, with where in the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct RulesError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl RulesError {
    fn at(text: &str, offset: usize, message: String) -> Self {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let (line, column) = crate::text_file::line_and_column(&text[..offset]);
        RulesError {
            line,
            column,
            message,
        }
    }
}

/// What happens to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Out of the other interface.
    Forward,
    /// Dropped.
    Drop,
    /// To the forwarding host's own kernel stack.
    Pass,
    /// Forwarded while within the rule's rate, dropped above it.
    RateLimit,
}

impl Verdict {
    /// The name used in rules files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Forward => "forward",
            Verdict::Drop => "drop",
            Verdict::Pass => "pass",
            Verdict::RateLimit => "rate-limit",
        }
    }
}

/// The unit of a rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateUnit {
    /// Packets per second; the burst is in packets.
    Packets,
    /// Bits per second of Ethernet frame (header and payload, no FCS); the burst is in bytes.
    Bits,
}

/// A token-bucket rate: `per_second` units refilled each second, up to `burst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Packets or bits per second.
    pub per_second: u64,
    /// Packets or bits.
    pub unit: RateUnit,
    /// What may pass at once after a quiet time: packets, or bytes for bit rates.
    pub burst: u64,
}

impl Rate {
    /// Parses `"1000pps"`, `"10kpps"`, `"2Mpps"`, `"800bps"`, `"10kbps"`, `"5Mbps"`, `"1Gbps"`
    /// (SI multiples; bits, not bytes).
    pub fn parse(s: &str) -> Result<(u64, RateUnit), String> {
        let s = s.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("rate {s:?} must start with a number, as in \"10kpps\""))?;
        let lower = unit.trim().to_ascii_lowercase();
        let (mult, unit) = match lower.as_str() {
            "pps" => (1.0, RateUnit::Packets),
            "kpps" => (1e3, RateUnit::Packets),
            "mpps" => (1e6, RateUnit::Packets),
            "bps" | "bit" => (1.0, RateUnit::Bits),
            "kbps" | "kbit" => (1e3, RateUnit::Bits),
            "mbps" | "mbit" => (1e6, RateUnit::Bits),
            "gbps" | "gbit" => (1e9, RateUnit::Bits),
            _ => {
                return Err(format!(
                    "rate {s:?} has unit {unit:?}; use pps, kpps, Mpps, bps, kbps, Mbps or Gbps"
                ))
            }
        };
        let per_second = (value * mult).round();
        if !(1.0..=1e12).contains(&per_second) {
            return Err(format!("rate {s:?} must be at least 1 and at most 1 Tbps"));
        }
        Ok((per_second as u64, unit))
    }

    /// A limiter for this rate.
    pub fn limiter(&self) -> RateLimiter {
        RateLimiter::new(*self)
    }
}

/// A token bucket as a GCRA (the "virtual scheduling" form): one atomic theoretical arrival
/// time, so workers on several queues share one limit without a lock.
///
/// The limit is one bucket for all queues, as a rule says, so its cache line is shared by
/// the workers whose traffic hits the rule; a bucket per worker would give each queue the
/// whole rate (or a fixed share of it), which is another limit. Each limiter has a cache
/// line of its own, so rules never slow each other down.
#[derive(Debug)]
#[repr(align(64))]
pub struct RateLimiter {
    /// The time (picoseconds of the caller's clock) at which the bucket is full again.
    tat_ps: AtomicU64,
    per_second: u64,
    unit: RateUnit,
    /// The most the arrival time may run ahead of now: the burst's worth of time.
    tolerance_ps: u64,
}

const PS_PER_S: u128 = 1_000_000_000_000;

impl RateLimiter {
    /// A full bucket.
    pub fn new(rate: Rate) -> Self {
        let burst_units = match rate.unit {
            RateUnit::Packets => rate.burst,
            RateUnit::Bits => rate.burst.saturating_mul(8),
        };
        RateLimiter {
            tat_ps: AtomicU64::new(0),
            per_second: rate.per_second,
            unit: rate.unit,
            tolerance_ps: (u128::from(burst_units) * PS_PER_S / u128::from(rate.per_second))
                .min(u128::from(u64::MAX / 4)) as u64,
        }
    }

    /// Takes the tokens for a frame of `frame_len` bytes at time `now_ps` (picoseconds of any
    /// clock that only moves forward: a full bucket at any time after 0); false if the bucket
    /// does not hold them (the frame is over the rate).
    pub fn allow(&self, now_ps: u64, frame_len: usize) -> bool {
        let units = match self.unit {
            RateUnit::Packets => 1u128,
            RateUnit::Bits => frame_len as u128 * 8,
        };
        let cost =
            (units * PS_PER_S / u128::from(self.per_second)).min(u128::from(u64::MAX / 4)) as u64;
        let mut tat = self.tat_ps.load(Ordering::Relaxed);
        loop {
            let next = tat.max(now_ps) + cost;
            if next - now_ps > self.tolerance_ps.max(cost) {
                return false;
            }
            match self
                .tat_ps
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }
}

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

    fn family(&self) -> u8 {
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

    /// True if the kernel filter can decide this match exactly (it sees destination prefix,
    /// protocol and destination port only).
    pub fn kernel_exact(&self) -> bool {
        self.src.is_none() && self.src_ports.is_none()
    }
}

/// A [`Match`] as masks and ranges, compared with a key's addresses taken as 128-bit
/// numbers: what the rules stage tries, rule after rule, for every packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FastMatch {
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
    fn new(m: &Match) -> Self {
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
    fn matches(&self, k: &PacketKey, src: u128, dst: u128) -> bool {
        self.matches_but_ports(k, src, dst) && self.ports_match(k)
    }

    #[inline]
    fn matches_but_ports(&self, k: &PacketKey, src: u128, dst: u128) -> bool {
        !self.never
            && (self.family == 0 || self.family == k.family)
            && src & self.src.1 == self.src.0
            && dst & self.dst.1 == self.dst.0
            && self
                .protocol
                .is_none_or(|p| k.family != 0 && p == k.protocol)
    }

    #[inline]
    fn ports_match(&self, k: &PacketKey) -> bool {
        (self.src_ports.0..=self.src_ports.1).contains(&k.src_port)
            && (self.dst_ports.0..=self.dst_ports.1).contains(&k.dst_port)
    }

    /// Whether the rule names ports (a range narrower than all of them).
    fn has_ports(&self) -> bool {
        self.src_ports != (0, u16::MAX) || self.dst_ports != (0, u16::MAX)
    }
}

/// One rule of a [`RuleSet`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    /// A name for counters.
    pub name: String,
    /// What it matches.
    pub matcher: Match,
    action: Verdict,
    /// The rate, for [`Verdict::RateLimit`].
    pub rate: Option<Rate>,
}

impl RuleSpec {
    /// What the rule does.
    pub fn verdict(&self) -> Verdict {
        self.action
    }
}

/// The fields of a packet the rules look at. `family` is 0 for anything but IPv4 and IPv6.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketKey {
    /// 4, 6, or 0.
    pub family: u8,
    /// Source address (IPv4 in the first 4 bytes).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// IP protocol (after IPv6 extension headers).
    pub protocol: u8,
    /// TCP/UDP source port, else 0.
    pub src_port: u16,
    /// TCP/UDP destination port, else 0.
    pub dst_port: u16,
    /// A later fragment (an IPv4 or IPv6 fragment offset other than 0): its TCP or UDP
    /// ports are in the first fragment, not here, and read as 0.
    pub later_fragment: bool,
}

/// Why a packet could not be classified: its headers are cut short or lie, or the fields the
/// rules look at lie behind more than xskit walks. Such a packet takes the rules file's
/// `unclassifiable` verdict (drop unless it says otherwise), never a rule's or the default's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unclassifiable(pub &'static str);

impl std::fmt::Display for Unclassifiable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// VLAN tags (802.1Q, 802.1ad) followed before a packet counts as unclassifiable.
pub const MAX_VLAN_TAGS: usize = 2;

impl PacketKey {
    /// Reads the key from a whole Ethernet frame. The XDP filter applies the same checks
    /// (bpf/xdp_filter.c), so the kernel and user space call the same packets unclassifiable:
    ///
    /// - fewer than 14 bytes, more than [`MAX_VLAN_TAGS`] tags, or a tag cut short;
    /// - IPv4: a header cut short, version not 4, IHL below 5, a total length below the header
    ///   or beyond the frame; IPv6: a header cut short, version not 6, a payload length of 0
    ///   (a jumbogram) or beyond the frame, an extension chain cut short or longer than
    ///   [`ipv6::MAX_EXT_HEADERS`];
    /// - TCP or UDP (in a first fragment) without the 4 bytes of ports inside the IP length.
    ///
    /// Other EtherTypes (ARP, ...) are classifiable, with family 0: they match only rules
    /// without address, protocol or port fields.
    pub fn parse(frame: &[u8]) -> Result<PacketKey, Unclassifiable> {
        Self::parse_first(frame, false)
    }

    /// [`PacketKey::parse`] on the first buffer of a multi-buffer packet (`continued`): the
    /// rest of the packet is in further buffers, so lengths beyond this one are not lies.
    pub fn parse_first(frame: &[u8], continued: bool) -> Result<PacketKey, Unclassifiable> {
        Self::parse_headers(frame, continued).map(|(key, _)| key)
    }

    /// [`PacketKey::parse_first`], also telling whether the packet's TCP or UDP checksum is
    /// settled, from the same read of its headers: true when the packet holds no partial
    /// checksum (one its sender left for a device to finish, see [`L4Checksum`]) or nothing
    /// [`L4Checksum::locate`] would find; false when this read cannot tell (a chain of
    /// buffers, IPv6 extension headers, an unclassifiable packet), so that a later step looks
    /// for itself.
    #[inline]
    pub fn parse_noting_checksum(
        frame: &[u8],
        continued: bool,
    ) -> (Result<PacketKey, Unclassifiable>, bool) {
        if !continued {
            if let Some(done) = Self::plain_ipv4(frame) {
                return done;
            }
        }
        Self::parse_noting_checksum_slowly(frame, continued)
    }

    /// [`PacketKey::parse_noting_checksum`] by the general walk, which the fast path for the
    /// commonest packets must agree with.
    #[inline(never)]
    fn parse_noting_checksum_slowly(
        frame: &[u8],
        continued: bool,
    ) -> (Result<PacketKey, Unclassifiable>, bool) {
        match Self::parse_headers(frame, continued) {
            Err(e) => (Err(e), false),
            Ok((key, _)) if continued => (Ok(key), false),
            Ok((key, l4)) => {
                let settled = match (key.family, l4) {
                    (0, _) => true,
                    (_, Some(at)) => key.checksum_settled(frame, at),
                    (_, None) => false,
                };
                (Ok(key), settled)
            }
        }
    }

    /// The commonest packet read straight from fixed offsets: an untagged IPv4 packet without
    /// options, not a fragment, carrying TCP or UDP with a whole header inside a frame that
    /// holds all the IP packet claims. `None` for anything else (or anything doubtful),
    /// which the general walk then reads.
    #[inline(always)]
    fn plain_ipv4(frame: &[u8]) -> Option<(Result<PacketKey, Unclassifiable>, bool)> {
        let h: &[u8; 14 + 20 + 20] = frame.first_chunk()?;
        if h[12..15] != [0x08, 0x00, 0x45] || h[20] & 0x3f != 0 || h[21] != 0 {
            return None;
        }
        let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
        let (protocol, l4_len) = (h[23], total.checked_sub(20)?);
        let (field, min) = match protocol {
            ip_protocol::TCP => (14 + 20 + 16, 20),
            ip_protocol::UDP => (14 + 20 + 6, 8),
            _ => return None,
        };
        if l4_len < min || 14 + total > frame.len() {
            return None;
        }
        let (src, dst) = ([h[26], h[27], h[28], h[29]], [h[30], h[31], h[32], h[33]]);
        let mut key = PacketKey {
            family: 4,
            protocol,
            src_port: u16::from_be_bytes([h[34], h[35]]),
            dst_port: u16::from_be_bytes([h[36], h[37]]),
            ..PacketKey::default()
        };
        key.src[..4].copy_from_slice(&src);
        key.dst[..4].copy_from_slice(&dst);
        let pseudo = checksum::fold(checksum::pseudo_header_v4(
            src,
            dst,
            protocol,
            l4_len as u16,
        ));
        let c = L4Checksum {
            start: 14 + 20,
            offset: field - 14 - 20,
            len: l4_len,
            pseudo,
            udp: protocol == ip_protocol::UDP,
        };
        Some((Ok(key), !c.is_partial(frame)))
    }

    /// Whether the TCP or UDP checksum at `at` is anything but partial (see
    /// [`PacketKey::parse_noting_checksum`]); the same checks as [`L4Checksum::locate`].
    fn checksum_settled(&self, frame: &[u8], at: L4At) -> bool {
        let (offset, udp) = match self.protocol {
            ip_protocol::TCP if at.len >= 20 => (16, false),
            ip_protocol::UDP if at.len >= 8 => (6, true),
            _ => return true,
        };
        if at.fragment || at.start + offset + 2 > frame.len() {
            return true;
        }
        let pseudo = if self.family == 4 {
            let v4 = |a: &[u8; 16]| [a[0], a[1], a[2], a[3]];
            checksum::pseudo_header_v4(v4(&self.src), v4(&self.dst), self.protocol, at.len as u16)
        } else {
            checksum::pseudo_header_v6(self.src, self.dst, self.protocol, at.len as u32)
        };
        let c = L4Checksum {
            start: at.start,
            offset,
            len: at.len,
            pseudo: checksum::fold(pseudo),
            udp,
        };
        !c.is_partial(frame)
    }

    /// The key, and where the L4 header is when one read tells exactly (IPv4, or IPv6 without
    /// extension headers).
    fn parse_headers(
        frame: &[u8],
        continued: bool,
    ) -> Result<(PacketKey, Option<L4At>), Unclassifiable> {
        let mut k = PacketKey::default();
        let (ethertype, l3) = skip_vlan_tags(frame)?;
        let ip = &frame[l3..];
        let mut l4_at = None;
        // Bytes the IP packet may claim: the rest of the frame, or unknown for a chain.
        let room = if continued { usize::MAX } else { ip.len() };
        let l4 = match EtherType::from(ethertype) {
            EtherType::Ipv4 => {
                let (l4, at) = k.read_ipv4(ip, l3, room)?;
                l4_at = Some(at);
                l4
            }
            EtherType::Ipv6 => {
                if ip.len() < 40 {
                    return Err(Unclassifiable("IPv6 header cut short"));
                }
                let v = ipv6::Packet::new_unchecked(ip);
                let plen = usize::from(v.payload_len());
                if v.version() != 6 {
                    return Err(Unclassifiable("IPv6 header with a bad version"));
                }
                if plen == 0 || 40 + plen > room {
                    return Err(Unclassifiable("IPv6 payload length lies"));
                }
                k.family = 6;
                k.src = v.src_addr();
                k.dst = v.dst_addr();
                let held = ip.len().min(40 + plen);
                let (proto, rest, offset) = ipv6::Packet::new_unchecked(&ip[..held])
                    .upper_layer_fragment()
                    .map_err(|_| Unclassifiable("IPv6 extension headers cut short or too many"))?;
                k.protocol = proto;
                k.later_fragment = offset != 0;
                let l4_len = 40 + plen - (held - rest.len());
                if v.next_header() == proto {
                    // No extension headers: nothing lies between the header and L4.
                    l4_at = Some(L4At {
                        start: l3 + 40,
                        len: plen,
                        fragment: false,
                    });
                }
                (offset == 0).then_some((rest, l4_len))
            }
            _ => return Ok((k, None)),
        };
        if let Some((l4, l4_len)) = l4 {
            if matches!(k.protocol, ip_protocol::TCP | ip_protocol::UDP) {
                if l4.len() < 4 || l4_len < 4 {
                    return Err(Unclassifiable("TCP or UDP ports cut short"));
                }
                k.src_port = u16::from_be_bytes([l4[0], l4[1]]);
                k.dst_port = u16::from_be_bytes([l4[2], l4[3]]);
            }
        }
        Ok((k, l4_at))
    }
}

/// The EtherType after up to [`MAX_VLAN_TAGS`] VLAN tags, and where the L3 header starts.
fn skip_vlan_tags(frame: &[u8]) -> Result<(u16, usize), Unclassifiable> {
    if frame.len() < 14 {
        return Err(Unclassifiable("shorter than an Ethernet header"));
    }
    let mut ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let mut l3 = 14;
    for _ in 0..=MAX_VLAN_TAGS {
        if ethertype != 0x8100 && ethertype != 0x88a8 {
            break;
        }
        if l3 == 14 + 4 * MAX_VLAN_TAGS {
            return Err(Unclassifiable("more VLAN tags than are followed"));
        }
        if frame.len() < l3 + 4 {
            return Err(Unclassifiable("VLAN tag cut short"));
        }
        ethertype = u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]);
        l3 += 4;
    }
    Ok((ethertype, l3))
}

/// The L4 bytes a key reads ports from, and how long the IP header says L4 is; `None` for a
/// fragment that carries no L4 header.
type L4Bytes<'a> = Option<(&'a [u8], usize)>;

impl PacketKey {
    /// Fills in an IPv4 packet's fields from `ip` (at `l3` in the frame, `room` bytes it may
    /// claim).
    fn read_ipv4<'a>(
        &mut self,
        ip: &'a [u8],
        l3: usize,
        room: usize,
    ) -> Result<(L4Bytes<'a>, L4At), Unclassifiable> {
        if ip.len() < 20 {
            return Err(Unclassifiable("IPv4 header cut short"));
        }
        let v = ipv4::Packet::new_unchecked(ip);
        let hl = v.header_len();
        if v.version() != 4 || hl < 20 {
            return Err(Unclassifiable("IPv4 header with a bad version or length"));
        }
        if hl > ip.len() {
            return Err(Unclassifiable("IPv4 options cut short"));
        }
        let total = usize::from(v.total_len());
        if total < hl || total > room {
            return Err(Unclassifiable("IPv4 total length lies"));
        }
        self.family = 4;
        self.protocol = v.protocol();
        self.later_fragment = v.frag_offset() != 0;
        self.src[..4].copy_from_slice(&v.src_addr());
        self.dst[..4].copy_from_slice(&v.dst_addr());
        let at = L4At {
            start: l3 + hl,
            len: total - hl,
            fragment: v.more_frags() || v.frag_offset() != 0,
        };
        Ok(((v.frag_offset() == 0).then(|| (&ip[hl..], total - hl)), at))
    }
}

/// Where one read of a packet's headers found its L4 header.
#[derive(Clone, Copy, Debug)]
struct L4At {
    /// Offset from the start of the frame.
    start: usize,
    /// Bytes of L4 header and payload, as the IP header says.
    len: usize,
    /// An IPv4 fragment, first or later (no checksum is finished on those).
    fragment: bool,
}

/// An ordered rule list and the verdict for packets no rule matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSet {
    rules: Vec<RuleSpec>,
    /// The rules' matches as the rules stage tries them, one per rule.
    fast: Vec<FastMatch>,
    default: Verdict,
    unclassifiable: Verdict,
    forward_in_kernel: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRepr {
    #[serde(default)]
    default: Option<toml::Spanned<String>>,
    #[serde(default)]
    unclassifiable: Option<toml::Spanned<String>>,
    #[serde(default)]
    rule: Vec<toml::Spanned<RuleRepr>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleRepr {
    name: Option<toml::Spanned<String>>,
    src: Option<toml::Spanned<String>>,
    dst: Option<toml::Spanned<String>>,
    protocol: Option<toml::Spanned<toml::Value>>,
    src_port: Option<toml::Spanned<toml::Value>>,
    dst_port: Option<toml::Spanned<toml::Value>>,
    action: toml::Spanned<String>,
    rate: Option<toml::Spanned<String>>,
    burst: Option<toml::Spanned<i64>>,
}

fn parse_verdict(s: &str, allow_rate: bool) -> Result<Verdict, String> {
    match s {
        "forward" => Ok(Verdict::Forward),
        "drop" => Ok(Verdict::Drop),
        "pass" => Ok(Verdict::Pass),
        "rate-limit" if allow_rate => Ok(Verdict::RateLimit),
        _ if allow_rate => Err(format!(
            "action {s:?} is not one of \"forward\", \"drop\", \"pass\", \"rate-limit\""
        )),
        _ => Err(format!(
            "default {s:?} is not one of \"forward\", \"drop\", \"pass\""
        )),
    }
}

fn parse_protocol(v: &toml::Value) -> Result<u8, String> {
    match v {
        toml::Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(ip_protocol::TCP),
            "udp" => Ok(ip_protocol::UDP),
            "icmp" => Ok(ip_protocol::ICMP),
            "icmpv6" => Ok(ip_protocol::ICMPV6),
            _ => Err(format!(
                "protocol {s:?} is not tcp, udp, icmp or icmpv6 (or give a number 1-255)"
            )),
        },
        toml::Value::Integer(n) => u8::try_from(*n)
            .ok()
            .filter(|&n| n != 0)
            .ok_or_else(|| format!("protocol {n} must be 1 to 255")),
        other => Err(format!(
            "protocol must be a name or a number, not {}",
            other.type_str()
        )),
    }
}

fn parse_ports(v: &toml::Value) -> Result<(u16, u16), String> {
    let port = |s: &str| {
        s.trim()
            .parse::<u16>()
            .map_err(|_| format!("{s:?} is not a port (0-65535)"))
    };
    match v {
        toml::Value::Integer(n) => u16::try_from(*n)
            .map(|p| (p, p))
            .map_err(|_| format!("port {n} is not 0-65535")),
        toml::Value::String(s) => {
            let (lo, hi) = match s.split_once('-') {
                Some((a, b)) => (port(a)?, port(b)?),
                None => {
                    let p = port(s)?;
                    (p, p)
                }
            };
            if lo > hi {
                return Err(format!("port range {s:?} is empty: write it low-high"));
            }
            Ok((lo, hi))
        }
        other => Err(format!(
            "a port is a number or a range such as \"1000-2000\", not {}",
            other.type_str()
        )),
    }
}

/// Rule `i` of a rules file, its errors pointing into `text`.
fn parse_rule(
    text: &str,
    i: usize,
    spanned: &toml::Spanned<RuleRepr>,
) -> Result<RuleSpec, RulesError> {
    let at = |span: std::ops::Range<usize>, m: String| RulesError::at(text, span.start, m);
    let r = spanned.get_ref();
    let prefix = |p: &Option<toml::Spanned<String>>| {
        p.as_ref()
            .map(|s| Prefix::parse(s.get_ref()).map_err(|m| at(s.span(), m)))
            .transpose()
    };
    let (src, dst) = (prefix(&r.src)?, prefix(&r.dst)?);
    if let (Some(s), Some(d)) = (src, dst) {
        if s.family() != d.family() {
            return Err(at(
                spanned.span(),
                "src and dst are of different families: no packet can match".into(),
            ));
        }
    }
    let protocol = r
        .protocol
        .as_ref()
        .map(|p| parse_protocol(p.get_ref()).map_err(|m| at(p.span(), m)))
        .transpose()?;
    let ports = |p: &Option<toml::Spanned<toml::Value>>| {
        p.as_ref()
            .map(|s| parse_ports(s.get_ref()).map_err(|m| at(s.span(), m)))
            .transpose()
    };
    let (src_ports, dst_ports) = (ports(&r.src_port)?, ports(&r.dst_port)?);
    if (src_ports.is_some() || dst_ports.is_some())
        && !matches!(protocol, Some(ip_protocol::TCP | ip_protocol::UDP))
    {
        let span = r
            .dst_port
            .as_ref()
            .or(r.src_port.as_ref())
            .map(|s| s.span());
        return Err(at(
            span.unwrap_or(spanned.span()),
            "ports need protocol = \"tcp\" or \"udp\" in the same rule".into(),
        ));
    }
    let action = parse_verdict(r.action.get_ref(), true).map_err(|m| at(r.action.span(), m))?;
    let rate = parse_rate(text, r, action)?;
    let name = match &r.name {
        Some(n) => {
            check_name(n.get_ref()).map_err(|m| at(n.span(), m))?;
            n.get_ref().clone()
        }
        None => format!("rule{}", i + 1),
    };
    Ok(RuleSpec {
        name,
        matcher: Match {
            src,
            dst,
            protocol,
            src_ports,
            dst_ports,
        },
        action,
        rate,
    })
}

/// A rule's rate limit: a rate and a burst for `rate-limit` rules, nothing for the others.
fn parse_rate(text: &str, r: &RuleRepr, action: Verdict) -> Result<Option<Rate>, RulesError> {
    let at = |span: std::ops::Range<usize>, m: String| RulesError::at(text, span.start, m);
    Ok(match (&r.rate, action) {
        (Some(rate), Verdict::RateLimit) => {
            let (per_second, unit) = Rate::parse(rate.get_ref()).map_err(|m| at(rate.span(), m))?;
            let burst = match &r.burst {
                Some(b) => u64::try_from(*b.get_ref())
                    .ok()
                    .filter(|&b| b > 0)
                    .ok_or_else(|| at(b.span(), "burst must be at least 1".into()))?,
                // 50 ms worth, and at least one full-size frame: a user-space
                // policer sees packets in bunches when its thread is scheduled
                // out, and a shorter burst would police the scheduler.
                None => match unit {
                    RateUnit::Packets => (per_second / 20).max(1),
                    RateUnit::Bits => (per_second / 160).max(1514),
                },
            };
            Some(Rate {
                per_second,
                unit,
                burst,
            })
        }
        (None, Verdict::RateLimit) => {
            return Err(at(
                r.action.span(),
                "a rate-limit rule needs rate = \"...\", such as \"10kpps\" or \"5Mbps\"".into(),
            ))
        }
        (Some(rate), _) => {
            return Err(at(
                rate.span(),
                "rate is only for action = \"rate-limit\"".into(),
            ))
        }
        (None, _) => {
            if let Some(b) = &r.burst {
                return Err(at(
                    b.span(),
                    "burst is only for action = \"rate-limit\"".into(),
                ));
            }
            None
        }
    })
}

/// The longest rule name, in characters: it stands in every live line and metric.
pub const MAX_RULE_NAME_CHARS: usize = 64;

/// Whether `c` would change what a terminal or a log shows rather than show itself: control
/// characters, and the marks that reorder text (a name must read as it is written).
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A rule name fit to print in live lines, logs and metrics.
fn check_name(name: &str) -> Result<(), String> {
    let chars = name.chars().count();
    if chars == 0 {
        return Err("a rule's name cannot be empty: give it one, or leave name out (ruleN)".into());
    }
    if chars > MAX_RULE_NAME_CHARS {
        let start: String = name.chars().take(16).collect();
        return Err(format!(
            "the name {start:?}... is {chars} characters long: at most {MAX_RULE_NAME_CHARS}"
        ));
    }
    if let Some(c) = name.chars().find(|&c| invisible(c)) {
        return Err(format!(
            "the name {name:?} holds the control character U+{:04X}: names are printed in live \
             lines, logs and metrics, so give one of letters, digits and punctuation",
            u32::from(c)
        ));
    }
    Ok(())
}

/// Counters and metrics are kept by rule name, beside `default` and `unclassifiable`: two
/// rules of one name would share them, so a name is refused where it is used the second time.
fn unique_names(
    text: &str,
    spans: &[toml::Spanned<RuleRepr>],
    rules: &[RuleSpec],
) -> Result<(), RulesError> {
    let mut seen = std::collections::HashMap::with_capacity(rules.len());
    for (i, r) in rules.iter().enumerate() {
        let earlier = seen.insert(r.name.as_str(), i);
        let clash = match earlier {
            Some(j) => format!("rule {} is named {:?} too", j + 1, r.name),
            None if matches!(r.name.as_str(), "default" | "unclassifiable") => {
                format!("{:?} names the counter of packets no rule takes", r.name)
            }
            None => continue,
        };
        return Err(RulesError::at(
            text,
            spans[i].span().start,
            format!(
                "{clash}: give each rule a name of its own (counters and metrics are kept by name)"
            ),
        ));
    }
    Ok(())
}

/// A rules file that could not be read or holds a mistake.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RulesFileError {
    /// Not a regular file, too large, unreadable or not UTF-8.
    #[error(transparent)]
    Read(#[from] crate::text_file::TextFileError),
    /// A mistake in the rules, with its line and column.
    #[error("{}: {error}", path.display())]
    Invalid {
        /// The file.
        path: std::path::PathBuf,
        /// The mistake.
        error: RulesError,
    },
}

impl RuleSet {
    /// Rules from the file at `path`: a regular file of at most
    /// [`MAX_RULES_FILE_BYTES`](crate::text_file::MAX_RULES_FILE_BYTES) of UTF-8.
    pub fn from_file(path: &std::path::Path) -> Result<Self, RulesFileError> {
        let text = crate::text_file::read_bounded(path, crate::text_file::MAX_RULES_FILE_BYTES)?;
        RuleSet::from_toml(&text).map_err(|error| RulesFileError::Invalid {
            path: path.to_path_buf(),
            error,
        })
    }

    /// Rules from a TOML text; errors give line and column.
    pub fn from_toml(text: &str) -> Result<Self, RulesError> {
        let file: FileRepr = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            let mut message = e.message().trim().to_string();
            if text[offset.min(text.len())..].starts_with("[rule]") {
                message += ": write each rule under [[rule]], in double brackets";
            }
            RulesError::at(text, offset, message)
        })?;
        if file.rule.len() > crate::MAX_RULES {
            return Err(RulesError::at(
                text,
                file.rule[crate::MAX_RULES].span().start,
                format!(
                    "{} rules; at most {} are supported",
                    file.rule.len(),
                    crate::MAX_RULES
                ),
            ));
        }
        let at = |span: std::ops::Range<usize>, m: String| RulesError::at(text, span.start, m);
        let default = match &file.default {
            Some(d) => parse_verdict(d.get_ref(), false).map_err(|m| at(d.span(), m))?,
            None => Verdict::Forward,
        };
        // Fail closed: a packet the rules cannot see into is dropped unless the file says so.
        let unclassifiable = match &file.unclassifiable {
            Some(u) => parse_verdict(u.get_ref(), false)
                .map_err(|m| at(u.span(), m.replacen("default", "unclassifiable", 1)))?,
            None => Verdict::Drop,
        };
        let rules = file
            .rule
            .iter()
            .enumerate()
            .map(|(i, spanned)| parse_rule(text, i, spanned))
            .collect::<Result<Vec<_>, _>>()?;
        unique_names(text, &file.rule, &rules)?;
        Ok(RuleSet {
            fast: rules.iter().map(|r| FastMatch::new(&r.matcher)).collect(),
            rules,
            default,
            unclassifiable,
            forward_in_kernel: false,
        })
    }

    /// A rule set with no rules: everything takes `default`.
    pub fn with_default(default: Verdict) -> Self {
        RuleSet {
            rules: Vec::new(),
            fast: Vec::new(),
            default,
            unclassifiable: Verdict::Drop,
            forward_in_kernel: false,
        }
    }

    /// The verdict for packets that cannot be classified ([`Unclassifiable`]): `drop` unless
    /// the file's `unclassifiable` says otherwise.
    pub fn unclassifiable_verdict(&self) -> Verdict {
        self.unclassifiable
    }

    /// Sets the verdict for unclassifiable packets.
    pub fn set_unclassifiable_verdict(&mut self, v: Verdict) {
        self.unclassifiable = v;
    }

    /// The verdict for `frame`'s packet and the index of what decided it: a rule, the default
    /// (`rules().len()`), or unclassifiable (`rules().len() + 1`).
    pub fn decide(&self, key: &Result<PacketKey, Unclassifiable>) -> (usize, Verdict) {
        match key.as_ref().map(|k| self.classify(k)) {
            Ok(Ok(Some(i))) => (i, self.rules[i].action),
            Ok(Ok(None)) => (self.rules.len(), self.default),
            Err(_) | Ok(Err(_)) => (self.rules.len() + 1, self.unclassifiable),
        }
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[RuleSpec] {
        &self.rules
    }

    /// The verdict when no rule matches.
    pub fn default_verdict(&self) -> Verdict {
        self.default
    }

    /// The index of the first rule that matches, or `None` for the default. A later
    /// fragment that reaches a rule with ports, its other fields matching, is unclassifiable:
    /// whether that rule is its packet's cannot be told from it, and the rules after it (and
    /// the default) must not take it for want of ports.
    pub fn classify(&self, key: &PacketKey) -> Result<Option<usize>, Unclassifiable> {
        let (src, dst) = (u128::from_be_bytes(key.src), u128::from_be_bytes(key.dst));
        if !key.later_fragment {
            return Ok(self.fast.iter().position(|m| m.matches(key, src, dst)));
        }
        for (i, m) in self.fast.iter().enumerate() {
            if !m.matches_but_ports(key, src, dst) {
                continue;
            }
            if m.has_ports() {
                return Err(Unclassifiable(
                    "a later fragment reached a rule with ports: its ports are not in it",
                ));
            }
            return Ok(Some(i));
        }
        Ok(None)
    }

    /// Lets the kernel carry out `forward` verdicts it can decide (XDP_REDIRECT out of the
    /// other interface), so those packets never reach user space. Off by default.
    pub fn set_forward_in_kernel(&mut self, on: bool) {
        self.forward_in_kernel = on;
    }

    /// Whether the kernel carries out `forward` verdicts (see
    /// [`RuleSet::set_forward_in_kernel`]).
    pub fn forward_in_kernel(&self) -> bool {
        self.forward_in_kernel
    }

    fn kernel_can(&self, v: Verdict) -> bool {
        match v {
            Verdict::Drop | Verdict::Pass => true,
            Verdict::Forward => self.forward_in_kernel,
            Verdict::RateLimit => false,
        }
    }

    /// True if the kernel filter settles rule `i` itself: its match is exact there and its
    /// action is drop or pass (or forward, with [`RuleSet::set_forward_in_kernel`]). Such a
    /// rule's packets never reach user space, unless an earlier rule that only user space can
    /// decide sent them up.
    pub fn decided_in_kernel(&self, i: usize) -> bool {
        self.rules
            .get(i)
            .is_some_and(|r| r.matcher.kernel_exact() && self.kernel_can(r.action))
    }

    /// True if the kernel settles unclassifiable packets itself.
    pub fn unclassifiable_decided_in_kernel(&self) -> bool {
        self.kernel_can(self.unclassifiable)
    }

    /// The kernel filter's action for unclassifiable packets.
    pub fn kernel_unclassifiable(&self) -> Action {
        self.kernel_action(self.unclassifiable)
    }

    fn kernel_action(&self, v: Verdict) -> Action {
        match v {
            Verdict::Drop => Action::Drop,
            Verdict::Pass => Action::Pass,
            Verdict::Forward if self.forward_in_kernel => Action::Forward,
            Verdict::Forward | Verdict::RateLimit => Action::Redirect,
        }
    }

    /// True if the kernel settles packets no rule matches.
    pub fn default_decided_in_kernel(&self) -> bool {
        self.kernel_can(self.default)
    }

    /// The kernel filter's rules (one per rule, same order) and default action.
    ///
    /// A rule the kernel cannot match exactly (source prefix or port) becomes a redirect over
    /// what the kernel can see of it (a superset of its packets), so no later kernel rule can
    /// take a packet it might match; user space then evaluates the whole list again.
    pub fn kernel_rules(&self) -> crate::Result<(Vec<KernelRule>, Action)> {
        let action = |v: Verdict| self.kernel_action(v);
        let rules = self
            .rules
            .iter()
            .map(|r| {
                KernelRule::new(
                    r.matcher.dst.map(|p| (p.addr, p.len)),
                    r.matcher.protocol,
                    r.matcher.dst_ports,
                    if r.matcher.kernel_exact() {
                        action(r.action)
                    } else {
                        Action::Redirect
                    },
                )
            })
            .collect::<crate::Result<_>>()?;
        Ok((rules, action(self.default)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules' decision written plainly, byte by byte: the reference the masks are held to.
    fn prefix_contains(p: &Prefix, family: u8, addr: &[u8; 16]) -> bool {
        if family != p.family() {
            return false;
        }
        let mine = match p.addr {
            IpAddr::V4(a) => {
                let mut b = [0; 16];
                b[..4].copy_from_slice(&a.octets());
                b
            }
            IpAddr::V6(a) => a.octets(),
        };
        let (whole, bits) = (usize::from(p.len / 8), p.len % 8);
        if mine[..whole] != addr[..whole] {
            return false;
        }
        bits == 0 || {
            let mask = 0xffu8 << (8 - bits);
            mine[whole] & mask == addr[whole] & mask
        }
    }

    fn byte_wise_matches(m: &Match, k: &PacketKey) -> bool {
        m.src.is_none_or(|p| prefix_contains(&p, k.family, &k.src))
            && m.dst.is_none_or(|p| prefix_contains(&p, k.family, &k.dst))
            && m.protocol.is_none_or(|p| k.family != 0 && p == k.protocol)
            && m.src_ports
                .is_none_or(|(lo, hi)| (lo..=hi).contains(&k.src_port))
            && m.dst_ports
                .is_none_or(|(lo, hi)| (lo..=hi).contains(&k.dst_port))
    }

    fn key(dst: [u8; 4], proto: u8, dport: u16) -> PacketKey {
        let mut k = PacketKey {
            family: 4,
            protocol: proto,
            dst_port: dport,
            ..PacketKey::default()
        };
        k.dst[..4].copy_from_slice(&dst);
        k
    }

    #[test]
    fn rule_names_are_unique() {
        let e = RuleSet::from_toml(
            "[[rule]]\nname = \"web\"\naction = \"pass\"\n[[rule]]\nname = \"web\"\naction = \"drop\"\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.column), (4, 1), "{e}");
        assert!(e.message.starts_with("rule 1 is named \"web\" too"), "{e}");
        // An unnamed rule's name ("rule2") is taken as well.
        let e = RuleSet::from_toml(
            "[[rule]]\nname = \"rule2\"\naction = \"pass\"\n[[rule]]\naction = \"drop\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        for reserved in ["default", "unclassifiable"] {
            let text = format!("[[rule]]\nname = \"{reserved}\"\naction = \"pass\"\n");
            let e = RuleSet::from_toml(&text).unwrap_err();
            assert!(e.message.contains("names the counter"), "{e}");
        }
    }

    #[test]
    fn a_later_fragment_reaching_a_port_rule_is_unclassifiable() {
        let rs = RuleSet::from_toml(
            r#"
default = "forward"
[[rule]]
dst = "198.51.100.0/24"
action = "pass"
[[rule]]
protocol = "udp"
dst_port = 53
action = "drop"
[[rule]]
protocol = "tcp"
action = "forward"
"#,
        )
        .unwrap();
        let mut later = key([203, 0, 113, 9], 17, 0);
        later.later_fragment = true;
        // Its ports might be 53: neither the drop nor the default may take it.
        assert!(rs.classify(&later).is_err());
        assert_eq!(rs.decide(&Ok(later)), (3 + 1, rs.unclassifiable_verdict()));
        // A rule before the port rule that matches without ports still takes it, and one
        // whose other fields do not match is passed by.
        let mut to_pass = later;
        to_pass.dst[..4].copy_from_slice(&[198, 51, 100, 9]);
        assert_eq!(rs.classify(&to_pass), Ok(Some(0)));
        let mut tcp = later;
        tcp.protocol = 6;
        assert_eq!(rs.classify(&tcp), Ok(Some(2)));
        // Read from a frame: an IPv4 fragment at offset 8, and the first fragment.
        let mut frame = vec![0u8; 14 + 20 + 8];
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut ip = ipv4::Packet::new_unchecked(&mut frame[14..]);
        ip.init(28, 17, [203, 0, 113, 1], [203, 0, 113, 9]);
        frame[14 + 6..14 + 8].copy_from_slice(&1u16.to_be_bytes());
        let k = PacketKey::parse(&frame).unwrap();
        assert!(k.later_fragment && k.dst_port == 0);
        assert_eq!(rs.decide(&Ok(k)).0, 4);
        frame[14 + 6..14 + 8].copy_from_slice(&0x2000u16.to_be_bytes());
        frame[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&53u16.to_be_bytes());
        let first = PacketKey::parse(&frame).unwrap();
        assert!(!first.later_fragment);
        assert_eq!(rs.classify(&first), Ok(Some(1)));
    }

    #[test]
    fn first_match_wins_and_kernel_split_keeps_order() {
        let rs = RuleSet::from_toml(
            r#"
default = "drop"
[[rule]]
src = "198.51.100.7"
action = "forward"
[[rule]]
dst = "203.0.113.0/24"
protocol = "udp"
dst_port = "1000-2000"
action = "drop"
[[rule]]
protocol = "icmp"
action = "rate-limit"
rate = "10kpps"
"#,
        )
        .unwrap();
        assert_eq!(rs.classify(&key([203, 0, 113, 9], 17, 1500)), Ok(Some(1)));
        assert_eq!(rs.classify(&key([203, 0, 113, 9], 17, 999)), Ok(None));
        assert_eq!(rs.classify(&key([203, 0, 113, 9], 1, 0)), Ok(Some(2)));
        let mut from7 = key([203, 0, 113, 9], 17, 1500);
        from7.src[..4].copy_from_slice(&[198, 51, 100, 7]);
        assert_eq!(rs.classify(&from7), Ok(Some(0)));
        let (k, default) = rs.kernel_rules().unwrap();
        assert_eq!(default, Action::Drop);
        // The source rule is a redirect of everything, so the kernel drop below cannot
        // take packets from .7.
        assert!(k[0].any_destination());
        assert_eq!(k[0].action(), Action::Redirect);
        assert_eq!(k[1].action(), Action::Drop);
        assert_eq!(k[2].action(), Action::Redirect);
        assert!(!rs.decided_in_kernel(0) && rs.decided_in_kernel(1));
        assert_eq!(rs.rules()[2].rate.unwrap().burst, 500);
    }

    #[test]
    fn hostile_names_are_refused_where_they_stand() {
        let rule = |name: &str| {
            let name = toml::Value::String(name.into());
            format!("[[rule]]\nname = {name}\naction = \"drop\"\n")
        };
        for (name, says) in [
            ("", "cannot be empty"),
            ("a\nb", "U+000A"),
            ("a\rb", "U+000D"),
            ("\u{1b}[2Jx", "U+001B"),
            ("\u{202e}txt", "U+202E"),
        ] {
            let e = RuleSet::from_toml(&rule(name)).unwrap_err();
            assert_eq!((e.line, e.column), (2, 8), "{e}");
            assert!(e.message.contains(says), "{name:?}: {e}");
        }
        let long = "x".repeat(1 << 20);
        let e = RuleSet::from_toml(&rule(&long)).unwrap_err();
        assert!(
            e.message.len() < 200,
            "the message does not repeat a long name: {e}"
        );
        assert!(e.message.contains("at most 64"), "{e}");
        let longest = "é".repeat(MAX_RULE_NAME_CHARS);
        assert!(RuleSet::from_toml(&rule(&longest)).is_ok());
    }

    #[test]
    fn a_prefix_says_what_it_means_or_is_refused() {
        let dst =
            |p: &str| RuleSet::from_toml(&format!("[[rule]]\ndst = {p:?}\naction = \"drop\"\n"));
        let e = dst("10.0.0.1/8").unwrap_err();
        assert!(
            e.message
                .contains("\"10.0.0.0/8\" for the network or \"10.0.0.1/32\""),
            "{e}"
        );
        let e = dst("2001:db8::1/32").unwrap_err();
        assert!(e.message.contains("\"2001:db8::/32\""), "{e}");
        let e = dst(" 10.0.0.0/8").unwrap_err();
        assert!(e.message.contains("white space"), "{e}");
        assert!(dst("10.0.0.0/ 8").is_err());
        for ok in [
            "10.0.0.0/8",
            "10.0.0.1",
            "0.0.0.0/0",
            "2001:db8::/32",
            "::/0",
        ] {
            assert!(dst(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn a_single_bracketed_rule_is_explained() {
        let e = RuleSet::from_toml("[rule]\naction = \"drop\"\n").unwrap_err();
        assert!(e.message.contains("[[rule]]"), "{e}");
    }

    #[test]
    fn too_many_rules_are_refused_before_any_is_read() {
        // Each rule would be refused on its own (a duplicate name): the count comes first,
        // so a huge file costs one pass of the TOML parser and no more.
        let rule = "[[rule]]\nname = \"same\"\naction = \"drop\"\n";
        let e = RuleSet::from_toml(&rule.repeat(50_000)).unwrap_err();
        assert!(e.message.starts_with("50000 rules; at most 64"), "{e}");
        assert_eq!(e.line, 3 * crate::MAX_RULES + 1);
    }

    #[test]
    fn errors_point_at_line_and_column() {
        let e = RuleSet::from_toml("[[rule]]\naction = \"forward\"\ndst = \"10.0.0.0/40\"\n")
            .unwrap_err();
        assert_eq!((e.line, e.column), (3, 7), "{e}");
        assert!(e.message.contains("0 to 32"), "{e}");
        let e = RuleSet::from_toml("[[rule]]\naction = \"fwd\"\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 10), "{e}");
        let e = RuleSet::from_toml("[[rule]]\nactoin = \"drop\"\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("actoin"), "{e}");
        let e = RuleSet::from_toml("[[rule]]\ndst_port = 53\naction = \"drop\"\n").unwrap_err();
        assert!(e.message.contains("tcp"), "{e}");
        assert_eq!(e.line, 2);
        let e = RuleSet::from_toml("[[rule]]\naction = \"rate-limit\"\n").unwrap_err();
        assert!(e.message.contains("rate ="), "{e}");
        let e = RuleSet::from_toml("[[rule]]\naction = \"rate-limit\"\nrate = \"5 furlongs\"\n")
            .unwrap_err();
        assert_eq!(e.line, 3);
        let e = RuleSet::from_toml("default = \"rate-limit\"").unwrap_err();
        assert_eq!((e.line, e.column), (1, 11));
        let e = RuleSet::from_toml("[[rule]\n").unwrap_err();
        assert_eq!(e.line, 1, "{e}");
    }

    #[test]
    fn rates_parse_and_limit() {
        assert_eq!(Rate::parse("10kpps"), Ok((10_000, RateUnit::Packets)));
        assert_eq!(Rate::parse("5Mbps"), Ok((5_000_000, RateUnit::Bits)));
        assert_eq!(Rate::parse("1.5Gbps"), Ok((1_500_000_000, RateUnit::Bits)));
        assert!(Rate::parse("0pps").is_err() && Rate::parse("fast").is_err());
        let l = RateLimiter::new(Rate {
            per_second: 1000,
            unit: RateUnit::Packets,
            burst: 10,
        });
        // A burst of 10 at time 0, then one per millisecond.
        assert_eq!((0..20).filter(|_| l.allow(0, 64)).count(), 10);
        let ms = 1_000_000_000;
        assert!(!l.allow(ms / 2, 64));
        assert!(l.allow(ms, 64));
        // Over one simulated second at 10x the rate, the rate passes (the bucket is empty).
        let passed = (0..10_000u64)
            .filter(|i| l.allow(ms + i * ms / 10, 64))
            .count();
        assert!((999..=1001).contains(&passed), "{passed}");
        let bits = RateLimiter::new(Rate {
            per_second: 8_000,
            unit: RateUnit::Bits,
            burst: 1000,
        });
        // 1000 bytes a second: one 1000-byte frame, then nothing until a second later.
        assert!(bits.allow(0, 1000) && !bits.allow(0, 1));
        assert!(bits.allow(1000 * ms, 1000));
    }

    #[test]
    fn unclassifiable_packets_are_dropped_unless_the_file_says_otherwise() {
        let rs = RuleSet::from_toml("").unwrap();
        assert_eq!(rs.unclassifiable_verdict(), Verdict::Drop);
        assert_eq!(rs.decide(&Err(Unclassifiable("x"))), (1, Verdict::Drop));
        let rs = RuleSet::from_toml("unclassifiable = \"forward\"\n").unwrap();
        assert_eq!(rs.unclassifiable_verdict(), Verdict::Forward);
        let e = RuleSet::from_toml("\nunclassifiable = \"maybe\"\n").unwrap_err();
        assert!(
            e.to_string().contains("unclassifiable") && e.line == 2,
            "{e}"
        );
    }

    #[test]
    fn keys_come_from_frames_and_garbage_matches_nothing_specific() {
        let mut f = [0u8; 64];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        {
            let mut ip = ipv4::Packet::new_unchecked(&mut f[14..]);
            ip.init(20 + 8, 17, [198, 51, 100, 1], [203, 0, 113, 5]);
        }
        f[34..38].copy_from_slice(&[0x30, 0x39, 0, 53]);
        let k = PacketKey::parse(&f).unwrap();
        assert_eq!(
            (k.family, k.protocol, k.src_port, k.dst_port),
            (4, 17, 12345, 53)
        );
        assert_eq!(&k.dst[..4], &[203, 0, 113, 5]);
        for cut in 0..14 + 20 + 4 {
            assert!(PacketKey::parse(&f[..cut]).is_err(), "cut at {cut}");
        }
        // Ethernet padding after the IP packet is fine.
        assert!(PacketKey::parse(&f).is_ok());
        // Lying lengths, a wrong version, a short IHL.
        for (at, v) in [(16, 0u8), (17, 10), (16, 0xff), (14, 0x65), (14, 0x44)] {
            let mut g = f;
            g[at] = v;
            if at == 16 {
                g[17] = if v == 0xff { 0xff } else { 10 };
            }
            assert!(PacketKey::parse(&g).is_err(), "byte {at} = {v}");
        }
        // Non-IP frames are classifiable, with family 0.
        let mut arp = f;
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(PacketKey::parse(&arp).unwrap().family, 0);
        let p = Prefix::parse("203.0.113.0/25").unwrap();
        assert!(prefix_contains(&p, 4, &k.dst) && !prefix_contains(&p, 6, &k.dst));
        let other = Prefix::parse("203.0.113.128/25").unwrap();
        assert!(!prefix_contains(&other, 4, &k.dst));
    }

    /// Frames for the checksum note: Ethernet, optional VLAN tag, IPv4 or IPv6 (with a
    /// hop-by-hop header when asked), then a TCP or UDP header and payload whose checksum
    /// field holds the pseudo-header sum (`partial`) or something else.
    fn l4_frame(v6: bool, tagged: bool, hop_by_hop: bool, proto: u8, partial: bool) -> Vec<u8> {
        let l4_len: usize = if proto == ip_protocol::TCP { 20 } else { 8 } + 10;
        let mut f = vec![0u8; 12];
        if tagged {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        let (src, dst) = ([198, 51, 100, 1], [203, 0, 113, 5]);
        let mut src6 = [0u8; 16];
        src6[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        let mut dst6 = src6;
        dst6[15] = 9;
        let l3 = f.len() + 2;
        let pseudo = if v6 {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            let ext = if hop_by_hop { 8 } else { 0 };
            f.extend_from_slice(&((l4_len + ext) as u16).to_be_bytes());
            f.extend_from_slice(&[if hop_by_hop { 0 } else { proto }, 64]);
            f.extend_from_slice(&src6);
            f.extend_from_slice(&dst6);
            if hop_by_hop {
                f.extend_from_slice(&[proto, 0, 1, 4, 0, 0, 0, 0]);
            }
            checksum::pseudo_header_v6(src6, dst6, proto, l4_len as u32)
        } else {
            f.extend_from_slice(&[0x08, 0x00]);
            f.resize(l3 + 20, 0);
            ipv4::Packet::new_unchecked(&mut f[l3..]).init(20 + l4_len as u16, proto, src, dst);
            checksum::pseudo_header_v4(src, dst, proto, l4_len as u16)
        };
        let l4 = f.len();
        f.resize(l4 + l4_len, 0x5a);
        let field = l4 + if proto == ip_protocol::TCP { 16 } else { 6 };
        let value = if partial {
            checksum::fold(pseudo)
        } else {
            0x1234
        };
        f[field..field + 2].copy_from_slice(&value.to_be_bytes());
        f
    }

    fn partial_by_locate(f: &[u8]) -> bool {
        L4Checksum::locate(f, f.len()).is_some_and(|c| c.is_partial(f))
    }

    #[test]
    fn one_read_tells_a_settled_checksum_from_a_partial_one_as_locate_does() {
        let (tcp, udp) = (ip_protocol::TCP, ip_protocol::UDP);
        for (v6, tagged, hop, proto) in [
            (false, false, false, udp),
            (false, false, false, tcp),
            (false, true, false, udp),
            (true, false, false, udp),
            (true, true, false, tcp),
        ] {
            for partial in [false, true] {
                let f = l4_frame(v6, tagged, hop, proto, partial);
                assert_eq!(partial_by_locate(&f), partial, "the frame is as built");
                let (key, settled) = PacketKey::parse_noting_checksum(&f, false);
                assert_eq!(key, PacketKey::parse(&f), "the same key");
                assert_eq!(settled, !partial, "v6 {v6} tagged {tagged} proto {proto}");
                let (_, in_chain) = PacketKey::parse_noting_checksum(&f, true);
                assert!(!in_chain, "a chain is left to the transmit step");
            }
        }
        // Behind IPv6 extension headers this read cannot tell: unknown, not settled.
        let f = l4_frame(true, false, true, udp, false);
        assert!(!partial_by_locate(&f));
        assert!(!PacketKey::parse_noting_checksum(&f, false).1);
        // Nothing to finish: not IP, an IPv4 fragment, no TCP or UDP.
        let mut arp = l4_frame(false, false, false, udp, true);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let mut fragment = l4_frame(false, false, false, udp, true);
        fragment[20] = 0x20; // more fragments
        let mut icmp = l4_frame(false, false, false, udp, true);
        icmp[23] = ip_protocol::ICMP;
        for f in [arp, fragment, icmp] {
            assert!(!partial_by_locate(&f));
            assert!(PacketKey::parse_noting_checksum(&f, false).1);
        }
    }

    /// Whatever the bytes, a checksum called settled is never one locate finds partial (the
    /// transmit step skips only what it would have left alone), and the fast path for plain
    /// IPv4 reads every packet it takes exactly as the general walk does.
    #[test]
    fn a_settled_checksum_is_never_a_partial_one_whatever_the_bytes() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let interesting = [
            0u8, 1, 4, 5, 6, 0x11, 0x20, 0x40, 0x45, 0x60, 0x81, 0x86, 0xdd, 0xff,
        ];
        let (mut settled_seen, mut partial_seen, mut fast_seen) = (0, 0, 0);
        for base in 0..8u64 {
            let (v6, tagged, proto) = (base & 1 == 1, base & 2 == 2, [6, 17][(base >> 2) as usize]);
            let clean = l4_frame(v6, tagged, false, proto, true);
            for _ in 0..4000 {
                let mut f = clean.clone();
                for _ in 0..(next() % 3 + 1) {
                    let at = (next() % f.len() as u64) as usize;
                    f[at] = interesting[(next() % interesting.len() as u64) as usize];
                }
                if next() % 4 == 0 {
                    f.truncate((next() % f.len() as u64) as usize);
                }
                let (key, settled) = PacketKey::parse_noting_checksum(&f, false);
                let partial = partial_by_locate(&f);
                if let Some(fast) = PacketKey::plain_ipv4(&f) {
                    let slow = PacketKey::parse_noting_checksum_slowly(&f, false);
                    assert_eq!(fast, slow, "the fast path reads {f:02x?} as the walk does");
                    fast_seen += 1;
                }
                assert_eq!(key, PacketKey::parse(&f), "the same key as parse");
                assert!(
                    !(settled && partial),
                    "called settled but partial: {f:02x?}"
                );
                settled_seen += usize::from(settled);
                partial_seen += usize::from(partial);
            }
        }
        assert!(
            settled_seen > 1000 && partial_seen > 1000 && fast_seen > 1000,
            "{settled_seen} {partial_seen} {fast_seen}"
        );
    }

    /// The rules stage's masks decide as the plain byte-wise reading does, for rules and packets of
    /// every shape: prefixes of each length and family (mixed too), protocols with and
    /// without an IP family, port ranges, and keys near and far from the prefixes.
    #[test]
    fn the_fast_match_decides_as_the_match_does() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let base: [u8; 16] = [
            0x20, 0x01, 0x0d, 0xb8, 198, 51, 100, 7, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        let near = |next: &mut dyn FnMut(u64) -> u64| {
            let mut a = base;
            for _ in 0..next(3) {
                a[next(16) as usize] ^= 1 << next(8);
            }
            a
        };
        let (mut matched, mut missed) = (0, 0);
        for _ in 0..20_000 {
            let prefix = |next: &mut dyn FnMut(u64) -> u64| -> Option<Prefix> {
                let a = near(next);
                match next(3) {
                    0 => None,
                    1 => Some(Prefix {
                        addr: IpAddr::from([a[4], a[5], a[6], a[7]]),
                        len: next(33) as u8,
                    }),
                    _ => Some(Prefix {
                        addr: IpAddr::from(a),
                        len: next(129) as u8,
                    }),
                }
            };
            let ports = |next: &mut dyn FnMut(u64) -> u64| {
                (next(2) == 0).then(|| {
                    let lo = next(100) as u16;
                    (lo, lo + next(50) as u16)
                })
            };
            let m = Match {
                src: prefix(&mut next),
                dst: prefix(&mut next),
                protocol: [None, Some(6), Some(17)][next(3) as usize],
                src_ports: ports(&mut next),
                dst_ports: ports(&mut next),
            };
            let (src, dst) = (near(&mut next), near(&mut next));
            let v4 = |a: [u8; 16]| {
                let mut b = [0; 16];
                b[..4].copy_from_slice(&a[4..8]);
                b
            };
            let family = [0, 4, 6][next(3) as usize];
            let k = PacketKey {
                family,
                src: if family == 4 { v4(src) } else { src },
                dst: if family == 4 { v4(dst) } else { dst },
                protocol: [6, 17, 1][next(3) as usize],
                src_port: next(160) as u16,
                dst_port: next(160) as u16,
                later_fragment: false,
            };
            let fast = FastMatch::new(&m);
            let (s128, d128) = (u128::from_be_bytes(k.src), u128::from_be_bytes(k.dst));
            let expected = byte_wise_matches(&m, &k);
            assert_eq!(fast.matches(&k, s128, d128), expected, "{m:?} {k:?}");
            assert_eq!(m.matches(&k), expected, "{m:?} {k:?}");
            if expected {
                matched += 1;
            } else {
                missed += 1;
            }
        }
        assert!(matched > 500 && missed > 1000, "{matched} {missed}");
    }
}
