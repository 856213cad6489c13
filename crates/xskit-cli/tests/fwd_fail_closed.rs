//! `xskit fwd` as a filter fails closed: packets it cannot fully classify (long IPv6 extension
//! chains, deep VLAN tag stacks, headers cut short or lying) never fall through to `forward`,
//! through user space or with `--xdp-forward`; they are counted, and the rules file can say
//! what to do with them.

mod common;

use common::*;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use xskit::Interface;
use xskit_testbed::{BridgedOptions, Chain};
use xskit_traffic::baseline::PacketTx;
use xskit_wire::{ethernet, ipv4, ipv6, EtherType};

fn macs(chain: &Chain) -> ([u8; 6], [u8; 6]) {
    (chain.c.mac, chain.a.mac)
}

/// UDP to c's port 53 over IPv6, behind `ext` Destination Options headers.
fn udp6_behind_options(chain: &Chain, ext: usize) -> Vec<u8> {
    let (dst_mac, src_mac) = macs(chain);
    let mut f = vec![0u8; 14 + 40 + 8 * ext + 8 + 4];
    let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
    eth.set_dst_addr(dst_mac);
    eth.set_src_addr(src_mac);
    eth.set_ethertype(EtherType::Ipv6);
    let mut ip = ipv6::Packet::new_unchecked(eth.payload_mut());
    let (src, dst) = (chain.a.ip6.unwrap().octets(), chain.c.ip6.unwrap().octets());
    ip.init(
        (8 * ext + 12) as u16,
        if ext > 0 { 60 } else { 17 },
        src,
        dst,
        0,
    );
    for k in 0..ext {
        let at = 14 + 40 + 8 * k;
        f[at] = if k + 1 == ext { 17 } else { 60 };
        f[at + 2..at + 4].copy_from_slice(&[1, 4]); // PadN
    }
    let at = 14 + 40 + 8 * ext;
    f[at..at + 2].copy_from_slice(&4000u16.to_be_bytes());
    f[at + 2..at + 4].copy_from_slice(&53u16.to_be_bytes());
    f[at + 4..at + 6].copy_from_slice(&12u16.to_be_bytes());
    f[at + 8..].copy_from_slice(b"evil");
    let pseudo = xskit_wire::checksum::pseudo_header_v6(src, dst, 17, 12);
    let sum = !xskit_wire::checksum::fold(xskit_wire::checksum::accumulate(pseudo, &f[at..]));
    f[at + 6..at + 8].copy_from_slice(&sum.to_be_bytes());
    f
}

