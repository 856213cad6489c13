//! The rules: their file, matching, the kernel's share and rate limits.

use std::net::IpAddr;

use xskit_wire::offload::L4Checksum;
use xskit_wire::{checksum, ip_protocol, ipv4};

use super::matching::FastMatch;
use super::*;
use crate::filter::Action;

/// The rules' decision written plainly, byte by byte: the reference the masks are held to.
fn prefix_contains(p: &Prefix, family: u8, addr: &[u8; 16]) -> bool {
    if family != p.family() {
        return false;
    }
    let mine = match p.addr {
        IpAddr::V4(a) => {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&a.octets());
            b
        }
        IpAddr::V6(a) => a.octets(),
    };
    let (whole, bits) = (usize::from(p.len / 8), p.len % 8);
    if mine[..whole] != addr[..whole] {
        return false;
    }
    bits == 0 || {
        let mask = 0xffu8 << (8 - bits);
        mine[whole] & mask == addr[whole] & mask
    }
}

fn byte_wise_matches(m: &Match, k: &PacketKey) -> bool {
    m.src.is_none_or(|p| prefix_contains(&p, k.family, &k.src))
        && m.dst.is_none_or(|p| prefix_contains(&p, k.family, &k.dst))
        && m.protocol.is_none_or(|p| k.family != 0 && p == k.protocol)
        && m.src_ports
            .is_none_or(|(lo, hi)| (lo..=hi).contains(&k.src_port))
        && m.dst_ports
            .is_none_or(|(lo, hi)| (lo..=hi).contains(&k.dst_port))
        && m.vlan.is_none_or(|v| k.vlan == Some(v))
        && m.length
            .is_none_or(|(lo, hi)| k.family != 0 && (lo..=hi).contains(&k.ip_len))
        && m.tcp_flags.is_none_or(|f| k.tcp_flags & f.mask == f.value)
        && m.icmp_type.is_none_or(|t| t == k.icmp_type)
        && m.icmp_code.is_none_or(|c| c == k.icmp_code)
}

fn key(dst: [u8; 4], proto: u8, dport: u16) -> PacketKey {
    let mut k = PacketKey {
        family: 4,
        protocol: proto,
        dst_port: dport,
        ..PacketKey::default()
    };
    k.dst[..4].copy_from_slice(&dst);
    k
}

#[test]
fn rule_names_are_unique() {
    let e = RuleSet::from_toml(
        "[[rule]]\nname = \"web\"\naction = \"pass\"\n[[rule]]\nname = \"web\"\naction = \"drop\"\n",
    )
    .unwrap_err();
    assert_eq!((e.line, e.column), (4, 1), "{e}");
    assert!(e.message.starts_with("rule 1 is named \"web\" too"), "{e}");
    // An unnamed rule's name ("rule2") is taken as well.
    let e = RuleSet::from_toml(
        "[[rule]]\nname = \"rule2\"\naction = \"pass\"\n[[rule]]\naction = \"drop\"\n",
    )
    .unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    for reserved in ["default", "unclassifiable"] {
        let text = format!("[[rule]]\nname = \"{reserved}\"\naction = \"pass\"\n");
        let e = RuleSet::from_toml(&text).unwrap_err();
        assert!(e.message.contains("names the counter"), "{e}");
    }
}

#[test]
fn a_later_fragment_reaching_a_port_rule_is_unclassifiable() {
    let rs = RuleSet::from_toml(
        r#"
default = "forward"
[[rule]]
dst = "198.51.100.0/24"
action = "pass"
[[rule]]
protocol = "udp"
dst_port = 53
action = "drop"
[[rule]]
protocol = "tcp"
action = "forward"
"#,
    )
    .unwrap();
    let mut later = key([203, 0, 113, 9], 17, 0);
    later.later_fragment = true;
    // Its ports might be 53: neither the drop nor the default may take it.
    assert!(rs.classify(&later).is_err());
    assert_eq!(rs.decide(&Ok(later)), (3 + 1, rs.unclassifiable_verdict()));
    // A rule before the port rule that matches without ports still takes it, and one
    // whose other fields do not match is passed by.
    let mut to_pass = later;
    to_pass.dst[..4].copy_from_slice(&[198, 51, 100, 9]);
    assert_eq!(rs.classify(&to_pass), Ok(Some(0)));
    let mut tcp = later;
    tcp.protocol = 6;
    assert_eq!(rs.classify(&tcp), Ok(Some(2)));
    // Read from a frame: an IPv4 fragment at offset 8, and the first fragment.
    let mut frame = vec![0u8; 14 + 20 + 8];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    let mut ip = ipv4::Packet::new_unchecked(&mut frame[14..]);
    ip.init(28, 17, [203, 0, 113, 1], [203, 0, 113, 9]);
    frame[14 + 6..14 + 8].copy_from_slice(&1u16.to_be_bytes());
    let k = PacketKey::parse(&frame).unwrap();
    assert!(k.later_fragment && k.dst_port == 0);
    assert_eq!(rs.decide(&Ok(k)).0, 4);
    frame[14 + 6..14 + 8].copy_from_slice(&0x2000u16.to_be_bytes());
    frame[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&53u16.to_be_bytes());
    let first = PacketKey::parse(&frame).unwrap();
    assert!(!first.later_fragment);
    assert_eq!(rs.classify(&first), Ok(Some(1)));
}

