//! The bond transmit hashes (Linux's policies and DPDK's): any frame is hashed without a
//! panic; a frame that is not IP hashes as layer2 under layer2+3 and layer3+4, as in Linux.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xskit_wire::bond_hash::{xmit_hash, XmitHashPolicy};

fuzz_target!(|data: &[u8]| {
    for policy in XmitHashPolicy::ALL.into_iter().chain(XmitHashPolicy::DPDK) {
        let _ = xmit_hash(policy, data);
    }
    if data.len() >= 14 && !matches!(u16::from_be_bytes([data[12], data[13]]), 0x0800 | 0x86dd) {
        let layer2 = xmit_hash(XmitHashPolicy::Layer2, data);
        assert_eq!(xmit_hash(XmitHashPolicy::Layer23, data), layer2);
        assert_eq!(xmit_hash(XmitHashPolicy::Layer34, data), layer2);
    }
});
