//! `xskit fwd` on a three-namespace bump in the wire: a — [m: xskit fwd] — c, a and c on one
//! subnet, m with no address, so every packet between a and c crosses xskit.

// A scenario reads top to bottom as the steps it takes, however many there are.
#![allow(clippy::too_many_lines)]

mod common;

use common::*;

use std::process::Command;
use std::time::Duration;

use xskit_testbed::{Chain, Host};

/// SIGINT, then the JSON summary.
fn interrupt(child: KillOnDrop) -> serde_json::Value {
    signal(child, "-INT")
}

/// `xskit gen` from `from` to `to`'s address and MAC, with the given destination port.
fn gen(from: &Host, to: &Host, dst_port: u16, extra: &[&str]) -> serde_json::Value {
    let (mac, src, dst) = (mac(to), from.ip.to_string(), to.ip.to_string());
    let port = dst_port.to_string();
    let mut args = vec!["gen", "-i", &from.ifname, "--dst-mac", &mac, "--json"];
    args.extend_from_slice(&["--src-ip", &src, "--dst-ip", &dst, "--dst-port", &port]);
    args.extend_from_slice(extra);
    let out = run(from, XSKIT, &args);
    ok(&out);
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// `xskit gen` meant to overload the path: the device may drop frames the forwarder cannot
/// take in time, which gen reports with status 1; any other failure fails the test.
fn gen_overload(from: &Host, to: &Host, extra: &[&str]) -> serde_json::Value {
    let (mac, src, dst) = (mac(to), from.ip.to_string(), to.ip.to_string());
    let mut args = vec!["gen", "-i", &from.ifname, "--dst-mac", &mac, "--json"];
    args.extend_from_slice(&["--src-ip", &src, "--dst-ip", &dst]);
    args.extend_from_slice(extra);
    let out = run(from, XSKIT, &args);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("gen's JSON");
    assert!(
        out.status.success() || j["device_tx_dropped"].as_u64().unwrap_or(0) > 0,
        "{j} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    j
}

fn xdp_attached(host: &Host) -> bool {
    let out = run(host, "ip", &["-d", "link", "show", "dev", &host.ifname]);
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

/// Rules past the walked few, so that the XDP filter looks them up by its vectors: drops
/// for ports nothing here uses, then the probes' rule, then the default for the rest.
fn many_rules_forwarding_the_probes() -> String {
    let mut text = String::from("default = \"forward\"\n");
    for port in 1000..1012 {
        text.push_str(&format!(
            "[[rule]]\nprotocol = \"udp\"\ndst_port = {port}\naction = \"drop\"\n"
        ));
    }
    text.push_str(
        "[[rule]]\nname = \"probes\"\nprotocol = \"udp\"\ndst_port = 9\naction = \"forward\"\n",
    );
    text
}

fn forwards_intact_in_order(mode: &str) {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let rules = RulesFile::new(&many_rules_forwarding_the_probes());
    let fwd = start_fwd(&chain, &["-m", mode, "--check", "--rules", rules.path()]);
    // The kernel stacks of a and c find each other through xskit (ARP, then echo).
    ok(&run(
        &chain.a,
        "ping",
        &["-c", "3", "-i", "0.2", "-W", "2", "198.51.100.3"],
    ));
    ok(&run(
        &chain.c,
        "ping",
        &["-c", "2", "-i", "0.2", "-W", "2", "198.51.100.1"],
    ));
    let count = 20_000u64;
    let n = count.to_string();
    let receiver = recv(&chain.c, &["-m", mode, "-n", &n, "-d", "20"]);
    let g = gen(
        &chain.a,
        &chain.c,
        9,
        &["-m", mode, "-n", &n, "-r", "20000"],
    );
    assert_eq!(g["tx_packets"], count, "{g}");
    let r = json_of(receiver.take());
    assert_eq!(r["valid"], count, "every probe crossed: {r}");
    assert_eq!(r["corrupt"], 0, "payloads unchanged: {r}");
    assert_eq!(r["out_of_order"], 0, "order kept: {r}");
    let report = interrupt(fwd);
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
    let ports = report["counters"]["ports"].as_array().unwrap();
    assert!(ports[0]["tx_packets"].as_u64().unwrap() >= 5, "{report}");
    assert!(
        ports[1]["tx_packets"].as_u64().unwrap() >= count,
        "{report}"
    );
    // Forwarded as they came: rx ring to tx ring, not through the pipeline, by the rule
    // the XDP filter told in front of them, not classified again.
    assert!(
        ports[1]["tx_direct"].as_u64().unwrap() * 2 >= count,
        "{report}"
    );
    assert!(
        ports[0]["rx_told"].as_u64().unwrap() * 2 >= count,
        "{report}"
    );
    assert!(!xdp_attached(&chain.m_a) && !xdp_attached(&chain.m_c));
}

#[test]
fn forwards_intact_in_order_drv() {
    forwards_intact_in_order("drv");
}

#[test]
fn forwards_intact_in_order_skb() {
    forwards_intact_in_order("skb");
}

#[test]
fn a_bad_rules_file_names_line_and_column() {
    let rules = RulesFile::new("default = \"forward\"\n[[rule]]\nprotocol = \"udp\"\ndst_port = \"9-x\"\naction = \"drop\"\n");
    let out = Command::new(XSKIT)
        .args([
            "fwd",
            "-i",
            "xsk-none0",
            "-i",
            "xsk-none1",
            "--rules",
            rules.path(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 4, column 12"), "{err}");
    assert!(err.contains("\"x\" is not a port"), "{err}");
}

#[test]
fn explain_says_where_each_rule_is_decided() {
    let rules = RulesFile::new(
        "default = \"drop\"\n[[rule]]\nname = \"k\"\nprotocol = \"udp\"\ndst_port = 53\naction = \"drop\"\n\
         [[rule]]\nname = \"u\"\nsrc = \"198.51.100.0/24\"\nprotocol = \"udp\"\nsrc_port = 53\naction = \"pass\"\n\
         [[rule]]\nname = \"f\"\nprotocol = \"tcp\"\naction = \"forward\"\n\
         [[rule]]\nname = \"r\"\nprotocol = \"icmp\"\naction = \"rate-limit\"\nrate = \"1kpps\"\n",
    );
    let out = Command::new(XSKIT)
        .args([
            "fwd",
            "--explain",
            "-i",
            "xsk-none0",
            "--rules",
            rules.path(),
        ])
        .output()
        .unwrap();
    let text = ok(&out);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name}: {text}"))
            .to_string()
    };
    assert!(line("k").contains("decided in the kernel"), "{text}");
    assert!(
        line("u").contains("decided in the kernel"),
        "a source prefix and port are read in the kernel: {text}"
    );
    assert!(line("f").contains("carried out in user space"), "{text}");
    assert!(
        line("r").contains("policed in the kernel (XDP): over the rate dropped"),
        "{text}"
    );
}

#[test]
fn rule_counters_are_exact_in_the_kernel_and_in_user_space() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let rules = RulesFile::new(UDP_7_AND_FROM_A_UDP_8);
    let fwd = start_fwd(&chain, &["-m", "drv", "--check", "--rules", rules.path()]);
    let receiver = recv(&chain.c, &["-m", "drv", "-n", "500", "-d", "20"]);
    for (port, n) in [(7, "1000"), (8, "700"), (9, "500")] {
        let g = gen(
            &chain.a,
            &chain.c,
            port,
            &["-m", "drv", "-n", n, "-r", "20000"],
        );
        assert_eq!(g["tx_packets"].to_string(), n, "{g}");
    }
    let r = json_of(receiver.take());
    assert_eq!(r["valid"], 500, "only port 9 crosses: {r}");
    let report = interrupt(fwd);
    let (k, u, d) = (
        rule(&report, "udp-7"),
        rule(&report, "from-a-udp-8"),
        rule(&report, "default"),
    );
    assert_eq!(
        (&k["packets"], &k["in_kernel"]),
        (&1000.into(), &1000.into()),
        "{report}"
    );
    assert_eq!(k["bytes"], 1000 * 64, "{report}");
    assert_eq!(
        (&u["packets"], &u["in_kernel"]),
        (&700.into(), &700.into()),
        "a source prefix is matched in the kernel too: {report}"
    );
    assert_eq!(
        (&d["packets"], &d["in_kernel"]),
        (&500.into(), &0.into()),
        "the default forwards in user space: {report}"
    );
    assert_eq!(
        report["counters"]["ports"][0]["xdp_dropped"], 1700,
        "{report}"
    );
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
}

/// Probes at 10 kpps through a rate limit of `rate` (with `burst`), which lets `pps` probes
/// a second through plus `burst_packets` at once. On any machine, however busy: never more
/// than that over the forwarder's run, at least the burst (the bucket starts full), and fewer
/// than all when the probes came faster than the limit. How closely the limit is kept is
/// tested on virtual time (xskit-fwd's rate limit and bucket tests).
fn rate_limit_holds(rate: &str, burst: u64, pps: f64, burst_packets: f64) {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let rules = RulesFile::new(&format!(
        "[[rule]]\nname = \"limit\"\nprotocol = \"udp\"\naction = \"rate-limit\"\nrate = \"{rate}\"\nburst = {burst}\n"
    ));
    let fwd = start_fwd_lines(&chain, &["-m", "drv", "--rules", rules.path()]);
    let g = gen(
        &chain.a,
        &chain.c,
        9,
        &["-m", "drv", "-n", "30000", "-r", "10000"],
    );
    let sent_in = g["duration_s"].as_f64().unwrap();
    let report = interrupt_when(fwd, Duration::from_secs(60), |line| {
        rule(line, "limit")["packets"] == 30000
    });
    let limit = rule(&report, "limit");
    assert_eq!(limit["packets"], 30000, "{report}");
    let passed = 30000 - limit["over_rate"].as_u64().unwrap();
    let ran = report["duration_s"].as_f64().unwrap();
    let most = pps * ran + burst_packets;
    assert!(
        passed as f64 <= most && passed as f64 >= burst_packets,
        "{rate}: {passed} passed in a run of {ran:.2} s, at most {most:.0}, at least the \
         burst, {burst_packets}: {report}"
    );
    if 30000.0 / sent_in > 1.5 * pps {
        assert!(
            passed < 30000,
            "{rate}: sent faster than the limit, all passed: {report}"
        );
    }
    // What crossed: the passed probes, and c's replies' ARP traffic (default rule).
    let tx = report["counters"]["ports"][1]["tx_packets"]
        .as_u64()
        .unwrap();
    let other = rule(&report, "default")["packets"].as_u64().unwrap();
    assert!(passed <= tx && tx <= passed + other, "{report}");
}

#[test]
fn rate_limit_in_packets_is_never_exceeded() {
    rate_limit_holds("2kpps", 200, 2000.0, 200.0);
}

#[test]
fn rate_limit_in_bits_is_never_exceeded() {
    // 64-byte probes: 1 Mbps is 1953 a second; a 12,800-byte burst is 200 of them.
    rate_limit_holds("1Mbps", 12_800, 1e6 / (64.0 * 8.0), 200.0);
}

#[test]
fn respond_answers_arp_and_ping_from_both_sides() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let fwd = start_fwd(&chain, &["-m", "drv", "--respond", "198.51.100.254"]);
    ok(&run(
        &chain.a,
        "ping",
        &["-c", "3", "-i", "0.2", "-W", "2", "198.51.100.254"],
    ));
    ok(&run(
        &chain.c,
        "ping",
        &["-c", "2", "-i", "0.2", "-W", "2", "198.51.100.254"],
    ));
    // a's kernel learnt the address from our ARP reply.
    let neigh = run(&chain.a, "ip", &["neigh", "show", "198.51.100.254"]);
    assert!(
        String::from_utf8_lossy(&neigh.stdout).contains(&mac(&chain.m_a)),
        "{}",
        String::from_utf8_lossy(&neigh.stdout)
    );
    let report = interrupt(fwd);
    assert_eq!(report["counters"]["echo_replies"], 5, "{report}");
    assert!(
        report["counters"]["arp_replies"].as_u64().unwrap() >= 2,
        "{report}"
    );
}

#[test]
fn the_tap_device_carries_the_hosts_own_traffic_and_pass_rules() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let rules = RulesFile::new(
        "[[rule]]\nname = \"to-host\"\nsrc = \"198.51.100.1\"\nprotocol = \"udp\"\ndst_port = 7\naction = \"pass\"\n",
    );
    let fwd = start_fwd(
        &chain,
        &["-m", "drv", "--tap", "xskit-tap0", "--rules", rules.path()],
    );
    ok(&run(
        &chain.m_a,
        "ip",
        &["addr", "add", "198.51.100.253/24", "dev", "xskit-tap0"],
    ));
    // ARP to the TAP device's kernel and back, then echo through user space both ways.
    ok(&run(
        &chain.a,
        "ping",
        &["-c", "3", "-i", "0.2", "-W", "2", "198.51.100.253"],
    ));
    gen(
        &chain.a,
        &chain.c,
        7,
        &["-m", "drv", "-n", "100", "-r", "10000"],
    );
    let stats = run(
        &chain.m_a,
        "ip",
        &["-s", "-j", "link", "show", "xskit-tap0"],
    );
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let tap_rx = stats[0]["stats64"]["rx"]["packets"].as_u64().unwrap();
    let report = interrupt(fwd);
    assert_eq!(rule(&report, "to-host")["packets"], 100, "{report}");
    let ports = &report["counters"]["ports"];
    assert!(ports[0]["to_kernel"].as_u64().unwrap() >= 103, "{report}");
    assert!(
        ports[0]["from_kernel"].as_u64().unwrap() >= 4,
        "ARP and echo replies: {report}"
    );
    assert!(tap_rx >= 103, "the kernel got {tap_rx} frames");
}

#[test]
fn a_second_forwarder_is_refused_and_the_first_keeps_going() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let fwd = start_fwd(&chain, &["-m", "drv"]);
    let second = run(
        &chain.m_a,
        XSKIT,
        &["fwd", "-i", &chain.m_a.ifname, "-i", &chain.m_c.ifname],
    );
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("xskit_filter") && err.contains("xsk-ma"),
        "{err}"
    );
    ok(&run(
        &chain.a,
        "ping",
        &["-c", "2", "-i", "0.2", "-W", "2", "198.51.100.3"],
    ));
    let report = signal(fwd, "-TERM");
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
    assert!(!xdp_attached(&chain.m_a) && !xdp_attached(&chain.m_c));
    // Bad set-ups fail with the reason, and leave nothing attached.
    let (ma, mc) = (chain.m_a.ifname.as_str(), chain.m_c.ifname.as_str());
    for (args, expected) in [
        (
            vec!["fwd", "-i", ma, "-i", mc, "--queue-count", "2"],
            "queue 1 does not exist on xsk-ma",
        ),
        (
            vec!["fwd", "-i", ma, "-i", ma],
            "both interfaces are xsk-ma",
        ),
        (
            vec!["fwd", "-i", ma],
            "(reflecting is --reflect): with one interface",
        ),
        (
            vec!["fwd", "-i", ma, "-i", mc, "--vector", "300"],
            "vector size 300",
        ),
        (
            vec!["fwd", "-i", ma, "-i", mc, "--tap", "a/b"],
            "TAP device a/b",
        ),
        (
            vec!["fwd", "-i", ma, "-i", mc, "--cpus", "0,99"],
            "CPU 99 does not exist",
        ),
        (
            vec!["fwd", "-i", ma, "-i", mc, "-m", "zc"],
            "(-m zc): zero-copy is not available on xsk-ma (its driver does not offer it; \
             xdp-features: basic redirect",
        ),
        (
            vec!["fwd", "-i", ma, "-i", mc, "--ring-size", "1000"],
            "power of two",
        ),
        (
            vec!["fwd", "-i", ma, "-i", mc, "--ring-size", "1073741824"],
            "power of two from 32 to 32768",
        ),
        (
            vec!["fwd", "-i", ma, "-i", mc, "--ring-size", "8"],
            "power of two from 32 to 32768",
        ),
        (
            vec![
                "fwd",
                "-i",
                ma,
                "-i",
                mc,
                "--ring-size",
                "64",
                "--vector",
                "128",
            ],
            "smaller than the vector size",
        ),
    ] {
        let out = run(&chain.m_a, XSKIT, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expected),
            "{args:?}: {err}"
        );
        assert!(
            !xdp_attached(&chain.m_a) && !xdp_attached(&chain.m_c),
            "{args:?}"
        );
    }
    // The two ends of one veth pair would loop every broadcast: refused, nothing attached.
    ok(&run(
        &chain.m_a,
        "ip",
        &[
            "link", "add", "xsk-p0", "type", "veth", "peer", "name", "xsk-p1",
        ],
    ));
    for end in ["xsk-p0", "xsk-p1"] {
        ok(&run(&chain.m_a, "ip", &["link", "set", end, "up"]));
    }
    let out = run(&chain.m_a, XSKIT, &["fwd", "-i", "xsk-p0", "-i", "xsk-p1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("xsk-p0 and xsk-p1 are the two ends of one veth pair"),
        "{err}"
    );
    let shown = ok(&run(&chain.m_a, "ip", &["-d", "link", "show"]));
    assert!(!shown.contains("prog/xdp"), "{shown}");
}

