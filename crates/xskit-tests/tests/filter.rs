//! Stage 0 in the kernel: ordered rules drop, pass and redirect, count exactly, and change at
//! run time without reattaching.

// A scenario reads top to bottom as the steps it takes, however many there are.
#![allow(clippy::too_many_lines)]

mod common;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use xskit::{Interface, Mode, Port, PortConfig, SocketConfig};
use xskit_fwd::abi::Slot;
use xskit_fwd::filter::{Action, SetRoom, XdpFilter};
use xskit_fwd::rules::{Match, Prefix};
use xskit_testbed::TestbedConfig;
use xskit_traffic::probe::{self, Template};

/// Sends `n` probes numbered from `first` to `dst_port`, paced so no ring overflows.
fn send(tx: &mut Port, t: &Template, first: u64, n: u64) {
    let umem = tx.umem().clone();
    let mut batch = Vec::new();
    for seq in first..first + n {
        tx.alloc(&mut batch, 1);
        let f = batch.last_mut().unwrap();
        let len = t.write(umem.buffer_mut(f), seq, 0).unwrap();
        umem.set_len(f, len).unwrap();
        if batch.len() == 16 || seq + 1 == first + n {
            while !batch.is_empty() {
                tx.send(&mut batch).unwrap();
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    tx.finish_sending(Duration::from_secs(2)).unwrap();
}

/// Receives until `n` probes arrived or a second passed; returns how many were valid.
fn receive(rx: &mut Port, n: u64) -> u64 {
    let umem = rx.umem().clone();
    let (mut frames, mut valid) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(1);
    while valid < n && Instant::now() < deadline {
        rx.receive(&mut frames, 64).unwrap();
        valid += frames
            .iter()
            .filter(|f| matches!(probe::check(umem.data(f)), probe::Probe::Valid { .. }))
            .count() as u64;
        rx.recycle(&mut frames);
    }
    valid
}

#[test]
fn rules_drop_pass_and_redirect_and_change_at_run_time() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let (b_if, b_ip) = (bed.b.ifname.clone(), bed.b.ip);
    let (program, mut rx, udp) = bed
        .b
        .ns
        .run(move || {
            let iface = Interface::by_name(&b_if).unwrap();
            let program = XdpFilter::attach(&iface, Mode::Drv, false).unwrap();
            let rx = Port::open_with(
                Arc::clone(program.program()),
                0,
                &PortConfig::default().mode(Mode::Drv),
            )
            .unwrap();
            let udp = UdpSocket::bind(SocketAddr::new(IpAddr::V4(b_ip), 5000)).unwrap();
            udp.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            (program, rx, udp)
        })
        .unwrap();
    let id = attached_program(&bed.b).expect("filter attached");
    program
        .set_rules(
            &[
                Match {
                    dst: Some(Prefix {
                        addr: IpAddr::V4(bed.b.ip),
                        len: 32,
                    }),
                    protocol: Some(17),
                    dst_ports: Some((7, 7)),
                    ..Match::default()
                }
                .kernel_rule(Action::Drop)
                .unwrap(),
                Match {
                    protocol: Some(17),
                    dst_ports: Some((5000, 5000)),
                    ..Match::default()
                }
                .kernel_rule(Action::Pass)
                .unwrap(),
            ],
            None,
            Action::Redirect,
        )
        .unwrap();
    let mut tx = tx_port(&bed);

    send(&mut tx, &probe_template(&bed, 7), 0, 100); // dropped in the kernel
    send(&mut tx, &probe_template(&bed, 5000), 0, 50); // passed to the kernel stack's socket
    send(&mut tx, &probe_template(&bed, 9), 0, 80); // redirected to the xskit socket
    let mut buf = [0u8; 2048];
    let mut datagrams = 0;
    while udp.recv(&mut buf).is_ok() {
        datagrams += 1;
    }
    assert_eq!(datagrams, 50, "passed packets reach the stack's UDP socket");
    assert_eq!(
        receive(&mut rx, 80),
        80,
        "redirected packets reach the xskit socket"
    );
    let c = program.rule_counters().unwrap();
    assert_eq!(c.len(), 3, "two rules and the default");
    assert_eq!((c[0].packets, c[0].bytes), (100, 100 * 64), "drop rule");
    assert_eq!(c[1].packets, 50, "pass rule");
    assert_eq!(c[2].packets, 80, "default (redirect)");

    // Change the rules while running: the drop rule goes, port 7 now takes the default.
    program.set_rules(&[], None, Action::Redirect).unwrap();
    send(&mut tx, &probe_template(&bed, 7), 100, 20);
    assert_eq!(receive(&mut rx, 20), 20, "port 7 is redirected now");
    let c = program.rule_counters().unwrap();
    assert_eq!(
        (c.len(), c[0].packets),
        (1, 100),
        "only the default remains, counting on"
    );
    assert_eq!(
        attached_program(&bed.b),
        Some(id),
        "same program, never reattached"
    );

    // A default of Drop stops everything without a rule.
    program.set_rules(&[], None, Action::Drop).unwrap();
    send(&mut tx, &probe_template(&bed, 9), 200, 10);
    assert_eq!(receive(&mut rx, 10), 0);
}

#[test]
fn rule_errors_are_clear() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let b_if = bed.b.ifname.clone();
    let filter = bed
        .b
        .ns
        .run(move || {
            let iface = Interface::by_name(&b_if).unwrap();
            let filter = XdpFilter::attach(&iface, Mode::Skb, false).unwrap();
            let any = Match::default().kernel_rule(Action::Pass).unwrap();
            let too_many = vec![any; xskit_fwd::MAX_RULES + 1];
            let too_many = filter
                .set_rules(&too_many, None, Action::Pass)
                .unwrap_err()
                .to_string();
            // Attached with no room for vectors: a list past LINEAR_RULES is refused, and says
            // so in words of rules, not sets.
            let text: String = (0..20)
                .map(|i| {
                    format!("[[rule]]\nprotocol = \"udp\"\ndst_port = {i}\naction = \"drop\"\n")
                })
                .collect();
            let rs = xskit_fwd::rules::RuleSet::from_toml(&text).unwrap();
            let (rules, default) = rs.kernel_share(false).kernel_rules().unwrap();
            let vectors = rs.vectors().map(|v| &**v);
            let no_room = filter
                .set_rules(&rules, vectors, default)
                .unwrap_err()
                .to_string();
            (too_many, no_room)
        })
        .unwrap();
    let (too_many, no_room) = filter;
    let want = format!("at most {}", xskit_fwd::MAX_RULES);
    assert!(too_many.contains(&want), "{too_many}");
    assert!(
        no_room.contains("the rules need") && no_room.contains("start the forwarder again"),
        "{no_room}"
    );
}

mod split {
    //! The kernel and user space agree on every packet: for random rule sets and packets, the
    //! rule the XDP filter hits (read from its counters after a dry run) is the rule user
    //! space picks when the kernel decides, and never later than it when the kernel sends the
    //! packet up.

    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use xskit_fwd::abi::TellNote;
    use xskit_fwd::rules::{ChecksumState, KernelShare, PacketKey, RuleSet, Verdict};
    use xskit_wire::{checksum, ethernet, ipv4, ipv6, EtherType};

    const DSTS: [&str; 8] = [
        "",
        "198.51.100.0/24",
        "198.51.100.2/32",
        "203.0.113.0/25",
        "2001:db8::/32",
        "@b",
        "@c",
        "@w",
    ];
    const SRCS: [&str; 6] = ["", "198.51.100.1/32", "2001:db8::1/128", "@a", "@c", "@w"];
    /// The sets every rules text declares: a /24 the set holds whole (203.0.113.0/24 in b),
    /// parts of /24s (their bitmaps found by rank, with other partial /24s before them in the
    /// same table word: 198.51.96-99 and 203.0.112, never in a frame, whose bitmaps hold the
    /// frames' last bytes where the right ones do not), and IPv6; and a set with timeouts and
    /// counters (c): an expired /24 and IPv6 /32 leave out what no live element under them
    /// holds, and an expired host is looked past to the live /31 or /127 that holds it; and a
    /// set holding a /8 (w), whose /16s its summary decides (198.51 in it, 203.0 out); in b,
    /// 198.51/16 holds one prefix (a /31), which its summary entry decides alone, while the
    /// other /16s of a, b and c are read in their records.
    const SETS: &str = "[[set]]\nname = \"a\"\nprefixes = [\"198.51.96.2\", \"198.51.99.128/25\", \
                        \"198.51.100.0/31\", \"203.0.112.9\", \"203.0.113.128/25\", \
                        \"2001:db8::/127\"]\n\
                        [[set]]\nname = \"b\"\nprefixes = [\"203.0.112.5\", \"198.51.100.2/31\", \
                        \"203.0.113.0/24\", \"2001:db8::/32\"]\n\
                        [[set]]\nname = \"p\"\nports = [53, \"900-1000\"]\n\
                        [[set]]\nname = \"c\"\ntimeout = \"1h\"\ncounters = true\nprefixes = [\
                        \"198.51.100.0/24 timeout 1ms\", \"198.51.100.0/31\", \
                        \"198.51.100.1 timeout 1ms\", \"203.0.113.0/25\", \
                        \"2001:db8::/32 timeout 1ms\", \"2001:db8::/127\", \
                        \"2001:db8::1 timeout 1ms\"]\n\
                        [[set]]\nname = \"w\"\nprefixes = [\"198.0.0.0/8\"]\n";
    const PROTOS: [&str; 4] = ["", "udp", "tcp", "icmp"];
    const PORTS: [&str; 4] = ["", "53", "\"1-100\"", "\"@p\""];
    const ACTIONS: [&str; 3] = ["drop", "pass", "forward"];
    const DEFAULTS: [&str; 3] = ["drop", "pass", "forward"];
    /// The keys most rules leave out, with the protocol each needs (0: any). The damaged
    /// frames' VLAN tags carry ID 5.
    const EXTRAS: [(&str, u8); 8] = [
        ("", 0),
        ("vlan = 5", 0),
        ("length = \"20-40\"", 0),
        ("length = 48", 0),
        ("tcp_flags = \"syn,!ack\"", 6),
        ("tcp_flags = \"ack\"", 6),
        ("icmp_type = 8", 1),
        ("icmp_type = 3\nicmp_code = 1", 1),
    ];

    /// The rules file of `rules`. Without `tracked`, a rule that would name the set with
    /// timeouts and counters (c) names a plain one instead (b, or a for a source): any rule
    /// naming c takes every packet off the plain path, so a list of many rules would almost
    /// never reach the plain path's vectors otherwise.
    fn rules_text(
        rules: &[(usize, usize, usize, usize, usize, usize, usize)],
        default: usize,
        unclassifiable: usize,
        tracked: bool,
    ) -> String {
        let mut t = format!(
            "default = \"{}\"\nunclassifiable = \"{}\"\n{SETS}",
            DEFAULTS[default], DEFAULTS[unclassifiable]
        );
        for &(dst, src, proto, dport, sport, action, extra) in rules {
            t.push_str("[[rule]]\n");
            // A source of the other family than the destination can match nothing: skip it.
            let prefixes = !DSTS[dst].is_empty() && !DSTS[dst].starts_with('@');
            let src = if prefixes && DSTS[dst].contains(':') != SRCS[src].contains(':') {
                0
            } else {
                src
            };
            for (key, v) in [("dst", DSTS[dst]), ("src", SRCS[src])] {
                let v = match (v, tracked) {
                    ("@c", false) if key == "dst" => "@b",
                    ("@c", false) => "@a",
                    _ => v,
                };
                if !v.is_empty() {
                    t.push_str(&format!("{key} = \"{v}\"\n"));
                }
            }
            if !PROTOS[proto].is_empty() {
                t.push_str(&format!("protocol = \"{}\"\n", PROTOS[proto]));
                if proto <= 2 {
                    for (key, v) in [("dst_port", PORTS[dport]), ("src_port", PORTS[sport])] {
                        if !v.is_empty() {
                            t.push_str(&format!("{key} = {v}\n"));
                        }
                    }
                }
            }
            let (keys, needs) = EXTRAS[extra];
            let protocol = [0, 17, 6, 1][proto];
            if needs == 0 || needs == protocol {
                t.push_str(keys);
                t.push('\n');
            }
            t.push_str(&format!("action = \"{}\"\n", ACTIONS[action]));
        }
        t
    }

    const V4: [[u8; 4]; 3] = [[198, 51, 100, 1], [198, 51, 100, 2], [203, 0, 113, 9]];
    const V6: [[u8; 16]; 2] = [
        [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0x20, 0x01, 0x0d, 0xb9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    ];
    const L4: [u8; 3] = [17, 6, 1];
    const PORT_VALUES: [u16; 4] = [9, 53, 80, 1000];

    /// (family: 0 ARP, 1 IPv4, 2 IPv6, 3 IPv6 with a hop-by-hop header; src, dst, l4, sport,
    /// dport, first fragment)
    fn frame(p: (usize, usize, usize, usize, usize, usize, bool)) -> Vec<u8> {
        let (family, src, dst, l4, sport, dport, first) = p;
        let mut f = vec![0u8; 14 + 40 + 8 + 20 + 8];
        let proto = L4[l4];
        let l4_len = if proto == 6 { 20 } else { 8 };
        let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
        eth.set_dst_addr([2, 0, 0, 0, 0, 2]);
        eth.set_src_addr([2, 0, 0, 0, 0, 1]);
        let l4_at = match family % 4 {
            0 => {
                eth.set_ethertype(EtherType::Arp);
                return f[..14 + 28].to_vec();
            }
            1 => {
                eth.set_ethertype(EtherType::Ipv4);
                let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
                ip.init(20 + l4_len, proto, V4[src % 3], V4[dst % 3]);
                ip.fill_checksum();
                14 + 20
            }
            2 => {
                eth.set_ethertype(EtherType::Ipv6);
                let mut ip = ipv6::Packet::new_unchecked(eth.payload_mut());
                ip.init(l4_len, proto, V6[src % 2], V6[dst % 2], 0);
                14 + 40
            }
            _ => {
                // IPv6 with a hop-by-hop header (PadN options) before the upper layer.
                eth.set_ethertype(EtherType::Ipv6);
                let mut ip = ipv6::Packet::new_unchecked(eth.payload_mut());
                ip.init(8 + l4_len, 0, V6[src % 2], V6[dst % 2], 0);
                ip.payload_mut()[..8].copy_from_slice(&[proto, 0, 1, 4, 0, 0, 0, 0]);
                14 + 40 + 8
            }
        };
        if !first && family == 1 {
            // Fragment offset 64 bytes: the bytes where ports would be are payload.
            f[14 + 6] = 0;
            f[14 + 7] = 8;
            let mut ip = ipv4::Packet::new_unchecked(&mut f[14..]);
            ip.fill_checksum();
        }
        f[l4_at..l4_at + 2].copy_from_slice(&PORT_VALUES[sport].to_be_bytes());
        f[l4_at + 2..l4_at + 4].copy_from_slice(&PORT_VALUES[dport].to_be_bytes());
        if proto == 6 {
            f[l4_at + 12] = 5 << 4;
            // SYN, SYN-ACK, ACK, FIN-ACK.
            f[l4_at + 13] = [0x02, 0x12, 0x10, 0x11][sport % 4];
        }
        if proto == 1 {
            // Echo request, destination unreachable (host), echo reply.
            let (kind, code) = [(8, 0), (3, 1), (0, 0)][sport % 3];
            f[l4_at..l4_at + 2].copy_from_slice(&[kind, code]);
        }
        f.truncate(l4_at + usize::from(l4_len));
        f
    }

    /// Damages a frame as an attacker (or a broken sender) would: `m` picks the damage, `at`
    /// where to cut. Some of them leave a valid packet (one or two VLAN tags).
    fn mutate(mut f: Vec<u8>, m: usize, at: usize) -> Vec<u8> {
        let ethertype = u16::from_be_bytes([f[12], f[13]]);
        let v4 = ethertype == 0x0800;
        let v6 = ethertype == 0x86dd;
        match m {
            1 => f.truncate(at % (f.len() + 1)),
            2 if v4 => f[16..18].copy_from_slice(&10u16.to_be_bytes()),
            3 if v4 => f[16..18].copy_from_slice(&65535u16.to_be_bytes()),
            2 if v6 => f[18..20].copy_from_slice(&0u16.to_be_bytes()),
            3 if v6 => f[18..20].copy_from_slice(&65535u16.to_be_bytes()),
            4 if v4 => f[14] = 0x65,
            4 if v6 => f[14] = 0x45,
            5 if v4 => f[14] = 0x44,
            6 | 7 => {
                // UDP to port 53 behind 9 or 50 Destination Options headers.
                let n = if m == 6 { 9 } else { 50 };
                let mut g = vec![0u8; 14 + 40 + 8 * n + 8];
                g[..12].copy_from_slice(&f[..12]);
                let mut eth = ethernet::Frame::new_unchecked(&mut g[..]);
                eth.set_ethertype(EtherType::Ipv6);
                let mut ip = ipv6::Packet::new_unchecked(eth.payload_mut());
                ip.init((8 * n + 8) as u16, 60, V6[0], V6[1], 0);
                for k in 0..n {
                    let at = 14 + 40 + 8 * k;
                    g[at] = if k + 1 == n { 17 } else { 60 };
                    g[at + 2..at + 4].copy_from_slice(&[1, 4]);
                }
                let at = 14 + 40 + 8 * n;
                g[at + 2..at + 4].copy_from_slice(&53u16.to_be_bytes());
                g[at + 4..at + 6].copy_from_slice(&8u16.to_be_bytes());
                return g;
            }
            12 if v4 && f.len() >= 14 + 20 + 8 && matches!(f[23], 6 | 17) => {
                // The TCP or UDP checksum left partial for a device: the pseudo-header's sum;
                // UDP with a payload, so that the frame is as long as a TCP header's.
                if f[23] == 17 && f.len() == 14 + 20 + 8 {
                    f.extend_from_slice(&[7u8; 16]);
                    let mut ip = ipv4::Packet::new_unchecked(&mut f[14..]);
                    ip.set_total_len(20 + 8 + 16);
                    ip.fill_checksum();
                    f[38..40].copy_from_slice(&24u16.to_be_bytes());
                }
                let l4_len = u16::from_be_bytes([f[16], f[17]]).saturating_sub(20);
                let four = |i: usize| [f[i], f[i + 1], f[i + 2], f[i + 3]];
                let sum = checksum::pseudo_header_v4(four(26), four(30), f[23], l4_len);
                let at = 34 + if f[23] == 6 { 16 } else { 6 };
                if at + 2 <= f.len() {
                    f[at..at + 2].copy_from_slice(&checksum::fold(sum).to_be_bytes());
                }
            }
            8..=11 => {
                // 1, 2, 3 or 10 VLAN tags in front of the packet.
                let tags = [1, 2, 3, 10][m - 8];
                for _ in 0..tags {
                    f.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
                }
            }
            _ => {}
        }
        f
    }

    /// The kernel's share of a rule set, in force in `program`; the sets' elements that
    /// expire within a second have expired when it returns.
    fn install(program: &XdpFilter, share: &KernelShare<'_>) {
        program.set_sets(share.rule_set().sets()).unwrap();
        settle_expiry(share.rule_set());
        program.set_port_sets(share.rule_set().port_sets()).unwrap();
        program.set_limits(&share.kernel_limits()).unwrap();
        let (kernel_rules, kernel_default) = share.kernel_rules().unwrap();
        let vectors = share.rule_set().vectors().map(|v| &**v);
        share.tell_in(program);
        program
            .set_rules(&kernel_rules, vectors, kernel_default)
            .unwrap();
        program
            .set_unclassifiable(share.kernel_unclassifiable())
            .unwrap();
    }

    /// Waits until the elements of `rs`'s sets that expire within a second have expired on
    /// the XDP program's clock (CLOCK_MONOTONIC_COARSE), which user space reads too: both
    /// then take them as gone, and no decision falls on the tick between.
    fn settle_expiry(rs: &RuleSet) {
        let now = xskit_os::monotonic_coarse_ns();
        let soon = rs
            .sets()
            .iter()
            .flat_map(|s| s.elements())
            .filter_map(|e| e.expires_ns)
            .filter(|&t| t <= now + 1_000_000_000)
            .max();
        if let Some(t) = soon {
            while xskit_os::monotonic_coarse_ns() <= t {
                std::thread::yield_now();
            }
        }
    }

    /// One frame through the kernel's dry run and user space's decision, held to each other;
    /// the rule the kernel decided the frame by, when it did.
    fn judge(
        program: &XdpFilter,
        rs: &RuleSet,
        share: &KernelShare<'_>,
        text: &str,
        f: &[u8],
    ) -> Result<Option<usize>, TestCaseError> {
        let n = rs.rules().len();
        if f.len() < 14 {
            // The kernel's dry run refuses frames shorter than an Ethernet header.
            prop_assert!(PacketKey::parse(f).is_err());
            return Ok(None);
        }
        let before = program.rule_counters().unwrap();
        let undecided = program.undecided_counter().unwrap().packets;
        let unclassified = program.unclassifiable_counter().unwrap().packets;
        let partial = program.partial_checksum_counter().unwrap().packets;
        let (verdict, out) = program.program().test_run_output(f).unwrap();
        let after = program.rule_counters().unwrap();
        let told = told_rule(program, f, verdict, &out)?;
        let hit: Vec<usize> = (0..=n)
            .filter(|&i| after[i].packets != before[i].packets)
            .collect();
        let parsed = PacketKey::parse(f);
        if program.undecided_counter().unwrap().packets != undecided {
            // IPv6 with extension headers: always up to user space, undecided;
            // user space walks the chain (or finds it unclassifiable).
            prop_assert!(hit.is_empty() && verdict == 4, "{:?} {}", hit, verdict);
            return Ok(None);
        }
        if program.partial_checksum_counter().unwrap().packets != partial {
            // Forwarded in XDP but for its partial checksum: up to user space, which
            // finishes it, untold and counted there.
            prop_assert!(
                hit.is_empty() && verdict == 4 && told.is_none(),
                "{:?}",
                hit
            );
            prop_assert_eq!(rs.decide(&parsed).1, Verdict::Forward, "{:?}", f);
            let read = PacketKey::classifiable_noting_checksum(f, false);
            prop_assert!(
                matches!(read, (true, ChecksumState::Partial { .. })),
                "{:?}",
                f
            );
            return Ok(None);
        }
        if program.unclassifiable_counter().unwrap().packets != unclassified {
            prop_assert!(hit.is_empty(), "{:?}", hit);
            // Unreadable, or a later fragment at a rule with ports.
            prop_assert_eq!(
                rs.decide(&parsed).0,
                n + 1,
                "user space classified it\n{}\n{:?}",
                text,
                f
            );
            let want = match rs.unclassifiable_verdict() {
                Verdict::Drop => 1,
                Verdict::Pass => 2,
                _ => 4,
            };
            prop_assert_eq!(verdict, want, "{:?}", f);
            return Ok(None);
        }
        prop_assert!(
            parsed.is_ok(),
            "kernel classified it: {:?}\n{:?}",
            parsed,
            f
        );
        prop_assert_eq!(hit.len(), 1, "one counter moves: {:?}", hit);
        let kernel = hit[0];
        // Past the kernel's rule, user space may still find it unclassifiable
        // (n + 1): a later fragment at a rule with source ports.
        let user = rs.decide(&parsed).0;
        if let Some((t, note)) = told {
            // What a worker takes instead of classifying: exactly its own decision, and
            // exactly its own reading of the headers when the note says one.
            prop_assert_eq!(t, user, "told\n{}\n{:?}", text, f);
            prop_assert_eq!(t, kernel);
            if let Some(state) = ChecksumState::told(note) {
                let read = PacketKey::classifiable_noting_checksum(f, false);
                prop_assert_eq!(read, (true, state), "note {:?}\n{:?}", note, f);
            }
        }
        let decided = if kernel == n {
            share.default_decided_in_kernel()
        } else {
            share.decided_in_kernel(kernel)
        };
        // What user space would do with the packet, had it seen it.
        let fate = rs.decide(&parsed).1;
        match verdict {
            1 => prop_assert!(
                decided && fate == Verdict::Drop,
                "dropped\n{}\n{:?}",
                text,
                f
            ),
            2 => prop_assert!(
                decided && fate == Verdict::Pass,
                "passed\n{}\n{:?}",
                text,
                f
            ),
            // To the socket (user space decides), or forwarded in XDP.
            4 => prop_assert!(
                !decided || fate == Verdict::Forward,
                "redirected\n{}\n{:?}",
                text,
                f
            ),
            other => prop_assert!(false, "verdict {}", other),
        }
        if decided {
            prop_assert_eq!(user, kernel, "{}\n{:?}", text, f);
            return Ok((kernel < n).then_some(kernel));
        } else {
            prop_assert!(
                user >= kernel,
                "user {} kernel {}\n{}\n{:?}",
                user,
                kernel,
                text,
                f
            );
        }
        Ok(None)
    }

    /// The rule the filter told in front of a packet it redirected (`out`, the dry run's
    /// output from its metadata on), and its note, if it told one; nothing else may be in
    /// front of it.
    fn told_rule(
        program: &XdpFilter,
        f: &[u8],
        verdict: u32,
        out: &[u8],
    ) -> Result<Option<(usize, TellNote)>, TestCaseError> {
        let front = out.len() - f.len().min(out.len());
        if front == 0 {
            return Ok(None);
        }
        prop_assert_eq!(verdict, 4, "only a redirect is told");
        prop_assert_eq!(front, xskit_fwd::abi::TOLD_LEN);
        prop_assert_eq!(&out[front..], f, "the packet itself unchanged");
        let rule = u32::from_ne_bytes(out[..4].try_into().unwrap());
        let note = u32::from_ne_bytes(out[4..8].try_into().unwrap());
        let tag = u64::from_ne_bytes(out[8..16].try_into().unwrap());
        prop_assert_eq!(tag, program.told_tag());
        prop_assert_ne!(tag, 0);
        let note = TellNote::from_index(note);
        prop_assert!(note.is_some(), "a note the worker knows");
        if rule == xskit_fwd::abi::NOT_TOLD {
            prop_assert_eq!(note, Some(TellNote::Nothing), "no note without a rule");
            return Ok(None);
        }
        Ok(note.map(|n| (rule as usize, n)))
    }

    #[test]
    fn kernel_and_user_space_agree() {
        agree(false);
    }

    /// The filter tells the rule (a rule's, the default's) that decided a packet it sends
    /// up, and its note says what user space's own read of the packet finds: its checksum
    /// complete or left partial, or nothing for a packet that read would not take (too short
    /// a UDP frame, too short a TCP header), in either program. (The agreement tests above
    /// hold every told decision to user space's, but tell seldom.)
    #[test]
    fn the_filters_notes_say_what_user_space_reads() {
        if !privileged() {
            return;
        }
        for multi_buffer in [false, true] {
            let (_bed, program, _port) = dry_run_filter(multi_buffer);
            let text = "default = \"forward\"\n[[rule]]\nprotocol = \"udp\"\ndst_port = 1000\n\
                        action = \"drop\"\n[[rule]]\nprotocol = \"tcp\"\naction = \"forward\"\n";
            let rs = RuleSet::from_toml(text).unwrap();
            let share = rs.kernel_share(false);
            install(&program, &share);
            let (tcp, udp) = (
                frame((1, 0, 1, 1, 0, 0, true)),
                frame((1, 0, 1, 0, 0, 0, true)),
            );
            let mut settled_udp = mutate(udp.clone(), 12, 0);
            settled_udp[41] ^= 1;
            let mut short_tcp = tcp.clone();
            ipv4::Packet::new_unchecked(&mut short_tcp[14..]).set_total_len(20 + 16);
            ipv4::Packet::new_unchecked(&mut short_tcp[14..]).fill_checksum();
            // TCP is the forward rule's (1), UDP the default's (2).
            let cases = [
                (tcp.clone(), 1, TellNote::Settled),
                (mutate(tcp, 12, 0), 1, TellNote::PartialTcp),
                (short_tcp, 1, TellNote::Nothing),
                (udp.clone(), 2, TellNote::Nothing),
                (mutate(udp, 12, 0), 2, TellNote::PartialUdp),
                (settled_udp, 2, TellNote::Settled),
            ];
            for (f, rule, note) in cases {
                let (verdict, out) = program.program().test_run_output(&f).unwrap();
                let told = told_rule(&program, &f, verdict, &out).unwrap();
                assert_eq!(told, Some((rule, note)), "{f:?}");
                judge(&program, &rs, &share, text, &f).unwrap();
            }
        }
    }

    #[test]
    fn kernel_and_user_space_agree_in_the_multi_buffer_program() {
        agree(true);
    }

    /// The filter attached in SKB mode to a testbed interface for dry runs, a socket on queue
    /// 0 (so that a redirect shows as XDP_REDIRECT, not PASS) and forwarding to that same
    /// interface (a devmap redirect: any interface will do for dry runs).
    fn dry_run_filter(multi_buffer: bool) -> (xskit_testbed::Testbed, XdpFilter, Port) {
        let bed = bed(TestbedConfig::default());
        let b_if = bed.b.ifname.clone();
        let (program, port) = bed
            .b
            .ns
            .run(move || {
                let iface = Interface::by_name(&b_if).unwrap();
                let room = SetRoom {
                    sets: 4,
                    partial_blocks: 64,
                    trie_entries: 64,
                    elements: 64,
                    port_sets: 1,
                    sources: 64,
                    blocked: 4,
                    // The vectors of the longest rule sets drawn here, and more.
                    vectors: 4096,
                    rule_prefixes: 64,
                };
                let program =
                    XdpFilter::attach_with_sets(&iface, Mode::Skb, multi_buffer, room).unwrap();
                let port = Port::open_with(
                    Arc::clone(program.program()),
                    0,
                    &PortConfig::default()
                        .mode(Mode::Skb)
                        .socket(SocketConfig::default().multi_buffer(multi_buffer)),
                )
                .unwrap();
                program.set_forward_target(&iface).unwrap();
                (program, port)
            })
            .unwrap();
        (bed, program, port)
    }

    /// Each key most rules leave out, alone in a rule, against frames that carry it and frames
    /// that do not (IPv4 and IPv6, UDP, TCP of four flag sets, ICMP of three types, tagged and
    /// not, later fragments): the kernel decides every frame as user space does, and each rule
    /// takes some and lets others pass.
    #[test]
    fn the_vlan_length_tcp_flag_and_icmp_keys_are_decided_in_the_kernel() {
        if !privileged() {
            return;
        }
        let (_bed, program, _port) = dry_run_filter(false);
        let mut frames = Vec::new();
        for (family, l4, sport, tags) in frame_shapes() {
            frames.push(mutate(frame((family, 0, 1, l4, sport, 1, true)), tags, 0));
        }
        for l4 in 0..3 {
            frames.push(frame((1, 0, 1, l4, 0, 1, false)));
        }
        for &(keys, needs) in &EXTRAS[1..] {
            let protocol = match needs {
                6 => "protocol = \"tcp\"\n",
                1 => "protocol = \"icmp\"\n",
                _ => "",
            };
            let text = format!(
                "default = \"pass\"\n[[rule]]\nname = \"x\"\n{protocol}{keys}\naction = \"drop\"\n"
            );
            let rs = RuleSet::from_toml(&text).unwrap();
            let share = rs.kernel_share(false);
            install(&program, &share);
            let (mut taken, mut passed) = (0, 0);
            for f in &frames {
                match judge(&program, &rs, &share, &text, f).unwrap() {
                    Some(0) => taken += 1,
                    _ => passed += 1,
                }
            }
            assert!(
                taken > 0 && passed > 0,
                "{keys}: {taken} taken, {passed} not"
            );
        }
    }

    /// A rule table is put in force whole: while rule lists of 5 (walked), 40 (one word a
    /// field) and 100 rules (anchored words) replace each other, a stream of frames meets
    /// one list's last rule or another's, never a default that no list would give it.
    #[test]
    fn a_rule_table_is_swapped_whole_while_frames_flow() {
        if !privileged() {
            return;
        }
        let (_bed, program, _port) = dry_run_filter(false);
        let list = |count: usize, action: &str| {
            let mut text = String::from("default = \"forward\"\n");
            for i in 1..count {
                text += &format!(
                    "[[rule]]\nname = \"r{i}\"\nprotocol = \"tcp\"\ndst_port = {i}\n\
                     action = \"drop\"\n"
                );
            }
            text += &format!(
                "[[rule]]\nname = \"last\"\nprotocol = \"udp\"\ndst_port = 53\n\
                 action = \"{action}\"\n"
            );
            RuleSet::from_toml(&text).unwrap()
        };
        let lists = [list(5, "drop"), list(40, "pass"), list(100, "drop")];
        // UDP from 198.51.100.1 to 198.51.100.2, port 9 to port 53.
        let f = frame((1, 0, 1, 0, 0, 1, true));
        let done = std::sync::atomic::AtomicBool::new(false);
        let runner = Arc::clone(program.program());
        install(&program, &lists[2].kernel_share(false));
        let verdicts = std::thread::scope(|scope| {
            let seen = scope.spawn(|| {
                let mut seen = [0u64; 8];
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    seen[runner.test_run(&f).unwrap() as usize & 7] += 1;
                }
                seen
            });
            for round in 0..300 {
                install(&program, &lists[round % 3].kernel_share(false));
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            seen.join().unwrap()
        });
        // XDP_DROP is 1, XDP_PASS 2; the default (forward, to the socket) would be 4.
        assert!(
            verdicts[1] > 0 && verdicts[2] > 0,
            "both lists met: {verdicts:?}"
        );
        assert_eq!(
            verdicts[1] + verdicts[2],
            verdicts.iter().sum::<u64>(),
            "only a list's last rule decides: {verdicts:?}"
        );
    }

    /// A set rewritten in place, five times: the kernel's tables and trie follow it (what a
    /// set no longer holds is gone from the trie; a /16 that gains a record reads its own),
    /// as user space's ranges do.
    #[test]
    fn a_set_changes_in_place() {
        if !privileged() {
            return;
        }
        let (_bed, program, _port) = dry_run_filter(false);
        let frames: Vec<Vec<u8>> = (0..3)
            .flat_map(|src| {
                [
                    frame((1, src, 0, 0, 0, 1, true)),
                    frame((2, src, 0, 0, 0, 1, true)),
                ]
            })
            .collect();
        for (prefixes, taken) in [
            ("\"198.51.100.1\", \"203.0.113.0/24\"", 2),
            // Two of the IPv6 frames come from 2001:db8::1.
            ("\"198.51.100.2/31\", \"2001:db8::1\"", 3),
            ("\"198.51.100.0/30\", \"203.0.113.9\", \"2001:db8::/32\"", 5),
            // Two prefixes of 203.0/16: its /16 takes a record. Then 198.51/16 gains one too,
            // after 203.0/16's in the table but before it in address order.
            ("\"203.0.113.9\", \"203.0.112.0/24\"", 1),
            (
                "\"198.51.100.2\", \"198.51.99.5\", \"203.0.113.9\", \"203.0.112.0/24\"",
                2,
            ),
            ("", 0),
        ] {
            let text = format!(
                "default = \"pass\"\n[[set]]\nname = \"s\"\nprefixes = [{prefixes}]\n\
                 [[rule]]\nname = \"x\"\nsrc = \"@s\"\naction = \"drop\"\n"
            );
            let rs = RuleSet::from_toml(&text).unwrap();
            let share = rs.kernel_share(false);
            install(&program, &share);
            let hits = frames
                .iter()
                .filter(|f| judge(&program, &rs, &share, &text, f).unwrap() == Some(0))
                .count();
            assert_eq!(hits, taken, "{prefixes}");
        }
    }

    /// A bit-rate limit polices in the kernel with the arithmetic user space uses: on the
    /// plain path (IPv4 UDP) and the general one (IPv6), a burst's worth of frames passes
    /// (to user space, counted at WITHIN_RATE), then only what the rate refilled meanwhile;
    /// every other frame is dropped, counted on the rule and as over the rate.
    #[test]
    fn a_rate_limit_is_policed_in_the_kernel_as_user_space_polices() {
        use xskit_fwd::abi::Slot;
        use xskit_fwd::rules::RateLimiter;
        if !privileged() {
            return;
        }
        let (_bed, program, _port) = dry_run_filter(false);
        let text = "default = \"pass\"\n[[rule]]\nname = \"limit\"\nprotocol = \"udp\"\n\
                    action = \"rate-limit\"\nrate = \"8kbps\"\nburst = 1000\n";
        let rs = RuleSet::from_toml(text).unwrap();
        let share = rs.kernel_share(false);
        let (mut over, mut within) = (0u64, 0u64);
        for family in [1, 2] {
            // A full bucket for each family's frames.
            program.set_limits(&[None]).unwrap();
            install(&program, &share);
            let f = frame((family, 0, 0, 0, 0, 1, true));
            let user = RateLimiter::new(rs.rules()[0].rate.unwrap());
            let at_once = (0..40).filter(|_| user.allow(0, f.len())).count() as u64;
            assert!(at_once > 1, "a burst of {at_once} {}-byte frames", f.len());
            let start = Instant::now();
            let verdicts: Vec<u32> = (0..40)
                .map(|_| program.program().test_run(&f).unwrap())
                .collect();
            // 1,000 bytes a second refill the bucket while the frames run.
            let refilled = (start.elapsed().as_secs_f64() * 1000.0 / f.len() as f64) as u64 + 1;
            let passed = verdicts.iter().filter(|&&v| v == 4).count() as u64;
            let dropped = verdicts.iter().filter(|&&v| v == 1).count() as u64;
            assert_eq!(passed + dropped, 40, "{verdicts:?}");
            assert!(
                (at_once..=at_once + refilled).contains(&passed),
                "family {family}: {passed} passed, {at_once} at once, {refilled} refilled"
            );
            over += dropped;
            within += passed;
        }
        assert_eq!(program.police_counters().unwrap()[0].over_rate, over);
        assert_eq!(program.rule_counters().unwrap()[0].packets, over);
        assert_eq!(
            program.slot_counter(Slot::WithinRate).unwrap().packets,
            within
        );
    }

    /// A limit per source keeps a bucket for each source prefix and blocks a source that
    /// went over its rate, in the kernel as user space's twin does: the same frames pass and
    /// drop, each source apart, and the blocked are listed and counted.
    #[test]
    fn a_per_source_limit_blocks_each_source_apart_as_user_space_does() {
        use xskit_fwd::rules::{PacketKey, SourceLimiter};
        if !privileged() {
            return;
        }
        let (_bed, program, _port) = dry_run_filter(false);
        let v4 = frame((1, 0, 0, 0, 0, 1, true)).len();
        // 8 bits a second refill a byte a second: the frames run in far less time than a
        // frame's worth takes, so user space's twin may judge them all at one instant.
        let text = format!(
            "default = \"pass\"\n[[rule]]\nname = \"limit\"\nprotocol = \"udp\"\n\
             action = \"rate-limit\"\nrate = \"8bps\"\nburst = {}\n\
             per = \"source/24\"\nblock = \"60s\"\n",
            2 * v4
        );
        let rs = RuleSet::from_toml(&text).unwrap();
        install(&program, &rs.kernel_share(false));
        let spec = &rs.rules()[0];
        let twin = SourceLimiter::new(spec.rate.unwrap(), spec.per_source.unwrap(), 64);
        // 198.51.100.1 and .2 share a /24; 203.0.113.9 is another; 2001:db8::1 another.
        let order = [
            (1, 0),
            (1, 0),
            (1, 1),
            (1, 0),
            (1, 2),
            (1, 2),
            (2, 0),
            (2, 0),
            (2, 0),
        ];
        let (mut passed, mut dropped) = (0, 0);
        for (i, &(family, src)) in order.iter().enumerate() {
            let f = frame((family, src, 0, 0, 0, 1, true));
            let key = PacketKey::parse(&f).unwrap();
            let want = if twin.allow(&key, 0, f.len()) { 4 } else { 1 };
            let got = program.program().test_run(&f).unwrap();
            assert_eq!(got, want, "frame {i} from {:?}", key.src);
            if got == 4 {
                passed += 1;
            } else {
                dropped += 1;
            }
        }
        assert_eq!(
            (passed, dropped),
            (5, 4),
            "the burst of each source, no more"
        );
        let count = program.police_counters().unwrap()[0];
        assert_eq!(count.over_rate + count.blocked, dropped);
        assert_eq!(count.blocks, 2, "{count:?}");
        assert_eq!(count.refused, 0);
        let blocked = program
            .blocked_sources(xskit::clock::monotonic_ns())
            .unwrap();
        let mut sources: Vec<&str> = blocked.iter().map(|b| b.source.as_str()).collect();
        sources.sort_unstable();
        assert_eq!(sources, ["198.51.100.0/24", "2001:db8::/64"], "{blocked:?}");
        assert!(
            blocked.iter().all(|b| b.left_ns > 50_000_000_000),
            "{blocked:?}"
        );
    }

    /// The blocked table is bounded (room for 4 blocks: 5 slots hashed to, and the 15 past
    /// them a source's probe may reach): once every slot where a source may lie holds a live block,
    /// that source, over its rate, is refused a block (counted) and only limited, and the
    /// blocked stay blocked, each found among the others.
    #[test]
    fn a_full_blocked_table_refuses_new_blocks_and_keeps_the_old() {
        if !privileged() {
            return;
        }
        let (_bed, program, _port) = dry_run_filter(false);
        let template = frame((1, 0, 0, 0, 0, 1, true));
        let text = format!(
            "default = \"pass\"\n[[rule]]\nname = \"limit\"\nprotocol = \"udp\"\n\
             action = \"rate-limit\"\nrate = \"8bps\"\nburst = {}\n\
             per = \"source\"\nblock = \"60s\"\n",
            template.len()
        );
        install(
            &program,
            &RuleSet::from_toml(&text).unwrap().kernel_share(false),
        );
        let from = |n: u8| {
            let mut f = template.clone();
            let mut ip = ipv4::Packet::new_unchecked(&mut f[14..]);
            ip.set_src_addr([203, 0, 113, n]);
            ip.fill_checksum();
            f
        };
        let sources = 64u8;
        for n in 0..sources {
            let verdicts: Vec<u32> = (0..2)
                .map(|_| program.program().test_run(&from(n)).unwrap())
                .collect();
            assert_eq!(
                verdicts,
                [4, 1],
                "source {n}: its burst, then over its rate"
            );
        }
        let count = program.police_counters().unwrap()[0];
        assert_eq!(
            count.blocks + count.refused,
            u64::from(sources),
            "{count:?}"
        );
        assert!((16..=20).contains(&count.blocks), "{count:?}");
        let blocked = program
            .blocked_sources(xskit::clock::monotonic_ns())
            .unwrap();
        assert_eq!(blocked.len() as u64, count.blocks, "{blocked:?}");
        for b in &blocked {
            let n: std::net::Ipv4Addr = b.source.parse().unwrap();
            assert_eq!(program.program().test_run(&from(n.octets()[3])).unwrap(), 1);
        }
        let after = program.police_counters().unwrap()[0];
        assert_eq!(after.blocked, count.blocked + count.blocks, "{after:?}");
        assert_eq!((after.blocks, after.refused), (count.blocks, count.refused));
    }

    /// A rule's state is its slot's: a per-source block stays with a rate limit that moves
    /// down the list in its slot, and a rule new to a slot, cleared, starts afresh, whether
    /// the slot was never used or held that block.
    #[test]
    fn a_rules_state_stays_in_its_slot_and_a_cleared_slot_starts_afresh() {
        if !privileged() {
            return;
        }
        let (_bed, program, _port) = dry_run_filter(false);
        let f = frame((1, 0, 0, 0, 0, 1, true));
        let limit = format!(
            "[[rule]]\nname = \"limit\"\nprotocol = \"udp\"\naction = \"rate-limit\"\n\
             rate = \"8bps\"\nburst = {}\nper = \"source/24\"\nblock = \"60s\"\n",
            2 * f.len()
        );
        let other = "[[rule]]\nname = \"other\"\nprotocol = \"tcp\"\naction = \"drop\"\n";
        // Installs `text`'s rules with their state in `slots`, default pass.
        let put = |text: &str, slots: &[u16]| {
            let rs = RuleSet::from_toml(&format!("default = \"pass\"\n{text}")).unwrap();
            let share = rs.kernel_share(false);
            let (rules, default) = share.kernel_rules().unwrap();
            let rules: Vec<_> = rules
                .into_iter()
                .zip(slots)
                .map(|(r, &s)| r.in_slot(s))
                .collect();
            program
                .set_limits_in_slots(&rules, &share.kernel_limits())
                .unwrap();
            program.set_rules_in_slots(&rules, None, default).unwrap();
        };
        let verdicts = |n: usize| -> Vec<u32> {
            (0..n)
                .map(|_| program.program().test_run(&f).unwrap())
                .collect()
        };
        put(&limit, &[5]);
        assert_eq!(verdicts(3), [4, 4, 1], "the burst, then over: blocked");
        put(&format!("{other}{limit}"), &[6, 5]);
        assert_eq!(verdicts(1), [1], "still blocked where the rule moved");
        let count = program.police_counters().unwrap()[1];
        assert_eq!((count.blocks, count.blocked), (1, 1), "{count:?}");
        program.reset_slots(&[9]).unwrap();
        put(&limit, &[9]);
        assert_eq!(verdicts(1), [4], "a slot never used: a full bucket");
        program.reset_slots(&[5]).unwrap();
        put(&format!("{limit}{other}"), &[5, 6]);
        assert_eq!(verdicts(3), [4, 4, 1], "slot 5 cleared: its block gone");
        // Within the rate, frames go up to user space (counted apart); the one drop here.
        assert_eq!(
            program.rule_counters().unwrap()[0].packets,
            1,
            "the rule new to slot 5 counted from zero"
        );
    }

    /// (family, L4, source port index, damage) for IPv4 and IPv6, UDP, TCP and ICMP, every
    /// flag set or ICMP type, and no VLAN tag or one (damage 8: a tag of VLAN 5).
    fn frame_shapes() -> Vec<(usize, usize, usize, usize)> {
        let mut all = Vec::new();
        for family in 1..=2 {
            for l4 in 0..3 {
                for sport in 0..4 {
                    for tags in [0, 8] {
                        all.push((family, l4, sport, tags));
                    }
                }
            }
        }
        all
    }

    fn agree(multi_buffer: bool) {
        if !privileged() {
            return;
        }
        let (_bed, program, _port) = dry_run_filter(multi_buffer);
        let rule = (
            0..DSTS.len(),
            0..SRCS.len(),
            0..4usize,
            0..PORTS.len(),
            0..PORTS.len(),
            0..3usize,
            prop_oneof![1 => Just(0usize), 3 => 1..EXTRAS.len()],
        );
        let packet = (
            0..4usize,
            0..3usize,
            0..3usize,
            0..3usize,
            0..4usize,
            0..4usize,
            prop::bool::weighted(0.8),
        );
        // Mostly intact packets; the rest damaged in one of the ways `mutate` knows, or with
        // their checksums left partial (12), which the filter's notes tell apart.
        let damage = prop_oneof![3 => Just(0usize), 2 => 1..13usize, 1 => Just(12usize)];
        let case = (
            // Up to LINEAR_RULES rules are walked, more looked up by their vectors: by their
            // words up to WORD_RULES on the plain path, by its vectors past it.
            prop_oneof![
                prop::collection::vec(rule.clone(), 0..=xskit_fwd::abi::LINEAR_RULES),
                prop::collection::vec(rule, xskit_fwd::abi::LINEAR_RULES + 1..100),
            ],
            0..3usize,
            prop::collection::vec((packet, damage, 0..200usize), 1..24),
            any::<bool>(),
            (0..3usize, any::<bool>()),
        );
        let mut runner = TestRunner::new(Config {
            cases: 96,
            ..Config::default()
        });
        runner
            .run(
                &case,
                |(rules, default, packets, xdp_forward, (unclassifiable, tracked))| {
                    let text = rules_text(&rules, default, unclassifiable, tracked);
                    let rs = RuleSet::from_toml(&text).unwrap();
                    let share = rs.kernel_share(xdp_forward);
                    install(&program, &share);
                    for (p, damage, at) in packets {
                        let f = mutate(frame(p), damage, at);
                        judge(&program, &rs, &share, &text, &f)?;
                    }
                    Ok(())
                },
            )
            .unwrap();
    }
}

/// A packet for user space that finds no socket on its queue (the forwarder starting, or
/// stopping after its sockets let go) is dropped and counted, never handed to the host's
/// stack undecided: the stack's own socket on its port hears nothing.
#[test]
fn a_redirect_with_no_socket_fails_closed_and_is_counted() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let (b_if, b_ip) = (bed.b.ifname.clone(), bed.b.ip);
    let (filter, udp) = bed
        .b
        .ns
        .run(move || {
            let iface = Interface::by_name(&b_if).unwrap();
            let filter = XdpFilter::attach(&iface, Mode::Drv, false).unwrap();
            let udp = UdpSocket::bind(SocketAddr::new(IpAddr::V4(b_ip), 9)).unwrap();
            udp.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            (filter, udp)
        })
        .unwrap();
    // The default redirects; no socket is registered for queue 0.
    filter.set_rules(&[], None, Action::Redirect).unwrap();
    let mut tx = tx_port(&bed);
    send(&mut tx, &probe_template(&bed, 9), 0, 40);
    let counted = xskit_testbed::wait_for(Duration::from_secs(10), || {
        let dropped = filter.slot_counter(Slot::NoSocket).unwrap().packets;
        (dropped >= 40).then_some(dropped)
    });
    assert_eq!(
        counted,
        Some(40),
        "every probe dropped for want of a socket"
    );
    let mut buf = [0u8; 2048];
    assert!(
        udp.recv(&mut buf).is_err(),
        "nothing reached the host's stack"
    );
}
