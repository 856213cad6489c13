//! The Linux bonding driver's transmit hashes (`xmit_hash_policy`), bit for bit as a
//! little-endian Linux computes them (`__bond_xmit_hash`, `bond_eth_hash`, `bond_ip_hash` and
//! `bond_vlan_srcmac_hash` in `drivers/net/bonding/bond_main.c`). A balance-xor or 802.3ad
//! bond sends a packet out of member `hash % members` of its usable members, so a user-space
//! bond that hashes with these sends each flow where the kernel's bond would.
//!
//! Checked packet for packet against the kernel's bonding driver in the guest testbed
//! (`crates/xskit-cli/tests/guest.rs`).
//!
//! layer2+3 and layer3+4 read one IP header and the transport header after it, as
//! `bond_flow_dissect` does; an ICMP or ICMPv6 error (destination unreachable, packet too
//! big, time exceeded, redirect, source quench, parameter problem) is hashed on the IP header
//! it quotes and that header's ports instead, so that an error follows the flow that caused
//! it (read once: an error quoting an error hashes on the quoted error's addresses). A quote
//! cut short of its IP header makes Linux, and this, fall back to layer2.
//!
//! vlan+srcmac reads the VLAN id of the frame's first in-band tag (802.1Q or 802.1ad). Linux
//! reads only a tag the device offloads (`skb_vlan_tag_present`) and refuses XDP on a bond of
//! this policy, so it has no answer for in-band tags to hold this to: a frame whose tag is in
//! its bytes hashes on that tag's id here, where Linux's skb path would see id 0. The encap policies run Linux's whole flow dissector
//! (`__skb_flow_dissect` with the bond's keys), which this module follows too: in-band VLAN
//! tags, IPv6 extension headers, and tunnels are walked, and the innermost IP header and
//! its transport count: IP-in-IP, IPv6-in-IP, and GRE version 0 (with checksum, key and
//! sequence fields, and transparent Ethernet bridging).
//!   PPTP (GRE version 1) is followed into IP and IPv6.
//! - ARP and MPLS end the dissection with no addresses, so they hash as 0 there. PPPoE
//!   sessions and TIPC are not followed: they hash as layer2 here.
//! - A header that cannot be read (a tunnel cut short) makes Linux fall back to layer2, as
//!   here.
//!
//! DPDK's bonding PMD hashes differently (`burst_xmit_l2_hash`, `_l23_` and `_l34_` in
//! `drivers/net/bonding/rte_eth_bond_pmd.c`): those are here too, as the `dpdk-l2`,
//! `dpdk-l23` and `dpdk-l34` policies, so that an xskit bond facing a DPDK bond can spread
//! flows the way the DPDK side does. DPDK reads headers without checking the frame's length;
//! here a header cut short contributes nothing (DPDK would read whatever follows the frame).

use crate::{ethernet, ip_protocol, ipv4, ipv6, EtherType};

/// A bonding `xmit_hash_policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XmitHashPolicy {
    /// `layer2`: the MAC addresses' last bytes and the EtherType.
    Layer2,
    /// `layer2+3`: layer2 and the IP addresses.
    Layer23,
    /// `layer3+4`: the IP addresses and the ports (the ICMP type, code and id for echo).
    Layer34,
    /// `encap2+3`: layer2+3 (over the inner headers of IP-in-IP and GRE in Linux).
    Encap23,
    /// `encap3+4`: layer3+4 (over the inner headers of IP-in-IP and GRE in Linux).
    Encap34,
    /// `vlan+srcmac`: the VLAN id and the source MAC address.
    VlanSrcMac,
    /// DPDK's `l2`: the MAC addresses, 16 bits at a time. Not a Linux policy.
    DpdkL2,
    /// DPDK's `l23`: DPDK's l2 and the IP addresses. Not a Linux policy.
    DpdkL23,
    /// DPDK's `l34`: the IP addresses and the TCP or UDP ports, no MACs. Not a Linux policy.
    DpdkL34,
}

impl XmitHashPolicy {
    /// DPDK's bonding PMD's policies.
    pub const DPDK: [XmitHashPolicy; 3] = [
        XmitHashPolicy::DpdkL2,
        XmitHashPolicy::DpdkL23,
        XmitHashPolicy::DpdkL34,
    ];

    /// Every Linux policy.
    pub const ALL: [XmitHashPolicy; 6] = [
        XmitHashPolicy::Layer2,
        XmitHashPolicy::Layer23,
        XmitHashPolicy::Layer34,
        XmitHashPolicy::Encap23,
        XmitHashPolicy::Encap34,
        XmitHashPolicy::VlanSrcMac,
    ];

