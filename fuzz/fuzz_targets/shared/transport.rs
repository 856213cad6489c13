//! What the IP targets share: the transport header behind an IP header.

use xskit_wire::{icmp, ip_protocol, tcp, udp};

/// Reads TCP, UDP or ICMP in `payload` (after a pseudo-header sum of `pseudo`); a checksum
/// filled in must verify.
pub fn transport(protocol: u8, payload: &[u8], pseudo: u32) {
    let mut copy = payload.to_vec();
    match protocol {
        ip_protocol::TCP => {
            if let Ok(t) = tcp::Packet::new_checked(payload) {
                let _ = (t.src_port(), t.dst_port(), t.seq(), t.ack(), t.flags());
                let _ = (
                    t.window(),
                    t.options(),
                    t.payload(),
                    t.verify_checksum(pseudo),
                );
                tcp::Packet::new_unchecked(&mut copy[..]).fill_checksum(pseudo);
                assert!(tcp::Packet::new_checked(&copy[..])
                    .unwrap()
                    .verify_checksum(pseudo));
            }
        }
        ip_protocol::UDP => {
            if let Ok(u) = udp::Packet::new_checked(payload) {
                let _ = (u.src_port(), u.dst_port(), u.len(), u.payload());
                let _ = u.verify_checksum(pseudo);
                udp::Packet::new_unchecked(&mut copy[..]).fill_checksum(pseudo);
                assert!(udp::Packet::new_checked(&copy[..])
                    .unwrap()
                    .verify_checksum(pseudo));
            }
        }
        ip_protocol::ICMP | ip_protocol::ICMPV6 => {
            if let Ok(m) = icmp::Packet::new_checked(payload) {
                let _ = (
                    m.kind(),
                    m.code(),
                    m.echo_ident(),
                    m.echo_seq(),
                    m.payload(),
                );
                let _ = m.verify_checksum(pseudo);
            }
        }
        _ => {}
    }
}