#[test]
fn live_counters_per_interface_and_rule_every_interval() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let rules =
        RulesFile::new("[[rule]]\nname = \"icmp\"\nprotocol = \"icmp\"\naction = \"forward\"\n");
    let fwd = start_logged(
        &chain.m_a,
        &[
            "fwd",
            "-i",
            &chain.m_a.ifname,
            "-i",
            &chain.m_c.ifname,
            "-m",
            "skb",
            "--rules",
            rules.path(),
            "-I",
            "0.5",
            "-d",
            "3",
        ],
    );
    ok(&run(
        &chain.a,
        "ping",
        &["-c", "4", "-i", "0.2", "-W", "2", "198.51.100.3"],
    ));
    let text = fwd.finish();
    let ticks = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
    assert!(ticks("xsk-ma ") >= 4 && ticks("xsk-mc ") >= 4, "{text}");
    assert!(
        ticks("rule icmp") >= 4 && ticks("rule default") >= 4,
        "{text}"
    );
    assert!(text.contains("stopped after"), "{text}");
    let summary = text
        .lines()
        .find(|l| l.contains("rule icmp") && l.contains("packets"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        summary.contains("packets 8 "),
        "4 requests and 4 replies: {summary}"
    );
}

#[test]
fn reflect_sends_every_packet_back_with_macs_swapped() {
    use xskit::{Mode, Port, PortConfig};
    use xskit_traffic::probe::{self, Endpoints, Flows, Probe, Template};
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let fwd = KillOnDrop::new(start(
        &chain.m_a,
        &[
            "fwd",
            "-i",
            &chain.m_a.ifname,
            "--reflect",
            "-m",
            "drv",
            "--check",
            "--json",
        ],
    ));
    let a_if = chain.a.ifname.clone();
    let mut port = chain
        .a
        .ns
        .run(|| Port::open(&a_if, 0, &PortConfig::default().mode(Mode::Drv)))
        .unwrap()
        .unwrap();
    let template = Template::new(
        Endpoints {
            src_mac: chain.a.mac,
            dst_mac: chain.m_a.mac,
            src_ip: chain.a.ip.into(),
            dst_ip: chain.c.ip.into(),
            src_port: 40000,
            dst_port: 9,
        },
        Flows::default(),
        None,
        64,
    )
    .unwrap();
    let umem = port.umem().clone();
    let count = 5000u64;
    let (mut batch, mut got, mut seqs) = (Vec::new(), Vec::new(), Vec::new());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut next = 0;
    while (seqs.len() as u64) < count && std::time::Instant::now() < deadline {
        // A few in flight at a time, so no ring on the way overflows.
        while next < count && next < seqs.len() as u64 + 64 {
            port.alloc(&mut batch, 1);
            let f = batch.last_mut().unwrap();
            let len = template.write(umem.buffer_mut(f), next, 0).unwrap();
            umem.set_len(f, len).unwrap();
            next += 1;
        }
        while !batch.is_empty() {
            port.send(&mut batch).unwrap();
        }
        port.complete();
        port.receive(&mut got, 64).unwrap();
        for f in &got {
            let data = umem.data(f);
            assert_eq!(
                &data[..12],
                &[chain.a.mac, chain.m_a.mac].concat()[..],
                "swapped"
            );
            match probe::check(data) {
                Probe::Valid { seq, .. } => seqs.push(seq),
                other => panic!("{other:?}"),
            }
        }
        port.recycle(&mut got);
    }
    assert_eq!(seqs, (0..count).collect::<Vec<_>>(), "all back, in order");
    let report = interrupt(fwd);
    assert_eq!(
        report["counters"]["ports"][0]["tx_packets"], count,
        "{report}"
    );
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
}