    /// The name the bonding driver uses (`ip link ... xmit_hash_policy NAME`).
    pub fn name(self) -> &'static str {
        match self {
            XmitHashPolicy::Layer2 => "layer2",
            XmitHashPolicy::Layer23 => "layer2+3",
            XmitHashPolicy::Layer34 => "layer3+4",
            XmitHashPolicy::Encap23 => "encap2+3",
            XmitHashPolicy::Encap34 => "encap3+4",
            XmitHashPolicy::VlanSrcMac => "vlan+srcmac",
            XmitHashPolicy::DpdkL2 => "dpdk-l2",
            XmitHashPolicy::DpdkL23 => "dpdk-l23",
            XmitHashPolicy::DpdkL34 => "dpdk-l34",
        }
    }

    /// The policy of a name, as [`XmitHashPolicy::name`] gives it.
    pub fn from_name(name: &str) -> Option<Self> {
        XmitHashPolicy::ALL
            .into_iter()
            .chain(XmitHashPolicy::DPDK)
            .find(|p| p.name() == name)
    }

    /// The number `xskit_bond.h` takes for the policy: Linux's `BOND_XMIT_POLICY_*` for
    /// Linux's policies, 16 to 18 for DPDK's (which Linux does not have).
    pub fn id(self) -> u32 {
        match self {
            XmitHashPolicy::Layer2 => 0,
            XmitHashPolicy::Layer34 => 1,
            XmitHashPolicy::Layer23 => 2,
            XmitHashPolicy::Encap23 => 3,
            XmitHashPolicy::Encap34 => 4,
            XmitHashPolicy::VlanSrcMac => 5,
            XmitHashPolicy::DpdkL2 => 16,
            XmitHashPolicy::DpdkL23 => 17,
            XmitHashPolicy::DpdkL34 => 18,
        }
    }

    fn has_ports(self) -> bool {
        matches!(self, XmitHashPolicy::Layer34 | XmitHashPolicy::Encap34)
    }
}

/// A 32-bit field as a little-endian CPU loads it from the packet (the kernel's raw `__be32`
/// used as a `u32`).
fn word(bytes: [u8; 4]) -> u32 {
    u32::from_le_bytes(bytes)
}

fn eth_hash(frame: &[u8]) -> u32 {
    if frame.len() < ethernet::HEADER_LEN {
        return 0;
    }
    let proto = u16::from_be_bytes([frame[12], frame[13]]);
    u32::from(frame[5] ^ frame[11]) ^ u32::from(proto)
}

fn vlan_srcmac_hash(frame: &[u8]) -> u32 {
    if frame.len() < ethernet::HEADER_LEN {
        return 0;
    }
    let src = &frame[6..12];
    let vendor = u32::from_be_bytes([0, src[0], src[1], src[2]]);
    let device = u32::from_be_bytes([0, src[3], src[4], src[5]]);
    let tpid = u16::from_be_bytes([frame[12], frame[13]]);
    let vlan = if (tpid == 0x8100 || tpid == 0x88a8) && frame.len() >= 16 {
        u32::from(u16::from_be_bytes([frame[14], frame[15]]) & 0x0fff)
    } else {
        0
    };
    vlan ^ vendor ^ device
}

/// What the flow dissection of `bond_flow_dissect` finds: the addresses' hash and the
/// transport word (ports, or ICMP type/code/id).
struct Flow {
    addrs: u32,
    transport: u32,
}

/// The ICMP types whose identifier the flow dissector takes (`icmp_has_id`): echo and
/// timestamp, request and reply, of ICMP and ICMPv6 alike (one list, whichever the
/// protocol).
fn icmp_has_id(icmp_type: u8) -> bool {
    matches!(icmp_type, 0 | 8 | 13 | 14 | 128 | 129)
}

/// Times the flow dissector moves on to another header at most (`MAX_FLOW_DISSECT_HDRS`).
const MAX_HEADERS: u32 = 15;

/// How far into a frame headers are looked for: BPF's verifier needs a bound, and the Rust
/// and C hashes keep the same one. Linux has none; no real stack of headers comes near it.
const MAX_HEADER_BYTES: usize = 512;

