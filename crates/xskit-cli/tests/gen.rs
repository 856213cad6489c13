//! `xskit gen` to `xskit recv` across a testbed: exact counts, order, intact payloads and
//! checksums, the rate limit, and the JSON output.

mod common;

use common::*;
use std::io::{BufRead, BufReader};

use std::process::{Child, Command};

use xskit_testbed::{Host, Testbed, TestbedConfig};

/// Starts `xskit recv --json` on `host` and waits until its port is open.
fn start_recv(host: &Host, extra: &[&str]) -> Child {
    let mut args = vec!["recv", "-i", &host.ifname, "--json"];
    args.extend_from_slice(extra);
    start(host, &args)
}

fn gen(host: &Host, to: &Host, args: &[&str]) -> serde_json::Value {
    let out = host
        .ns
        .command(XSKIT)
        .args(["gen", "-i", &host.ifname, "--dst-mac", &mac(to), "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

fn exact_transfer(mode: &str, gen_args: &[&str], recv_args: &[&str], count: u64) {
    let jumbo = recv_args.contains(&"--frags");
    let bed = Testbed::new(&TestbedConfig::default().mtu(jumbo.then_some(9000))).unwrap();
    let n = count.to_string();
    // Rings deep enough to ride out the receiver being scheduled out for a while (CI runs
    // other tests on the same two CPUs): a full ring drops, and this checks exactness.
    let mut rargs = vec!["-m", mode, "-n", &n, "-d", "20", "--ring-size", "8192"];
    rargs.extend_from_slice(recv_args);
    let recv = start_recv(&bed.b, &rargs);
    // A rate the receiver keeps up with even unoptimised: this checks exactness, not speed.
    let rate = if jumbo { "2000" } else { "20000" };
    let mut gargs = vec!["-m", mode, "-n", &n, "-r", rate];
    gargs.extend_from_slice(gen_args);
    let g = gen(&bed.a, &bed.b, &gargs);
    assert_eq!(g["tx_packets"], count, "{g}");
    let r = json_of(recv);
    assert_eq!(r["valid"], count, "{mode} {gen_args:?}: {r}");
    assert_eq!(r["corrupt"], 0, "{r}");
    assert_eq!(r["out_of_order"], 0, "{r}");
    assert_eq!(r["lost"], 0, "{r}");
    assert!(r["latency_mean_us"].as_f64().unwrap() > 0.0, "{r}");
}

#[test]
fn ipv4_exact_and_in_order_skb_and_drv() {
    if !privileged() {
        return;
    }
    for mode in ["skb", "drv"] {
        exact_transfer(mode, &[], &[], 20_000);
    }
}

#[test]
fn ipv6_vlan_and_flows_exact() {
    if !privileged() {
        return;
    }
    exact_transfer(
        "drv",
        &[
            "-6",
            "--vlan",
            "100",
            "--flows",
            "64",
            "--dst-ips",
            "4",
            "-s",
            "300",
        ],
        &[],
        10_000,
    );
}

#[test]
fn jumbo_through_multi_buffer() {
    if !privileged() {
        return;
    }
    for mode in ["skb", "drv"] {
        exact_transfer(mode, &["-s", "9000"], &["--frags"], 2_000);
    }
}

/// `-r` is never exceeded, on any machine: n packets at rate r take at least (n - 1) / r
/// seconds (the first goes at once). A busy machine may send slower, which no test can hold
/// against it; how closely the pacing keeps to the rate is tested on virtual time
/// (xskit-traffic's sender).
#[test]
fn a_rate_is_never_exceeded() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let (n, rate) = (200_000u64, 100_000u64);
    let g = gen(
        &bed.a,
        &bed.b,
        &["-m", "skb", "-r", &rate.to_string(), "-n", &n.to_string()],
    );
    assert_eq!(g["tx_packets"].as_u64(), Some(n), "{g}");
    let took = g["duration_s"].as_f64().unwrap();
    // duration_s is rounded to the millisecond.
    let least = (n - 1) as f64 / rate as f64 - 0.001;
    assert!(took >= least, "{n} packets at {rate} pps in {took} s: {g}");
}

#[test]
fn json_has_every_field() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let recv = start_recv(&bed.b, &["-m", "skb", "-n", "100", "-d", "10"]);
    let g = gen(&bed.a, &bed.b, &["-m", "skb", "-n", "100", "-r", "10kpps"]);
    assert_eq!(g["rate_pps"], 10_000, "-r takes the rules' units: {g}");
    for key in [
        "command",
        "interface",
        "queue",
        "mode",
        "packet_size",
        "flows",
        "rate_pps",
        "duration_s",
        "tx_packets",
        "tx_pps",
        "tx_bytes",
        "statistics",
    ] {
        assert!(g.get(key).is_some(), "gen JSON lacks {key}: {g}");
    }
    let r = json_of(recv);
    for key in [
        "rx_packets",
        "rx_pps",
        "valid",
        "corrupt",
        "out_of_order",
        "lost",
        "latency_mean_us",
        "statistics",
    ] {
        assert!(r.get(key).is_some(), "recv JSON lacks {key}: {r}");
    }
    for stat in [
        "rx_dropped",
        "rx_invalid_descs",
        "tx_invalid_descs",
        "rx_ring_full",
        "rx_fill_ring_empty_descs",
        "tx_ring_empty_descs",
    ] {
        assert!(
            g["statistics"].get(stat).is_some() && r["statistics"].get(stat).is_some(),
            "{stat}"
        );
    }
}

/// The live-frames engine sends copies of one probe; a native receiver counts every one intact.
#[test]
fn live_frames_engine() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let recv = start_recv(&bed.b, &["-m", "drv", "-n", "20000", "-d", "10"]);
    let g = gen(
        &bed.a,
        &bed.b,
        &["--engine", "live", "-n", "20000", "-r", "100000"],
    );
    assert_eq!(g["tx_packets"], 20000, "{g}");
    assert_eq!(g["mode"], "live-frames");
    let r = json_of(recv);
    assert_eq!(r["valid"], 20000, "every copy arrives intact: {r}");
    assert_eq!(r["corrupt"], 0);
}

