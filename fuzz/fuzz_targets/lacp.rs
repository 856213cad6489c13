//! LACPDUs and Marker PDUs: an accepted view reads every field without panicking, and what
//! is emitted reads back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xskit_wire::lacp;

fuzz_target!(|data: &[u8]| {
    if let Ok(pdu) = lacp::Lacpdu::new_checked(data) {
        let (actor, partner, delay) = (pdu.actor(), pdu.partner(), pdu.collector_max_delay());
        let _ = pdu.version();
        let mut copy = data.to_vec();
        lacp::Lacpdu::new_unchecked(&mut copy[..]).emit(&actor, &partner, delay);
        let back = lacp::Lacpdu::new_checked(&copy[..]).expect("what was emitted reads back");
        assert_eq!(back.actor(), actor);
        assert_eq!(back.partner(), partner);
        assert_eq!(back.collector_max_delay(), delay);
    }
    if let Ok(marker) = lacp::Marker::new_checked(data) {
        let (port, system, transaction) = (
            marker.requester_port(),
            marker.requester_system(),
            marker.transaction(),
        );
        let mut copy = data.to_vec();
        let mut m = lacp::Marker::new_unchecked(&mut copy[..]);
        m.make_response();
        let back = lacp::Marker::new_checked(&copy[..]).expect("a response reads back");
        assert!(back.is_response());
        assert_eq!(
            (
                back.requester_port(),
                back.requester_system(),
                back.transaction()
            ),
            (port, system, transaction)
        );
    }
});
