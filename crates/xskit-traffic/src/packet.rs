//! Probe packets: UDP over IPv4 or IPv6, optionally 802.1Q-tagged, spread over flows by
//! MAC/IP/port ranges, each carrying a magic number, a sequence number, its send time
//! (CLOCK_MONOTONIC ns) and a payload pattern derived from the sequence number, so that a
//! receiver can tell loss, reordering, damage and latency.

use std::net::IpAddr;

use xskit_wire::{checksum, ethernet, ip_protocol, ipv4, ipv6, udp, vlan, EtherType};

use crate::error::{Error, Result};

/// Marks probe payloads ("XSKP").
pub const MAGIC: u32 = 0x5853_4b50;
/// Magic, sequence number and send time at the start of the UDP payload.
pub const PAYLOAD_HEADER_LEN: usize = 20;
/// The UDP port probes use unless told otherwise (discard).
pub const PORT: u16 = 9;
/// The largest probe: a 9000-byte MTU plus the Ethernet header and one tag.
pub const MAX_LEN: usize = 9000 + ethernet::HEADER_LEN + vlan::HEADER_LEN;

/// Where probes come from and go to (the first flow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source address; the family chooses IPv4 or IPv6.
    pub src_ip: IpAddr,
    /// Destination address, of the same family.
    pub dst_ip: IpAddr,
    /// Source UDP port.
    pub src_port: u16,
    /// Destination UDP port.
    pub dst_port: u16,
}

/// How many consecutive values each field takes; a stream cycles through their product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flows {
    /// Source MACs (the low bytes count up).
    pub src_macs: u32,
    /// Source addresses.
    pub src_ips: u32,
    /// Destination addresses.
    pub dst_ips: u32,
    /// Source ports.
    pub src_ports: u32,
    /// Destination ports.
    pub dst_ports: u32,
}

impl Default for Flows {
    fn default() -> Self {
        Flows {
            src_macs: 1,
            src_ips: 1,
            dst_ips: 1,
            src_ports: 1,
            dst_ports: 1,
        }
    }
}

impl Flows {
    /// The number of distinct flows.
    pub fn total(&self) -> u64 {
        [
            self.src_macs,
            self.src_ips,
            self.dst_ips,
            self.src_ports,
            self.dst_ports,
        ]
        .iter()
        .map(|&n| u64::from(n.max(1)))
        .product()
    }
}

/// A validated description of a probe stream; writes and checks its packets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    ends: Endpoints,
    flows: Flows,
    vlan: Option<u16>,
    vlan_priority: u8,
    size: usize,
    l3_offset: usize,
    partial_checksum: bool,
}

/// The shortest Ethernet frame without its FCS; devices pad shorter ones.
pub const MIN_FRAME_LEN: usize = 60;

impl Template {
    /// The smallest frame a template builds with these options: its headers, and at least
    /// [`MIN_FRAME_LEN`]. Frames shorter than [`Template::min_len`] carry no probe header
    /// (unnumbered: a receiver counts them as other traffic).
    pub fn min_frame_len(ipv6: bool, vlan: bool) -> usize {
        (Self::min_len(ipv6, vlan) - PAYLOAD_HEADER_LEN).max(MIN_FRAME_LEN)
    }

    /// The smallest probe with these options.
    pub fn min_len(ipv6: bool, vlan: bool) -> usize {
        ethernet::HEADER_LEN
            + if vlan { vlan::HEADER_LEN } else { 0 }
            + if ipv6 {
                ipv6::HEADER_LEN
            } else {
                ipv4::HEADER_LEN
            }
            + udp::HEADER_LEN
            + PAYLOAD_HEADER_LEN
    }