/// dumpcap (Wireshark's) capturing `count` UDP frames at `host` into `file`, started once
/// its capture is open.
fn start_dumpcap(host: &Host, count: u32, file: &std::path::Path) -> std::process::Child {
    let mut dumpcap = host
        .ns
        .command("dumpcap")
        .args([
            "-i",
            &host.ifname,
            "-c",
            &count.to_string(),
            "-a",
            "duration:120",
        ])
        .args(["-f", "udp", "-w"])
        .arg(file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // dumpcap says "Capturing on" once its capture is open.
    let mut said = BufReader::new(dumpcap.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("Capturing on") {
        line.clear();
        assert!(
            said.read_line(&mut line).unwrap() > 0,
            "dumpcap did not start"
        );
    }
    // Read on, so that dumpcap's later lines never meet a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut said, &mut std::io::sink()));
    dumpcap
}

/// The live engine with `--src-list`: each copy of the frame leaves from the next address
/// of the list (a prefix from its first), and Wireshark finds every IPv4 and UDP checksum
/// right; `--src-ips` counts on from `--src-ip` the same way.
#[test]
fn live_frames_come_from_each_listed_source_with_right_checksums() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    // Without XDP at b, redirected frames reach its stack (and dumpcap) only through GRO.
    let gro = bed
        .b
        .ns
        .command("ethtool")
        .args(["-K", &bed.b.ifname, "gro", "on"])
        .status();
    assert!(gro.unwrap().success());
    let list = std::env::temp_dir().join(format!("xskit-sources-{}.txt", std::process::id()));
    let text = "# three sources\n198.51.100.10\n203.0.113.0/24 ; SBL1\n\n198.51.100.77/32\n";
    std::fs::write(&list, text).unwrap();
    let file = std::env::temp_dir().join(format!("xskit-sources-{}.pcap", std::process::id()));
    let cases: [(&[&str], &[&str]); 2] = [
        (
            &["--src-list", list.to_str().unwrap()],
            &["198.51.100.10", "203.0.113.0", "198.51.100.77"],
        ),
        (
            &["--src-ip", "203.0.113.250", "--src-ips", "3"],
            &["203.0.113.250", "203.0.113.251", "203.0.113.252"],
        ),
    ];
    for (args, sources) in cases {
        let mut dumpcap = start_dumpcap(&bed.b, 300, &file);
        let mut all = vec!["--engine", "live", "-n", "300", "-r", "20000"];
        all.extend_from_slice(args);
        let g = gen(&bed.a, &bed.b, &all);
        assert_eq!(
            (g["tx_packets"].as_u64(), g["flows"].as_u64()),
            (Some(300), Some(3)),
            "{g}"
        );
        assert!(dumpcap.wait().unwrap().success());
        let fields = wireshark(
            "tshark",
            &["-r", file.to_str().unwrap(), "-o", "ip.check_checksum:TRUE"]
                .into_iter()
                .chain([
                    "-o",
                    "udp.check_checksum:TRUE",
                    "-T",
                    "fields",
                    "-e",
                    "ip.src",
                ])
                .chain(["-e", "ip.checksum.status", "-e", "udp.checksum.status"])
                .collect::<Vec<_>>(),
        );
        let lines: Vec<&str> = fields.lines().collect();
        assert_eq!(lines.len(), 300, "{fields}");
        for (i, line) in lines.iter().enumerate() {
            let expected = format!("{}\t1\t1", sources[i % 3]);
            assert_eq!(
                *line, expected,
                "frame {i} (status 1: the checksum is good)"
            );
        }
    }
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&list);
}