/// Linux's whole flow dissector (`__skb_flow_dissect`) with the bond's keys, for the encap
/// policies: `None` where it fails (the bond then hashes layer2). One step per header, as
/// `xskit_dissect_all` in `xskit_bond.h` takes them.
// One pass over the headers, as the kernel's flow dissector makes it, run per packet by a
// bond's transmit hash: kept whole so that it reads against `__skb_flow_dissect`.
#[allow(clippy::too_many_lines)]
fn dissect_all(frame: &[u8], ports: bool) -> Option<Flow> {
    let get = |at: usize, n: usize| {
        if at + n > MAX_HEADER_BYTES {
            None
        } else {
            frame.get(at..at + n)
        }
    };
    let mut proto = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let mut at = ethernet::HEADER_LEN;
    let mut addrs = 0;
    let mut moves = 0;
    // The IP protocol of the last IP header, once one is read, and whether it was IPv6.
    let mut next: Option<(u8, bool)> = None;
    let done = |addrs| {
        Some(Flow {
            addrs,
            transport: 0,
        })
    };
    loop {
        let Some((protocol, v6)) = next else {
            // At a network header of type `proto`.
            match proto {
                0x0800 => {
                    let ip = get(at, ipv4::HEADER_LEN)?;
                    let ihl = usize::from(ip[0] & 0x0f) * 4;
                    if ihl < ipv4::HEADER_LEN {
                        return None;
                    }
                    addrs = word([ip[12], ip[13], ip[14], ip[15]])
                        ^ word([ip[16], ip[17], ip[18], ip[19]]);
                    at += ihl;
                    // A fragment ends it: no ports, and a first fragment is not read on.
                    if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
                        return done(addrs);
                    }
                    next = Some((ip[9], false));
                }
                0x86dd => {
                    let ip = get(at, ipv6::HEADER_LEN)?;
                    addrs = (8..40)
                        .step_by(4)
                        .fold(0, |h, i| h ^ word([ip[i], ip[i + 1], ip[i + 2], ip[i + 3]]));
                    at += ipv6::HEADER_LEN;
                    next = Some((ip[6], true));
                }
                0x8100 | 0x88a8 => {
                    let tag = get(at, 4)?;
                    proto = u16::from_be_bytes([tag[2], tag[3]]);
                    at += 4;
                    moves += 1;
                    if moves > MAX_HEADERS {
                        return done(addrs);
                    }
                }
                // Dissected with keys the bond does not use: done, nothing found.
                0x0806 | 0x8035 | 0x8847 | 0x8848 => return done(addrs),
                _ => return None,
            }
            continue;
        };
        // At the header IP protocol `protocol` names: extension headers and tunnels lead
        // on; anything else is the transport.
        match protocol {
            // Hop-by-hop, routing and destination options (IPv6 only).
            0 | 43 | 60 if v6 => {
                let h = get(at, 2)?;
                next = Some((h[0], true));
                at += (usize::from(h[1]) + 1) * 8;
            }
            // A fragment header: a fragment, first or not, ends it without ports.
            44 if v6 => {
                get(at, 8)?;
                return done(addrs);
            }
            4 | 41 => {
                proto = if protocol == 4 { 0x0800 } else { 0x86dd };
                next = None;
            }
            47 => {
                let gre = get(at, 4)?;
                let flags = u16::from_be_bytes([gre[0], gre[1]]);
                let version = flags & 0x0007;
                proto = u16::from_be_bytes([gre[2], gre[3]]);
                // Routing present, a version above 1, or a version 1 that is not PPTP (PPP
                // with a key): not looked into.
                if flags & 0x4000 != 0
                    || version > 1
                    || (version == 1 && (proto != 0x880b || flags & 0x2000 == 0))
                {
                    return done(addrs);
                }
                at += 4 + [0x8000u16, 0x2000, 0x1000]
                    .iter()
                    .filter(|&&bit| flags & bit != 0)
                    .count()
                    * 4;
                if version == 1 {
                    // PPTP: an acknowledgement number, then a PPP header naming IP or IPv6
                    // (anything else stays PPP, which the dissector fails on).
                    if flags & 0x0080 != 0 {
                        at += 4;
                    }
                    let ppp = get(at, 4)?;
                    match u16::from_be_bytes([ppp[2], ppp[3]]) {
                        0x0021 => proto = 0x0800,
                        0x0057 => proto = 0x86dd,
                        _ => {}
                    }
                    at += 4;
                } else if proto == 0x6558 {
                    // Transparent Ethernet bridging: an Ethernet frame inside.
                    let inner = get(at, ethernet::HEADER_LEN)?;
                    proto = u16::from_be_bytes([inner[12], inner[13]]);
                    at += ethernet::HEADER_LEN;
                }
                next = None;
            }
            _ => {
                let transport = match frame.get(at..) {
                    Some(l4) if ports && at <= MAX_HEADER_BYTES => transport_word(protocol, l4),
                    _ => 0,
                };
                return Some(Flow { addrs, transport });
            }
        }
        moves += 1;
        if moves > MAX_HEADERS {
            return done(addrs);
        }
    }
}

/// The ICMP header's word as the flow dissector keeps it (`skb_flow_get_icmp_tci`): type,
/// code and identifier, for the types that carry an identifier; 0 for the others, and when
/// the 8 bytes of the header are not all there.
fn icmp_word(l4: &[u8]) -> u32 {
    if l4.len() < 8 || !icmp_has_id(l4[0]) {
        return 0;
    }
    let id = match u16::from_be_bytes([l4[4], l4[5]]) {
        0 => 1,
        id => id,
    };
    u32::from(l4[0]) | u32::from(l4[1]) << 8 | u32::from(id) << 16
}

/// The ports word `__skb_flow_get_ports` reads (`proto_ports_offset`): the ports (or the SPI)
/// start the header; AH's SPI is at 4; other protocols, ICMP among them, have none.
fn ports_word(protocol: u8, l4: &[u8]) -> u32 {
    match protocol {
        ip_protocol::TCP | ip_protocol::UDP | 33 | 50 | 132 | 136 if l4.len() >= 4 => {
            word([l4[0], l4[1], l4[2], l4[3]])
        }
        51 if l4.len() >= 8 => word([l4[4], l4[5], l4[6], l4[7]]),
        _ => 0,
    }
}

/// The transport word of a header the encap policies reach: ICMP's identifier word where it
/// has one, or the ports.
fn transport_word(protocol: u8, l4: &[u8]) -> u32 {
    match protocol {
        ip_protocol::ICMP | ip_protocol::ICMPV6 => icmp_word(l4),
        _ => ports_word(protocol, l4),
    }
}

