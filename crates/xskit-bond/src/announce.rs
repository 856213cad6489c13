//! Telling the switch where the bond is now: after a failover, gratuitous ARPs from the new
//! active member (bonding's `num_grat_arp`) so that the switch's forwarding table points the
//! bond's MAC at the new port.

use xskit::Interface;
use xskit_traffic::baseline::PacketTx;
use xskit_wire::{arp, ethernet, EtherType};

use crate::Result;

/// A gratuitous ARP request for `ip` from `mac`, broadcast: the sender and target address
/// are both `ip`, as Linux's bond sends them.
pub fn gratuitous_arp(mac: [u8; 6], ip: [u8; 4]) -> [u8; 42] {
    let mut frame = [0u8; 42];
    let mut eth = ethernet::Frame::new_unchecked(&mut frame[..]);
    eth.set_dst_addr([0xff; 6]);
    eth.set_src_addr(mac);
    eth.set_ethertype(EtherType::Arp);
    arp::Packet::new_unchecked(eth.payload_mut()).emit(
        arp::operation::REQUEST,
        mac,
        ip,
        [0; 6],
        ip,
    );
    frame
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
}
