//! IPv4 and what it carries (TCP, UDP, ICMP): an accepted view reads every field without
//! panicking, and a checksum filled in verifies.
#![no_main]

use libfuzzer_sys::fuzz_target;
#[path = "shared/transport.rs"]
mod transport;

use xskit_wire::ipv4;

fuzz_target!(|data: &[u8]| {
    let Ok(ip) = ipv4::Packet::new_checked(data) else {
        return;
    };
    let _ = (
        ip.version(),
        ip.dscp_ecn(),
        ip.ident(),
        ip.dont_frag(),
        ip.more_frags(),
    );
    let _ = (
        ip.frag_offset(),
        ip.ttl(),
        ip.checksum(),
        ip.options(),
        ip.verify_checksum(),
    );
    assert!(ip.header_len() >= 20 && ip.header_len() <= data.len());
    let payload = ip.payload();
    assert!(payload.len() + ip.header_len() <= data.len());
    let pseudo = ip.pseudo_header();
    let mut copy = data.to_vec();
    let mut header = ipv4::Packet::new_unchecked(&mut copy[..]);
    header.fill_checksum();
    assert!(ipv4::Packet::new_checked(&copy[..])
        .unwrap()
        .verify_checksum());
    transport::transport(ip.protocol(), payload, pseudo);
});