    /// Checks the options and builds the template. `size` is the frame length without FCS.
    pub fn new(ends: Endpoints, flows: Flows, vlan: Option<u16>, size: usize) -> Result<Self> {
        let ipv6 = match (ends.src_ip, ends.dst_ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) => false,
            (IpAddr::V6(_), IpAddr::V6(_)) => true,
            _ => return Err(Error::MixedFamilies),
        };
        if let Some(vid) = vlan {
            if vid == 0 || vid >= 4095 {
                return Err(Error::VlanId { vid });
            }
        }
        let min = Self::min_frame_len(ipv6, vlan.is_some());
        if size < min || size > MAX_LEN {
            return Err(Error::PacketSize {
                size,
                family: if ipv6 { "IPv6" } else { "IPv4" },
                min,
                max: MAX_LEN,
            });
        }
        let counts = [
            (flows.src_macs, "src_macs"),
            (flows.src_ips, "src_ips"),
            (flows.dst_ips, "dst_ips"),
            (flows.src_ports, "src_ports"),
            (flows.dst_ports, "dst_ports"),
        ];
        if let Some(&(_, range)) = counts.iter().find(|c| c.0 == 0) {
            return Err(Error::EmptyFlowRange { range });
        }
        if u64::from(ends.src_port) + u64::from(flows.src_ports) > 65536
            || u64::from(ends.dst_port) + u64::from(flows.dst_ports) > 65536
        {
            return Err(Error::PortRange);
        }
        let l3_offset = ethernet::HEADER_LEN + if vlan.is_some() { vlan::HEADER_LEN } else { 0 };
        Ok(Template {
            ends,
            flows,
            vlan,
            vlan_priority: 0,
            size,
            l3_offset,
            partial_checksum: false,
        })
    }

    /// Sets the VLAN tag's priority (PCP, 0 to 7; the template must have a tag).
    pub fn with_vlan_priority(mut self, pcp: u8) -> Result<Self> {
        if pcp > 7 {
            return Err(Error::VlanPriority { pcp });
        }
        if self.vlan.is_none() {
            return Err(Error::VlanPriorityWithoutTag);
        }
        self.vlan_priority = pcp;
        Ok(self)
    }

    /// Leaves each UDP checksum partial, as a sender that hands it to the device does
    /// (Linux's CHECKSUM_PARTIAL): the field holds the pseudo-header's sum alone, folded, for
    /// whoever transmits the frame to finish over the datagram. A receiver that does not
    /// finish it sees a bad checksum.
    pub fn with_partial_checksum(mut self) -> Self {
        self.partial_checksum = true;
        self
    }

    /// Whether each UDP checksum is left partial ([`Template::with_partial_checksum`]).
    pub fn partial_checksum(&self) -> bool {
        self.partial_checksum
    }

    /// Whether the frames carry a probe header (sequence number and send time): false for
    /// frames shorter than [`Template::min_len`].
    pub fn numbered(&self) -> bool {
        self.size >= Self::min_len(self.ends.src_ip.is_ipv6(), self.vlan.is_some())
    }

    /// Frame length of every probe.
    pub fn len(&self) -> usize {
        self.size
    }

    /// True for a zero-length template (never: `new` refuses it).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The addresses and ports the first flow is sent between.
    pub fn ends(&self) -> &Endpoints {
        &self.ends
    }

    /// The flows.
    pub fn flows(&self) -> &Flows {
        &self.flows
    }

    /// Writes probe `seq` (of flow `seq % flows`) sent at `sent_ns` into `buf`; returns its
    /// length, or `None` if `buf` is too small.
    pub fn write(&self, buf: &mut [u8], seq: u64, sent_ns: u64) -> Option<usize> {
        let frame = buf.get_mut(..self.size)?;
        let f = &self.flows;
        let mut flow = seq % f.total();
        let mut next = |n: u32| {
            let v = flow % u64::from(n);
            flow /= u64::from(n);
            v
        };
        let (sport, sip, dip, dport, smac) = (
            next(f.src_ports),
            next(f.src_ips),
            next(f.dst_ips),
            next(f.dst_ports),
            next(f.src_macs),
        );
        let mut eth = ethernet::Frame::new_unchecked(&mut frame[..]);
        eth.set_dst_addr(self.ends.dst_mac);
        eth.set_src_addr(add_mac(self.ends.src_mac, smac));
        let l3_type = if self.ends.src_ip.is_ipv6() {
            EtherType::Ipv6
        } else {
            EtherType::Ipv4
        };
        match self.vlan {
            Some(vid) => {
                eth.set_ethertype(EtherType::Vlan);
                let mut tag = vlan::Tag::new_unchecked(eth.payload_mut());
                tag.set_tci(self.vlan_priority, vid);
                tag.set_ethertype(l3_type);
            }
            None => eth.set_ethertype(l3_type),
        }
        let l3 = &mut frame[self.l3_offset..];
        let l3_len = l3.len();
        let (udp_bytes, pseudo) = match (self.ends.src_ip, self.ends.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let src = (u32::from(s).wrapping_add(sip as u32)).to_be_bytes();
                let dst = (u32::from(d).wrapping_add(dip as u32)).to_be_bytes();
                let mut ip = ipv4::Packet::new_unchecked(&mut l3[..]);
                ip.init(l3_len as u16, ip_protocol::UDP, src, dst);
                ip.set_ident(seq as u16);
                ip.fill_checksum();
                let udp_len = (l3_len - ipv4::HEADER_LEN) as u16;
                let pseudo = checksum::pseudo_header_v4(src, dst, ip_protocol::UDP, udp_len);
                (&mut l3[ipv4::HEADER_LEN..], pseudo)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let src = (u128::from(s).wrapping_add(u128::from(sip))).to_be_bytes();
                let dst = (u128::from(d).wrapping_add(u128::from(dip))).to_be_bytes();
                let payload_len = (l3_len - ipv6::HEADER_LEN) as u16;
                let mut ip = ipv6::Packet::new_unchecked(&mut l3[..]);
                ip.init(payload_len, ip_protocol::UDP, src, dst, 0);
                let pseudo =
                    checksum::pseudo_header_v6(src, dst, ip_protocol::UDP, u32::from(payload_len));
                (&mut l3[ipv6::HEADER_LEN..], pseudo)
            }
            _ => return None,
        };
        let udp_len = udp_bytes.len() as u16;
        let mut u = udp::Packet::new_unchecked(&mut udp_bytes[..]);
        u.set_src_port(self.ends.src_port.wrapping_add(sport as u16));
        u.set_dst_port(self.ends.dst_port.wrapping_add(dport as u16));
        u.set_len(udp_len);
        let payload = u.payload_mut();
        if payload.len() >= PAYLOAD_HEADER_LEN {
            payload[0..4].copy_from_slice(&MAGIC.to_be_bytes());
            payload[4..12].copy_from_slice(&seq.to_be_bytes());
            payload[12..20].copy_from_slice(&sent_ns.to_be_bytes());
            write_pattern(&mut payload[PAYLOAD_HEADER_LEN..], seq);
        } else {
            write_pattern(payload, seq);
        }
        if self.partial_checksum {
            u.set_checksum(checksum::fold(pseudo));
        } else {
            u.fill_checksum(pseudo);
        }
        Some(self.size)
    }
}

