//! The C hash (`bpf/xskit_bond.h`, run with BPF_PROG_TEST_RUN) and the Rust one
//! (`xskit_wire::bond_hash`) agree on every policy for random and edge-case frames. The Rust
//! one is held to the kernel's bond in the guest testbed (crates/xskit-cli/tests/guest.rs).

// A scenario reads top to bottom as the steps it takes, however many there are.
#![allow(clippy::too_many_lines)]

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

/// Headers for the frames below.
fn ip4(protocol: u8, flags: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0, 0, 0, 0, 1];
    h.extend_from_slice(&flags.to_be_bytes());
    h.extend_from_slice(&[64, protocol, 0, 0, 198, 51, 100, 7, 203, 0, 113, 9]);
    h.extend_from_slice(payload);
    h
}

fn ip6(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0, 0, payload.len() as u8, next, 64];
    h.extend((0..32).map(|i| (i * 13 + 5) as u8));
    h.extend_from_slice(payload);
    h
}

fn gre(flags: u16, proto: u16, inner: &[u8]) -> Vec<u8> {
    let mut h = flags.to_be_bytes().to_vec();
    h.extend_from_slice(&proto.to_be_bytes());
    for bit in [0x8000u16, 0x2000, 0x1000] {
        if flags & bit != 0 {
            h.extend_from_slice(&[0xa5; 4]);
        }
    }
    h.extend_from_slice(inner);
    h
}

fn eth(proto: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 0x0b, 2, 0, 0, 0, 0, 0x0a];
    f.extend_from_slice(&proto.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// ICMP and ICMPv6 messages: every error type over quoted TCP, UDP, an echo, a fragment and
/// another error; echo, timestamp and an unassigned type for contrast.
fn icmp_errors() -> Vec<Vec<u8>> {
    let udp = [0x9c, 0x40, 0x00, 0x35, 0, 16, 0, 0];
    let tcp = [0x30, 0x39, 0x01, 0xbb, 0, 0, 0, 1];
    let echo = [8, 0, 0, 0, 0x12, 0x34, 0, 1];
    let quoted4 = [
        ip4(17, 0, &udp),
        ip4(6, 0, &tcp),
        ip4(1, 0, &echo),
        ip4(17, 0x2000, &udp),
        ip4(
            1,
            0,
            &[&[3, 1, 0, 0, 0, 0, 0, 0][..], &ip4(17, 0, &udp)].concat(),
        ),
    ];
    let quoted6 = [
        ip6(17, &udp),
        ip6(6, &tcp),
        ip6(58, &[128, 0, 0, 0, 0x12, 0x34, 0, 1]),
        ip6(
            58,
            &[&[1, 4, 0, 0, 0, 0, 0, 0][..], &ip6(17, &udp)].concat(),
        ),
    ];
    let mut frames = Vec::new();
    for kind in [3u8, 4, 5, 11, 12, 0, 8, 13, 42] {
        for q in &quoted4 {
            frames.push(eth(
                0x0800,
                &ip4(1, 0, &[&[kind, 1, 0, 0, 0, 0, 0, 0][..], q].concat()),
            ));
        }
    }
    for kind in [1u8, 2, 3, 4, 128, 129, 135, 0] {
        for q in &quoted6 {
            frames.push(eth(
                0x86dd,
                &ip6(58, &[&[kind, 0, 0, 0, 0, 0, 0, 0][..], q].concat()),
            ));
        }
    }
    // The other family's ICMP number: Linux picks the error list by the number, not the
    // family.
    frames.push(eth(
        0x0800,
        &ip4(
            58,
            0,
            &[&[1, 0, 0, 0, 0, 0, 0, 0][..], &quoted4[0]].concat(),
        ),
    ));
    frames.push(eth(
        0x86dd,
        &ip6(1, &[&[3, 0, 0, 0, 0, 0, 0, 0][..], &quoted6[0]].concat()),
    ));
    frames
}

/// Frames through tunnels (IP-in-IP, IPv6-in-IP, GRE with each optional field, GRE with
/// Ethernet inside, PPTP), IPv6 extension headers and fragments, ARP and MPLS.
fn tunnels() -> Vec<Vec<u8>> {
    let udp = [0x9c, 0x40, 0x00, 0x35, 0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let tcp: Vec<u8> = [0x30, 0x39, 0x01, 0xbb]
        .iter()
        .copied()
        .chain([0; 16])
        .collect();
    let inner4 = ip4(17, 0, &udp);
    let inner6 = ip6(6, &tcp);
    let mut teb = eth(0x0800, &inner4);
    let mut teb_vlan = eth(0x8100, &[0, 5, 0x08, 0x00]);
    teb_vlan.extend_from_slice(&inner4);
    let mut ppp4 = vec![0xff, 0x03, 0x00, 0x21];
    ppp4.extend_from_slice(&inner4);
    let mut hop = vec![17, 0, 0, 0, 0, 0, 0, 0];
    hop.extend_from_slice(&udp);
    let mut frag = vec![17, 0, 0, 0, 0, 0, 0, 1];
    frag.extend_from_slice(&udp);
    teb.truncate(teb.len());
    vec![
        eth(0x0800, &ip4(4, 0, &inner4)),
        eth(0x0800, &ip4(41, 0, &inner6)),
        eth(0x0800, &ip4(47, 0, &gre(0, 0x0800, &inner4))),
        eth(0x0800, &ip4(47, 0, &gre(0xb000, 0x86dd, &inner6))),
        eth(0x0800, &ip4(47, 0, &gre(0x2000, 0x6558, &teb))),
        eth(0x0800, &ip4(47, 0, &gre(0, 0x6558, &teb_vlan))),
        eth(0x0800, &ip4(47, 0, &gre(0x4000, 0x0800, &inner4))),
        eth(
            0x0800,
            &ip4(
                47,
                0,
                &gre(0x2081, 0x880b, &[&[0xaa; 4][..], &ppp4].concat()),
            ),
        ),
        eth(
            0x0800,
            &ip4(47, 0, &gre(0x2001, 0x880b, &[0xff, 0x03, 0x00, 0x2b, 1, 2])),
        ),
        eth(0x0800, &ip4(4, 0x2000, &inner4)),
        eth(0x86dd, &ip6(0, &hop)),
        eth(0x86dd, &ip6(44, &frag)),
        eth(0x86dd, &ip6(41, &inner6)),
        eth(0x86dd, &ip6(47, &gre(0, 0x0800, &ip4(4, 0, &inner4)))),
        eth(
            0x8100,
            &[&[0, 7, 0x08, 0x00][..], &ip4(4, 0, &inner4)].concat(),
        ),
        eth(0x0806, &[0; 28]),
        eth(0x8847, &[&[0, 0, 0x11, 0x40][..], &inner4].concat()),
        eth(0x0800, &ip4(1, 0, &[15, 0, 0, 0, 0x12, 0x34, 0, 1])),
        eth(0x86dd, &ip6(58, &[8, 0, 0, 0, 0x12, 0x34, 0, 1])),
    ]
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
    // Tunnels and extension headers the encap policies walk, each cut at every length.
    for f in tunnels() {
        for cut in 14..=f.len() {
            agree(&mut hasher, &f[..cut]).unwrap();
        }
    }
    // ICMP and ICMPv6 errors of each type quoting TCP, UDP, an echo, a fragment and an error
    // (Linux hashes the quoted header), and informational types, each cut at every length.
    for f in icmp_errors() {
        for cut in 14..=f.len() {
            agree(&mut hasher, &f[..cut]).unwrap();
        }
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