/// ICMP error types, whose message quotes the header of the packet that caused it
/// (`icmp_is_err`, `icmpv6_is_err`).
fn icmp_is_error(protocol: u8, icmp_type: u8) -> bool {
    if protocol == ip_protocol::ICMP {
        matches!(icmp_type, 3 | 4 | 5 | 11 | 12)
    } else {
        matches!(icmp_type, 1..=4)
    }
}

/// What `bond_flow_ip` reads of the IP header at `at` in `l3` (the family being the frame's
/// EtherType's): the addresses' hash, the ports after the header (with `ports`), where the
/// header ends, and the transport protocol; `protocol` is kept for a fragment, whose header
/// sets none. `None` when the header is not all there.
struct FlowIp {
    addrs: u32,
    ports: u32,
    end: usize,
    protocol: Option<u8>,
}

fn flow_ip(ipv4: bool, l3: &[u8], at: usize, ports: bool, protocol: Option<u8>) -> Option<FlowIp> {
    let header = l3.get(at..)?;
    let (addrs, end, protocol) = if ipv4 {
        if header.len() < ipv4::HEADER_LEN {
            return None;
        }
        let ip = ipv4::Packet::new_unchecked(header);
        let fragment = ip.more_frags() || ip.frag_offset() != 0;
        // bond_flow_ip takes the header length as it says, even below 20 bytes.
        let end = at + ip.header_len();
        let protocol = if fragment {
            protocol
        } else {
            Some(ip.protocol())
        };
        (word(ip.src_addr()) ^ word(ip.dst_addr()), end, protocol)
    } else {
        if header.len() < ipv6::HEADER_LEN {
            return None;
        }
        let ip = ipv6::Packet::new_unchecked(header);
        let addr_hash = |a: [u8; 16]| {
            a.chunks_exact(4)
                .fold(0, |h, w| h ^ word([w[0], w[1], w[2], w[3]]))
        };
        // Linux takes the next header as the transport protocol here, without walking
        // extension headers.
        let end = at + ipv6::HEADER_LEN;
        (
            addr_hash(ip.src_addr()) ^ addr_hash(ip.dst_addr()),
            end,
            Some(ip.next_header()),
        )
    };
    let ports = match (ports, protocol, l3.get(end..)) {
        (true, Some(p), Some(l4)) => ports_word(p, l4),
        _ => 0,
    };
    Some(FlowIp {
        addrs,
        ports,
        end,
        protocol,
    })
}

/// `bond_flow_dissect` for layer2+3 and layer3+4: one IP header and the ports after it; an
/// ICMP error is hashed on the header it quotes (and that header's ports), so that errors
/// follow their flow, and fails (the bond then hashes layer2) when that header is cut short.
fn dissect(ethertype: u16, l3: &[u8], ports: bool) -> Option<Flow> {
    let ipv4 = ethertype == u16::from(EtherType::Ipv4);
    if !ipv4 && ethertype != u16::from(EtherType::Ipv6) {
        return None;
    }
    let outer = flow_ip(ipv4, l3, 0, ports, None)?;
    let protocol = outer.protocol.unwrap_or(0);
    if protocol != ip_protocol::ICMP && protocol != ip_protocol::ICMPV6 {
        return Some(Flow {
            addrs: outer.addrs,
            transport: outer.ports,
        });
    }
    let l4 = l3.get(outer.end..).unwrap_or_default();
    let icmp = icmp_word(l4);
    // The type is read only when the whole 8-byte header is there.
    if l4.len() < 8 || !icmp_is_error(protocol, l4[0]) {
        return Some(Flow {
            addrs: outer.addrs,
            transport: if icmp != 0 { icmp } else { outer.ports },
        });
    }
    let quoted = flow_ip(ipv4, l3, outer.end + 8, ports, outer.protocol)?;
    Some(Flow {
        addrs: quoted.addrs,
        transport: quoted.ports,
    })
}

/// The hash the Linux bond computes for `frame` (an Ethernet frame as it leaves: in-band
/// VLAN tags included) under `policy`. The member is `hash % members`.
pub fn xmit_hash(policy: XmitHashPolicy, frame: &[u8]) -> u32 {
    match policy {
        XmitHashPolicy::VlanSrcMac => return vlan_srcmac_hash(frame),
        XmitHashPolicy::DpdkL2 | XmitHashPolicy::DpdkL23 | XmitHashPolicy::DpdkL34 => {
            return dpdk_hash(policy, frame)
        }
        _ => {}
    }
    if frame.len() < ethernet::HEADER_LEN {
        return 0;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let flow = match policy {
        XmitHashPolicy::Layer2 => None,
        XmitHashPolicy::Encap23 | XmitHashPolicy::Encap34 => dissect_all(frame, policy.has_ports()),
        _ => dissect(
            ethertype,
            &frame[ethernet::HEADER_LEN..],
            policy.has_ports(),
        ),
    };
    let Some(flow) = flow else {
        return eth_hash(frame);
    };
    let mut hash = if policy.has_ports() {
        flow.transport
    } else {
        eth_hash(frame)
    };
    hash ^= flow.addrs;
    hash ^= hash >> 16;
    hash ^= hash >> 8;
    // Linux drops the lowest bit for layer3+4: even port numbers are common.
    if policy.has_ports() {
        hash >>= 1;
    }
    hash
}

/// A 16-bit field as a little-endian CPU loads it; 0 past the end.
fn le16_at(frame: &[u8], at: usize) -> u32 {
    frame
        .get(at..at + 2)
        .map_or(0, |b| u32::from(u16::from_le_bytes([b[0], b[1]])))
}

/// A 32-bit field as a little-endian CPU loads it.
fn le32_at(frame: &[u8], at: usize) -> u32 {
    word([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]])
}