#[test]
fn native_attach_with_jumbo_mtu_explains_multi_buffer() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default().mtu(Some(9000))).unwrap();
    let out = bed
        .b
        .ns
        .command(XSKIT)
        .args(["recv", "-i", &bed.b.ifname, "-m", "drv", "-d", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("MTU 9000 is too large") && err.contains("--frags"),
        "{err}"
    );
}

#[test]
fn gen_errors_are_clear() {
    for (args, expected) in [
        (vec!["gen"], "needs an interface"),
        (vec!["gen", "-i", "xskit-nope0"], "no interface named"),
        (
            vec!["gen", "-i", "lo", "-s", "20"],
            "packet size 20 is out of range",
        ),
        (
            vec!["gen", "-i", "lo", "--src-mac", "zz"],
            "not a MAC address",
        ),
        (
            vec!["gen", "-i", "lo", "-6", "--dst-ip", "198.51.100.2"],
            "must both be IPv4, or both IPv6 with -6",
        ),
        (vec!["gen", "-i", "lo", "--vlan", "5000"], "VLAN id 5000"),
        (
            vec![
                "gen",
                "-i",
                "lo",
                "--engine",
                "live",
                "--src-ips",
                "4",
                "--partial-csum",
            ],
            "--partial-csum with --engine live sends from one source",
        ),
        (
            vec!["gen", "-i", "lo", "--partial-csum", "--pcap", "/dev/null"],
            "cannot be used with",
        ),
        (vec!["gen", "-i", "lo", "--duration=-1"], "--duration"),
        (vec!["gen", "-i", "lo", "-r", "10kg"], "use pps, kpps, Mpps"),
        (
            vec!["gen", "-i", "lo", "--dst-ips", "0"],
            "--dst-ips 0: a flow range",
        ),
        (
            vec!["gen", "-i", "lo", "--flows", "0"],
            "--flows 0: a flow range",
        ),
        (
            vec!["gen", "-i", "lo", "--vlan", "5", "--vlan-priority", "9"],
            "VLAN priority 9 is out of range 0..7",
        ),
        (
            vec!["gen", "-i", "lo", "-d", "5x"],
            "or a duration such as 30s",
        ),
    ] {
        refused(&args, expected);
    }
}

