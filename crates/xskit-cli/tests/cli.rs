//! The `xskit` binary end to end.

mod common;

use common::*;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use xskit_testbed::{Testbed, TestbedConfig};

fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("xskit-{pid}-");
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn demo_passes_in_skb_and_drv_and_cleans_up() {
    if !privileged() {
        return;
    }
    let child = Command::new(XSKIT)
        .args(["demo", "-n", "3000"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    assert!(
        out.contains("skb  xdp-skb copy: sent 3000 received 3000"),
        "{out}"
    );
    assert!(
        out.contains("drv  xdp-drv copy: sent 3000 received 3000"),
        "{out}"
    );
    assert_eq!(out.matches("[OK]").count(), 2, "{out}");
    assert!(
        out.contains("rx_fill_ring_empty_descs="),
        "prints the kernel statistics: {out}"
    );
}

#[test]
fn demo_removes_its_testbed_on_sigint() {
    if !privileged() {
        return;
    }
    let mut child = Command::new(XSKIT)
        .args(["demo", "-n", "50000000", "-m", "skb"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("testbed:"), "{first}");
    assert_eq!(namespaces_of(pid).len(), 2, "the testbed is up");
    let _ = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "exit status after SIGINT");
    assert!(
        namespaces_of(pid).is_empty(),
        "left: {:?}",
        namespaces_of(pid)
    );
}

#[test]
fn zero_copy_demo_on_veth_fails_clearly_and_cleans_up() {
    if !privileged() {
        return;
    }
    let child = Command::new(XSKIT)
        .args(["demo", "-n", "10", "-m", "zc"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("zero-copy is not available") && err.contains("use mode `drv`"),
        "{err}"
    );
    assert!(
        namespaces_of(pid).is_empty(),
        "left: {:?}",
        namespaces_of(pid)
    );
}

#[test]
fn info_reports_veth_capabilities() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default().queues(4)).unwrap();
    let out = bed
        .b
        .ns
        .command(XSKIT)
        .args(["info", "-i", &bed.b.ifname])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "native XDP        yes",
        "AF_XDP zero-copy  no",
        "rx queues         4",
        "xdp program       none",
        "redirect",
    ] {
        assert!(text.contains(expected), "missing '{expected}' in:\n{text}");
    }
    // The same facts as one JSON object.
    let out = bed
        .b
        .ns
        .command(XSKIT)
        .args(["info", "-i", &bed.b.ifname, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let device = &j["device"];
    assert_eq!(device["interface"], bed.b.ifname.as_str(), "{j}");
    assert_eq!(device["native_xdp"], true, "{j}");
    assert_eq!(device["zero_copy"], false, "{j}");
    assert_eq!(device["rx_queues"], 4, "{j}");
    assert_eq!(device["xdp_program"], serde_json::Value::Null, "{j}");
    assert!(device["xdp_features"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "redirect"));
    assert_eq!(j["bonding"]["bond"], serde_json::Value::Null, "{j}");
    assert_eq!(j["command"], "info", "{j}");
}

#[test]
fn bad_input_gets_clear_errors() {
    for (args, expected) in [
        (
            vec!["info", "-i", "xskit-nope0"],
            "no interface named 'xskit-nope0'",
        ),
        (vec!["demo", "-s", "10"], "packet size 10 is out of range"),
        (vec!["demo", "-n", "0"], "--count must be at least 1"),
        (
            vec!["gen", "-i", "lo", "--ring-size", "1073741824"],
            "--ring-size 1073741824 must be a power of two from 32 to 32768",
        ),
        (
            vec!["recv", "-i", "lo", "--ring-size", "8"],
            "--ring-size 8 must be a power of two from 32 to 32768",
        ),
        (
            vec!["recv", "-i", "lo", "--ring-size", "32", "-b", "64"],
            "smaller than the batch size",
        ),
    ] {
        let out = Command::new(XSKIT).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let out = Command::new(XSKIT)
        .args(["demo", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap usage error");
    // A mode is checked by clap, which lists the modes there are.
    let out = Command::new(XSKIT)
        .args(["demo", "-m", "fast"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("invalid value 'fast'") && err.contains("possible values: auto, skb, drv, zc"),
        "{err}"
    );
}

#[test]
fn queue_counts_are_the_ones_in_use() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    // A veth made without queue counts allocates more queues than it uses.
    let st = bed
        .b
        .ns
        .command("ip")
        .args(["link", "add", "xq0", "type", "veth", "peer", "name", "xq1"])
        .status()
        .unwrap();
    assert!(st.success());
    for dev in ["xq0", "xq1"] {
        let st = bed
            .b
            .ns
            .command("ip")
            .args(["link", "set", dev, "up"])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let run = |args: &[&str]| bed.b.ns.command(XSKIT).args(args).output().unwrap();
    let info = run(&["info", "-i", "xq0"]);
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(text.contains("rx queues         1 (of "), "{text}");
    for cmd in [
        &["gen", "-i", "xq0", "-q", "1", "-n", "1"][..],
        &["recv", "-i", "xq0", "-q", "1", "-d", "1"],
    ] {
        let out = run(cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {err}");
        assert!(
            err.contains("queue 1") && err.contains("xq0"),
            "{cmd:?}: {err}"
        );
        assert!(!err.contains("Invalid argument"), "{cmd:?}: {err}");
    }
}

/// Completions and man pages come from the command's own definition: every command is in
/// them, with its options.
#[test]
fn completions_and_man_pages_cover_every_command() {
    let out = Command::new(XSKIT)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{script}");
    for word in [
        "fwd",
        "gen",
        "recv",
        "bench",
        "zcsend",
        "--bond-mode",
        "--lacp-rate",
    ] {
        assert!(script.contains(word), "{word} in the bash completion");
    }
    let bad = Command::new(XSKIT)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bash"));
    let dir = std::env::temp_dir().join(format!("xskit-man-{}", std::process::id()));
    let out = Command::new(XSKIT)
        .args(["man", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let page = std::fs::read_to_string(dir.join("xskit-fwd.1")).unwrap();
    assert!(
        page.starts_with(".ie") || page.contains(".TH xskit-fwd"),
        "{page}"
    );
    assert!(page.contains("lacp"), "fwd's options are in its page");
    assert!(dir.join("xskit.1").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench plot` redraws a saved table without measuring, and says what is wrong with a file
/// that is not one; the file is refused by the commands that measure.
#[cfg(feature = "bench-harness")]
#[test]
fn bench_plot_redraws_a_saved_table() {
    let dir = std::env::temp_dir().join(format!("xskit-bench-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("results.json");
    std::fs::write(
        &saved,
        r#"{"command":"bench","schema_version":1,"seconds_per_cell":3.0,"runs":2,
            "cells":[{"bench":"rxdrop","mode":"drv","size":64,"mpps":[1.5,1.7],"cpu_ns_per_packet":[300.0]}],
            "ratios":[]}"#,
    )
    .unwrap();
    let plot = |args: &[&str]| {
        let out = Command::new(XSKIT).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, text) = plot(&["bench", "plot", saved.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    let svg = std::fs::read_to_string(dir.join("results.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("rxdrop drv 64 B"),
        "{svg}"
    );
    let out = dir.join("other.svg");
    let (code, text) = plot(&[
        "bench",
        "plot",
        saved.to_str().unwrap(),
        "--plot",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert!(out.exists());
    std::fs::write(&saved, r#"{"command":"gen"}"#).unwrap();
    let (code, text) = plot(&["bench", "plot", saved.to_str().unwrap()]);
    assert_ne!(code, Some(0));
    assert!(
        text.contains("not the JSON of `xskit bench --json`"),
        "{text}"
    );
    let (code, text) = plot(&["bench", "plot"]);
    assert_ne!(code, Some(0));
    assert!(text.contains("xskit bench plot RESULTS.json"), "{text}");
    let (code, text) = plot(&["bench", "rxdrop", saved.to_str().unwrap()]);
    assert_ne!(code, Some(0));
    assert!(text.contains("is for bench plot"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The frame-size convention (no FCS; RFC 2544's 64 is -s 60) is in every packet command's
/// help.
#[test]
fn the_help_of_commands_that_count_frames_says_sizes_exclude_the_fcs() {
    for (command, counts_frames) in [
        (None, false),
        (Some("gen"), true),
        (Some("bench"), true),
        (Some("dump"), true),
        (Some("demo"), true),
        (Some("recv"), false),
        (Some("fwd"), false),
        (Some("zcsend"), false),
    ] {
        let out = Command::new(XSKIT)
            .args(command)
            .arg("--help")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.contains("WITHOUT its 4-byte FCS") && text.contains("-s 60"),
            counts_frames,
            "{command:?}: {text}"
        );
    }
}

const NOSUCH: &str = "no interface named 'xskit-no-such-if'";

/// Command lines with several mistakes, and what each mistake's message says.
type Mistaken = (&'static [&'static str], &'static [&'static str]);

const MISTAKEN: &[Mistaken] = &[
    (
        &["gen", "-i", "xskit-no-such-if", "-s", "20000", "-t", "0"],
        &[NOSUCH, "packet size 20000", "-t 0"],
    ),
    (
        &[
            "recv",
            "-i",
            "xskit-no-such-if",
            "--expect",
            "0",
            "--max-loss",
            "200%",
        ],
        &[NOSUCH, "--expect 0", "--max-loss \"200%\""],
    ),
    (
        &["dump", "-i", "xskit-no-such-if", "-s", "0", "port("],
        &[NOSUCH, "-s 0", "not tcpdump's language"],
    ),
    (
        &[
            "fwd",
            "-i",
            "a",
            "-i",
            "a",
            "-I",
            "0",
            "--rules",
            "/nonexistent/rules.toml",
        ],
        &[
            "--interval 0",
            "--rules: /nonexistent/rules.toml",
            "no interface named 'a'",
            "both interfaces are a",
        ],
    ),
    (
        &["fwd", "-i", "xskit-no-such-if", "-i", "xskit-no-such-if2"],
        &[NOSUCH, "no interface named 'xskit-no-such-if2'"],
    ),
    (
        &["gen", "-i", "lo", "-b", "0", "-s", "10", "--flows", "0"],
        &["batch size 0", "--flows 0", "packet size 10"],
    ),
    (
        &["gen", "-i", "lo", "--dst-ip", "2001:db8::2", "-b", "0"],
        &["batch size 0", "with -6 (--ipv6)"],
    ),
    (
        &["recv", "-i", "lo", "--ring-size", "100", "-b", "0"],
        &["batch size 0", "--ring-size 100"],
    ),
    (
        &["bench", "txpush", "-i", "lo", "-s", "10", "-I", "0"],
        &["packet size 10", "--interval 0"],
    ),
    (
        &[
            "bench",
            "rxdrop",
            "-i",
            "xskit-no-such-if",
            "-b",
            "0",
            "--runs",
            "3",
        ],
        &[NOSUCH, "batch size 0", "--runs is for the testbed table"],
    ),
];

#[test]
fn every_mistake_of_a_command_line_is_reported_at_once() {
    for &(args, mistakes) in MISTAKEN {
        let out = Command::new(XSKIT).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {text}");
        assert!(
            text.contains(&format!("{} mistakes", mistakes.len())),
            "{text}"
        );
        for mistake in mistakes {
            assert!(text.contains(mistake), "{args:?}: {mistake}: {text}");
        }
    }
}

/// A rules file is read bounded: what is not a regular file is refused before a byte of it is
/// read (a FIFO would block the start for ever, /dev/zero would exhaust memory), and a file
/// with no rules is said at start.
#[test]
fn hostile_rules_files_are_refused_before_they_are_read() {
    let dir = std::env::temp_dir().join(format!("xskit-cli-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let empty = dir.join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let explain = |rules: &std::path::Path| {
        let out = Command::new(XSKIT)
            .args(["fwd", "-i", "lo", "-i", "lo", "--explain", "--rules"])
            .arg(rules)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, text) = explain(std::path::Path::new("/dev/zero"));
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("/dev/zero: is a device, not a regular file"),
        "{text}"
    );
    let (code, text) = explain(&fifo);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("is a FIFO, not a regular file"), "{text}");
    let (code, text) = explain(&empty);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("has no rules: every packet takes the default (forward)"),
        "{text}"
    );
    // Past eight rules, the start says they are looked up by vectors, and what that takes.
    let many = dir.join("many.toml");
    let rules: String = (0..20)
        .map(|i| format!("[[rule]]\nname = \"r{i}\"\nprotocol = \"udp\"\ndst_port = {i}\naction = \"drop\"\n"))
        .collect();
    std::fs::write(&many, rules).unwrap();
    let (code, text) = explain(&many);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("20 rules, looked up by bit vectors:") && text.contains("MiB on each"),
        "{text}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