/// Load in both directions while the forwarder checks its accounting after every vector;
/// `stop` ends it: its own timer, or SIGINT in the middle of the load.
fn accounting_under_load(duration: Option<&str>) {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let mut args = vec!["-m", "drv", "--check"];
    if let Some(d) = duration {
        args.extend_from_slice(&["-d", d]);
    }
    let fwd = match duration {
        Some(_) => start_fwd(&chain, &args),
        None => start_fwd_lines(&chain, &args),
    };
    let seconds = duration
        .map_or(3.0, |d| d.parse::<f64>().unwrap() - 1.0)
        .to_string();
    let (a, c) = (&chain.a, &chain.c);
    let report = std::thread::scope(|s| {
        let there = s.spawn(|| gen_overload(a, c, &["-m", "drv", "-d", &seconds]));
        let back = s.spawn(|| gen_overload(c, a, &["-m", "drv", "-d", &seconds, "-r", "100000"]));
        let report = match duration {
            Some(_) => json_of(fwd.take()),
            // Stopped once both directions' load is coming through.
            None => interrupt_when(fwd, Duration::from_secs(60), |line| {
                let rx = |i: usize| line["counters"]["ports"][i]["rx_packets"].as_u64().unwrap();
                rx(0) >= 20_000 && rx(1) >= 20_000
            }),
        };
        there.join().unwrap();
        back.join().unwrap();
        report
    });
    let frames = &report["frames"];
    assert_eq!(frames["unaccounted"], 0, "{report}");
    assert_eq!(
        frames["total"].as_u64().unwrap(),
        ["pool", "fill", "rx", "tx", "kernel_held"]
            .iter()
            .map(|k| frames[k].as_u64().unwrap())
            .sum::<u64>()
    );
    let ports = report["counters"]["ports"].as_array().unwrap();
    assert!(
        ports[0]["rx_packets"].as_u64().unwrap() > 10_000,
        "{report}"
    );
    assert!(
        ports[1]["rx_packets"].as_u64().unwrap() > 10_000,
        "{report}"
    );
    assert!(!xdp_attached(&chain.m_a) && !xdp_attached(&chain.m_c));
}