#[test]
fn first_match_wins_and_kernel_split_keeps_order() {
    let rs = RuleSet::from_toml(
        r#"
default = "drop"
[[rule]]
src = "198.51.100.7"
action = "forward"
[[rule]]
dst = "203.0.113.0/24"
protocol = "udp"
dst_port = "1000-2000"
action = "drop"
[[rule]]
protocol = "icmp"
action = "rate-limit"
rate = "10kpps"
"#,
    )
    .unwrap();
    assert_eq!(rs.classify(&key([203, 0, 113, 9], 17, 1500)), Ok(Some(1)));
    assert_eq!(rs.classify(&key([203, 0, 113, 9], 17, 999)), Ok(None));
    assert_eq!(rs.classify(&key([203, 0, 113, 9], 1, 0)), Ok(Some(2)));
    let mut from7 = key([203, 0, 113, 9], 17, 1500);
    from7.src[..4].copy_from_slice(&[198, 51, 100, 7]);
    assert_eq!(rs.classify(&from7), Ok(Some(0)));
    let share = rs.kernel_share(false);
    let (k, default) = share.kernel_rules().unwrap();
    assert_eq!(default, Action::Drop);
    // The source rule is the kernel's as the others are: its source, any destination.
    assert_eq!(
        (k[0].family, k[0].mask, k[0].smask[0]),
        (4, [0; 4], u32::MAX)
    );
    assert_eq!(k[0].saddr[0], u32::from_be_bytes([198, 51, 100, 7]).to_be());
    assert_eq!(k[0].action(), Action::Redirect, "forward, not in XDP");
    assert_eq!(k[1].action(), Action::Drop);
    assert_eq!(k[2].action(), Action::Redirect);
    assert!(!share.decided_in_kernel(0) && share.decided_in_kernel(1));
    assert_eq!(rs.rules()[2].rate.unwrap().burst, 500);
}

#[test]
fn hostile_names_are_refused_where_they_stand() {
    let rule = |name: &str| {
        let name = toml::Value::String(name.into());
        format!("[[rule]]\nname = {name}\naction = \"drop\"\n")
    };
    for (name, says) in [
        ("", "cannot be empty"),
        ("a\nb", "U+000A"),
        ("a\rb", "U+000D"),
        ("\u{1b}[2Jx", "U+001B"),
        ("\u{202e}txt", "U+202E"),
    ] {
        let e = RuleSet::from_toml(&rule(name)).unwrap_err();
        assert_eq!((e.line, e.column), (2, 8), "{e}");
        assert!(e.message.contains(says), "{name:?}: {e}");
    }
    let long = "x".repeat(1 << 20);
    let e = RuleSet::from_toml(&rule(&long)).unwrap_err();
    assert!(
        e.message.len() < 200,
        "the message does not repeat a long name: {e}"
    );
    assert!(
        e.message
            .contains(&format!("at most {MAX_RULE_NAME_CHARS}")),
        "{e}"
    );
    let longest = "é".repeat(MAX_RULE_NAME_CHARS);
    assert!(RuleSet::from_toml(&rule(&longest)).is_ok());
}

#[test]
fn a_prefix_says_what_it_means_or_is_refused() {
    let dst = |p: &str| RuleSet::from_toml(&format!("[[rule]]\ndst = {p:?}\naction = \"drop\"\n"));
    let e = dst("10.0.0.1/8").unwrap_err();
    assert!(
        e.message
            .contains("\"10.0.0.0/8\" for the network or \"10.0.0.1/32\""),
        "{e}"
    );
    let e = dst("2001:db8::1/32").unwrap_err();
    assert!(e.message.contains("\"2001:db8::/32\""), "{e}");
    let e = dst(" 10.0.0.0/8").unwrap_err();
    assert!(e.message.contains("white space"), "{e}");
    assert!(dst("10.0.0.0/ 8").is_err());
    for ok in [
        "10.0.0.0/8",
        "10.0.0.1",
        "0.0.0.0/0",
        "2001:db8::/32",
        "::/0",
    ] {
        assert!(dst(ok).is_ok(), "{ok}");
    }
}