/// UDP to c's port 53 over IPv4, behind `tags` VLAN tags.
fn udp4_behind_tags(chain: &Chain, tags: usize) -> Vec<u8> {
    let (dst_mac, src_mac) = macs(chain);
    let mut f = vec![0u8; 14 + 20 + 8 + 4];
    let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
    eth.set_dst_addr(dst_mac);
    eth.set_src_addr(src_mac);
    eth.set_ethertype(EtherType::Ipv4);
    let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
    ip.init(32, 17, chain.a.ip.octets(), chain.c.ip.octets());
    ip.fill_checksum();
    f[34..36].copy_from_slice(&4000u16.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[38..40].copy_from_slice(&12u16.to_be_bytes());
    f[42..].copy_from_slice(b"evil");
    for _ in 0..tags {
        f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
    }
    f
}

fn inject(chain: &Chain, frames: &[Vec<u8>]) {
    let ifname = chain.a.ifname.clone();
    chain
        .a
        .ns
        .run(|| {
            let tx = PacketTx::open(Interface::by_name(&ifname).unwrap().index()).unwrap();
            for f in frames {
                tx.send_copies(f, 1).unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
        })
        .unwrap();
}

/// c's UDP socket on port 53 (IPv4 and IPv6): what it received within a short wait.
fn listen_53(chain: &Chain) -> (UdpSocket, UdpSocket) {
    let v4 = SocketAddr::new(chain.c.ip.into(), 53);
    let v6 = SocketAddr::new(chain.c.ip6.unwrap().into(), 53);
    chain
        .c
        .ns
        .run(|| {
            let a = UdpSocket::bind(v4).unwrap();
            let b = UdpSocket::bind(v6).unwrap();
            for s in [&a, &b] {
                s.set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
            }
            (a, b)
        })
        .unwrap()
}

fn received(s: &UdpSocket) -> usize {
    let mut buf = [0u8; 2048];
    let mut n = 0;
    while s.recv(&mut buf).is_ok() {
        n += 1;
    }
    n
}

fn run_case(extra: &[&str], rules: &str, frames: &[Vec<u8>]) -> (usize, serde_json::Value) {
    let chain = Chain::bridged_with(&BridgedOptions {
        queues: 1,
        mtu: None,
        ipv6: true,
    })
    .unwrap();
    let file = RulesFile::new(rules);
    let mut args = vec!["--check", "--rules", file.path()];
    args.extend_from_slice(extra);
    let fwd = start_fwd(&chain, &args);
    let (v4, v6) = listen_53(&chain);
    inject(&chain, frames);
    let got = received(&v4) + received(&v6);
    (got, stop_fwd(fwd))
}

const DROP_DNS: &str =
    "[[rule]]\nname = \"no-dns\"\nprotocol = \"udp\"\ndst_port = 53\naction = \"drop\"\n";

fn hostile(chain_like: &Chain) -> Vec<Vec<u8>> {
    let mut frames = vec![
        udp6_behind_options(chain_like, 9),
        udp6_behind_options(chain_like, 50),
        udp4_behind_tags(chain_like, 3),
        udp4_behind_tags(chain_like, 10),
    ];
    // Every truncation of a UDP/53 packet inside its headers: the IP length then lies.
    let whole = udp4_behind_tags(chain_like, 0);
    for cut in 14..14 + 20 + 4 {
        frames.push(whole[..cut].to_vec());
    }
    frames
}

#[test]
fn unclassifiable_packets_never_fall_through_to_forward() {
    if !privileged() {
        return;
    }
    // The frames only need a's and c's addresses and MACs, which every bridged testbed shares.
    let template = Chain::bridged_with(&BridgedOptions {
        queues: 1,
        mtu: None,
        ipv6: true,
    })
    .unwrap();
    let frames = hostile(&template);
    let control = [
        udp6_behind_options(&template, 8),
        udp4_behind_tags(&template, 0),
    ];
    drop(template);
    for extra in [
        &["-m", "drv"][..],
        &["-m", "skb"],
        &["-m", "drv", "--xdp-forward"],
    ] {
        let (got, r) = run_case(extra, DROP_DNS, &frames);
        assert_eq!(
            got, 0,
            "{extra:?}: the protected socket received hostile packets: {r}"
        );
        let u = r["counters"]["unclassifiable"]["packets"].as_u64().unwrap();
        assert_eq!(u as usize, frames.len(), "{extra:?}: each one counted: {r}");
        assert_eq!(r["counters"]["unclassifiable"]["action"], "drop", "{r}");
        // Whether the kernel or user space found them unclassifiable, the ports say the
        // same total as the unclassifiable rule.
        let on_ports: u64 = (0..2)
            .map(|p| {
                r["counters"]["ports"][p]["unclassifiable"]
                    .as_u64()
                    .unwrap()
            })
            .sum();
        assert_eq!(on_ports, u, "{extra:?}: {r}");
        // Packets the rules can classify still meet the rule.
        let (got, r) = run_case(extra, DROP_DNS, &control);
        assert_eq!(got, 0, "{extra:?}: {r}");
        assert_eq!(r["counters"]["rules"][0]["packets"], 2, "{extra:?}: {r}");
    }
    // The rules file may forward them instead, and then they arrive (the three a host's
    // kernel accepts: the IPv6 chains and a complete untagged packet are among them).
    let (got, r) = run_case(
        &["-m", "drv"],
        "unclassifiable = \"forward\"\n",
        &frames[..2],
    );
    assert_eq!(got, 2, "{r}");
    assert_eq!(r["counters"]["unclassifiable"]["packets"], 2, "{r}");
}

/// c's UDP sockets on `port`, IPv4 and IPv6.
fn listen(chain: &Chain, port: u16) -> Vec<UdpSocket> {
    let addrs = [
        SocketAddr::new(chain.c.ip.into(), port),
        SocketAddr::new(chain.c.ip6.unwrap().into(), port),
    ];
    chain
        .c
        .ns
        .run(move || {
            addrs
                .iter()
                .map(|a| {
                    let s = UdpSocket::bind(a).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(500)))
                        .unwrap();
                    s
                })
                .collect()
        })
        .unwrap()
}