#[test]
fn frame_accounting_is_exact_after_a_ten_second_run() {
    accounting_under_load(Some("10"));
}

#[test]
fn frame_accounting_is_exact_after_sigint_under_load() {
    accounting_under_load(None);
}

#[test]
fn one_pinned_worker_per_queue() {
    use xskit::{Mode, Port, PortConfig};
    use xskit_traffic::probe::{self, Probe};
    if !privileged() {
        return;
    }
    let chain = Chain::bridged_queues(2).unwrap();
    let fwd = start_fwd(&chain, &["-m", "drv", "--check", "--cpus", "0,1"]);
    let c_if = chain.c.ifname.clone();
    let mut ports = chain
        .c
        .ns
        .run(|| Port::open_queues(&c_if, &[0, 1], &PortConfig::default().mode(Mode::Drv)))
        .unwrap()
        .unwrap();
    // Fewer than an rx ring holds: c reads them after both generators are done.
    let count = 1000u64;
    let n = count.to_string();
    for q in ["0", "1"] {
        let g = gen(
            &chain.a,
            &chain.c,
            9,
            &["-m", "drv", "-q", q, "-n", &n, "-r", "20000"],
        );
        assert_eq!(g["tx_packets"], count, "{g}");
    }
    // Queue k's packets reach only worker k's sockets, and leave on queue k: each queue's
    // exact, ordered count at c shows each worker forwarded its own.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut seqs = [Vec::new(), Vec::new()];
    let mut frames = Vec::new();
    while seqs.iter().any(|s| (s.len() as u64) < count) && std::time::Instant::now() < deadline {
        for (q, port) in ports.iter_mut().enumerate() {
            port.receive(&mut frames, 64).unwrap();
            let umem = port.umem().clone();
            for f in &frames {
                if let Probe::Valid { seq, .. } = probe::check(umem.data(f)) {
                    seqs[q].push(seq);
                }
            }
            port.recycle(&mut frames);
        }
    }
    for (q, s) in seqs.iter().enumerate() {
        assert_eq!(s, &(0..count).collect::<Vec<_>>(), "queue {q}");
    }
    let report = interrupt(fwd);
    assert_eq!(report["workers"], 2, "{report}");
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
}

#[test]
fn xdp_forward_keeps_decided_packets_in_the_kernel() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    // The limit (which no probe here exceeds) is policed in XDP, and its packets forwarded
    // there.
    let rules = RulesFile::new(
        "[[rule]]\nname = \"limit-a-udp-8\"\nsrc = \"198.51.100.1\"\nprotocol = \"udp\"\ndst_port = 8\naction = \"rate-limit\"\nrate = \"10kpps\"\nburst = 1000\n",
    );
    let fwd = start_fwd(
        &chain,
        &[
            "-m",
            "drv",
            "--check",
            "--xdp-forward",
            "--rules",
            rules.path(),
        ],
    );
    // c's receiver attaches a native program, so xsk-c takes XDP frames from m_c.
    let receiver = recv(&chain.c, &["-m", "drv", "-n", "800", "-d", "20"]);
    for (port, n) in [(8, "300"), (9, "500")] {
        let g = gen(
            &chain.a,
            &chain.c,
            port,
            &["-m", "drv", "-n", n, "-r", "20000"],
        );
        assert_eq!(g["tx_packets"].to_string(), n, "{g}");
    }
    let r = json_of(receiver.take());
    assert_eq!(r["valid"], 800, "{r}");
    // Each stream numbers its probes from 0: one step back where the second begins, none
    // inside either.
    assert_eq!(r["out_of_order"], 1, "{r}");
    let report = interrupt(fwd);
    let (u, d) = (rule(&report, "limit-a-udp-8"), rule(&report, "default"));
    // A probe whose correct checksum happens to equal its pseudo-header sum (1 in 65,536)
    // looks partial: the filter sends it up to be finished, and says so.
    let a_side = &report["counters"]["ports"][0];
    let partial = a_side["xdp_partial_checksums"].as_u64().unwrap();
    assert_eq!((&u["packets"], &d["packets"]), (&300.into(), &500.into()));
    assert_eq!(u["over_rate"], 0, "{report}");
    let in_kernel = u["in_kernel"].as_u64().unwrap() + d["in_kernel"].as_u64().unwrap();
    assert_eq!(in_kernel, 800 - partial, "{report}");
    assert_eq!(
        a_side["rx_packets"], partial,
        "only what user space decides comes up: {report}"
    );
    assert_eq!(a_side["xdp_forwarded"], 800 - partial, "{report}");
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");

    let refused = run(
        &chain.m_a,
        XSKIT,
        &["fwd", "-i", &chain.m_a.ifname, "--reflect", "--xdp-forward"],
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("forwarding in XDP needs"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// `--json-lines`: an object every interval, then the summary; every object says which
/// command and schema it is, and the interval objects' counters grow to the summary's.
#[test]
fn json_lines_stream_one_object_per_interval_then_the_summary() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let fwd = start_fwd_printing(&chain, &["--json-lines", "-I", "0.2"], &[]);
    gen(&chain.a, &chain.c, 9, &["-n", "300", "-r", "1000"]);
    let rx = |o: &serde_json::Value| o["counters"]["ports"][0]["rx_packets"].as_u64().unwrap();
    // Stopped once an interval line has counted every probe and half a second has passed.
    let objects = lines_until(fwd, Duration::from_secs(60), |o| {
        rx(o) >= 300 && o["elapsed_s"].as_f64().unwrap() > 0.5
    });
    let text = format!("{objects:?}");
    assert!(objects.len() >= 3, "{text}");
    for o in &objects {
        assert_eq!(o["command"], "fwd", "{o}");
        assert_eq!(o["schema_version"], 1, "{o}");
    }
    let (intervals, summary) = objects.split_at(objects.len() - 1);
    let summary = &summary[0];
    assert!(intervals.iter().all(|o| o["interval"] == true), "{text}");
    assert!(summary["duration_s"].as_f64().unwrap() > 0.0, "{summary}");
    assert_eq!(summary["frames"]["unaccounted"], 0, "{summary}");
    let seen: Vec<u64> = intervals.iter().map(rx).collect();
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert!(
        rx(summary) >= 300 && rx(summary) >= *seen.last().unwrap(),
        "{summary}"
    );
}

/// Prometheus's own OpenMetrics parser (Debian's python3-prometheus-client, for the system
/// python) reads what `curl` fetches
/// from a forwarder's `--metrics` endpoint.
fn scrape(host: &Host, url: &str) -> Vec<(String, String, serde_json::Value, f64)> {
    let out = run(
        host,
        "sh",
        &[
            "-c",
            &format!(
                "curl -sf {url} | /usr/bin/python3 -c '{}'",
                r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        print(json.dumps([family.type, s.name, s.labels, s.value]))
"#
            ),
        ],
    );
    ok(&out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v[0].as_str().unwrap().to_string(),
                v[1].as_str().unwrap().to_string(),
                v[2].clone(),
                v[3].as_f64().unwrap(),
            )
        })
        .collect()
}