#[test]
fn a_single_bracketed_rule_is_explained() {
    let e = RuleSet::from_toml("[rule]\naction = \"drop\"\n").unwrap_err();
    assert!(e.message.contains("[[rule]]"), "{e}");
}

#[test]
fn too_many_rules_are_refused_before_any_is_read() {
    // Each rule would be refused on its own (a duplicate name): the count comes first,
    // so a huge file costs one pass of the TOML parser and no more.
    let rule = "[[rule]]\nname = \"same\"\naction = \"drop\"\n";
    let e = RuleSet::from_toml(&rule.repeat(50_000)).unwrap_err();
    let want = format!("50000 rules; at most {}", crate::MAX_RULES);
    assert!(e.message.starts_with(&want), "{e}");
    assert_eq!(e.line, 3 * crate::MAX_RULES + 1);
}

#[test]
fn errors_point_at_line_and_column() {
    let e =
        RuleSet::from_toml("[[rule]]\naction = \"forward\"\ndst = \"10.0.0.0/40\"\n").unwrap_err();
    assert_eq!((e.line, e.column), (3, 7), "{e}");
    assert!(e.message.contains("0 to 32"), "{e}");
    let e = RuleSet::from_toml("[[rule]]\naction = \"fwd\"\n").unwrap_err();
    assert_eq!((e.line, e.column), (2, 10), "{e}");
    let e = RuleSet::from_toml("[[rule]]\nactoin = \"drop\"\n").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("actoin"), "{e}");
    let e = RuleSet::from_toml("[[rule]]\ndst_port = 53\naction = \"drop\"\n").unwrap_err();
    assert!(e.message.contains("tcp"), "{e}");
    assert_eq!(e.line, 2);
    let e = RuleSet::from_toml("[[rule]]\naction = \"rate-limit\"\n").unwrap_err();
    assert!(e.message.contains("rate ="), "{e}");
    let e = RuleSet::from_toml("[[rule]]\naction = \"rate-limit\"\nrate = \"5 furlongs\"\n")
        .unwrap_err();
    assert_eq!(e.line, 3);
    let e = RuleSet::from_toml("default = \"rate-limit\"").unwrap_err();
    assert_eq!((e.line, e.column), (1, 11));
    let e = RuleSet::from_toml("[[rule]\n").unwrap_err();
    assert_eq!(e.line, 1, "{e}");
}

#[test]
fn rates_parse_and_limit() {
    assert_eq!(Rate::parse("10kpps"), Ok((10_000, RateUnit::Packets)));
    assert_eq!(Rate::parse("5Mbps"), Ok((5_000_000, RateUnit::Bits)));
    assert_eq!(Rate::parse("1.5Gbps"), Ok((1_500_000_000, RateUnit::Bits)));
    assert!(Rate::parse("0pps").is_err() && Rate::parse("fast").is_err());
    let l = RateLimiter::new(Rate {
        per_second: 1000,
        unit: RateUnit::Packets,
        burst: 10,
    });
    // A burst of 10 at time 0, then one per millisecond.
    assert_eq!((0..20).filter(|_| l.allow(0, 64)).count(), 10);
    let ms = 1_000_000;
    assert!(!l.allow(ms / 2, 64));
    assert!(l.allow(ms, 64));
    // Over one simulated second at 10x the rate, the rate passes (the bucket is empty).
    let passed = (0..10_000u64)
        .filter(|i| l.allow(ms + i * ms / 10, 64))
        .count();
    assert!((999..=1001).contains(&passed), "{passed}");
    let bits = RateLimiter::new(Rate {
        per_second: 8_000,
        unit: RateUnit::Bits,
        burst: 1000,
    });
    // 1000 bytes a second: one 1000-byte frame, then nothing until a second later.
    assert!(bits.allow(0, 1000) && !bits.allow(0, 1));
    assert!(bits.allow(1000 * ms, 1000));
}

#[test]
fn buckets_keep_time_past_a_year_of_uptime_and_small_costs_exactly() {
    // Two years of CLOCK_MONOTONIC: a bucket that kept picoseconds would have overflowed.
    let late = 2 * 365 * 86_400 * 1_000_000_000u64;
    let l = RateLimiter::new(Rate {
        per_second: 10,
        unit: RateUnit::Packets,
        burst: 2,
    });
    assert_eq!((0..5).filter(|_| l.allow(late, 64)).count(), 2);
    assert!(l.allow(late + 100_000_000, 64) && !l.allow(late + 100_000_000, 64));
    // 100 Gbps: a 64-byte frame costs 5.12 ns, which whole nanoseconds would make 5 (2% more
    // frames than the rate); ticks and a rounded cost keep it within 0.5%.
    let fast = Bucket::new(100_000_000_000, 1, true);
    let per_frame = fast.cost(64) as f64 / 16.0;
    assert!((per_frame - 5.12).abs() < 0.5 * 5.12 / 100.0, "{per_frame}");
    // 1 bps and a 64 KiB frame: no product overflows.
    let slow = Bucket::new(1, 1, true);
    assert_eq!(slow.cost(65_536), 65_536 * 8 * 16_000_000_000);
}