/// A 4,000-byte datagram from a's kernel to c's `port`, over IPv4 and IPv6: on a 1500-byte
/// link each leaves in three fragments, and only the first carries the ports.
fn send_large(chain: &Chain, port: u16) {
    let pairs = [
        (chain.a.ip.into(), chain.c.ip.into()),
        (chain.a.ip6.unwrap().into(), chain.c.ip6.unwrap().into()),
    ];
    chain
        .a
        .ns
        .run(move || {
            for (from, to) in pairs {
                let s = UdpSocket::bind(SocketAddr::new(from, 0)).unwrap();
                s.send_to(&[0x5a; 4000], SocketAddr::new(to, port)).unwrap();
            }
        })
        .unwrap();
}

/// Real fragments from a host's kernel: with a rule dropping UDP port 53 and the default
/// `forward`, the first fragment of a large UDP/53 datagram meets the rule, and its later
/// fragments, which carry no ports, must not reach the default for want of them. They are
/// unclassifiable (dropped and counted), in user space and in the kernel alike; so are the
/// later fragments of a datagram to another UDP port, which then cannot be put together
/// unless the rules file says `unclassifiable = "forward"`.
#[test]
fn later_fragments_never_pass_a_port_rule_to_the_default() {
    if !privileged() {
        return;
    }
    for extra in [
        &["-m", "drv"][..],
        &["-m", "skb"],
        &["-m", "drv", "--xdp-forward"],
    ] {
        for (rules, other_arrives) in [
            (DROP_DNS.to_string(), false),
            (format!("unclassifiable = \"forward\"\n{DROP_DNS}"), true),
        ] {
            let chain = Chain::bridged_with(&BridgedOptions {
                queues: 1,
                mtu: None,
                ipv6: true,
            })
            .unwrap();
            far_ends_take_xdp_frames(&chain);
            let file = RulesFile::new(&rules);
            let mut args = vec!["--check", "--rules", file.path()];
            args.extend_from_slice(extra);
            let fwd = start_fwd(&chain, &args);
            let (dns, other) = (listen(&chain, 53), listen(&chain, 5353));
            send_large(&chain, 53);
            send_large(&chain, 5353);
            let got = |socks: &[UdpSocket]| socks.iter().map(received).sum::<usize>();
            let (got_dns, got_other) = (got(&dns), got(&other));
            let r = stop_fwd(fwd);
            let why = format!("{extra:?} {rules:?}: {r}");
            assert_eq!(got_dns, 0, "a UDP/53 datagram arrived: {why}");
            // The two first fragments to port 53 meet the rule.
            assert_eq!(r["counters"]["rules"][0]["packets"], 2, "{why}");
            // Two later fragments of each of the four datagrams.
            let u = &r["counters"]["unclassifiable"];
            assert_eq!(u["packets"], 8, "{why}");
            assert_eq!(got_other, if other_arrives { 2 } else { 0 }, "{why}");
        }
    }
}