fn add_mac(mac: [u8; 6], n: u64) -> [u8; 6] {
    let low = u32::from_be_bytes([0, mac[3], mac[4], mac[5]]).wrapping_add(n as u32) & 0x00ff_ffff;
    let b = low.to_be_bytes();
    [mac[0], mac[1], mac[2], b[1], b[2], b[3]]
}

/// Byte i of a probe's pattern is `seq * 31 + i` (mod 256): a ramp, so it is copied from a
/// precomputed one instead of computed byte by byte.
const RAMP: [u8; 512] = {
    let mut r = [0u8; 512];
    let mut i = 0;
    while i < 512 {
        r[i] = i as u8;
        i += 1;
    }
    r
};

fn pattern_start(seq: u64) -> usize {
    usize::from((seq as u8).wrapping_mul(31))
}

fn write_pattern(dst: &mut [u8], seq: u64) {
    let start = pattern_start(seq);
    for (n, chunk) in dst.chunks_mut(256).enumerate() {
        let off = (start + n * 256) % 256;
        chunk.copy_from_slice(&RAMP[off..off + chunk.len()]);
    }
}

fn pattern_matches(src: &[u8], seq: u64) -> bool {
    let start = pattern_start(seq);
    src.chunks(256)
        .enumerate()
        .all(|(n, chunk)| chunk == &RAMP[(start + n * 256) % 256..][..chunk.len()])
}

/// What a receiver learns from a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// A probe whose headers, checksums, lengths and payload are all intact.
    Valid {
        /// Its sequence number.
        seq: u64,
        /// When it was sent (CLOCK_MONOTONIC ns).
        sent_ns: u64,
    },
    /// A probe that arrived damaged (bad checksum, length or payload).
    Corrupt {
        /// Its sequence number, as read.
        seq: u64,
    },
    /// Not a probe: other traffic.
    Foreign,
}

/// Finds the UDP datagram of a frame, following one VLAN tag; lengths not yet trusted.
fn locate_udp(frame: &[u8]) -> Option<(usize, bool)> {
    let eth = ethernet::Frame::new_checked(frame).ok()?;
    let (mut ethertype, mut at) = (eth.ethertype(), ethernet::HEADER_LEN);
    if matches!(ethertype, EtherType::Vlan | EtherType::QinQ) {
        ethertype = vlan::Tag::new_checked(frame.get(at..)?).ok()?.ethertype();
        at += vlan::HEADER_LEN;
    }
    match ethertype {
        EtherType::Ipv4 => {
            let hl = usize::from(*frame.get(at)? & 0x0f) * 4;
            (*frame.get(at + 9)? == ip_protocol::UDP && hl >= ipv4::HEADER_LEN)
                .then_some((at, false))
        }
        EtherType::Ipv6 => (*frame.get(at + 6)? == ip_protocol::UDP).then_some((at, true)),
        _ => None,
    }
}