/// `xskit fwd` between m's interfaces with `--metrics` on m's loopback, and its URL.
fn fwd_with_metrics(chain: &Chain) -> (KillOnDrop, String) {
    let (a, c) = (&chain.m_a.ifname, &chain.m_c.ifname);
    let mut child = chain
        .m_a
        .ns
        .command(XSKIT)
        .args(["fwd", "-i", a, "-i", c, "--json", "-I", "0.2"])
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let fwd = KillOnDrop::new(child);
    for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
        let line = line.unwrap();
        if let Some(at) = line.split("metrics at ").nth(1) {
            return (fwd, at.trim().to_string());
        }
        assert!(!line.starts_with("xskit:"), "{line}");
    }
    panic!("fwd says where its metrics are");
}

/// A field of /proc/PID/status, as a number (threads; kB of memory).
fn proc_status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{field} in {status}"))
}

/// `--metrics` under abuse, while the forwarder forwards: 300 connections opened and held
/// without a request, and a client sending its request a byte every half second. The
/// endpoint's threads and memory stay as they were (no thread per connection), a scrape is
/// answered while they are held (an idle connection takes no worker), the held ones and the
/// slow client are closed unanswered at their deadline, and forwarding goes on.
#[test]
fn the_metrics_endpoint_stays_bounded_under_held_and_slow_connections() {
    use std::io::{Read, Write};
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let (fwd, url) = fwd_with_metrics(&chain);
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("an address in {url}"));
    let ns = &chain.m_a.ns;
    let connect = || {
        ns.run(|| std::net::TcpStream::connect(addr))
            .unwrap()
            .unwrap()
    };
    let pid = fwd.id();
    // Up and forwarding (its workers start after the endpoint): then its threads are all
    // there.
    gen(&chain.a, &chain.c, 9, &["-n", "100", "-r", "1000"]);
    assert!(!scrape(&chain.m_a, &url).is_empty(), "a first scrape");
    let (threads, rss) = (proc_status(pid, "Threads"), proc_status(pid, "VmRSS"));
    let mut slow = connect();
    let slow_client = std::thread::spawn(move || {
        let request = b"GET /metrics HTTP/1.1\r\nHost: xskit\r\n\r\n";
        for b in request {
            if slow.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let mut answer = String::new();
        slow.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let _ = slow.read_to_string(&mut answer);
        answer
    });
    let mut held: Vec<std::net::TcpStream> = (0..300).map(|_| connect()).collect();
    let sent = gen(&chain.a, &chain.c, 9, &["-n", "2000", "-r", "4000"]);
    assert_eq!(sent["tx_packets"], 2000, "{sent}");
    assert_eq!(proc_status(pid, "Threads"), threads, "threads while held");
    let grown = proc_status(pid, "VmRSS").saturating_sub(rss);
    assert!(
        grown < 16 * 1024,
        "RSS grew by {grown} kB under 300 connections"
    );
    let samples = scrape(&chain.m_a, &url);
    assert!(
        samples
            .iter()
            .any(|(_, n, _, _)| n == "xskit_rx_packets_total"),
        "a scrape while 300 connections are held: {samples:?}"
    );
    for stream in &mut held {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut answer = String::new();
        // Every held connection ends, closed unanswered at its deadline.
        stream
            .read_to_string(&mut answer)
            .unwrap_or_else(|e| panic!("a held connection was never closed: {e}"));
        assert_eq!(answer, "", "a held connection got an answer");
    }
    let slow_answer = slow_client.join().unwrap();
    assert!(
        !slow_answer.contains("200 OK"),
        "the slow client was answered: {slow_answer}"
    );
    drop(held);
    let summary = interrupt(fwd);
    let out = summary["counters"]["ports"][1]["tx_packets"]
        .as_u64()
        .unwrap();
    assert!(out >= 2000, "forwarding went on: {summary}");
}

