//! `xskit bench` end to end: every benchmark on a testbed interface, l2fwd's MAC swap, the JSON
//! fields, and the testbed table.

mod common;

use common::*;

use std::process::Command;
use std::time::{Duration, Instant};

use xskit::{Mode, Port, PortConfig};
use xskit_testbed::{Chain, Testbed, TestbedConfig};
use xskit_traffic::probe::{self, ProbeAddrs};

const FIELDS: [&str; 17] = [
    "bench",
    "mode",
    "interface",
    "queue",
    "duration_s",
    "window_s",
    "rx_pps",
    "tx_pps",
    "rx_packets",
    "tx_packets",
    "cpu_ns_per_packet",
    "rx_dropped",
    "rx_invalid_descs",
    "tx_invalid_descs",
    "rx_ring_full",
    "rx_fill_ring_empty_descs",
    "tx_ring_empty_descs",
];

#[test]
fn every_benchmark_runs_and_reports_json() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    for (kind, mode, receives) in [
        ("rxdrop", "skb", true),
        ("rxdrop", "drv", true),
        ("l2fwd", "drv", true),
        ("afpacket-rx", "skb", true),
        ("xdp-drop", "drv", true),
        ("xdp-tx", "drv", true),
        ("txpush", "skb", false),
        ("afpacket-tx", "skb", false),
    ] {
        let (host, peer) = if receives {
            (&bed.b, &bed.a)
        } else {
            (&bed.a, &bed.b)
        };
        let bench = start(
            host,
            &[
                "bench",
                kind,
                "-i",
                &host.ifname,
                "-m",
                mode,
                "-d",
                "1",
                "--json",
            ],
        );
        let generator = receives.then(|| {
            start(
                peer,
                &[
                    "gen",
                    "-i",
                    &peer.ifname,
                    "-m",
                    "skb",
                    "--dst-mac",
                    &mac(host),
                    "-r",
                    "200000",
                    "-d",
                    "1.5",
                    "--json",
                ],
            )
        });
        let r = json_of(bench);
        if let Some(g) = generator {
            json_of(g);
        }
        for f in FIELDS {
            assert!(r.get(f).is_some(), "{kind}: JSON lacks {f}: {r}");
        }
        assert_eq!(r["bench"], kind);
        let moved = if receives {
            &r["rx_packets"]
        } else {
            &r["tx_packets"]
        };
        assert!(
            moved.as_u64().unwrap() > 10_000,
            "{kind} {mode} moved too little: {r}"
        );
    }
}

/// xdp-drop --src-port drops and counts the UDP from that port alone: of frames from
/// ports 53 and 54 in turn, it counts the 53s (the other half pass, uncounted).
#[test]
fn xdp_drop_by_source_port_counts_that_port_alone() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let mut bench = Live::new(xdp_drop_on(
        &bed,
        &["--src-port", "53", "--json-lines", "-I", "0.1"],
    ));
    // Its first line: the program is attached.
    assert!(bench.wait(Duration::from_secs(30), |_| true).is_some());
    let out = run(
        &bed.a,
        XSKIT,
        &[
            "gen",
            "-i",
            &bed.a.ifname,
            "-m",
            "skb",
            "--dst-mac",
            &mac(&bed.b),
            "--src-port",
            "53",
            "--src-ports",
            "2",
            "-n",
            "2000",
            "-r",
            "10000",
            "--json",
        ],
    );
    ok(&out);
    let sent: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sent["tx_packets"], 2000, "{sent}");
    bench.wait(Duration::from_secs(10), |l| {
        l["counters"]["ports"][0]["rx_packets"] == 1000
    });
    let r = bench.stop();
    let counted = r["rx_packets"].as_u64().unwrap();
    // veth may lose a frame under load; every frame counted was from port 53.
    assert!((950..=1000).contains(&counted), "{r}");
}

