//! Telling the switch where the bond is now: after a failover, gratuitous ARPs (bonding's
//! `num_grat_arp`) and unsolicited IPv6 neighbour advertisements (`num_unsol_na`) from the new
//! active member, so that the switch's forwarding table points the bond's MAC at the new
//! port and the neighbours' caches stay right.

use xskit::Interface;
use xskit_os::packet::PacketTx;
use xskit_wire::{arp, checksum, ethernet, ip_protocol, ipv6, EtherType};

use crate::Result;

/// A broadcast ARP request from `mac`, sender address `sender`, asking for `target`.
pub(crate) fn arp_request(mac: [u8; 6], sender: [u8; 4], target: [u8; 4]) -> [u8; 42] {
    let mut frame = [0u8; 42];
    let mut eth = ethernet::Frame::new_unchecked(&mut frame[..]);
    eth.set_dst_addr([0xff; 6]);
    eth.set_src_addr(mac);
    eth.set_ethertype(EtherType::Arp);
    arp::Packet::new_unchecked(eth.payload_mut()).emit(
        arp::operation::REQUEST,
        mac,
        sender,
        [0; 6],
        target,
    );
    frame
}

/// A gratuitous ARP request for `ip` from `mac`, broadcast: the sender and target address
/// are both `ip`, as Linux's bond sends them.
pub fn gratuitous_arp(mac: [u8; 6], ip: [u8; 4]) -> [u8; 42] {
    arp_request(mac, ip, ip)
}

/// Bytes of an unsolicited neighbour advertisement with its link-layer option.
pub const UNSOLICITED_NA_LEN: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + 32;

/// An unsolicited neighbour advertisement for `ip` at `mac` (RFC 4861 7.2.6): to all nodes
/// (ff02::1), hop limit 255, the override flag set, the target link-layer address option.
pub fn unsolicited_na(mac: [u8; 6], ip: [u8; 16]) -> [u8; UNSOLICITED_NA_LEN] {
    const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let mut frame = [0u8; UNSOLICITED_NA_LEN];
    let mut eth = ethernet::Frame::new_unchecked(&mut frame[..]);
    eth.set_dst_addr([0x33, 0x33, 0, 0, 0, 1]);
    eth.set_src_addr(mac);
    eth.set_ethertype(EtherType::Ipv6);
    let mut ip6 = ipv6::Packet::new_unchecked(eth.payload_mut());
    ip6.init(32, ip_protocol::ICMPV6, ip, ALL_NODES, 0);
    ip6.set_hop_limit(255);
    let na = &mut frame[ethernet::HEADER_LEN + ipv6::HEADER_LEN..];
    na[0] = 136; // neighbour advertisement
    na[4] = 0x20; // override
    na[8..24].copy_from_slice(&ip);
    na[24] = 2; // target link-layer address
    na[25] = 1; // 8 bytes
    na[26..32].copy_from_slice(&mac);
    let sum = checksum::accumulate(
        checksum::pseudo_header_v6(ip, ALL_NODES, ip_protocol::ICMPV6, 32),
        na,
    );
    na[2..4].copy_from_slice(&(!checksum::fold(sum)).to_be_bytes());
    frame
}

/// Sends `count` unsolicited neighbour advertisements for (`mac`, `ip`) out of `member`, in
/// the calling thread's namespace.
pub fn announce_v6(member: &Interface, mac: [u8; 6], ip: [u8; 16], count: usize) -> Result<()> {
    let tx = PacketTx::open(member.index())?;
    let frame = unsolicited_na(mac, ip);
    for _ in 0..count {
        tx.send_copies(&frame, 1)?;
    }
    Ok(())
}

/// Sends `count` gratuitous ARPs for (`mac`, `ip`) out of `member` (AF_PACKET, past the
/// qdisc), in the calling thread's namespace.
pub fn announce(member: &Interface, mac: [u8; 6], ip: [u8; 4], count: usize) -> Result<()> {
    let tx = PacketTx::open(member.index())?;
    let frame = gratuitous_arp(mac, ip);
    for _ in 0..count {
        tx.send_copies(&frame, 1)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gratuitous_arp_names_the_address_twice() {
        let f = gratuitous_arp([2, 0, 0, 0, 0, 1], [203, 0, 113, 5]);
        let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
        assert_eq!(eth.dst_addr(), [0xff; 6]);
        assert_eq!(eth.ethertype(), EtherType::Arp);
        let a = arp::Packet::new_checked(eth.payload()).unwrap();
        assert_eq!(a.operation(), arp::operation::REQUEST);
        assert_eq!(
            (a.sender_ip(), a.target_ip()),
            ([203, 0, 113, 5], [203, 0, 113, 5])
        );
        assert_eq!(a.sender_mac(), [2, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn an_unsolicited_na_sums_to_zero_over_its_pseudo_header() {
        let ip = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
        let f = unsolicited_na([2, 0, 0, 0, 0, 1], ip);
        let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
        assert_eq!(eth.dst_addr(), [0x33, 0x33, 0, 0, 0, 1]);
        let ip6 = ipv6::Packet::new_checked(eth.payload()).unwrap();
        assert_eq!(
            (ip6.hop_limit(), ip6.next_header()),
            (255, ip_protocol::ICMPV6)
        );
        assert_eq!(ip6.src_addr(), ip);
        let na = &f[54..];
        let sum = checksum::accumulate(ip6.pseudo_header(), na);
        assert_eq!(checksum::fold(sum), 0xffff, "a valid ICMPv6 checksum");
        assert_eq!((na[0], na[4] & 0x20, &na[8..24]), (136, 0x20, &ip[..]));
        assert_eq!(&na[26..32], &[2, 0, 0, 0, 0, 1]);
    }
}
