//! The Linux bonding driver's transmit hashes (`xmit_hash_policy`), bit for bit as a
//! little-endian Linux computes them (`__bond_xmit_hash`, `bond_eth_hash`, `bond_ip_hash` and
//! `bond_vlan_srcmac_hash` in `drivers/net/bonding/bond_main.c`). A balance-xor or 802.3ad
//! bond sends a packet out of member `hash % members` of its usable members, so a user-space
//! bond that hashes with these sends each flow where the kernel's bond would.
//!
//! Checked packet for packet against the kernel's bonding driver in the guest testbed
//! (`crates/xskit-cli/tests/guest.rs`). The encap policies dissect inner headers of IP-in-IP
//! and GRE tunnels in Linux; here they hash the outer headers, as Linux does for traffic that
//! is not tunnelled.

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
}

impl XmitHashPolicy {
    /// Every policy.
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
        }
    }

    /// The policy of a name, as [`XmitHashPolicy::name`] gives it.
    pub fn from_name(name: &str) -> Option<Self> {
        XmitHashPolicy::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Linux's number for the policy (`BOND_XMIT_POLICY_*`), which `xskit_bond.h` takes too.
    pub fn linux_id(self) -> u32 {
        match self {
            XmitHashPolicy::Layer2 => 0,
            XmitHashPolicy::Layer34 => 1,
            XmitHashPolicy::Layer23 => 2,
            XmitHashPolicy::Encap23 => 3,
            XmitHashPolicy::Encap34 => 4,
            XmitHashPolicy::VlanSrcMac => 5,
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

/// The ICMP types whose header carries an identifier (`icmp_has_id`).
fn icmp_has_id(protocol: u8, icmp_type: u8) -> bool {
    match protocol {
        ip_protocol::ICMP => matches!(icmp_type, 0 | 8 | 13 | 14 | 15 | 16 | 17 | 18),
        _ => matches!(icmp_type, 128 | 129),
    }
}

fn transport_word(protocol: u8, l4: &[u8]) -> u32 {
    match protocol {
        ip_protocol::ICMP | ip_protocol::ICMPV6 => {
            if l4.len() < 8 {
                return 0;
            }
            let id = if icmp_has_id(protocol, l4[0]) {
                match u16::from_be_bytes([l4[4], l4[5]]) {
                    0 => 1,
                    id => id,
                }
            } else {
                0
            };
            if id == 0 {
                return 0;
            }
            u32::from(l4[0]) | u32::from(l4[1]) << 8 | u32::from(id) << 16
        }
        // proto_ports_offset(): the ports (or the SPI) start the header; AH's SPI is at 4.
        ip_protocol::TCP | ip_protocol::UDP | 33 | 50 | 132 | 136 if l4.len() >= 4 => {
            word([l4[0], l4[1], l4[2], l4[3]])
        }
        51 if l4.len() >= 8 => word([l4[4], l4[5], l4[6], l4[7]]),
        _ => 0,
    }
}

fn dissect(ethertype: u16, l3: &[u8], ports: bool) -> Option<Flow> {
    if ethertype == u16::from(EtherType::Ipv4) {
        let ip = ipv4::Packet::new_unchecked(l3);
        if l3.len() < ipv4::HEADER_LEN || ip.header_len() < ipv4::HEADER_LEN {
            return None;
        }
        let addrs = word(ip.src_addr()) ^ word(ip.dst_addr());
        let fragment = ip.more_frags() || ip.frag_offset() != 0;
        let transport = match (ports, fragment, l3.get(ip.header_len()..)) {
            (true, false, Some(l4)) => transport_word(ip.protocol(), l4),
            _ => 0,
        };
        return Some(Flow { addrs, transport });
    }
    if ethertype == u16::from(EtherType::Ipv6) {
        if l3.len() < ipv6::HEADER_LEN {
            return None;
        }
        let ip = ipv6::Packet::new_unchecked(l3);
        let addr_hash = |a: [u8; 16]| {
            a.chunks_exact(4)
                .fold(0, |h, w| h ^ word([w[0], w[1], w[2], w[3]]))
        };
        let addrs = addr_hash(ip.src_addr()) ^ addr_hash(ip.dst_addr());
        // Linux takes the next header as the transport protocol here, without walking
        // extension headers.
        let transport = if ports {
            transport_word(ip.next_header(), &l3[ipv6::HEADER_LEN..])
        } else {
            0
        };
        return Some(Flow { addrs, transport });
    }
    None
}

/// The hash the Linux bond computes for `frame` (an Ethernet frame as it leaves: in-band
/// VLAN tags included) under `policy`. The member is `hash % members`.
pub fn xmit_hash(policy: XmitHashPolicy, frame: &[u8]) -> u32 {
    if policy == XmitHashPolicy::VlanSrcMac {
        return vlan_srcmac_hash(frame);
    }
    if frame.len() < ethernet::HEADER_LEN {
        return 0;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let flow = match policy {
        XmitHashPolicy::Layer2 => None,
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn layer2_is_the_last_mac_bytes_and_the_ethertype() {
        let f = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        assert_eq!(xmit_hash(XmitHashPolicy::Layer2, &f), 0x0b ^ 0x0a ^ 0x0800);
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
        for p in XmitHashPolicy::ALL {
            assert_eq!(XmitHashPolicy::from_name(p.name()), Some(p));
            if p != XmitHashPolicy::VlanSrcMac {
                assert_eq!(xmit_hash(p, &arp), 0x0b ^ 0x0a ^ 0x0806, "{p:?}");
            }
        }
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, &[0u8; 3]), 0);
    }
}