/// DPDK's hashes (`ether_hash`, `ipv4_hash`, `ipv6_hash` and `burst_xmit_l*_hash`).
fn dpdk_hash(policy: XmitHashPolicy, frame: &[u8]) -> u32 {
    if frame.len() < ethernet::HEADER_LEN {
        return 0;
    }
    // The MAC addresses as three 16-bit words each.
    let eth = (0..3).fold(0, |h, i| {
        h ^ le16_at(frame, 2 * i) ^ le16_at(frame, 6 + 2 * i)
    });
    if policy == XmitHashPolicy::DpdkL2 {
        return eth ^ (eth >> 8);
    }
    // DPDK skips one 802.1Q or 802.1ad tag, then one more 802.1Q tag.
    let be16 = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let mut proto = be16(12);
    let mut l3 = ethernet::HEADER_LEN;
    if matches!(proto, Some(0x8100 | 0x88a8)) {
        proto = be16(16);
        l3 = 18;
        if proto == Some(0x8100) {
            proto = be16(20);
            l3 = 22;
        }
    }
    let ports = |l4: usize, header: usize| -> u32 {
        // DPDK takes IPv4's ports only when the header ends before the frame does.
        if l4 + header < frame.len() {
            le16_at(frame, l4) ^ le16_at(frame, l4 + 2)
        } else {
            0
        }
    };
    let (mut l3hash, mut l4hash) = (0, 0);
    match proto {
        Some(0x0800) if frame.len() >= l3 + 20 => {
            l3hash = le32_at(frame, l3 + 12) ^ le32_at(frame, l3 + 16);
            let fragment = u16::from_be_bytes([frame[l3 + 6], frame[l3 + 7]]) & 0x3fff;
            if policy == XmitHashPolicy::DpdkL34 && fragment == 0 {
                let l4 = l3 + usize::from(frame[l3] & 0x0f) * 4;
                l4hash = match frame[l3 + 9] {
                    ip_protocol::TCP => ports(l4, 20),
                    ip_protocol::UDP => ports(l4, 8),
                    _ => 0,
                };
            }
        }
        Some(0x86dd) if frame.len() >= l3 + 40 => {
            l3hash = (8..40)
                .step_by(4)
                .fold(0, |h, at| h ^ le32_at(frame, l3 + at));
            // No extension headers: the next header is the transport's or nothing.
            if policy == XmitHashPolicy::DpdkL34
                && matches!(frame[l3 + 6], ip_protocol::TCP | ip_protocol::UDP)
                && frame.len() >= l3 + 44
            {
                l4hash = le16_at(frame, l3 + 40) ^ le16_at(frame, l3 + 42);
            }
        }
        _ => {}
    }
    let mut hash = if policy == XmitHashPolicy::DpdkL23 {
        eth ^ l3hash
    } else {
        l3hash ^ l4hash
    };
    hash ^= hash >> 16;
    hash ^= hash >> 8;
    hash
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::{vec, vec::Vec};

    fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> [u8; 42] {
        let mut f = [0u8; 42];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x0b]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x0a]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = ip_protocol::UDP;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    /// udp4 with `payload` bytes (up to 22) after the UDP header: the frame and its length.
    fn udp4_with_payload(sport: u16, dport: u16, payload: usize) -> ([u8; 64], usize) {
        let mut f = [0u8; 64];
        f[..42].copy_from_slice(&udp4([198, 51, 100, 1], [198, 51, 100, 3], sport, dport));
        (f, 42 + payload)
    }

    #[test]
    fn dpdk_l2_by_hand() {
        // MAC words loaded little-endian: 0x0002 ^ 0x0000 ^ 0x0b00 (dst) and 0x0002 ^ 0x0000
        // ^ 0x0a00 (src) give 0x0100; then h ^= h >> 8.
        let (f, len) = udp4_with_payload(1000, 2000, 18);
        assert_eq!(xmit_hash(XmitHashPolicy::DpdkL2, &f[..len]), 0x0101);
    }

    #[test]
    fn dpdk_l23_by_hand() {
        // The addresses loaded little-endian: 0x016433c6 ^ 0x036433c6 = 0x02000000; with the
        // MAC words 0x0100: 0x02000100; ^ >> 16: 0x02000300; ^ >> 8: 0x02020303.
        let (f, len) = udp4_with_payload(1000, 2000, 18);
        assert_eq!(xmit_hash(XmitHashPolicy::DpdkL23, &f[..len]), 0x0202_0303);
    }

    #[test]
    fn dpdk_l34_by_hand() {
        // Ports 1000 (03 e8) and 2000 (07 d0) loaded little-endian: 0xe803 ^ 0xd007 = 0x3804;
        // with the addresses: 0x02003804; ^ >> 16: 0x02003a04; ^ >> 8: 0x02023a3e. No MACs.
        let (f, len) = udp4_with_payload(1000, 2000, 18);
        assert_eq!(xmit_hash(XmitHashPolicy::DpdkL34, &f[..len]), 0x0202_3a3e);
    }

    #[test]
    fn dpdk_l34_takes_udp_ports_only_when_the_header_ends_before_the_frame() {
        // DPDK's check is `udp_hdr + 8 < end`: a UDP header that ends the frame is not read,
        // so only the addresses count: 0x02000000; ^ >> 16: 0x02000200; ^ >> 8: 0x02020202.
        let (f, len) = udp4_with_payload(1000, 2000, 0);
        assert_eq!(xmit_hash(XmitHashPolicy::DpdkL34, &f[..len]), 0x0202_0202);
    }

    #[test]
    fn dpdk_l34_skips_ports_of_fragments_and_other_protocols() {
        let (whole, len) = udp4_with_payload(1000, 2000, 18);
        let addresses_only = 0x0202_0202;
        let mut fragment = whole;
        fragment[20] = 0x20; // more fragments
        assert_eq!(
            xmit_hash(XmitHashPolicy::DpdkL34, &fragment[..len]),
            addresses_only
        );
        let mut icmp = whole;
        icmp[23] = ip_protocol::ICMP;
        assert_eq!(
            xmit_hash(XmitHashPolicy::DpdkL34, &icmp[..len]),
            addresses_only
        );
    }

    #[test]
    fn dpdk_hashes_skip_two_vlan_tags() {
        let (plain, len) = udp4_with_payload(1000, 2000, 18);
        let mut tagged = [0u8; 72];
        tagged[..12].copy_from_slice(&plain[..12]);
        tagged[12..20].copy_from_slice(&[0x88, 0xa8, 0, 5, 0x81, 0x00, 0, 7]);
        tagged[20..len + 8].copy_from_slice(&plain[12..len]);
        for p in [XmitHashPolicy::DpdkL23, XmitHashPolicy::DpdkL34] {
            assert_eq!(
                xmit_hash(p, &tagged[..len + 8]),
                xmit_hash(p, &plain[..len]),
                "{}",
                p.name()
            );
        }
    }

    #[test]
    fn dpdk_non_ip_hashes_l2_only_in_l23_and_nothing_in_l34() {
        let (mut arp, len) = udp4_with_payload(1000, 2000, 18);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        // l23 of 0x0100: ^ >> 16 leaves it, ^ >> 8 gives 0x0101.
        assert_eq!(xmit_hash(XmitHashPolicy::DpdkL23, &arp[..len]), 0x0101);
        assert_eq!(xmit_hash(XmitHashPolicy::DpdkL34, &arp[..len]), 0);
    }

    #[test]
    fn dpdk_policies_are_named_apart_from_linux_ones() {
        for p in XmitHashPolicy::DPDK {
            assert!(p.name().starts_with("dpdk-"));
            assert_eq!(XmitHashPolicy::from_name(p.name()), Some(p));
            assert!(!XmitHashPolicy::ALL.contains(&p));
        }
    }

    #[test]
    fn layer2_is_the_last_mac_bytes_and_the_ethertype() {
        let f = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        assert_eq!(xmit_hash(XmitHashPolicy::Layer2, &f), 0x0b ^ 0x0a ^ 0x0800);
    }

    /// An ICMP error from `src` to `dst` of `icmp_type` quoting the first `quote` bytes of
    /// `inner` (an IPv4 packet).
    fn icmp4_error(src: [u8; 4], dst: [u8; 4], icmp_type: u8, inner: &[u8]) -> Vec<u8> {
        let mut f = udp4(src, dst, 0, 0)[..34].to_vec();
        f[23] = ip_protocol::ICMP;
        f.extend_from_slice(&[icmp_type, 3, 0, 0, 0, 0, 0, 0]);
        f.extend_from_slice(inner);
        f
    }

    fn l34(addrs: u32, ports: u32) -> u32 {
        let mut h = ports ^ addrs;
        h ^= h >> 16;
        h ^= h >> 8;
        h >> 1
    }

    #[test]
    fn an_icmp_error_hashes_as_the_flow_it_quotes() {
        let flow = udp4([10, 0, 0, 1], [10, 0, 0, 2], 0x1234, 0x5678);
        let quoted = &flow[14..42];
        for icmp_type in [3, 4, 5, 11, 12] {
            let err = icmp4_error([192, 0, 2, 9], [10, 0, 0, 1], icmp_type, quoted);
            // The quoted header's addresses and ports, not the error's.
            let want = l34(
                u32::from_le_bytes([10, 0, 0, 1]) ^ u32::from_le_bytes([10, 0, 0, 2]),
                0x7856_3412,
            );
            assert_eq!(
                xmit_hash(XmitHashPolicy::Layer34, &err),
                want,
                "type {icmp_type}"
            );
            // layer2+3: the MACs (the same here) and the quoted addresses.
            assert_eq!(
                xmit_hash(XmitHashPolicy::Layer23, &err),
                xmit_hash(XmitHashPolicy::Layer23, &flow),
                "type {icmp_type}"
            );
        }
        // Not an error (an address mask reply, type 18): the ICMP packet's own addresses.
        let other = icmp4_error([192, 0, 2, 9], [10, 0, 0, 1], 18, quoted);
        let own = u32::from_le_bytes([192, 0, 2, 9]) ^ u32::from_le_bytes([10, 0, 0, 1]);
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &other), l34(own, 0));
    }

    #[test]
    fn an_icmp_error_whose_quote_is_cut_short_hashes_layer2() {
        let flow = udp4([10, 0, 0, 1], [10, 0, 0, 2], 0x1234, 0x5678);
        let err = icmp4_error([192, 0, 2, 9], [10, 0, 0, 1], 11, &flow[14..33]);
        for policy in [XmitHashPolicy::Layer23, XmitHashPolicy::Layer34] {
            assert_eq!(xmit_hash(policy, &err), eth_hash(&err), "{}", policy.name());
        }
        // The quoted header whole but not its ports: the ports count as 0.
        let err = icmp4_error([192, 0, 2, 9], [10, 0, 0, 1], 11, &flow[14..36]);
        let addrs = u32::from_le_bytes([10, 0, 0, 1]) ^ u32::from_le_bytes([10, 0, 0, 2]);
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &err), l34(addrs, 0));
        // An ICMP header cut short is no error: the packet's own addresses.
        let err = icmp4_error([192, 0, 2, 9], [10, 0, 0, 1], 11, &[])[..40].to_vec();
        let own = u32::from_le_bytes([192, 0, 2, 9]) ^ u32::from_le_bytes([10, 0, 0, 1]);
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &err), l34(own, 0));
    }

    #[test]
    fn an_error_quoting_an_error_is_followed_once() {
        let flow = udp4([10, 0, 0, 1], [10, 0, 0, 2], 0x1234, 0x5678);
        let first = icmp4_error([10, 0, 0, 7], [10, 0, 0, 1], 3, &flow[14..42]);
        let second = icmp4_error([10, 0, 0, 8], [10, 0, 0, 7], 11, &first[14..]);
        // The quoted packet is the first error: its addresses, and no ports (ICMP has none).
        let addrs = u32::from_le_bytes([10, 0, 0, 7]) ^ u32::from_le_bytes([10, 0, 0, 1]);
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &second), l34(addrs, 0));
    }

    #[test]
    fn an_icmpv6_error_hashes_as_the_flow_it_quotes() {
        let mut inner = vec![0x60, 0, 0, 0, 0, 12, ip_protocol::UDP, 64];
        inner.extend((0..32).map(|i| i as u8));
        inner.extend_from_slice(&[0x12, 0x34, 0x56, 0x78, 0, 12, 0, 0]);
        let outer_addrs: Vec<u8> = (100..132).collect();
        let mut f = vec![2, 0, 0, 0, 0, 0x0b, 2, 0, 0, 0, 0, 0x0a, 0x86, 0xdd];
        f.extend_from_slice(&[0x60, 0, 0, 0, 0, 56, ip_protocol::ICMPV6, 64]);
        f.extend_from_slice(&outer_addrs);
        f.extend_from_slice(&[1, 4, 0, 0, 0, 0, 0, 0]);
        f.extend_from_slice(&inner);
        let fold = |b: &[u8]| {
            b.chunks_exact(4)
                .fold(0, |h, w| h ^ word([w[0], w[1], w[2], w[3]]))
        };
        let quoted = l34(fold(&inner[8..40]), 0x7856_3412);
        for icmp_type in 1..=4 {
            f[54] = icmp_type;
            assert_eq!(
                xmit_hash(XmitHashPolicy::Layer34, &f),
                quoted,
                "type {icmp_type}"
            );
        }
        // An informational message (echo request, 128, id 0 taken as 1) is its own flow.
        f[54] = 128;
        let echo = u32::from(128u8) | 4 << 8 | 1 << 16;
        assert_eq!(
            xmit_hash(XmitHashPolicy::Layer34, &f),
            l34(fold(&outer_addrs), echo)
        );
    }

    #[test]
    fn layer34_by_hand() {
        let f = udp4([10, 0, 0, 1], [10, 0, 0, 2], 0x1234, 0x5678);
        // The ports' bytes 12 34 56 78 loaded little-endian.
        let mut h: u32 = 0x7856_3412;
        h ^= u32::from_le_bytes([10, 0, 0, 1]) ^ u32::from_le_bytes([10, 0, 0, 2]);
        h ^= h >> 16;
        h ^= h >> 8;
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &f), h >> 1);
        // A fragment has no ports.
        let mut frag = f;
        frag[20] = 0x20; // MF
        let mut h = u32::from_le_bytes([10, 0, 0, 1]) ^ u32::from_le_bytes([10, 0, 0, 2]);
        h ^= h >> 16;
        h ^= h >> 8;
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &frag), h >> 1);
    }

    /// Vectors worked by hand. u32 words are the packet's bytes loaded little-endian, as the
    /// kernel loads a `__be32` on x86: 198.51.100.1 is 0x016433c6, 203.0.113.9 0x097100cb.
    #[test]
    fn written_vectors() {
        let v4 = udp4([198, 51, 100, 1], [203, 0, 113, 9], 40000, 53);
        // layer3+4: ports 9c 40 00 35 -> 0x3500409c; ^ 0x016433c6 ^ 0x097100cb = 0x3d157391;
        // h ^= h >> 16 -> 0x3d154e84; h ^= h >> 8 -> 0x3d285bca; >> 1 -> 0x1e942de5.
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &v4), 0x1e94_2de5);
        assert_eq!(xmit_hash(XmitHashPolicy::Encap34, &v4), 0x1e94_2de5);
        // layer2+3: 0x0b ^ 0x0a ^ 0x0800 = 0x0801, ^ both addresses, folded, no shift.
        assert_eq!(xmit_hash(XmitHashPolicy::Layer23, &v4), 0x081d_262a);
        // ICMP echo request, id 0x1234: the word is type | code << 8 | id << 16.
        let mut icmp = v4;
        icmp[23] = ip_protocol::ICMP;
        icmp[34..38].copy_from_slice(&[8, 0, 0, 0]);
        icmp[38..40].copy_from_slice(&0x1234u16.to_be_bytes());
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &icmp), 0x0d1d_8406);
        // IPv6 TCP 2001:db8::1.443 -> 2001:db8::2.51000: each address folds to the xor of its
        // four words (2001:db8::1 -> 0xb80d0120 ^ 0x01000000).
        let mut v6 = [0u8; 74];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[14] = 0x60;
        v6[20] = ip_protocol::TCP;
        let addr = |last: u8| {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
            a[15] = last;
            a
        };
        v6[22..38].copy_from_slice(&addr(1));
        v6[38..54].copy_from_slice(&addr(2));
        v6[54..56].copy_from_slice(&443u16.to_be_bytes());
        v6[56..58].copy_from_slice(&51000u16.to_be_bytes());
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &v6), 0x1dfe_23a3);
        // vlan+srcmac: VLAN 100 ^ 0x025847 (source OUI) ^ 0x00000a (the rest).
        let mut tagged = [0u8; 60];
        tagged[6..12].copy_from_slice(&[0x02, 0x58, 0x47, 0, 0, 0x0a]);
        tagged[12..14].copy_from_slice(&[0x81, 0x00]);
        tagged[14..16].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(xmit_hash(XmitHashPolicy::VlanSrcMac, &tagged), 0x0002_5829);
    }

    #[test]
    fn non_ip_falls_back_to_layer2_and_names_read_back() {
        let mut arp = udp4([0; 4], [0; 4], 0, 0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let eth = 0x0b ^ 0x0a ^ 0x0806;
        for p in XmitHashPolicy::ALL {
            assert_eq!(XmitHashPolicy::from_name(p.name()), Some(p));
        }
        for p in [
            XmitHashPolicy::Layer2,
            XmitHashPolicy::Layer23,
            XmitHashPolicy::Layer34,
        ] {
            assert_eq!(xmit_hash(p, &arp), eth, "{p:?}");
        }
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &[0u8; 3]), 0);
    }

    #[test]
    fn the_encap_policies_dissect_arp_to_nothing_as_linux_does() {
        // The whole flow dissector ends ARP with no addresses: encap2+3 folds the layer2
        // hash alone (0x0b ^ 0x0a ^ 0x0806 = 0x0807; ^ >> 8 gives 0x080f), encap3+4 has
        // nothing (0).
        let mut arp = udp4([0; 4], [0; 4], 0, 0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(xmit_hash(XmitHashPolicy::Encap23, &arp), 0x080f);
        assert_eq!(xmit_hash(XmitHashPolicy::Encap34, &arp), 0);
    }

    #[test]
    fn the_encap_policies_hash_the_innermost_headers() {
        // A UDP packet inside IP-in-IP inside GRE (with a key): encap3+4 hashes the inner
        // addresses and ports, exactly as layer3+4 hashes that packet on its own.
        let inner = udp4([10, 0, 0, 1], [10, 0, 0, 2], 0x1234, 0x5678);
        let mut f = [0u8; 14 + 20 + 8 + 20 + 28];
        f[..14].copy_from_slice(&inner[..14]);
        let mut at = 14;
        // Outer IPv4, GRE.
        f[at] = 0x45;
        f[at + 9] = 47;
        f[at + 12..at + 20].copy_from_slice(&[198, 51, 100, 1, 198, 51, 100, 2]);
        at += 20;
        f[at..at + 4].copy_from_slice(&[0x20, 0x00, 0x08, 0x00]);
        at += 8;
        // IP-in-IP.
        f[at] = 0x45;
        f[at + 9] = 4;
        f[at + 12..at + 20].copy_from_slice(&[203, 0, 113, 1, 203, 0, 113, 2]);
        at += 20;
        f[at..].copy_from_slice(&inner[14..]);
        assert_eq!(
            xmit_hash(XmitHashPolicy::Encap34, &f),
            xmit_hash(XmitHashPolicy::Layer34, &inner)
        );
        // layer3+4 stops at the outer header: GRE has no ports.
        assert_ne!(
            xmit_hash(XmitHashPolicy::Layer34, &f),
            xmit_hash(XmitHashPolicy::Layer34, &inner)
        );
    }
}