/// `--metrics`: scraped while the forwarder runs, the endpoint is valid OpenMetrics, names
/// the ports, rules and pool, and its counters agree with the summary printed at the end.
#[test]
fn metrics_scraped_during_a_run_agree_with_the_summary() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let (a, c) = (&chain.m_a.ifname, &chain.m_c.ifname);
    let (fwd, url) = fwd_with_metrics(&chain);
    gen(&chain.a, &chain.c, 9, &["-n", "300", "-r", "1000"]);
    // Scraped until a snapshot holds every probe (or a minute passed: the checks then fail).
    let value = |samples: &[(String, String, serde_json::Value, f64)], name: &str| {
        samples
            .iter()
            .find(|(_, n, l, _)| n == name && (l["interface"] == *a || l["rule"] == "default"))
            .map_or(0.0, |s| s.3)
    };
    let mut samples = scrape(&chain.m_a, &url);
    xskit_testbed::wait_for(Duration::from_secs(60), || {
        samples = scrape(&chain.m_a, &url);
        (value(&samples, "xskit_rx_packets_total") >= 300.0
            && value(&samples, "xskit_rule_packets_total") >= 300.0)
            .then_some(())
    });
    let find = |name: &str, label: (&str, &str)| {
        samples
            .iter()
            .find(|(_, n, l, _)| n == name && l[label.0] == label.1)
            .unwrap_or_else(|| panic!("{name} {label:?} in {samples:?}"))
    };
    let (kind, _, _, rx) = find("xskit_rx_packets_total", ("interface", a));
    assert_eq!(kind, "counter");
    assert!(*rx >= 300.0, "{rx}");
    find("xskit_tx_packets_total", ("interface", c));
    // XDP_STATISTICS, named as gen, recv and bench name them.
    find("xskit_statistics_rx_ring_full_total", ("interface", a));
    find("xskit_statistics_tx_invalid_descs_total", ("interface", c));
    // Where the frames are, as levels.
    let umem = samples
        .iter()
        .find(|(_, n, _, _)| n == "xskit_frames_umem")
        .unwrap_or_else(|| panic!("xskit_frames_umem in {samples:?}"));
    assert_eq!(umem.0, "gauge");
    assert!(umem.3 > 0.0);
    let (_, _, _, rule) = find("xskit_rule_packets_total", ("rule", "default"));
    assert!(*rule >= 300.0, "{rule}");
    find("xskit_rule_info", ("action", "forward"));
    find("xskit_build_info", ("command", "fwd"));
    assert!(
        samples
            .iter()
            .any(|(_, n, _, _)| n == "xskit_pool_alloc_fast_total"),
        "{samples:?}"
    );
    let status = Command::new("kill")
        .args(["-INT", &fwd.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let summary = json_of(fwd.take());
    let ports = &summary["counters"]["ports"];
    let summary_rx = ports[0]["rx_packets"].as_f64().unwrap();
    assert!(
        ports[0]["statistics"]["rx_fill_ring_empty_descs"].is_u64(),
        "{summary}"
    );
    assert!(
        summary_rx >= *rx && summary_rx - *rx < 50.0,
        "scraped {rx}, summary {summary_rx}"
    );
}

/// `--capture`: a pcapng of what the forwarder's programs saw, each packet with its verdict
/// and rule as a comment that Wireshark shows: the kernel's drops, the rule the kernel cannot
/// match exactly (sent to user space), and the default; one interface block per interface.
#[test]
fn capture_writes_each_packets_verdict_and_rule_for_wireshark() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let rules = RulesFile::new(UDP_7_AND_FROM_A_UDP_8);
    let file =
        std::env::temp_dir().join(format!("xskit-fwd-capture-{}.pcapng", std::process::id()));
    let path = file.to_str().unwrap();
    let fwd = start_fwd_lines(
        &chain,
        &["-m", "drv", "--rules", rules.path(), "--capture", path],
    );
    for (port, n) in [(7, "50"), (8, "30"), (9, "20")] {
        gen(
            &chain.a,
            &chain.c,
            port,
            &["-m", "drv", "-n", n, "-r", "2000"],
        );
    }
    let summary = interrupt_when(fwd, Duration::from_secs(60), |line| {
        rule(line, "udp-7")["packets"] == 50
            && rule(line, "from-a-udp-8")["packets"] == 30
            && rule(line, "default")["packets"].as_u64().unwrap() >= 20
    });
    assert!(
        summary["capture"]["captured"].as_u64().unwrap() >= 100,
        "{summary}"
    );
    assert_eq!(summary["capture"]["skipped"], 0, "{summary}");
    let info = wireshark("capinfos", &[path]);
    assert!(info.contains("Number of interfaces in file: 2"), "{info}");
    let count = |filter: &str| {
        wireshark("tshark", &["-r", path, "-Y", filter])
            .lines()
            .count()
    };
    assert_eq!(
        count(r#"udp.dstport == 7 && frame.comment contains "dropped in XDP: rule udp-7 (drop)""#),
        50
    );
    assert_eq!(
        count(
            r#"udp.dstport == 8 && frame.comment contains "dropped in XDP: rule from-a-udp-8 (drop)""#
        ),
        30
    );
    assert_eq!(
        count(
            r#"udp.dstport == 9 && !icmp && frame.comment contains "to xskit fwd in user space: the default (forward)""#
        ),
        20
    );
    // c's port-unreachable answers came back through the forwarder too, and say so.
    let icmp_back = format!(r#"icmp && frame.interface_name == "{}""#, chain.m_c.ifname);
    assert!(count(&icmp_back) > 0);
    std::fs::remove_file(&file).unwrap();
}

/// `--capture-rate`: the cap holds, and what it skipped is counted.
#[test]
fn capture_rate_caps_and_counts_what_it_skips() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let file =
        std::env::temp_dir().join(format!("xskit-fwd-cap-rate-{}.pcapng", std::process::id()));
    let path = file.to_str().unwrap();
    let fwd = start_fwd_lines(&chain, &["--capture", path, "--capture-rate", "10"]);
    gen(&chain.a, &chain.c, 9, &["-n", "500", "-r", "5000"]);
    let summary = interrupt_when(fwd, Duration::from_secs(60), |line| {
        line["counters"]["ports"][0]["rx_packets"].as_u64().unwrap() >= 500
    });
    let capture = &summary["capture"];
    let (captured, skipped) = (
        capture["captured"].as_u64().unwrap(),
        capture["skipped"].as_u64().unwrap(),
    );
    // 10 a second, per CPU: at most 10 per CPU in each second the probes took (0.1 s here,
    // within at most two windows).
    assert!(captured <= 40, "{summary}");
    assert!(
        captured + skipped >= 500,
        "every probe captured or counted: {summary}"
    );
    let info = wireshark("capinfos", &["-c", path]);
    assert!(
        info.contains(&format!("Number of packets:   {captured}")),
        "{info}"
    );
    std::fs::remove_file(&file).unwrap();
}

/// Rules on TCP flags and ICMP types against the hosts' own kernel stacks: a rule dropping
/// connection requests (`syn,!ack`) to one port makes the kernel's connect(2) there time out
/// while TCP to another port connects and carries data, and one dropping echo requests stops
/// ping; both decided in XDP.
/// A kernel TCP listener on c's `port`.
fn listen_on_c(chain: &Chain, port: u16) -> std::net::TcpListener {
    let at = std::net::SocketAddr::from((chain.c.ip, port));
    chain
        .c
        .ns
        .run(move || std::net::TcpListener::bind(at))
        .unwrap()
        .unwrap()
}

/// A kernel TCP connection from a to c's `port`, given 3 s.
fn connect_from_a(chain: &Chain, port: u16) -> std::io::Result<std::net::TcpStream> {
    let to = std::net::SocketAddr::from((chain.c.ip, port));
    chain
        .a
        .ns
        .run(move || std::net::TcpStream::connect_timeout(&to, Duration::from_secs(3)))
        .unwrap()
}

#[test]
fn tcp_flag_and_icmp_rules_stop_kernel_connects_and_pings_in_xdp() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let rules = RulesFile::new(
        "[[rule]]\nname = \"syn-5201\"\nprotocol = \"tcp\"\ntcp_flags = \"syn,!ack\"\n\
         dst_port = 5201\naction = \"drop\"\n\
         [[rule]]\nname = \"echo-requests\"\nprotocol = \"icmp\"\nicmp_type = 8\naction = \"drop\"\n",
    );
    let fwd = start_fwd(&chain, &["-m", "drv", "--rules", rules.path()]);
    let (dropped, open) = (listen_on_c(&chain, 5201), listen_on_c(&chain, 5202));
    let connect = |port: u16| connect_from_a(&chain, port);
    let refused = connect(5201);
    assert!(refused.is_err(), "the SYN to 5201 was dropped: {refused:?}");
    let mut stream = connect(5202).expect("TCP to 5202 connects through fwd");
    let (mut accepted, _) = open.accept().unwrap();
    std::io::Write::write_all(&mut stream, b"xskit").unwrap();
    let mut got = [0u8; 5];
    std::io::Read::read_exact(&mut accepted, &mut got).unwrap();
    assert_eq!(&got, b"xskit");
    let ping = run(
        &chain.a,
        "ping",
        &["-c", "2", "-W", "1", &chain.c.ip.to_string()],
    );
    assert!(!ping.status.success(), "echo requests were dropped");
    drop((dropped, stream, accepted));
    let report = interrupt(fwd);
    let (syn, echo) = (rule(&report, "syn-5201"), rule(&report, "echo-requests"));
    assert!(
        syn["in_kernel"].as_u64() > Some(0) && syn["in_kernel"] == syn["packets"],
        "{report}"
    );
    assert!(
        echo["in_kernel"].as_u64() >= Some(2) && echo["in_kernel"] == echo["packets"],
        "{report}"
    );
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
}

