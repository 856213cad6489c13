//! The GSO segmenter: from any frame and link size, the segments it plans fit the link, are
//! written without panicking, and carry the super-packet's payload exactly once, in order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xskit_wire::ethernet;
use xskit_wire::gso::TcpSegmenter;
use xskit_wire::offload::L4Checksum;

fuzz_target!(|input: (u16, &[u8])| {
    let (max_ip_len, packet) = input;
    let max_ip_len = usize::from(max_ip_len);
    let Some(plan) = TcpSegmenter::new(packet, max_ip_len) else {
        return;
    };
    // A segmenter bounds its own work: a frame cannot ask for more segments than bytes.
    assert!(plan.count() <= packet.len().max(1));
    let c = L4Checksum::locate(packet, packet.len()).expect("the segmenter found TCP");
    let headers = c.start + usize::from(packet[c.start + 12] >> 4) * 4;
    let untagged = ethernet::Frame::new_checked(packet).unwrap();
    let l3 = packet.len() - untagged.untagged().unwrap().payload.len();
    let mut out = vec![0u8; plan.max_segment_len()];
    let mut carried = Vec::new();
    for k in 0..plan.count() {
        let len = plan.write(packet, k, &mut out);
        assert!(len <= plan.max_segment_len());
        assert!(len - l3 <= max_ip_len, "segment {k}: {} IP bytes", len - l3);
        carried.extend_from_slice(&out[headers..len]);
    }
    assert_eq!(carried, &packet[headers..c.start + c.len]);
});