#[test]
fn unclassifiable_packets_are_dropped_unless_the_file_says_otherwise() {
    let rs = RuleSet::from_toml("").unwrap();
    assert_eq!(rs.unclassifiable_verdict(), Verdict::Drop);
    assert_eq!(rs.decide(&Err(Unclassifiable("x"))), (1, Verdict::Drop));
    let rs = RuleSet::from_toml("unclassifiable = \"forward\"\n").unwrap();
    assert_eq!(rs.unclassifiable_verdict(), Verdict::Forward);
    let e = RuleSet::from_toml("\nunclassifiable = \"maybe\"\n").unwrap_err();
    assert!(
        e.to_string().contains("unclassifiable") && e.line == 2,
        "{e}"
    );
}

#[test]
fn keys_come_from_frames_and_garbage_matches_nothing_specific() {
    let mut f = [0u8; 64];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    {
        let mut ip = ipv4::Packet::new_unchecked(&mut f[14..]);
        ip.init(20 + 8, 17, [198, 51, 100, 1], [203, 0, 113, 5]);
    }
    f[34..38].copy_from_slice(&[0x30, 0x39, 0, 53]);
    let k = PacketKey::parse(&f).unwrap();
    assert_eq!(
        (k.family, k.protocol, k.src_port, k.dst_port),
        (4, 17, 12345, 53)
    );
    assert_eq!(&k.dst[..4], &[203, 0, 113, 5]);
    for cut in 0..14 + 20 + 4 {
        assert!(PacketKey::parse(&f[..cut]).is_err(), "cut at {cut}");
    }
    // Ethernet padding after the IP packet is fine.
    assert!(PacketKey::parse(&f).is_ok());
    // Lying lengths, a wrong version, a short IHL.
    for (at, v) in [(16, 0u8), (17, 10), (16, 0xff), (14, 0x65), (14, 0x44)] {
        let mut g = f;
        g[at] = v;
        if at == 16 {
            g[17] = if v == 0xff { 0xff } else { 10 };
        }
        assert!(PacketKey::parse(&g).is_err(), "byte {at} = {v}");
    }
    // Non-IP frames are classifiable, with family 0.
    let mut arp = f;
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(PacketKey::parse(&arp).unwrap().family, 0);
    let p = Prefix::parse("203.0.113.0/25").unwrap();
    assert!(prefix_contains(&p, 4, &k.dst) && !prefix_contains(&p, 6, &k.dst));
    let other = Prefix::parse("203.0.113.128/25").unwrap();
    assert!(!prefix_contains(&other, 4, &k.dst));
}

/// Frames for the checksum note: Ethernet, optional VLAN tag, IPv4 or IPv6 (with a
/// hop-by-hop header when asked), then a TCP or UDP header and payload whose checksum
/// field holds the pseudo-header sum (`partial`) or something else.
fn l4_frame(v6: bool, tagged: bool, hop_by_hop: bool, proto: u8, partial: bool) -> Vec<u8> {
    let l4_len: usize = if proto == ip_protocol::TCP { 20 } else { 8 } + 10;
    let mut f = vec![0u8; 12];
    if tagged {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    }
    let (src, dst) = ([198, 51, 100, 1], [203, 0, 113, 5]);
    let mut src6 = [0u8; 16];
    src6[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    let mut dst6 = src6;
    dst6[15] = 9;
    let l3 = f.len() + 2;
    let pseudo = if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        let ext = if hop_by_hop { 8 } else { 0 };
        f.extend_from_slice(&((l4_len + ext) as u16).to_be_bytes());
        f.extend_from_slice(&[if hop_by_hop { 0 } else { proto }, 64]);
        f.extend_from_slice(&src6);
        f.extend_from_slice(&dst6);
        if hop_by_hop {
            f.extend_from_slice(&[proto, 0, 1, 4, 0, 0, 0, 0]);
        }
        checksum::pseudo_header_v6(src6, dst6, proto, l4_len as u32)
    } else {
        f.extend_from_slice(&[0x08, 0x00]);
        f.resize(l3 + 20, 0);
        ipv4::Packet::new_unchecked(&mut f[l3..]).init(20 + l4_len as u16, proto, src, dst);
        checksum::pseudo_header_v4(src, dst, proto, l4_len as u16)
    };
    let l4 = f.len();
    f.resize(l4 + l4_len, 0x5a);
    let field = l4 + if proto == ip_protocol::TCP { 16 } else { 6 };
    let value = if partial {
        checksum::fold(pseudo)
    } else {
        0x1234
    };
    f[field..field + 2].copy_from_slice(&value.to_be_bytes());
    f
}