/// The live engine's sources: what it cannot vary, and lists it cannot read.
#[test]
fn live_source_errors_are_clear() {
    for (args, expected) in [
        (
            vec!["gen", "-i", "lo", "--src-list", "/dev/null"],
            "--src-list is for --engine live",
        ),
        (
            vec!["gen", "-i", "lo", "--engine", "live", "--dst-ports", "4"],
            "--dst-ports: --engine live sends one frame and varies only its source",
        ),
        (
            vec![
                "gen",
                "-i",
                "lo",
                "--engine",
                "live",
                "-6",
                "--src-ips",
                "4",
            ],
            "varies IPv4 sources only",
        ),
        (
            vec![
                "gen",
                "-i",
                "lo",
                "--engine",
                "live",
                "--src-list",
                "/dev/zero",
            ],
            "--src-list /dev/zero: ",
        ),
        (
            vec![
                "gen",
                "-i",
                "lo",
                "--engine",
                "live",
                "--src-list",
                "/nope/list",
            ],
            "--src-list /nope/list: ",
        ),
    ] {
        refused(&args, expected);
    }
}

/// `xskit ARGS` fails, saying `expected`, without a panic.
fn refused(args: &[&str], expected: &str) {
    let out = Command::new(XSKIT).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{args:?}");
    assert!(err.contains(expected), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

/// Runs `xskit ARGS` in `host`'s namespace; (exit code, stdout, stderr).
fn xskit(host: &Host, args: &[&str]) -> (Option<i32>, String, String) {
    let out = host.ns.command(XSKIT).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn gen_refuses_frames_above_the_mtu_and_reports_device_drops() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let ifname = bed.a.ifname.as_str();
    for size in ["9000", "1515"] {
        let (code, _, err) = xskit(&bed.a, &["gen", "-i", ifname, "-s", size, "-n", "10"]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("MTU of 1500") && err.contains("use -s 1514"),
            "{err}"
        );
    }
    // The peer takes nothing above 1000 bytes: veth drops the frames on transmit, and gen says
    // so instead of counting them as sent.
    let st = bed
        .b
        .ns
        .command("ip")
        .args(["link", "set", &bed.b.ifname, "mtu", "1000"])
        .status()
        .unwrap();
    assert!(st.success());
    // (The socket engine: the live one's frames vanish uncounted, see its --help.)
    let (code, out, err) = xskit(
        &bed.a,
        &["gen", "-i", ifname, "-s", "1200", "-n", "500", "--json"],
    );
    let j: serde_json::Value = serde_json::from_str(&out).expect(&err);
    assert_eq!(j["device_tx_dropped"], 500, "{j}");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("dropped 500 of the 500"), "{err}");
}

#[test]
fn recv_counts_loss_at_the_end_and_ignores_forged_probes() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    // 1000 sent, 1200 expected: the last 200 are lost, and recv says so with its status.
    let recv = start_recv(&bed.b, &["--expect", "1200", "-d", "3"]);
    gen(&bed.a, &bed.b, &["-n", "1000", "-r", "20000"]);
    let out = recv.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (r["valid"].as_u64(), r["lost"].as_u64()),
        (Some(1000), Some(200)),
        "{r}"
    );
    // The same with 20% loss allowed passes.
    let recv = start_recv(
        &bed.b,
        &["--expect", "1200", "--max-loss", "20%", "-d", "3"],
    );
    gen(&bed.a, &bed.b, &["-n", "1000", "-r", "20000"]);
    assert_eq!(recv.wait_with_output().unwrap().status.code(), Some(0));
    // A forged probe with an absurd sequence number among real ones is foreign, not loss.
    let recv = start_recv(&bed.b, &["--expect", "100", "-d", "3"]);
    gen(&bed.a, &bed.b, &["-n", "50", "-r", "20000"]);
    let addrs = xskit_traffic::probe::ProbeAddrs {
        src_mac: bed.a.mac,
        dst_mac: bed.b.mac,
        src_ip: bed.a.ip.octets(),
        dst_ip: bed.b.ip.octets(),
    };
    let mut forged = [0u8; 64];
    xskit_traffic::probe::write(&mut forged, 64, 999_999_999_999_999_000, &addrs).unwrap();
    let a_if = bed.a.ifname.clone();
    bed.a
        .ns
        .run(|| {
            let index = xskit::Interface::by_name(&a_if).unwrap().index();
            xskit_traffic::baseline::PacketTx::open(index)
                .unwrap()
                .send_copies(&forged, 1)
                .unwrap();
        })
        .unwrap();
    gen(&bed.a, &bed.b, &["-n", "100", "-r", "20000"]);
    let r = json_of(recv);
    assert_eq!(r["foreign"], 1, "{r}");
    assert_eq!(r["lost"], 0, "{r}");
    assert!(r["valid"].as_u64().unwrap() >= 100, "{r}");
}