/// A blocklist file in Spamhaus DROP's format, an inline set and a port set, named by rules:
/// the kernel's pings from a listed source and SYNs to a listed destination and port are
/// dropped in XDP, other connections cross.
#[test]
fn prefix_sets_from_a_blocklist_file_drop_listed_sources_in_xdp() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let list = RulesFile::new(&format!(
        "; Spamhaus DROP List, in its format\n203.0.113.0/24 ; SBL100\n{}/32 ; SBL101\n\
         2001:db8:ffff::/48 ; SBL102\n",
        chain.a.ip
    ));
    let rules = RulesFile::new(&format!(
        "[[set]]\nname = \"attackers\"\nfile = \"{}\"\n\
         [[set]]\nname = \"protected\"\nprefixes = [\"{}\", \"198.51.100.128/25\"]\n\
         [[set]]\nname = \"closed\"\nports = [5201, \"6000-6010\"]\n\
         [[rule]]\nname = \"listed-pings\"\nsrc = \"@attackers\"\nprotocol = \"icmp\"\naction = \"drop\"\n\
         [[rule]]\nname = \"protected-5201\"\ndst = \"@protected\"\nprotocol = \"tcp\"\n\
         dst_port = \"@closed\"\naction = \"drop\"\n",
        list.path(),
        chain.c.ip
    ));
    let fwd = start_fwd(&chain, &["-m", "drv", "--rules", rules.path()]);
    let (dropped, open) = (listen_on_c(&chain, 5201), listen_on_c(&chain, 5202));
    let connect = |port: u16| connect_from_a(&chain, port);
    let refused = connect(5201);
    assert!(refused.is_err(), "the SYN to 5201 was dropped: {refused:?}");
    let stream = connect(5202).expect("TCP to 5202 connects through fwd");
    let ping = run(
        &chain.a,
        "ping",
        &["-c", "2", "-W", "1", &chain.c.ip.to_string()],
    );
    assert!(
        !ping.status.success(),
        "pings from a listed source were dropped"
    );
    drop((dropped, open, stream));
    let report = interrupt(fwd);
    for name in ["listed-pings", "protected-5201"] {
        let r = rule(&report, name);
        assert!(
            r["in_kernel"].as_u64() > Some(0) && r["in_kernel"] == r["packets"],
            "{name}: {report}"
        );
    }
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
}

/// A set with a timeout and counters: a's pings are dropped in XDP while its element lives,
/// each counted on it; once the element has expired they cross, and the summary lists the
/// element, expired, with every ping it matched.
#[test]
fn a_sets_element_drops_until_it_expires_and_counts_what_it_matched() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let rules = RulesFile::new(&format!(
        "[[set]]\nname = \"cooling\"\ncounters = true\n\
         prefixes = [\"{}/32 timeout 5s\", \"203.0.113.0/24\"]\n\
         [[rule]]\nname = \"cooling-pings\"\nsrc = \"@cooling\"\nprotocol = \"icmp\"\n\
         action = \"drop\"\n",
        chain.a.ip
    ));
    let fwd = start_fwd(&chain, &["-m", "drv", "--rules", rules.path()]);
    let c = chain.c.ip.to_string();
    let ping = run(&chain.a, "ping", &["-c", "2", "-W", "1", &c]);
    assert!(
        !ping.status.success(),
        "pings from a live element were dropped"
    );
    // The condition the element's expiry brings: a ping crosses (within a minute).
    let crossed = (0..60).any(|_| {
        run(&chain.a, "ping", &["-c", "1", "-W", "1", &c])
            .status
            .success()
    });
    assert!(crossed, "a's pings crossed once its element expired");
    let after = run(&chain.a, "ping", &["-c", "3", "-i", "0.2", "-W", "2", &c]);
    assert_eq!(
        pings_received(&after),
        3,
        "after the expiry every ping crosses"
    );
    let report = interrupt(fwd);
    let r = rule(&report, "cooling-pings");
    let dropped = r["in_kernel"].as_u64().unwrap();
    assert!(dropped >= 2 && r["packets"] == dropped, "{report}");
    let set = &report["counters"]["sets"][0];
    assert_eq!(
        (&set["name"], &set["elements"], &set["expired"]),
        (&"cooling".into(), &2.into(), &1.into()),
        "{report}"
    );
    let element = &set["top"][0];
    assert_eq!(element["element"], format!("{}/32", chain.a.ip), "{report}");
    assert_eq!(
        element["packets"], dropped,
        "each dropped ping matched it: {report}"
    );
    assert_eq!(element["left_s"], 0, "{report}");
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
}

/// 10,000 host addresses spread over the IPv4 space, none in the testbed's own /24s, one a
/// line: a botnet's sources.
fn scattered_sources() -> String {
    let mut seen = std::collections::HashSet::new();
    let mut x: u32 = 0x2545_f491;
    let mut text = String::new();
    while seen.len() < 10_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let own = [0x00C6_3364_u32, 0x00CB_0071].contains(&(x >> 8));
        if !own && seen.insert(x) {
            text += &format!("{}\n", std::net::Ipv4Addr::from(x));
        }
    }
    text
}

/// A flood from 10,000 sources listed in a set (the live-frames generator sending each frame
/// from the next address of the list) is dropped in XDP, every packet of it on the rule's
/// kernel count, while the kernel's ping and an HTTP download cross the forwarder intact; the
/// same with the set's elements counted (`counters = true`), whose counts add up to the drops.
#[test]
fn a_flood_from_ten_thousand_listed_sources_drops_in_xdp_while_ping_and_http_cross() {
    if !privileged() {
        return;
    }
    for counted in [false, true] {
        flood_from_a_listed_botnet(counted);
    }
}

fn flood_from_a_listed_botnet(counted: bool) {
    let chain = Chain::bridged().unwrap();
    let list = RulesFile::new(&scattered_sources());
    let rules = RulesFile::new(&format!(
        "[[set]]\nname = \"botnet\"\nfile = \"{}\"\ncounters = {counted}\n\
         [[rule]]\nname = \"botnet\"\nsrc = \"@botnet\"\naction = \"drop\"\n",
        list.path()
    ));
    let fwd = start_fwd(&chain, &["-m", "drv", "--rules", rules.path()]);
    let flood = KillOnDrop::new(start(
        &chain.a,
        &[
            "gen",
            "--engine",
            "live",
            "-i",
            &chain.a.ifname,
            "--src-list",
            list.path(),
            "--dst-mac",
            &mac(&chain.c),
            "--dst-ip",
            &chain.c.ip.to_string(),
            "-r",
            "20000",
            "-d",
            "300",
            "--json",
        ],
    ));
    let ping = run(
        &chain.a,
        "ping",
        &["-c", "10", "-i", "0.2", "-W", "2", &chain.c.ip.to_string()],
    );
    http_download(&chain.a, &chain.c);
    let sent = flood_report(flood);
    let report = stop_fwd(fwd);
    assert_eq!(
        pings_received(&ping),
        10,
        "counted {counted}: every ping crossed during the flood"
    );
    assert_eq!(sent["flows"], 10_000, "{sent}");
    let botnet = rule(&report, "botnet");
    // a's transmit drops count the kernel's own packets as well as the flood's.
    let sent_n = sent["tx_packets"].as_u64().unwrap();
    let left = sent_n - sent["device_tx_dropped"].as_u64().unwrap();
    let dropped = botnet["in_kernel"].as_u64().unwrap();
    assert!(
        (left..=sent_n).contains(&dropped) && botnet["packets"] == dropped,
        "counted {counted}: every frame of the flood that left a ({left} to {sent_n}) was \
         dropped in XDP: {sent} {report}"
    );
    if counted {
        let set = &report["counters"]["sets"][0];
        assert_eq!(set["packets"], dropped, "the elements' counts: {set}");
        assert!(!set["top"].as_array().unwrap().is_empty(), "{set}");
    }
}

