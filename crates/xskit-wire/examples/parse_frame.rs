//! Writes a UDP frame into a buffer, reads it back through checked views, and shows a cut
//! frame refused rather than read past its end.
//!
//! ```sh
//! cargo run -p xskit-wire --example parse_frame
//! ```
use xskit_wire::{ethernet, ip_protocol, ipv4, udp, EtherType};

const PAYLOAD: &[u8] = b"hello";

/// A UDP frame from 198.51.100.1:9 to 198.51.100.2:7, checksums filled.
fn build(frame: &mut [u8]) -> usize {
    let udp_len = 8 + PAYLOAD.len();
    let ip_len = 20 + udp_len;
    let mut eth = ethernet::Frame::new_unchecked(&mut *frame);
    eth.set_dst_addr([0x02, 0, 0, 0, 0, 2]);
    eth.set_src_addr([0x02, 0, 0, 0, 0, 1]);
    eth.set_ethertype(EtherType::Ipv4);
    let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
    ip.init(
        ip_len as u16,
        ip_protocol::UDP,
        [198, 51, 100, 1],
        [198, 51, 100, 2],
    );
    ip.fill_checksum();
    let pseudo = ip.pseudo_header();
    let mut u = udp::Packet::new_unchecked(ip.payload_mut());
    u.set_src_port(9);
    u.set_dst_port(7);
    u.set_len(udp_len as u16);
    u.payload_mut()[..PAYLOAD.len()].copy_from_slice(PAYLOAD);
    u.fill_checksum(pseudo);
    14 + ip_len
}

/// What the frame says, read only through views that checked their lengths first.
fn describe(frame: &[u8]) -> xskit_wire::Result<String> {
    let eth = ethernet::Frame::new_checked(frame)?;
    let ip = ipv4::Packet::new_checked(eth.payload())?;
    let u = udp::Packet::new_checked(ip.payload())?;
    Ok(format!(
        "{:?} -> {:?} udp {} -> {}: {:?} (ip checksum {}, udp checksum {})",
        ip.src_addr(),
        ip.dst_addr(),
        u.src_port(),
        u.dst_port(),
        String::from_utf8_lossy(u.payload()),
        if ip.verify_checksum() { "good" } else { "bad" },
        if u.verify_checksum(ip.pseudo_header()) {
            "good"
        } else {
            "bad"
        },
    ))
}

/// Run by the crate's tests too (tests/examples.rs).
pub(crate) fn main() -> xskit_wire::Result<()> {
    let mut frame = [0u8; 64];
    let len = build(&mut frame);
    let read = describe(&frame[..len])?;
    println!("{read}");
    assert!(read.contains("udp 9 -> 7: \"hello\" (ip checksum good, udp checksum good)"));
    // A frame cut inside its UDP header: the views refuse it, nothing reads past the end.
    let cut = describe(&frame[..14 + 20 + 4]);
    println!("a frame cut in its UDP header: {cut:?}");
    assert!(cut.is_err());
    Ok(())
}