/// Every packet of a capture, in order.
fn packets_of(path: &std::path::Path) -> Vec<Vec<u8>> {
    let mut source = xskit_pipeline::PcapSource::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(p) = source.next_packet_with(<[u8]>::to_vec).unwrap() {
        out.push(p);
    }
    out
}

#[test]
fn recv_writes_what_wireshark_reads_and_gen_replays_it_byte_for_byte() {
    if !privileged() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("xskit-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (first, second) = (dir.join("first.pcap"), dir.join("second.pcap"));
    let bed = Testbed::new(&TestbedConfig::default().mtu(Some(9000))).unwrap();
    // 300 small probes and 200 of 5,000 bytes (multi-buffer chains), written by recv.
    let path = first.to_str().unwrap();
    let recv = start_recv(&bed.b, &["-F", "-n", "500", "-d", "20", "-w", path]);
    gen(&bed.a, &bed.b, &["-n", "300", "-r", "2000"]);
    gen(&bed.a, &bed.b, &["-n", "200", "-r", "2000", "-s", "5000"]);
    let r = json_of(recv);
    assert_eq!(r["rx_packets"], 500, "{r}");
    let info = wireshark("capinfos", &["-c", "-M", path]);
    assert!(info.contains("Number of packets:   500"), "{info}");
    // Wireshark checks every UDP checksum: none bad, every probe UDP.
    let bad = wireshark(
        "tshark",
        &[
            "-r",
            path,
            "-o",
            "udp.check_checksum:TRUE",
            "-Y",
            "udp.checksum.status == 2",
        ],
    );
    assert_eq!(bad.lines().count(), 0, "bad checksums:\n{bad}");
    let udp = wireshark("tshark", &["-r", path, "-Y", "udp"]);
    assert_eq!(udp.lines().count(), 500, "{udp}");

    // Replayed at the capture's own timing, received and written again: the same bytes.
    let again = second.to_str().unwrap();
    let recv = start_recv(&bed.b, &["-F", "-n", "500", "-d", "20", "-w", again]);
    let out = bed
        .a
        .ns
        .command(XSKIT)
        .args(["gen", "-i", &bed.a.ifname, "--pcap", path, "--json"])
        .output()
        .unwrap();
    let g: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(g["tx_packets"], 500, "{g}");
    assert_eq!(g["timing"], "original", "{g}");
    let r = json_of(recv);
    assert_eq!(r["valid"], 500, "the replayed probes are intact: {r}");
    assert_eq!(packets_of(&first), packets_of(&second), "byte for byte");
    let info = wireshark("capinfos", &["-c", "-M", again]);
    assert!(info.contains("Number of packets:   500"), "{info}");

    // Looped, at a fixed rate: twice the capture.
    let recv = start_recv(&bed.b, &["-F", "-n", "1000", "-d", "20"]);
    let out = bed
        .a
        .ns
        .command(XSKIT)
        .args(["gen", "-i", &bed.a.ifname, "--pcap", path, "--json"])
        .args(["--loop", "2", "-r", "5kpps"])
        .output()
        .unwrap();
    let g: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (g["tx_packets"].as_u64(), g["loops"].as_u64()),
        (Some(1000), Some(2))
    );
    assert_eq!(g["timing"], "rate", "{g}");
    let r = json_of(recv);
    assert_eq!(r["rx_packets"], 1000, "{r}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn gen_pcap_refuses_what_it_cannot_replay() {
    let dir = std::env::temp_dir().join(format!("xskit-pcap-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let not_pcap = dir.join("text.pcap");
    std::fs::write(&not_pcap, "not a capture").unwrap();
    let path = not_pcap.to_str().unwrap();
    for (args, expected) in [
        (vec!["--pcap", path], "not a pcap or pcapng file"),
        (vec!["--pcap", "/nonexistent.pcap"], "cannot open it"),
        (
            vec!["--pcap", path, "-s", "100"],
            "drop the options that build",
        ),
        // Each option that builds probes is named, defaults or not.
        (
            vec!["--pcap", path, "--dst-port", "9", "--src-ports", "4"],
            "probes (--dst-port, --src-ports)",
        ),
        (vec!["--loop", "2"], "--pcap"),
    ] {
        let out = Command::new(XSKIT)
            .args(["gen", "-i", "lo"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// RFC 2544's 64-byte frames: `-s 60` with a VLAN tag and a priority, and 64-byte IPv6
/// frames, too short for a probe header, go out unnumbered; Wireshark reads their lengths,
/// tag and priority, and finds every checksum good.
#[test]
fn small_ipv6_and_tagged_frames_as_wireshark_reads_them() {
    if !privileged() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("xskit-small-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("small.pcap");
    let path = file.to_str().unwrap();
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let recv = start_recv(&bed.b, &["-d", "4", "-w", path]);
    let tagged = gen(
        &bed.a,
        &bed.b,
        &["-n", "100", "-r", "2000", "-s", "60", "--vlan", "100"],
    );
    assert_eq!(tagged["packet_size"], 60, "{tagged}");
    gen(
        &bed.a,
        &bed.b,
        &["-n", "100", "-r", "2000", "-s", "64", "-6"],
    );
    gen(
        &bed.a,
        &bed.b,
        &[
            "-n",
            "100",
            "-r",
            "2000",
            "-s",
            "62",
            "--vlan",
            "7",
            "--vlan-priority",
            "5",
        ],
    );
    let r = json_of(recv);
    assert_eq!(r["rx_packets"], 300, "{r}");
    assert_eq!(r["valid"], 0, "too short for probe numbers: {r}");
    let count = |filter: &str| {
        let checks = [
            "-o",
            "udp.check_checksum:TRUE",
            "-o",
            "ip.check_checksum:TRUE",
        ];
        wireshark(
            "tshark",
            &[&["-r", path], &checks[..], &["-Y", filter]].concat(),
        )
        .lines()
        .count()
    };
    assert_eq!(
        count("frame.len == 60 && vlan.id == 100 && vlan.priority == 0 && ip"),
        100
    );
    assert_eq!(count("frame.len == 64 && ipv6 && udp && !vlan"), 100);
    assert_eq!(
        count("frame.len == 62 && vlan.id == 7 && vlan.priority == 5 && ip"),
        100
    );
    assert_eq!(
        count("udp.checksum.status == 1"),
        300,
        "every UDP checksum good"
    );
    assert_eq!(
        count("ip.checksum.status == 1"),
        200,
        "every IPv4 header checksum good"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--json-lines`: gen's counts every interval, growing to the summary.
#[test]
fn gen_json_lines_stream_its_counts() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let out = bed
        .a
        .ns
        .command(XSKIT)
        .args(["gen", "-i", &bed.a.ifname, "--dst-mac", &mac(&bed.b)])
        .args(["-n", "300", "-r", "1000", "-I", "0.1", "--json-lines"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let objects: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (intervals, summary) = objects.split_at(objects.len() - 1);
    assert!(intervals.len() >= 2, "{objects:?}");
    let sent: Vec<u64> = intervals
        .iter()
        .map(|o| {
            assert_eq!(
                (&o["command"], &o["interval"]),
                (&"gen".into(), &true.into())
            );
            o["counters"]["ports"][0]["tx_packets"].as_u64().unwrap()
        })
        .collect();
    assert!(sent.windows(2).all(|w| w[0] <= w[1]), "{sent:?}");
    assert_eq!(summary[0]["tx_packets"], 300, "{summary:?}");
    assert!(*sent.last().unwrap() <= 300);
}

/// `-t 2`: two threads, one socket each on queues 0 and 1, split the probes; the receiving
/// host's own capture (dumpcap, no XDP there) sees every sequence number exactly once.
#[test]
fn two_threads_on_two_queues_send_every_number_once() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default().queues(2)).unwrap();
    let file = std::env::temp_dir().join(format!("xskit-threads-{}.pcap", std::process::id()));
    let mut dumpcap = start_dumpcap(&bed.b, 1000, &file);
    let g = gen(&bed.a, &bed.b, &["-t", "2", "-n", "1000", "-r", "5000"]);
    assert_eq!(g["tx_packets"], 1000, "{g}");
    let queues = g["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 2, "{g}");
    for (q, expected) in queues.iter().zip([0, 1]) {
        assert_eq!(
            (q["queue"].as_u64(), q["tx_packets"].as_u64()),
            (Some(expected), Some(500))
        );
    }
    assert!(dumpcap.wait().unwrap().success());
    let payloads = wireshark(
        "tshark",
        &[
            "-r",
            file.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "udp.payload",
        ],
    );
    let mut seqs: Vec<u64> = payloads
        .lines()
        .map(|hex| u64::from_str_radix(&hex[8..24], 16).unwrap())
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..1000).collect::<Vec<_>>());
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn an_interface_deleted_under_gen_stops_it_with_what_happened() {
    if !privileged() {
        return;
    }
    for engine in ["live", "xsk"] {
        let bed = Testbed::new(&TestbedConfig::default()).unwrap();
        let mut child = bed
            .a
            .ns
            .command(XSKIT)
            .args(["gen", "-i", &bed.a.ifname, "--engine", engine, "-d", "30"])
            .args(["--json-lines", "-I", "0.1"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Deleted once an interval line counts frames sent.
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
        loop {
            let mut line = String::new();
            let read = std::io::BufRead::read_line(&mut lines, &mut line).unwrap();
            assert!(read > 0, "{engine}: gen ended before sending");
            let o: serde_json::Value = serde_json::from_str(&line).unwrap();
            if o["counters"]["ports"][0]["tx_packets"]
                .as_u64()
                .unwrap_or(0)
                > 0
            {
                break;
            }
        }
        std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
        delete_link(&bed.a);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{engine} stopped on its own: {stderr}"
        );
        assert!(
            stderr.contains(&format!("{} went away while sending", bed.a.ifname)),
            "{engine}: {stderr}"
        );
    }
}

/// recv on an interface deleted under it ends within seconds, saying what happened (a socket
/// whose device is gone just stops receiving: without a look at the interface it would spin
/// on forever).
#[test]
fn an_interface_deleted_under_recv_stops_it_with_what_happened() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let recv = start_logged(&bed.b, &["recv", "-i", &bed.b.ifname, "--json"]);
    delete_link(&bed.b);
    let (code, stderr) = recv.ended_within(std::time::Duration::from_secs(10));
    assert_eq!(code, Some(1), "recv stopped on its own: {stderr}");
    assert!(
        stderr.contains(&bed.b.ifname) && stderr.contains("start xskit recv again"),
        "{stderr}"
    );
}
