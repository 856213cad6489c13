//! The checksum finder: whatever the frame, what it finds lies inside the frame, and the
//! checksum it completes makes the TCP or UDP bytes sum correctly with their pseudo-header
//! (as a receiver checks them); a partial field is recognised as such before, never after.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xskit_wire::checksum;
use xskit_wire::offload::L4Checksum;

fuzz_target!(|data: &[u8]| {
    let Some(c) = L4Checksum::locate(data, data.len()) else {
        return;
    };
    assert!(c.start + c.len <= data.len(), "{c:?}");
    assert!(c.start + c.offset + 2 <= c.start + c.len, "{c:?}");
    let mut frame = data.to_vec();
    c.complete(&mut frame);
    let l4 = &frame[c.start..c.start + c.len];
    let sum = checksum::fold(checksum::accumulate(u32::from(c.pseudo), l4));
    assert_eq!(sum, 0xffff, "{c:?}");
    // Completing again changes nothing.
    let once = frame.clone();
    c.complete(&mut frame);
    assert_eq!(frame, once);
});