#[test]
fn l2fwd_returns_every_frame_with_macs_swapped() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let fwd = start(
        &bed.b,
        &[
            "bench",
            "l2fwd",
            "-i",
            &bed.b.ifname,
            "-m",
            "drv",
            "-d",
            "4",
            "--json",
        ],
    );
    let ifname = bed.a.ifname.clone();
    let cfg = PortConfig::default().mode(Mode::Drv);
    let mut port = bed
        .a
        .ns
        .run(|| Port::open(&ifname, 0, &cfg))
        .unwrap()
        .unwrap();
    let addrs = ProbeAddrs {
        src_mac: bed.a.mac,
        dst_mac: bed.b.mac,
        src_ip: bed.a.ip.octets(),
        dst_ip: bed.b.ip.octets(),
    };
    let template = addrs.template(64).unwrap();
    let umem = port.umem().clone();
    let (count, mut seq, mut back) = (5000u64, 0u64, 0u64);
    let mut out = Vec::new();
    let mut inbox = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while back < count && Instant::now() < deadline {
        if out.is_empty() && seq < count && seq - back < 128 {
            port.alloc(&mut out, 32.min((count - seq) as usize));
            for f in out.iter_mut() {
                let len = template.write(umem.buffer_mut(f), seq, 0).unwrap();
                umem.set_len(f, len).unwrap();
                seq += 1;
            }
        }
        port.send(&mut out).unwrap();
        port.receive(&mut inbox, 64).unwrap();
        for f in &inbox {
            let data = umem.data(f);
            assert_eq!(
                &data[0..6],
                &bed.a.mac,
                "destination is the original source"
            );
            assert_eq!(&data[6..12], &bed.b.mac, "source is the forwarder");
            assert!(
                matches!(probe::check(data), probe::Probe::Valid { seq, .. } if seq == back),
                "frame {back} intact and in order"
            );
            back += 1;
        }
        port.recycle(&mut inbox);
    }
    assert_eq!(back, count, "every frame came back");
    drop(port);
    let r = json_of(fwd);
    assert!(r["tx_packets"].as_u64().unwrap() >= count, "{r}");
}