/// Classifies a received frame. Never panics, whatever the bytes.
pub fn check(frame: &[u8]) -> Probe {
    let Some((l3, is_v6)) = locate_udp(frame) else {
        return Probe::Foreign;
    };
    let hl = if is_v6 {
        ipv6::HEADER_LEN
    } else {
        usize::from(frame[l3] & 0x0f) * 4
    };
    let payload_at = l3 + hl + udp::HEADER_LEN;
    let Some(head) = frame.get(payload_at..payload_at + PAYLOAD_HEADER_LEN) else {
        return Probe::Foreign;
    };
    if head[0..4] != MAGIC.to_be_bytes() {
        return Probe::Foreign;
    }
    let seq = u64::from_be_bytes(head[4..12].try_into().unwrap_or_default());
    let sent_ns = u64::from_be_bytes(head[12..20].try_into().unwrap_or_default());
    let l3_bytes = &frame[l3..];
    let intact = if is_v6 {
        ipv6::Packet::new_checked(l3_bytes).ok().is_some_and(|ip| {
            ipv6::HEADER_LEN + usize::from(ip.payload_len()) == l3_bytes.len()
                && udp::Packet::new_checked(ip.payload()).is_ok_and(|u| {
                    usize::from(u.len()) == ip.payload().len()
                        && u.checksum() != 0
                        && u.verify_checksum(ip.pseudo_header())
                })
        })
    } else {
        ipv4::Packet::new_checked(l3_bytes).ok().is_some_and(|ip| {
            usize::from(ip.total_len()) == l3_bytes.len()
                && ip.verify_checksum()
                && udp::Packet::new_checked(ip.payload()).is_ok_and(|u| {
                    usize::from(u.len()) == ip.payload().len()
                        && u.verify_checksum(ip.pseudo_header())
                })
        })
    };
    let pattern_ok = pattern_matches(&frame[payload_at + PAYLOAD_HEADER_LEN..], seq);
    if intact && pattern_ok {
        Probe::Valid { seq, sent_ns }
    } else {
        Probe::Corrupt { seq }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends() -> Endpoints {
        Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: "198.51.100.1".parse().unwrap(),
            dst_ip: "198.51.100.2".parse().unwrap(),
            src_port: 9,
            dst_port: 9,
        }
    }

    fn ends_v6() -> Endpoints {
        Endpoints {
            src_ip: "2001:db8::1".parse().unwrap(),
            dst_ip: "2001:db8::2".parse().unwrap(),
            ..ends()
        }
    }

    #[test]
    fn a_bad_priority_or_an_empty_range_says_which() {
        let tagged = Template::new(ends(), Flows::default(), Some(5), 128).unwrap();
        assert!(matches!(
            tagged.with_vlan_priority(9),
            Err(Error::VlanPriority { pcp: 9 })
        ));
        let plain = Template::new(ends(), Flows::default(), None, 128).unwrap();
        assert!(matches!(
            plain.with_vlan_priority(3),
            Err(Error::VlanPriorityWithoutTag)
        ));
        let flows = Flows {
            dst_ips: 0,
            ..Flows::default()
        };
        assert!(matches!(
            Template::new(ends(), flows, None, 128),
            Err(Error::EmptyFlowRange { range: "dst_ips" })
        ));
    }

    #[test]
    fn a_partial_checksum_is_the_pseudo_headers_sum_and_finishing_it_gives_the_probe() {
        use xskit_wire::offload::L4Checksum;
        for (ends, size) in [(ends(), 128), (ends_v6(), 128), (ends(), 60)] {
            let full = Template::new(ends, Flows::default(), None, size).unwrap();
            let partial = full.clone().with_partial_checksum();
            assert!(partial.partial_checksum() && !full.partial_checksum());
            let (mut a, mut b) = (vec![0u8; size], vec![0u8; size]);
            for seq in [0u64, 1, 77] {
                full.write(&mut a, seq, 5).unwrap();
                partial.write(&mut b, seq, 5).unwrap();
                let c = L4Checksum::locate(&b, size).unwrap();
                assert!(c.is_partial(&b), "seq {seq}");
                assert!(!c.is_partial(&a), "seq {seq}");
                assert_ne!(a, b);
                c.complete(&mut b);
                assert_eq!(a, b, "finished, the frame is the full-checksum one");
            }
        }
    }

    #[test]
    fn pattern_is_the_ramp_whatever_the_length() {
        for seq in [0u64, 1, 9, 255, 256, 1 << 40] {
            for len in [0usize, 1, 255, 256, 257, 1000, 9000] {
                let mut buf = vec![0u8; len];
                write_pattern(&mut buf, seq);
                for (i, b) in buf.iter().enumerate() {
                    assert_eq!(*b, (seq as u8).wrapping_mul(31).wrapping_add(i as u8));
                }
                assert!(pattern_matches(&buf, seq));
                if len > 0 {
                    buf[len - 1] ^= 1;
                    assert!(!pattern_matches(&buf, seq));
                }
            }
        }
    }
}
