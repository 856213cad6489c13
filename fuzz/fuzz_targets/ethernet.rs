//! Ethernet, 802.1Q/802.1ad tags and ARP: a view accepted by `new_checked` reads every field
//! without panicking, and the tag walk stops at two tags.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xskit_wire::{arp, ethernet, vlan, EtherType};

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = ethernet::Frame::new_checked(data) else {
        assert!(data.len() < 14);
        return;
    };
    let _ = (frame.dst_addr(), frame.src_addr(), frame.ethertype());
    if let Ok(tag) = vlan::Tag::new_checked(frame.payload()) {
        let _ = (tag.priority(), tag.vid(), tag.ethertype(), tag.payload());
    }
    match frame.untagged() {
        Ok(inner) => {
            assert!(!matches!(
                inner.ethertype,
                EtherType::Vlan | EtherType::QinQ
            ));
            assert!(inner.payload.len() <= frame.payload().len());
            if inner.ethertype == EtherType::Arp {
                if let Ok(a) = arp::Packet::new_checked(inner.payload) {
                    let _ = (a.operation(), a.sender_mac(), a.sender_ip());
                    let _ = (a.target_mac(), a.target_ip());
                }
            }
        }
        Err(_) => assert!(matches!(
            frame.ethertype(),
            EtherType::Vlan | EtherType::QinQ
        )),
    }
});