fn partial_by_locate(f: &[u8]) -> bool {
    L4Checksum::locate(f, f.len()).is_some_and(|c| c.is_partial(f))
}

/// What locate says of a frame's checksum, in the one read's terms.
fn state_by_locate(f: &[u8]) -> ChecksumState {
    match L4Checksum::locate(f, f.len()) {
        Some(c) if c.is_partial(f) => ChecksumState::Partial {
            start: c.start,
            offset: c.offset,
        },
        _ => ChecksumState::Settled,
    }
}

#[test]
fn one_read_tells_a_settled_checksum_from_a_partial_one_as_locate_does() {
    let (tcp, udp) = (ip_protocol::TCP, ip_protocol::UDP);
    for (v6, tagged, hop, proto) in [
        (false, false, false, udp),
        (false, false, false, tcp),
        (false, true, false, udp),
        (true, false, false, udp),
        (true, true, false, tcp),
    ] {
        for partial in [false, true] {
            let f = l4_frame(v6, tagged, hop, proto, partial);
            assert_eq!(partial_by_locate(&f), partial, "the frame is as built");
            let (key, state) = PacketKey::parse_noting_checksum(&f, false);
            assert_eq!(key, PacketKey::parse(&f), "the same key");
            assert_eq!(
                state.is_settled(),
                !partial,
                "v6 {v6} tagged {tagged} proto {proto}"
            );
            assert_eq!(state, state_by_locate(&f), "found where locate finds it");
            let (_, in_chain) = PacketKey::parse_noting_checksum(&f, true);
            assert_eq!(
                in_chain,
                ChecksumState::Unknown,
                "a chain is left to the transmit step"
            );
        }
    }
    // Behind IPv6 extension headers this read cannot tell: unknown, not settled.
    let f = l4_frame(true, false, true, udp, false);
    assert!(!partial_by_locate(&f));
    assert_eq!(
        PacketKey::parse_noting_checksum(&f, false).1,
        ChecksumState::Unknown
    );
    // Nothing to finish: not IP, an IPv4 fragment, no TCP or UDP.
    let mut arp = l4_frame(false, false, false, udp, true);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let mut fragment = l4_frame(false, false, false, udp, true);
    fragment[20] = 0x20; // more fragments
    let mut icmp = l4_frame(false, false, false, udp, true);
    icmp[23] = ip_protocol::ICMP;
    for f in [arp, fragment, icmp] {
        assert!(!partial_by_locate(&f));
        assert!(PacketKey::parse_noting_checksum(&f, false).1.is_settled());
    }
}

/// Whatever the bytes, a checksum called settled is never one locate finds partial (the
/// transmit step skips only what it would have left alone), and the fast path for plain
/// IPv4 reads every packet it takes exactly as the general walk does.
#[test]
fn a_settled_checksum_is_never_a_partial_one_whatever_the_bytes() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let interesting = [
        0u8, 1, 4, 5, 6, 0x11, 0x20, 0x40, 0x45, 0x60, 0x81, 0x86, 0xdd, 0xff,
    ];
    let (mut settled_seen, mut partial_seen, mut fast_seen) = (0, 0, 0);
    for base in 0..8u64 {
        let (v6, tagged, proto) = (base & 1 == 1, base & 2 == 2, [6, 17][(base >> 2) as usize]);
        let clean = l4_frame(v6, tagged, false, proto, true);
        for _ in 0..4000 {
            let mut f = clean.clone();
            for _ in 0..(next() % 3 + 1) {
                let at = (next() % f.len() as u64) as usize;
                f[at] = interesting[(next() % interesting.len() as u64) as usize];
            }
            if next() % 4 == 0 {
                f.truncate((next() % f.len() as u64) as usize);
            }
            let (key, state) = PacketKey::parse_noting_checksum(&f, false);
            let (settled, partial) = (state.is_settled(), partial_by_locate(&f));
            if let ChecksumState::Partial { .. } = state {
                assert_eq!(
                    state,
                    state_by_locate(&f),
                    "partial where locate says: {f:02x?}"
                );
            }
            if let Some(fast) = PacketKey::plain_ipv4(&f) {
                let slow = PacketKey::parse_noting_checksum_slowly(&f, false);
                assert_eq!(fast, slow, "the fast path reads {f:02x?} as the walk does");
                fast_seen += 1;
            }
            assert_eq!(key, PacketKey::parse(&f), "the same key as parse");
            assert_eq!(
                PacketKey::classifiable_noting_checksum(&f, false),
                (key.is_ok(), state),
                "without a key, the same answers: {f:02x?}"
            );
            assert!(
                !(settled && partial),
                "called settled but partial: {f:02x?}"
            );
            settled_seen += usize::from(settled);
            partial_seen += usize::from(partial);
        }
    }
    assert!(
        settled_seen > 1000 && partial_seen > 1000 && fast_seen > 1000,
        "{settled_seen} {partial_seen} {fast_seen}"
    );
}