#[test]
fn extra_stats_lines() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let out = bed
        .b
        .ns
        .command(XSKIT)
        .args([
            "bench",
            "rxdrop",
            "-i",
            &bed.b.ifname,
            "-m",
            "skb",
            "-d",
            "1.3",
            "-I",
            "0.5",
            "-x",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let lines: Vec<_> = text.lines().filter(|l| l.contains(" pps ")).collect();
    assert!(lines.len() >= 2, "one line per interval: {text}");
    assert!(
        lines[0].contains("rx_fill_ring_empty_descs=") && lines[0].contains("empty_polls="),
        "{text}"
    );
}

/// The cells the testbed table measures: (benchmark, mode).
#[cfg(feature = "bench-harness")]
const TABLE_CELLS: [(&str, &str); 34] = [
    ("rxdrop", "skb"),
    ("rxdrop", "drv"),
    ("txpush", "skb"),
    ("txpush", "drv"),
    ("l2fwd", "skb"),
    ("l2fwd", "drv"),
    ("afpacket-rx", "skb"),
    ("afpacket-tx", "skb"),
    ("xdp-drop", "drv"),
    ("fwd", "skb"),
    ("fwd", "drv"),
    ("fwd --xdp-forward", "skb"),
    ("fwd --xdp-forward", "drv"),
    ("xdp redirect (devmap)", "skb"),
    ("xdp redirect (devmap)", "drv"),
    ("kernel bridge", "-"),
    ("ddos: fwd drops in XDP", "drv"),
    ("ddos: XDP_DROP ceiling", "drv"),
    ("ddos alone: fwd drops in XDP", "drv"),
    ("ddos alone: XDP_DROP ceiling", "drv"),
    ("reflection (src_port rule): fwd drops in XDP", "drv"),
    ("reflection (src_port rule): XDP_DROP ceiling", "drv"),
    ("reflection beside the floor: fwd drops in XDP", "drv"),
    ("reflection: minimal source-port drop", "drv"),
    ("set flood (1M-prefix set): fwd drops in XDP", "drv"),
    ("set flood (1M-prefix set): XDP_DROP ceiling", "drv"),
    ("per-source limit (10k sources): fwd drops in XDP", "drv"),
    ("per-source limit (10k sources): XDP_DROP ceiling", "drv"),
    ("10k-source set: fwd drops in XDP", "drv"),
    ("10k-source set: xdp-filter drops", "drv"),
    ("ddos check: XDP_DROP on fwd's link", "drv"),
    ("ddos check: XDP_DROP on the ceiling's link", "drv"),
    ("ddos floor: minimal source-port drop", "drv"),
    ("ddos floor: XDP_DROP ceiling beside it", "drv"),
];

#[cfg(feature = "bench-harness")]
#[test]
fn testbed_table_and_plot() {
    if !privileged() {
        return;
    }
    let svg = std::env::temp_dir().join(format!("xskit-bench-{}.svg", std::process::id()));
    let out = std::process::Command::new(XSKIT)
        .args(["bench", "-d", "0.4", "--json", "--plot"])
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cells = t["cells"].as_array().unwrap();
    for (bench, mode) in TABLE_CELLS {
        let cell = cells
            .iter()
            .find(|c| c["bench"] == bench && c["mode"] == mode)
            .unwrap_or_else(|| panic!("no {bench} {mode}"));
        assert!(cell["mpps"][0].as_f64().unwrap() > 0.01, "{cell}");
    }
    let ratios = t["ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 21, "{ratios:?}");
    assert!(
        ratios
            .iter()
            .any(|r| r[0] == "fwd --xdp-forward drv / xdp redirect (devmap)"),
        "{ratios:?}"
    );
    for name in [
        "ddos rule alone / XDP_DROP ceiling",
        "reflection, src_port rule alone / XDP_DROP ceiling",
        "reflection, src_port rule alone / minimal source-port drop",
        "minimal source-port drop / XDP_DROP ceiling",
        "flood from a 1,000,000-prefix set's sources / XDP_DROP ceiling",
        "per-source limit, flood from 10,000 sources / XDP_DROP ceiling",
        "flood from 10,000 sources, set / xdp-filter",
    ] {
        assert!(ratios.iter().any(|r| r[0] == name), "{name}: {ratios:?}");
    }
    // The side-by-side method's check: the ceiling against itself, a positive ratio.
    let check = ratios
        .iter()
        .find(|r| r[0] == "ddos method check: XDP_DROP / XDP_DROP")
        .unwrap();
    assert!(check[1].as_f64().unwrap() > 0.0, "{check}");
    let legit = ratios
        .iter()
        .find(|r| r[0] == "ddos legitimate delivered intact")
        .unwrap();
    assert!(legit[1].as_f64().unwrap() > 0.0, "{legit}");
    assert_kernel_traffic_crossed(ratios);
    assert!(
        t["ddos_method"].as_str().is_some(),
        "the DDoS rows' method is said"
    );
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg") && chart.matches("<rect").count() >= 9);
    let _ = std::fs::remove_file(&svg);
}

/// The DDoS rows one generator after the other, as on a kernel whose CPU accounting would hide
/// the programs' work side by side: every cell measured, the method said, legitimate traffic
/// delivered.
#[cfg(feature = "bench-harness")]
#[test]
fn ddos_rows_measured_one_after_the_other_where_asked() {
    if !privileged() {
        return;
    }
    let out = std::process::Command::new(XSKIT)
        .args(["bench", "fwd", "-d", "0.4", "--json"])
        .env("XSKIT_DDOS_METHOD", "one-after-the-other")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let t: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let method = t["ddos_method"].as_str().unwrap();
    assert!(method.starts_with("one after the other"), "{method}");
    for bench in [
        "ddos: fwd drops in XDP",
        "ddos: XDP_DROP ceiling",
        "ddos alone: fwd drops in XDP",
        "ddos alone: XDP_DROP ceiling",
        "reflection (src_port rule): fwd drops in XDP",
        "reflection (src_port rule): XDP_DROP ceiling",
        "ddos check: XDP_DROP on fwd's link",
        "ddos check: XDP_DROP on the ceiling's link",
        "ddos floor: minimal source-port drop",
    ] {
        let cell = t["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["bench"] == bench)
            .unwrap_or_else(|| panic!("no {bench}"));
        assert!(cell["mpps"][0].as_f64().unwrap() > 0.01, "{cell}");
    }
    let legit = t["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[0] == "ddos legitimate delivered intact")
        .unwrap();
    assert!(legit[1].as_f64().unwrap() > 0.0, "{legit}");
    assert_kernel_traffic_crossed(t["ratios"].as_array().unwrap());
    // A method nobody offers is refused, naming the variable.
    let out = std::process::Command::new(XSKIT)
        .args(["bench", "fwd", "-d", "0.4", "--json"])
        .env("XSKIT_DDOS_METHOD", "both")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("XSKIT_DDOS_METHOD=\"both\""));
}

/// The kernel's pings and downloads through `xskit fwd` during the floods: pings answered
/// (a loss under a loaded machine is reported, not failed on) and every download intact.
#[cfg(feature = "bench-harness")]
fn assert_kernel_traffic_crossed(ratios: &[serde_json::Value]) {
    let share = |name: &str| {
        ratios
            .iter()
            .find(|r| r[0] == name)
            .and_then(|r| r[1].as_f64())
            .unwrap_or_else(|| panic!("no {name:?}: {ratios:?}"))
    };
    assert!(share("ddos pings answered during the floods") > 0.0);
    assert_eq!(share("ddos downloads intact during the floods"), 1.0);
}

#[cfg(feature = "bench-harness")]
#[test]
fn pipeline_measurements_run_in_memory() {
    let out = std::process::Command::new(XSKIT)
        .args(["bench", "pipeline", "--packets", "20000", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "vector_drop_ns",
        "vector_forward_ns",
        "vector_alternate_ns",
        "per_packet_alternate_ns",
        "pool_ns",
        "shared_ring_per_frame_ns",
        "heap_per_packet_ns",
        "alternate_over_mean_of_pure",
    ] {
        let v = r[key].as_f64().unwrap_or(f64::NAN);
        assert!(v.is_finite() && v > 0.0, "{key}: {r}");
    }
    assert_eq!(r["packets_per_case"], 20000);
}

#[test]
fn bench_errors_are_clear() {
    for (args, expected) in [
        (vec!["bench", "-i", "lo"], "xdp-tx or xdp-redirect"),
        (
            vec!["bench", "xdp-redirect", "-i", "lo"],
            "needs --to IFACE",
        ),
        (
            vec!["bench", "rxdrop", "-i", "lo", "--to", "lo"],
            "--to is for xdp-redirect",
        ),
        (
            vec!["bench", "xdp-tx", "-i", "lo", "--src-port", "53"],
            "--src-port is for xdp-drop",
        ),
        (
            vec!["bench", "xdp-drop", "--src-port", "53"],
            "runs on your interface: -i IFACE --src-port PORT",
        ),
        (
            vec!["bench", "xdp-redirect", "--to", "lo"],
            "runs on your interfaces: -i IN --to OUT",
        ),
        (
            vec!["bench", "xdp-redirect", "-i", "lo", "--to", "xskit-nope0"],
            "--to xskit-nope0",
        ),
        (vec!["bench", "pipeline", "-i", "lo"], "runs in memory"),
        (
            vec!["bench", "rxdrop", "-i", "xskit-nope0"],
            "no interface named",
        ),
        (
            vec!["bench", "rxdrop", "-i", "lo", "--plot", "x.svg"],
            "--plot is for the testbed table",
        ),
        (
            vec!["bench", "txpush", "-i", "lo", "--sizes"],
            "--sizes is for the testbed table",
        ),
    ] {
        let out = std::process::Command::new(XSKIT)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

/// Refusals of the benchmarks without -i: the harness's own checks where it is built in, and
/// where it is not, how to get it.
#[test]
fn testbed_benchmark_errors_are_clear() {
    let cases: &[(&[&str], &str)] = if cfg!(feature = "bench-harness") {
        &[
            (&["bench", "-m", "drv"], "--mode applies only with -i"),
            (&["bench", "--runs", "0"], "--runs 0"),
            (&["bench", "xdp-tx"], "not in the testbed table"),
            (
                &["bench", "rxdrop", "--sizes"],
                "--sizes is the txpush table",
            ),
        ]
    } else {
        &[
            (&["bench"], "--features bench-harness"),
            (
                &["bench", "bond"],
                "bench bond comes with the benchmark harness",
            ),
        ]
    };
    for (args, expected) in cases {
        let out = std::process::Command::new(XSKIT)
            .args(*args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

/// `bench xdp-drop` on b with `extra` options: the kernel's own count of what arrived.
fn xdp_drop_on(bed: &Testbed, extra: &[&str]) -> KillOnDrop {
    let mut args = vec!["bench", "xdp-drop", "-i", &bed.b.ifname, "-m", "drv"];
    args.extend_from_slice(extra);
    KillOnDrop::new(start(&bed.b, &args))
}

#[test]
fn the_live_generator_count_equals_what_the_kernel_received() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let live = |extra: &[&str]| {
        let mut cmd = bed.a.ns.command(XSKIT);
        cmd.args(["gen", "--engine", "live", "-i", &bed.a.ifname, "--json"])
            .args(["--dst-mac", &mac(&bed.b)])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        cmd
    };
    // A count, then flat out until SIGINT: either way every frame gen counts arrived.
    for interrupted in [false, true] {
        let drop = xdp_drop_on(&bed, &["-d", "4", "--json"]);
        let g = if interrupted {
            let child = KillOnDrop::new(live(&["--json-lines", "-I", "0.1"]).spawn().unwrap());
            // Interrupted in full flow.
            interrupt_when(child, Duration::from_secs(60), |line| {
                line["counters"]["ports"][0]["tx_packets"]
                    .as_u64()
                    .unwrap_or(0)
                    >= 100_000
            })
        } else {
            let out = live(&["-n", "3000000"]).output().unwrap();
            assert!(out.status.success());
            serde_json::from_slice(&out.stdout).unwrap()
        };
        let d = json_of(drop.take());
        assert_eq!(
            g["tx_packets"], d["rx_packets"],
            "interrupted: {interrupted}\ngen {g}\nxdp-drop {d}"
        );
        assert!(g["tx_packets"].as_u64().unwrap() > 0, "{g}");
    }
}

#[test]
fn a_late_burst_is_measured_at_its_own_rate() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let bench = KillOnDrop::new(start(
        &bed.b,
        &[
            "bench",
            "rxdrop",
            "-i",
            &bed.b.ifname,
            "-m",
            "drv",
            "-d",
            "8",
            "--json",
        ],
    ));
    // The burst starts a second late and lasts about one second, paced by gen at 20 kpps (or
    // longer on a loaded machine: the run leaves it seven).
    std::thread::sleep(Duration::from_secs(1));
    let out = bed
        .a
        .ns
        .command(XSKIT)
        .args([
            "gen",
            "-i",
            &bed.a.ifname,
            "-m",
            "drv",
            "--dst-mac",
            &mac(&bed.b),
        ])
        .args(["-r", "20000", "-n", "20000", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let r = json_of(bench.take());
    assert_eq!(r["rx_packets"], 20000, "{r}");
    let (pps, window) = (
        r["rx_pps"].as_f64().unwrap(),
        r["window_s"].as_f64().unwrap(),
    );
    // The rate is the burst's packets over the burst's window, which starts at its first
    // packet, a second into the run: not diluted by the quiet before it, however long the
    // burst took.
    assert!(
        (pps * window - 20_000.0).abs() < 200.0,
        "the rate is the packets over the window: {r}"
    );
    assert!(
        window <= r["duration_s"].as_f64().unwrap() - 0.9,
        "the window leaves out the quiet first second: {r}"
    );
}

#[test]
fn callgrind_counts_instructions_per_packet_beside_the_xsk_h_peer_and_xdpsock() {
    if !privileged() {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/callgrind.sh");
    let out = Command::new("bash")
        .arg(script)
        .env("BIN", XSKIT)
        .env("COUNT", "50000")
        .env("SECS", "2")
        .env("IDLE_POLLS", "20000")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let number = |s: &str| s.trim_end_matches('x').parse::<f64>().unwrap();
    for name in [
        "rxdrop",
        "l2fwd",
        "txpush",
        "fwd",
        "fwd-64",
        "fwd-csum",
        "fwd-csum-live",
        "fwd-ddos",
    ] {
        let forwarder = name.starts_with("fwd");
        let worker_only = name == "fwd-ddos";
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{text}"));
        let fields: Vec<&str> = line.split_whitespace().collect();
        // On a loaded machine a ring loop's runs may differ more in empty polls than the
        // packets cost, and a forwarder's longer run may forward no more than its shorter
        // one when the generator is starved: the report says so instead of printing noise.
        if fields[2] == "unsteady:" && forwarder && !worker_only {
            assert!(line.contains("quieter machine"), "{line}");
            continue;
        }
        let packets: u64 = fields[1].parse().unwrap();
        if !forwarder && fields[2] == "unsteady" {
            assert!(
                packets > 0 && line.contains("per packet, outweigh"),
                "{line}"
            );
            continue;
        }
        assert!(packets > 0 && number(fields[2]) > 0.0, "{line}");
        if !worker_only {
            // The peer's figure (the xsk.h peer's, or xdpsock's l2fwd for the forwarder) and
            // the ratio, whole process and inside the loop.
            let (xskit, peer, ratio) = (number(fields[2]), number(fields[3]), number(fields[4]));
            assert!(peer > 0.0 && fields[4].ends_with('x'), "{line}");
            assert!((xskit / peer / ratio - 1.0).abs() < 0.02, "{line}");
            assert!(number(fields[5]) > 0.0 && number(fields[6]) > 0.0, "{line}");
        }
        let top = text
            .lines()
            .filter(|l| l.trim_start().starts_with(&format!("{name} ")))
            .filter(|l| l.contains('%'))
            .count();
        assert_eq!(top, if forwarder { 1 } else { 2 }, "top functions: {text}");
    }
    assert!(
        text.contains("xdpsock's longer run")
            || text
                .lines()
                .any(|l| l.trim_start().starts_with("xdpsock l2fwd:") && l.contains('%')),
        "xdpsock's top functions: {text}"
    );
}

#[cfg(feature = "bench-harness")]
#[test]
fn bench_fwd_refuses_an_unknown_ddos_case_before_measuring_anything() {
    if !privileged() {
        return;
    }
    let out = Command::new(XSKIT)
        .args(["bench", "fwd", "--runs", "1", "-d", "0.5"])
        .env("XSKIT_DDOS_CASES", "ddos alone,nope")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("no DDoS case is named \"nope\"") && stderr.contains("ddos alone"),
        "{stderr}"
    );
    assert!(
        !stdout.contains("Mpps"),
        "nothing was measured first: {stdout}"
    );
}

#[cfg(feature = "bench-harness")]
#[test]
fn bench_bond_measures_every_case_against_the_plain_program() {
    if !privileged() {
        return;
    }
    let out = std::process::Command::new(XSKIT)
        .args(["bench", "bond", "--runs", "1", "-d", "0.5", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (&report["command"], &report["schema_version"]),
        (&serde_json::json!("bench"), &serde_json::json!(1))
    );
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 9, "{text}");
    // Each verdict's plain program is its own baseline.
    for plain in [0, 3] {
        assert_eq!(rows[plain]["ratio"].as_f64().unwrap(), 1.0, "{text}");
    }
    assert!(rows[1]["case"].as_str().unwrap().starts_with("XDP_DROP"));
    assert_eq!(rows[1]["against"], rows[0]["case"]);
    for r in rows {
        assert!(r["median_mpps"].as_f64().unwrap() > 0.0, "{r}");
    }
}

/// An idle run says so, and a handful of stray packets over idle polling gives no CPU per
/// packet figure (it would be the idle loop's time divided by a few packets).
#[test]
fn an_idle_run_reports_no_packets_and_a_few_strays_no_cpu_figure() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let rxdrop = [
        "bench",
        "rxdrop",
        "-i",
        &bed.b.ifname,
        "-m",
        "skb",
        "-d",
        "1",
    ];
    let idle = bed.b.ns.command(XSKIT).args(rxdrop).output().unwrap();
    let text = String::from_utf8_lossy(&idle.stdout);
    assert!(text.contains(": no packets in"), "{text}");
    assert!(!text.contains("CPU per packet"), "{text}");

    let bench = KillOnDrop::new(start(&bed.b, &[&rxdrop[..], &["--json"]].concat()));
    let sent = bed
        .a
        .ns
        .command(XSKIT)
        .args([
            "gen",
            "-i",
            &bed.a.ifname,
            "-m",
            "skb",
            "-n",
            "5",
            "-r",
            "10",
            "--json",
        ])
        .args(["--dst-mac", &mac(&bed.b)])
        .output()
        .unwrap();
    assert!(sent.status.success(), "{sent:?}");
    let r = json_of(bench.take());
    assert!(
        r["window_s"].as_f64().unwrap() > 0.2,
        "strays spread out: {r}"
    );
    assert_eq!(r["rx_packets"], 5, "{r}");
    assert!(r["cpu_ns_per_packet"].is_null(), "five strays: {r}");
}

/// `bench xdp-redirect` (the kernel's bound on forwarding in XDP, measured beside
/// `fwd --xdp-forward`) sends every packet out of the other interface through its devmap: a
/// receiver behind it gets each probe intact, and the program counted them.
#[test]
fn xdp_redirect_forwards_every_packet_out_of_the_other_interface() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let args = [
        "bench",
        "xdp-redirect",
        "-i",
        &chain.m_a.ifname,
        "--to",
        &chain.m_c.ifname,
        "-m",
        "drv",
        "--json",
    ];
    let bench = KillOnDrop::new(start(&chain.m_a, &args));
    // c's receiver attaches a native program, so c takes the XDP frames m_c sends.
    let receiver = recv(&chain.c, &["-m", "drv", "-n", "500", "-d", "20"]);
    let (to, src, dst) = (
        mac(&chain.c),
        chain.a.ip.to_string(),
        chain.c.ip.to_string(),
    );
    let sent = ok(&run(
        &chain.a,
        XSKIT,
        &[
            "gen",
            "-i",
            &chain.a.ifname,
            "-m",
            "drv",
            "--dst-mac",
            &to,
            "--src-ip",
            &src,
            "--dst-ip",
            &dst,
            "-n",
            "500",
            "-r",
            "20000",
            "--json",
        ],
    ));
    assert!(sent.contains("\"tx_packets\":500"), "{sent}");
    let r = json_of(receiver.take());
    assert_eq!(
        (&r["valid"], &r["out_of_order"]),
        (&500.into(), &0.into()),
        "{r}"
    );
    let b = signal(bench, "-INT");
    assert_eq!(b["bench"], "xdp-redirect", "{b}");
    assert!(b["rx_packets"].as_u64().unwrap() >= 500, "{b}");
}