/// SIGINT to a live-frames flood, then its summary, whatever its status: a veth whose peer's
/// ring is full drops frames (counted as `device_tx_dropped`), and gen's status says so.
fn flood_report(flood: KillOnDrop) -> serde_json::Value {
    let status = Command::new("kill")
        .args(["-INT", &flood.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = flood.take().wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "gen's summary: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Replies `ping` reports in its summary ("N received").
fn pings_received(out: &std::process::Output) -> u64 {
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(',')
        .find_map(|part| part.trim().strip_suffix(" received")?.parse().ok())
        .unwrap_or_else(|| panic!("no summary from ping: {text}"))
}

/// Thousands of rules are looked up in XDP by their bit vectors: behind 4,095 rules that take
/// nothing of the hosts' traffic, the last drops a's UDP to port 9, every frame counted on it
/// in the kernel; ping and TCP both ways cross untouched, and the summary counts every rule.
#[test]
fn the_last_of_four_thousand_rules_drops_in_xdp_and_the_rest_crosses() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let mut text = String::new();
    for i in 0..4095 {
        let shape = match i % 3 {
            0 => format!("protocol = \"tcp\"\ndst_port = {}", 20_000 + i),
            1 => format!("dst = \"203.0.113.{}/32\"", i % 256),
            _ => format!(
                "protocol = \"udp\"\nsrc_port = \"{}-{}\"",
                1000 + i,
                1001 + i
            ),
        };
        text += &format!("[[rule]]\nname = \"r{i}\"\n{shape}\naction = \"drop\"\n");
    }
    text += &format!(
        "[[rule]]\nname = \"last\"\nsrc = \"{}/32\"\nprotocol = \"udp\"\ndst_port = 9\n\
         action = \"drop\"\n",
        chain.a.ip
    );
    let rules = RulesFile::new(&text);
    let fwd = start_fwd(&chain, &["-m", "drv", "--rules", rules.path()]);
    kernel_traffic_crosses(&chain.a, &chain.c, 2);
    let g = gen(
        &chain.a,
        &chain.c,
        9,
        &["-m", "drv", "-n", "1000", "-r", "20000"],
    );
    assert_eq!(g["tx_packets"], 1000, "{g}");
    let report = interrupt(fwd);
    let last = rule(&report, "last");
    assert_eq!(
        (&last["packets"], &last["in_kernel"]),
        (&1000.into(), &1000.into()),
        "{last}"
    );
    let rules = report["counters"]["rules"].as_array().expect("the rules");
    assert_eq!(rules.len(), 4096 + 1, "every rule and the default");
    assert_eq!(rule(&report, "r0")["packets"], 0);
    assert_eq!(report["frames"]["unaccounted"], 0, "{}", report["frames"]);
}

/// A rate limit polices in the XDP program: a's pings beyond its burst and rate are dropped
/// there and counted on the rule; those within it cross to c (forwarded in XDP, or by user
/// space, which does not police them again) and are answered.
fn a_rate_limit_drops_over_its_rate_in_xdp(extra: &[&str]) {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    far_ends_take_xdp_frames(&chain);
    let rules = RulesFile::new(&format!(
        "[[rule]]\nname = \"ping-limit\"\nsrc = \"{}/32\"\nprotocol = \"icmp\"\n\
         action = \"rate-limit\"\nrate = \"1pps\"\nburst = 3\n",
        chain.a.ip
    ));
    let mut args = vec!["-m", "drv", "--rules", rules.path()];
    args.extend_from_slice(extra);
    let fwd = start_fwd(&chain, &args);
    let start = std::time::Instant::now();
    let sent = 12u64;
    let ping = run(
        &chain.a,
        "ping",
        &[
            "-c",
            "12",
            "-i",
            "0.05",
            "-W",
            "1",
            "-q",
            &chain.c.ip.to_string(),
        ],
    );
    // Tokens the bucket can have given: its burst, and one a second since the first ping.
    let most = 3 + start.elapsed().as_secs() + 1;
    let received = pings_received(&ping);
    assert!(
        (3..=most).contains(&received),
        "{received} of {sent} answered, {most} at most: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    let report = interrupt(fwd);
    let r = rule(&report, "ping-limit");
    assert_eq!(r["packets"], sent, "{report}");
    assert_eq!(r["over_rate"], sent - received, "{report}");
    assert!(r["in_kernel"].as_u64() >= Some(sent - received), "{report}");
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
}

#[test]
fn a_rate_limit_drops_over_its_rate_in_xdp_and_user_space_forwards_the_rest() {
    a_rate_limit_drops_over_its_rate_in_xdp(&[]);
}

#[test]
fn a_rate_limit_drops_over_its_rate_and_forwards_the_rest_in_xdp() {
    a_rate_limit_drops_over_its_rate_in_xdp(&["--xdp-forward"]);
}

/// A limit per source with `block`: a's pings over its burst block a for the block's time, in
/// XDP, so that later pings are dropped even at a rate the limit would allow; the summary
/// counts the block and lists a's address.
#[test]
fn a_source_over_its_rate_is_blocked_in_xdp_and_listed() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let rules = RulesFile::new(&format!(
        "[[rule]]\nname = \"per-source\"\nsrc = \"{}/32\"\nprotocol = \"icmp\"\n\
         action = \"rate-limit\"\nrate = \"1pps\"\nburst = 2\nper = \"source\"\nblock = \"1h\"\n",
        chain.a.ip
    ));
    let fwd = start_fwd(&chain, &["-m", "drv", "--rules", rules.path()]);
    let c = chain.c.ip.to_string();
    let burst = run(
        &chain.a,
        "ping",
        &["-c", "6", "-i", "0.05", "-W", "1", "-q", &c],
    );
    let first = pings_received(&burst);
    assert!((2..=3).contains(&first), "{first} of 6 answered");
    // Slower than the rate now: a limit alone would let these through; the block does not.
    let later = run(
        &chain.a,
        "ping",
        &["-c", "2", "-i", "1.5", "-W", "1", "-q", &c],
    );
    assert_eq!(pings_received(&later), 0, "a stays blocked");
    let report = interrupt(fwd);
    let r = rule(&report, "per-source");
    assert_eq!(r["sources_blocked"], 1, "{report}");
    assert_eq!(r["packets"], 8, "{report}");
    assert_eq!(
        r["over_rate"].as_u64().unwrap() + r["blocked"].as_u64().unwrap(),
        8 - first,
        "{report}"
    );
    let listed = &report["counters"]["blocked_sources"][0];
    assert_eq!(listed["source"], chain.a.ip.to_string(), "{report}");
    assert_eq!(listed["rule"], "per-source", "{report}");
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
}