/// A match that names each key most rules leave out one time in eight, with values that
/// packets of [`the_fast_match_decides_as_the_match_does`] often have.
fn random_extras(next: &mut dyn FnMut(u64) -> u64) -> Match {
    let one_in_8 =
        |next: &mut dyn FnMut(u64) -> u64, n: u64| (next(8) == 0).then(|| next(n) as u16);
    Match {
        icmp_type: one_in_8(next, 3).map(|t| t as u8),
        icmp_code: one_in_8(next, 3).map(|c| c as u8),
        tcp_flags: one_in_8(next, 256).map(|mask| TcpFlags {
            mask: mask as u8,
            value: next(256) as u8 & mask as u8,
        }),
        length: one_in_8(next, 1500).map(|lo| (lo, lo + next(200) as u16)),
        vlan: one_in_8(next, 3),
        ..Match::default()
    }
}

/// The rules stage's masks decide as the plain byte-wise reading does, for rules and packets of
/// every shape: prefixes of each length and family (mixed too), protocols with and
/// without an IP family, port ranges, and keys near and far from the prefixes.
#[test]
fn the_fast_match_decides_as_the_match_does() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let base: [u8; 16] = [
        0x20, 0x01, 0x0d, 0xb8, 198, 51, 100, 7, 1, 2, 3, 4, 5, 6, 7, 8,
    ];
    let near = |next: &mut dyn FnMut(u64) -> u64| {
        let mut a = base;
        for _ in 0..next(3) {
            a[next(16) as usize] ^= 1 << next(8);
        }
        a
    };
    let (mut matched, mut missed) = (0, 0);
    for _ in 0..40_000 {
        let prefix = |next: &mut dyn FnMut(u64) -> u64| -> Option<Prefix> {
            let a = near(next);
            match next(3) {
                0 => None,
                1 => Some(Prefix {
                    addr: IpAddr::from([a[4], a[5], a[6], a[7]]),
                    len: next(33) as u8,
                }),
                _ => Some(Prefix {
                    addr: IpAddr::from(a),
                    len: next(129) as u8,
                }),
            }
        };
        let ports = |next: &mut dyn FnMut(u64) -> u64| {
            (next(2) == 0).then(|| {
                let lo = next(100) as u16;
                (lo, lo + next(50) as u16)
            })
        };
        let m = Match {
            src: prefix(&mut next),
            dst: prefix(&mut next),
            protocol: [None, Some(6), Some(17)][next(3) as usize],
            src_ports: ports(&mut next),
            dst_ports: ports(&mut next),
            ..random_extras(&mut next)
        };
        let (src, dst) = (near(&mut next), near(&mut next));
        let v4 = |a: [u8; 16]| {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&a[4..8]);
            b
        };
        let family = [0, 4, 6][next(3) as usize];
        let k = PacketKey {
            family,
            src: if family == 4 { v4(src) } else { src },
            dst: if family == 4 { v4(dst) } else { dst },
            protocol: [6, 17, 1][next(3) as usize],
            src_port: next(160) as u16,
            dst_port: next(160) as u16,
            ip_len: next(1700) as u16,
            vlan: [None, Some(0), Some(1)][next(3) as usize],
            tcp_flags: next(256) as u8,
            icmp_type: next(3) as u8,
            icmp_code: next(3) as u8,
            ..PacketKey::default()
        };
        let fast = FastMatch::new(&m, &[], &[]);
        let (s128, d128) = (u128::from_be_bytes(k.src), u128::from_be_bytes(k.dst));
        let expected = byte_wise_matches(&m, &k);
        assert_eq!(fast.matches(&k, s128, d128), expected, "{m:?} {k:?}");
        assert_eq!(m.matches(&k, &[], &[]), expected, "{m:?} {k:?}");
        if expected {
            matched += 1;
        } else {
            missed += 1;
        }
    }
    assert!(matched > 500 && missed > 1000, "{matched} {missed}");
}

