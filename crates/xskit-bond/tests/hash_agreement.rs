//! The C hash (`bpf/xskit_bond.h`, run with BPF_PROG_TEST_RUN) and the Rust one
//! (`xskit_wire::bond_hash`) agree on every policy for random and edge-case frames. The Rust
//! one is held to the kernel's bond in the guest testbed (crates/xskit-cli/tests/guest.rs).

use std::cell::RefCell;

use proptest::prelude::*;
use xskit_bond::{xmit_hash, BpfHasher, XmitHashPolicy};

fn privileged() -> bool {
    xskit_testbed::privileged_or_skip()
}

/// A frame of the given shape: Ethernet (optionally 802.1Q-tagged), an IPv4 or IPv6 header
/// (or another EtherType), a transport protocol, fragment bits, random bytes elsewhere, cut
/// to `cut` bytes.
#[derive(Clone, Debug)]
struct Shape {
    ethertype: u16,
    vlan: bool,
    protocol: u8,
    ihl: u8,
    frag: u16,
    bytes: Vec<u8>,
    cut: usize,
}

fn frame(s: &Shape) -> Vec<u8> {
    let mut f = s.bytes.clone();
    f.resize(128, 0);
    let mut l3 = 14;
    if s.vlan {
        f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        f[16..18].copy_from_slice(&s.ethertype.to_be_bytes());
        l3 = 18;
    } else {
        f[12..14].copy_from_slice(&s.ethertype.to_be_bytes());
    }
    match s.ethertype {
        0x0800 => {
            f[l3] = 0x40 | (s.ihl & 0x0f);
            f[l3 + 6..l3 + 8].copy_from_slice(&s.frag.to_be_bytes());
            f[l3 + 9] = s.protocol;
        }
        0x86dd => {
            f[l3] = 0x60;
            f[l3 + 6] = s.protocol;
        }
        _ => {}
    }
    f.truncate(s.cut.max(14));
    f
}

fn shapes() -> impl Strategy<Value = Shape> {
    (
        prop_oneof![Just(0x0800u16), Just(0x86dd), Just(0x0806), any::<u16>()],
        prop::bool::weighted(0.2),
        prop_oneof![
            Just(6u8),
            Just(17),
            Just(1),
            Just(58),
            Just(51),
            Just(50),
            Just(132),
            any::<u8>()
        ],
        prop_oneof![Just(5u8), 0u8..16],
        prop_oneof![Just(0u16), Just(0x4000), Just(0x2000), any::<u16>()],
        prop::collection::vec(any::<u8>(), 128),
        prop_oneof![Just(128usize), 14usize..128],
    )
        .prop_map(|(ethertype, vlan, protocol, ihl, frag, bytes, cut)| Shape {
            ethertype,
            vlan,
            protocol,
            ihl,
            frag,
            bytes,
            cut,
        })
}

fn agree(hasher: &mut BpfHasher, frame: &[u8]) -> Result<(), String> {
    for policy in XmitHashPolicy::ALL.into_iter().chain(XmitHashPolicy::DPDK) {
        let c = hasher.hash(policy, frame).map_err(|e| e.to_string())?;
        let rust = xmit_hash(policy, frame);
        if c != rust {
            return Err(format!(
                "{}: C {c:#x}, Rust {rust:#x} for {frame:02x?}",
                policy.name()
            ));
        }
    }
    Ok(())
}

#[test]
fn c_and_rust_agree_on_random_frames() {
    if !privileged() {
        return;
    }
    let hasher = RefCell::new(BpfHasher::load().unwrap());
    let config = ProptestConfig {
        cases: 3000,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(shape in shapes())| {
        let f = frame(&shape);
        prop_assert_eq!(agree(&mut hasher.borrow_mut(), &f), Ok(()));
    });
}

#[test]
fn c_and_rust_agree_on_edge_cases() {
    if !privileged() {
        return;
    }
    let mut hasher = BpfHasher::load().unwrap();
    let base = Shape {
        ethertype: 0x0800,
        vlan: false,
        protocol: 17,
        ihl: 5,
        frag: 0,
        bytes: (0..128).map(|i| (i * 37 + 11) as u8).collect(),
        cut: 128,
    };
    let mut cases = vec![base.clone()];
    // Headers cut at every length, IPv4 and IPv6, every protocol with ports or an id.
    for ethertype in [0x0800, 0x86dd] {
        for protocol in [6, 17, 1, 58, 51, 50, 132, 136, 33, 47] {
            for cut in 14..80 {
                cases.push(Shape {
                    ethertype,
                    protocol,
                    cut,
                    ..base.clone()
                });
            }
        }
    }
    // Fragments (MF, an offset, DF alone), options (ihl 6 to 15), and bad ihl (0 to 4).
    for frag in [0x2000, 0x0001, 0x1fff, 0x4000, 0x8000] {
        cases.push(Shape {
            frag,
            ..base.clone()
        });
    }
    for ihl in 0..16 {
        cases.push(Shape {
            ihl,
            ..base.clone()
        });
    }
    // ICMP echo with id 0 (Linux counts it as 1) and types without an id.
    for (protocol, kind) in [
        (1, 8),
        (1, 0),
        (1, 3),
        (1, 13),
        (58, 128),
        (58, 129),
        (58, 1),
    ] {
        let mut s = Shape {
            protocol,
            ethertype: if protocol == 1 { 0x0800 } else { 0x86dd },
            ..base.clone()
        };
        let l4 = if protocol == 1 { 34 } else { 54 };
        s.bytes[l4] = kind;
        s.bytes[l4 + 4] = 0;
        s.bytes[l4 + 5] = 0;
        cases.push(s);
    }
    // Tagged frames for vlan+srcmac; ARP and an unknown EtherType fall back to layer2.
    for ethertype in [0x0806, 0x88cc, 0x0800] {
        cases.push(Shape {
            ethertype,
            vlan: true,
            ..base.clone()
        });
    }
    for s in &cases {
        let f = frame(s);
        agree(&mut hasher, &f).unwrap();
    }
    // Two tags, 802.1ad then 802.1Q (DPDK skips both), cut at every length.
    for protocol in [6, 17] {
        let plain = frame(&Shape {
            protocol,
            ..base.clone()
        });
        for cut in 14..plain.len() + 8 {
            let mut qinq = plain[..12].to_vec();
            qinq.extend_from_slice(&[0x88, 0xa8, 0, 5, 0x81, 0x00, 0, 7]);
            qinq.extend_from_slice(&plain[12..]);
            qinq.truncate(cut);
            agree(&mut hasher, &qinq).unwrap();
        }
    }
}
