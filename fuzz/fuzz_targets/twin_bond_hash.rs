//! The bond hashes' twins held to each other: the same bytes through the C of
//! `xskit_bond.h` (BPF_PROG_TEST_RUN on the compiled program) and through the Rust of
//! `xskit_wire::bond_hash`, under every policy; any difference fails with the frame. Needs
//! root (CAP_BPF).
#![no_main]

use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;
use xskit_bond::{xmit_hash, BpfHasher, XmitHashPolicy};

static HASHER: Mutex<Option<BpfHasher>> = Mutex::new(None);

fuzz_target!(|frame: &[u8]| {
    // The kernel's test run refuses frames shorter than an Ethernet header.
    if frame.len() < 14 {
        return;
    }
    let mut hasher = HASHER.lock().unwrap();
    let hasher = hasher.get_or_insert_with(|| {
        BpfHasher::load().unwrap_or_else(|e| panic!("loading the C hash (run as root): {e}"))
    });
    for policy in XmitHashPolicy::ALL.into_iter().chain(XmitHashPolicy::DPDK) {
        let c = hasher
            .hash(policy, frame)
            .expect("a test run of the C hash");
        let rust = xmit_hash(policy, frame);
        assert_eq!(
            c,
            rust,
            "{}: C {c:#x}, Rust {rust:#x} for {frame:02x?}",
            policy.name()
        );
    }
});