#[test]
fn kernel_rules_hold_network_order_prefixes_and_refuse_what_cannot_match() {
    let prefix = |s: &str| Some(Prefix::parse(s).unwrap());
    let m = Match {
        dst: prefix("198.51.100.0/24"),
        src: prefix("198.51.100.128/25"),
        protocol: Some(17),
        dst_ports: Some((1000, 2000)),
        src_ports: Some((53, 53)),
        ..Match::default()
    };
    let r = m.kernel_rule(Action::Drop).unwrap();
    assert_eq!(r.family, 4);
    assert_eq!(r.addr[0].to_ne_bytes(), [198, 51, 100, 0]);
    assert_eq!(r.mask[0].to_ne_bytes(), [255, 255, 255, 0]);
    assert_eq!(r.saddr[0].to_ne_bytes(), [198, 51, 100, 128]);
    assert_eq!(r.smask[0].to_ne_bytes(), [255, 255, 255, 128]);
    assert_eq!(
        (r.port_lo, r.port_hi, r.sport_lo, r.sport_hi, r.protocol),
        (1000, 2000, 53, 53, 17)
    );
    assert_eq!((r.action(), r.source), (Action::Drop, 1));
    let v6 = Match {
        dst: prefix("2001:db8::/40"),
        ..Match::default()
    };
    let r = v6.kernel_rule(Action::Pass).unwrap();
    assert_eq!(
        (r.family, r.mask[1].to_ne_bytes(), r.mask[2]),
        (6, [255, 0, 0, 0], 0)
    );
    assert_eq!(
        (r.sport_lo, r.sport_hi, r.source),
        (0, u16::MAX, 0),
        "any source: the program skips comparing it"
    );
    let mixed = Match {
        src: prefix("2001:db8::1"),
        ..m
    };
    assert!(mixed.kernel_rule(Action::Drop).is_err());
    let backwards = Match {
        dst_ports: Some((9, 8)),
        ..Match::default()
    };
    assert!(backwards.kernel_rule(Action::Drop).is_err());
    let too_long = Match {
        dst: Some(Prefix {
            addr: "198.51.100.0".parse().unwrap(),
            len: 33,
        }),
        ..Match::default()
    };
    let e = too_long.kernel_rule(Action::Drop).unwrap_err().to_string();
    assert!(e.contains("/33"), "{e}");
}

#[test]
fn vlan_length_tcp_flag_and_icmp_keys_are_read_and_matched() {
    let rs = RuleSet::from_toml(
        r#"
[[rule]]
name = "syn-flood"
protocol = "tcp"
tcp_flags = "SYN, !ack"
action = "drop"
[[rule]]
name = "ping"
protocol = "icmp"
icmp_type = 8
icmp_code = 0
action = "pass"
[[rule]]
name = "big-on-vlan-7"
vlan = 7
length = "1000-1500"
action = "drop"
"#,
    )
    .unwrap();
    let m = |i: usize| rs.rules()[i].matcher;
    let syn = TcpFlags {
        mask: xskit_wire::tcp::flags::SYN | xskit_wire::tcp::flags::ACK,
        value: xskit_wire::tcp::flags::SYN,
    };
    assert_eq!(m(0).tcp_flags, Some(syn));
    assert_eq!(syn.to_string(), "syn,!ack");
    assert_eq!((m(1).icmp_type, m(1).icmp_code), (Some(8), Some(0)));
    assert_eq!((m(2).vlan, m(2).length), (Some(7), Some((1000, 1500))));
    let mut k = key([203, 0, 113, 9], 6, 80);
    k.tcp_flags = 0x02;
    assert_eq!(rs.classify(&k), Ok(Some(0)));
    k.tcp_flags = 0x12;
    assert_eq!(rs.classify(&k), Ok(None), "SYN-ACK is not the flood");
    let mut ping = key([203, 0, 113, 9], 1, 0);
    ping.icmp_type = 8;
    assert_eq!(rs.classify(&ping), Ok(Some(1)));
    ping.icmp_type = 0;
    assert_eq!(rs.classify(&ping), Ok(None));
    let mut big = key([203, 0, 113, 9], 17, 53);
    big.ip_len = 1200;
    assert_eq!(rs.classify(&big), Ok(None), "untagged");
    big.vlan = Some(7);
    assert_eq!(rs.classify(&big), Ok(Some(2)));
    big.ip_len = 999;
    assert_eq!(rs.classify(&big), Ok(None));
    // A later fragment carries no TCP header: at the flags rule it is unclassifiable.
    let mut later = key([203, 0, 113, 9], 6, 0);
    later.later_fragment = true;
    assert!(rs.classify(&later).is_err());
}

