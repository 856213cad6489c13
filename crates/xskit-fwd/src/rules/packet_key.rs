//! The fields of a packet the rules look at, read once from its headers.

use crate::abi::TellNote;
use xskit_wire::offload::{self, L4Checksum};
use xskit_wire::{checksum, ethernet, ip_protocol, ipv4, ipv6, tcp, udp, vlan, EtherType};

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
    /// A later fragment (an IPv4 or IPv6 fragment offset other than 0): its TCP, UDP or
    /// ICMP header is in the first fragment, not here, and its fields read as 0.
    pub later_fragment: bool,
    /// The IP packet's length: IPv4's total length, IPv6's 40 + payload length (at most
    /// 65,535); 0 when not IP. The length BGP Flowspec and amplification signatures give;
    /// the frame is 14 bytes longer, and 4 more a VLAN tag.
    pub ip_len: u16,
    /// The VLAN ID of the outer tag, if the frame has one.
    pub vlan: Option<u16>,
    /// TCP's flag byte, else 0.
    pub tcp_flags: u8,
    /// ICMP's or ICMPv6's type, else 0.
    pub icmp_type: u8,
    /// ICMP's or ICMPv6's code, else 0.
    pub icmp_code: u8,
    /// IPv6 extension headers follow the fixed header: the XDP filter, which does not walk
    /// them, sends such a packet to user space undecided.
    pub ipv6_extensions: bool,
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

/// What one read of a packet's headers tells of its TCP or UDP checksum, for the step that
/// finishes partial ones before a packet leaves (see [`L4Checksum`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChecksumState {
    /// Nothing to finish: no partial checksum, or nothing [`L4Checksum::locate`] would find.
    Settled,
    /// Partial, its sender having left it for a device (where [`L4Checksum::locate`] finds
    /// it).
    Partial {
        /// Where the L4 header starts in the frame.
        start: usize,
        /// Where the checksum field is in the L4 header.
        offset: usize,
    },
    /// This read cannot tell (a chain of buffers, IPv6 extension headers, an unclassifiable
    /// packet): the finishing step looks for itself.
    Unknown,
}

impl ChecksumState {
    /// Where the L4 header of the commonest packet starts (an untagged IPv4 packet without
    /// options, the one [`PacketKey`] reads from fixed offsets): after the Ethernet and the
    /// IPv4 header.
    pub const PLAIN_IPV4_L4: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN;

    /// Nothing to finish.
    pub fn is_settled(self) -> bool {
        self == ChecksumState::Settled
    }