#[test]
fn extra_keys_say_what_is_wrong() {
    let error = |rule: &str| {
        RuleSet::from_toml(&format!("[[rule]]\n{rule}\naction = \"drop\"\n"))
            .unwrap_err()
            .message
    };
    let cases = [
        ("tcp_flags = \"syn\"", "needs protocol = \"tcp\""),
        (
            "protocol = \"udp\"\ntcp_flags = \"syn\"",
            "needs protocol = \"tcp\"",
        ),
        (
            "protocol = \"tcp\"\ntcp_flags = \"syn,fyn\"",
            "\"fyn\" is not a TCP flag",
        ),
        (
            "protocol = \"tcp\"\ntcp_flags = \"syn,!syn\"",
            "names syn twice",
        ),
        (
            "protocol = \"tcp\"\ntcp_flags = \"\"",
            "\"\" is not a TCP flag",
        ),
        ("icmp_type = 8", "need protocol = \"icmp\" or \"icmpv6\""),
        (
            "protocol = \"icmp\"\nicmp_type = 256",
            "icmp_type 256 is not 0 to 255",
        ),
        (
            "protocol = \"icmp\"\nicmp_code = \"0\"",
            "icmp_code is a number",
        ),
        ("vlan = 4096", "vlan 4096 is not 0 to 4095"),
        ("length = \"1500-64\"", "length range \"1500-64\" is empty"),
        ("length = 70000", "length 70000 is not 0-65535"),
    ];
    for (rule, want) in cases {
        let e = error(rule);
        assert!(e.contains(want), "{rule}: {e}");
    }
}

#[test]
fn frames_give_their_vlan_length_tcp_flags_and_icmp_fields() {
    // IPv4 TCP, tagged VLAN 7: flags at byte 13 of the TCP header.
    let mut f = l4_frame(false, true, false, 6, false);
    let tcp_at = 14 + 4 + 20;
    f[tcp_at + 13] = 0x12;
    let k = PacketKey::parse(&f).unwrap();
    assert_eq!((k.vlan.is_some(), k.tcp_flags), (true, 0x12));
    assert_eq!(usize::from(k.ip_len), f.len() - 18);
    // Cut short before the flags (the IP length says 13 bytes of TCP): unclassifiable.
    let mut short = l4_frame(false, false, false, 6, false);
    short.truncate(14 + 20 + 13);
    short[16..18].copy_from_slice(&(20u16 + 13).to_be_bytes());
    assert!(PacketKey::parse(&short).is_err());
    // ICMP echo request: type and code.
    let mut icmp = vec![0u8; 14 + 20 + 8];
    icmp[12..14].copy_from_slice(&[0x08, 0x00]);
    ipv4::Packet::new_unchecked(&mut icmp[14..]).init(28, 1, [203, 0, 113, 1], [203, 0, 113, 9]);
    icmp[34] = 8;
    icmp[35] = 0;
    let k = PacketKey::parse(&icmp).unwrap();
    assert_eq!(
        (k.icmp_type, k.icmp_code, k.ip_len, k.vlan),
        (8, 0, 28, None)
    );
    // One byte of ICMP: its code is cut short.
    icmp.truncate(14 + 21);
    icmp[16..18].copy_from_slice(&21u16.to_be_bytes());
    assert!(PacketKey::parse(&icmp).is_err());
}

#[test]
fn a_limit_per_source_keeps_sources_apart_blocks_and_fails_closed_when_full() {
    let key = |a: [u8; 4]| {
        let mut k = PacketKey {
            family: 4,
            ..PacketKey::default()
        };
        k.src[..4].copy_from_slice(&a);
        k
    };
    let rate = Rate {
        per_second: 1,
        unit: RateUnit::Packets,
        burst: 2,
    };
    let per = PerSource {
        v4_len: 24,
        v6_len: 64,
        block: Some(std::time::Duration::from_secs(10)),
    };
    let l = SourceLimiter::new(rate, per, 2);
    let (a, a2, b, c) = (
        key([198, 51, 100, 1]),
        key([198, 51, 100, 2]),
        key([203, 0, 113, 1]),
        key([192, 0, 2, 1]),
    );
    let s = 1_000_000_000;
    // a's /24 has a burst of 2; b's its own.
    assert!(l.allow(&a, 0, 64) && l.allow(&a2, 0, 64));
    assert!(!l.allow(&a, 0, 64), "a's /24 is over its rate, and blocked");
    assert!(l.allow(&b, 0, 64) && l.allow(&b, 0, 64));
    // Blocked for 10 s though its bucket refills in 1.
    assert!(!l.allow(&a, 5 * s, 64));
    assert!(l.allow(&a, 10 * s, 64), "the block ran out");
    assert!(l.allow(&b, 10 * s, 64));
    // The table holds 2 sources, both with tokens spent: a third fails closed...
    assert!(!l.allow(&c, 10 * s, 64));
    // ... until a bucket is full again, which is the same as gone.
    assert!(l.allow(&c, 12 * s, 64));
}