    /// What the filter's note on a packet it told says of its checksum, as the plain read
    /// ([`PacketKey::classifiable_noting_checksum`]) of a classifiable packet would say it;
    /// `None` when the note says nothing.
    pub fn told(note: TellNote) -> Option<ChecksumState> {
        let partial = |offset| ChecksumState::Partial {
            start: Self::PLAIN_IPV4_L4,
            offset,
        };
        match note {
            TellNote::Nothing => None,
            TellNote::Settled => Some(ChecksumState::Settled),
            TellNote::PartialUdp => Some(partial(udp::CHECKSUM_AT)),
            TellNote::PartialTcp => Some(partial(tcp::CHECKSUM_AT)),
        }
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
    /// - in a first fragment inside the IP length: UDP without the 4 bytes of its ports, TCP
    ///   without the 14 through its flags, ICMP or ICMPv6 without the 2 of its type and code.
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

    /// [`PacketKey::parse_first`], also telling what the packet's TCP or UDP checksum needs,
    /// from the same read of its headers ([`ChecksumState`]).
    #[inline]
    pub fn parse_noting_checksum(
        frame: &[u8],
        continued: bool,
    ) -> (Result<PacketKey, Unclassifiable>, ChecksumState) {
        if !continued {
            if let Some(done) = Self::plain_ipv4(frame) {
                return done;
            }
        }
        Self::parse_noting_checksum_slowly(frame, continued)
    }

    /// [`PacketKey::parse_noting_checksum`] for rules that need no key: whether the packet
    /// can be classified, and what its checksum needs. The commonest packets' key is never
    /// built.
    #[inline(always)]
    pub fn classifiable_noting_checksum(frame: &[u8], continued: bool) -> (bool, ChecksumState) {
        if !continued {
            if let Some((key, state)) = Self::plain_ipv4(frame) {
                return (key.is_ok(), state);
            }
        }
        let (key, state) = Self::parse_noting_checksum_slowly(frame, continued);
        (key.is_ok(), state)
    }

    /// [`PacketKey::parse_noting_checksum`] by the general walk, which the fast path for the
    /// commonest packets must agree with.
    #[inline(never)]
    pub(super) fn parse_noting_checksum_slowly(
        frame: &[u8],
        continued: bool,
    ) -> (Result<PacketKey, Unclassifiable>, ChecksumState) {
        match Self::parse_headers(frame, continued) {
            Err(e) => (Err(e), ChecksumState::Unknown),
            Ok((key, _)) if continued => (Ok(key), ChecksumState::Unknown),
            Ok((key, l4)) => {
                let state = match (key.family, l4) {
                    (0, _) => ChecksumState::Settled,
                    (_, Some(at)) => key.checksum_state(frame, at),
                    (_, None) => ChecksumState::Unknown,
                };
                (Ok(key), state)
            }
        }
    }

    /// The commonest packet read straight from fixed offsets: an untagged IPv4 packet without
    /// options, not a fragment, carrying TCP or UDP with a whole header inside a frame that
    /// holds all the IP packet claims. `None` for anything else (or anything doubtful),
    /// which the general walk then reads.
    #[inline(always)]
    pub(super) fn plain_ipv4(
        frame: &[u8],
    ) -> Option<(Result<PacketKey, Unclassifiable>, ChecksumState)> {
        const L3: usize = ethernet::HEADER_LEN;
        const L4: usize = ChecksumState::PLAIN_IPV4_L4;
        // Every view below reads inside these bytes, whose length the compiler knows: one
        // bounds check for the lot.
        let h: &[u8; L4 + tcp::HEADER_LEN] = frame.first_chunk()?;
        let ip = ipv4::Packet::new_unchecked(&h[L3..L4]);
        let plain = ethernet::Frame::new_unchecked(&h[..L3]).ethertype() == EtherType::Ipv4
            && ip.version() == 4
            && ip.header_len() == ipv4::HEADER_LEN
            && !ip.more_frags()
            && ip.frag_offset() == 0;
        if !plain {
            return None;
        }
        let total = usize::from(ip.total_len());
        let (protocol, l4_len) = (ip.protocol(), total.checked_sub(ipv4::HEADER_LEN)?);
        let (offset, min) = match protocol {
            ip_protocol::TCP => (tcp::CHECKSUM_AT, tcp::HEADER_LEN),
            ip_protocol::UDP => (udp::CHECKSUM_AT, udp::HEADER_LEN),
            _ => return None,
        };
        if l4_len < min || L3 + total > frame.len() {
            return None;
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let (src_port, dst_port) = ports(protocol, &h[L4..]);
        let tcp_flags = if protocol == ip_protocol::TCP {
            h[L4 + tcp::FLAGS_AT]
        } else {
            0
        };
        let mut key = PacketKey {
            family: 4,
            protocol,
            src_port,
            dst_port,
            ip_len: total as u16,
            tcp_flags,
            ..PacketKey::default()
        };
        key.src[..4].copy_from_slice(&src);
        key.dst[..4].copy_from_slice(&dst);
        // Both the sum and the field in the machine's byte order: no swap on the way. The
        // addresses are read from `h` again, at offsets the compiler knows, which costs less
        // than passing on the views' copies.
        const ADDRS: usize = L3 + 12;
        let four = |i: usize| [h[i], h[i + 1], h[i + 2], h[i + 3]];
        let pseudo = checksum::fold(checksum::pseudo_header_v4_machine_order(
            four(ADDRS),
            four(ADDRS + 4),
            protocol,
            l4_len as u16,
        ));
        let at = L4 + offset;
        let field = u16::from_ne_bytes([h[at], h[at + 1]]);
        let state = if offload::holds_pseudo_sum(field, pseudo) {
            ChecksumState::Partial { start: L4, offset }
        } else {
            ChecksumState::Settled
        };
        Some((Ok(key), state))
    }

    /// What the TCP or UDP checksum at `at` needs (see [`PacketKey::parse_noting_checksum`]);
    /// the same checks as [`L4Checksum::locate`].
    fn checksum_state(&self, frame: &[u8], at: L4At) -> ChecksumState {
        let (offset, udp) = match self.protocol {
            ip_protocol::TCP if at.len >= tcp::HEADER_LEN => (tcp::CHECKSUM_AT, false),
            ip_protocol::UDP if at.len >= udp::HEADER_LEN => (udp::CHECKSUM_AT, true),
            _ => return ChecksumState::Settled,
        };
        if at.fragment || at.start + offset + 2 > frame.len() {
            return ChecksumState::Settled;
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
        if c.is_partial(frame) {
            ChecksumState::Partial {
                start: at.start,
                offset,
            }
        } else {
            ChecksumState::Settled
        }
    }

    /// The key, and where the L4 header is when one read tells exactly (IPv4, or IPv6 without
    /// extension headers).
    fn parse_headers(
        frame: &[u8],
        continued: bool,
    ) -> Result<(PacketKey, Option<L4At>), Unclassifiable> {
        let mut k = PacketKey::default();
        let (ethertype, l3);
        (ethertype, l3, k.vlan) = skip_vlan_tags(frame)?;
        let ip = &frame[l3..];
        let mut l4_at = None;
        // Bytes the IP packet may claim: the rest of the frame, or unknown for a chain.
        let room = if continued { usize::MAX } else { ip.len() };
        let l4 = match ethertype {
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
                k.ip_len = (40 + plen).min(usize::from(u16::MAX)) as u16;
                k.src = v.src_addr();
                k.dst = v.dst_addr();
                let held = ip.len().min(40 + plen);
                let (proto, rest, offset) = ipv6::Packet::new_unchecked(&ip[..held])
                    .upper_layer_fragment()
                    .map_err(|_| Unclassifiable("IPv6 extension headers cut short or too many"))?;
                k.protocol = proto;
                k.later_fragment = offset != 0;
                k.ipv6_extensions = matches!(v.next_header(), 0 | 43 | 44 | 51 | 60);
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
            k.read_l4(l4, l4_len)?;
        }
        Ok((k, l4_at))
    }

    /// Fills in the fields of the TCP, UDP or ICMP header at the start of `l4`, `l4_len`
    /// bytes long as the IP header says.
    fn read_l4(&mut self, l4: &[u8], l4_len: usize) -> Result<(), Unclassifiable> {
        let held = |n: usize, what| {
            if l4.len() < n || l4_len < n {
                Err(Unclassifiable(what))
            } else {
                Ok(())
            }
        };
        match self.protocol {
            ip_protocol::UDP => held(4, "UDP ports cut short")?,
            ip_protocol::TCP => {
                held(tcp::FLAGS_AT + 1, "TCP header cut short before its flags")?;
                self.tcp_flags = l4[tcp::FLAGS_AT];
            }
            ip_protocol::ICMP | ip_protocol::ICMPV6 => {
                held(2, "ICMP type and code cut short")?;
                (self.icmp_type, self.icmp_code) = (l4[0], l4[1]);
                return Ok(());
            }
            _ => return Ok(()),
        }
        (self.src_port, self.dst_port) = ports(self.protocol, l4);
        Ok(())
    }
}

/// The TCP or UDP ports at the start of `l4` (at least their 4 bytes).
#[inline(always)]
fn ports(protocol: u8, l4: &[u8]) -> (u16, u16) {
    if protocol == ip_protocol::TCP {
        let t = tcp::Packet::new_unchecked(l4);
        (t.src_port(), t.dst_port())
    } else {
        let u = udp::Packet::new_unchecked(l4);
        (u.src_port(), u.dst_port())
    }
}

/// The EtherType after up to [`MAX_VLAN_TAGS`] VLAN tags, where the L3 header starts, and
/// the outer tag's VLAN ID.
fn skip_vlan_tags(frame: &[u8]) -> Result<(EtherType, usize, Option<u16>), Unclassifiable> {
    let eth = ethernet::Frame::new_checked(frame)
        .map_err(|_| Unclassifiable("shorter than an Ethernet header"))?;
    let mut ethertype = eth.ethertype();
    let mut l3 = ethernet::HEADER_LEN;
    let mut outer = None;
    for _ in 0..=MAX_VLAN_TAGS {
        if !matches!(ethertype, EtherType::Vlan | EtherType::QinQ) {
            break;
        }
        if l3 == ethernet::HEADER_LEN + vlan::HEADER_LEN * MAX_VLAN_TAGS {
            return Err(Unclassifiable("more VLAN tags than are followed"));
        }
        let tag = vlan::Tag::new_checked(&frame[l3..])
            .map_err(|_| Unclassifiable("VLAN tag cut short"))?;
        ethertype = tag.ethertype();
        outer = outer.or(Some(tag.vid()));
        l3 += vlan::HEADER_LEN;
    }
    Ok((ethertype, l3, outer))
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
        self.ip_len = total as u16;
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
