//! `xskit zcsend` end to end.

mod common;

use common::*;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use xskit_testbed::{Testbed, TestbedConfig};

/// A TCP receiver in b and a sender in a: every byte arrives; the kernel's copy on local
/// delivery is reported and zero-copy switched off; the same over io_uring.
#[test]
fn tcp_sender_and_receiver() {
    if !privileged() {
        return;
    }
    for uring in [false, true] {
        let bed = Testbed::new(&TestbedConfig::default()).unwrap();
        let ip = bed.b.ip.to_string();
        let mut receiver = bed
            .b
            .ns
            .command(XSKIT)
            .args([
                "zcsend", "--role", "receiver", "--proto", "tcp", "--addr", &ip, "-d", "10",
                "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(receiver.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("listening"), "{line}");
        let mut sender = bed.a.ns.command(XSKIT);
        sender.args([
            "zcsend", "--role", "sender", "--proto", "tcp", "--addr", &ip, "-d", "0.5", "--json",
        ]);
        if uring {
            sender.arg("--uring");
        }
        let out = sender.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let r: serde_json::Value =
            serde_json::from_slice(&receiver.wait_with_output().unwrap().stdout).unwrap();
        assert!(s["bytes"].as_u64().unwrap() > 1 << 20, "{s}");
        assert_eq!(
            s["bytes"], r["bytes"],
            "uring={uring}: every byte arrived: {s} {r}"
        );
        assert!(
            s["copied_completions"].as_u64().unwrap() > 0,
            "local delivery copies: {s}"
        );
        assert!(s["cpu_s_per_gb"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn table_shows_both_paths() {
    if !privileged() {
        return;
    }
    let out = Command::new(XSKIT)
        .args(["zcsend", "--table", "-d", "0.3"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let udp: Vec<_> = text.lines().filter(|l| l.starts_with("udp")).collect();
    let tcp: Vec<_> = text.lines().filter(|l| l.starts_with("tcp")).collect();
    assert_eq!((udp.len(), tcp.len()), (5, 5), "{text}");
    for row in &udp[..3] {
        assert!(
            row.trim_end().ends_with("no"),
            "forwarded UDP goes out without a copy: {row}"
        );
    }
    for row in &tcp {
        assert!(
            row.contains("yes: the kernel copied"),
            "local delivery is reported honestly: {row}"
        );
    }
}

#[test]
fn bad_options_are_explained() {
    for (args, expected) in [
        (
            vec!["zcsend", "--addr", "198.51.100.2"],
            "--role sender or --role receiver",
        ),
        (vec!["zcsend", "--role", "sender"], "--addr is required"),
        (
            vec![
                "zcsend",
                "--role",
                "sender",
                "--addr",
                "198.51.100.2",
                "--proto",
                "udp",
                "-s",
                "70000",
            ],
            "too large for one UDP datagram",
        ),
        (
            vec![
                "zcsend",
                "--role",
                "sender",
                "--addr",
                "198.51.100.2",
                "--cork",
            ],
            "--cork applies to UDP only",
        ),
        (
            vec![
                "zcsend",
                "--role",
                "sender",
                "--addr",
                "198.51.100.2",
                "--duration=-1",
            ],
            "--duration",
        ),
        (
            vec![
                "zcsend",
                "--role",
                "sender",
                "--addr",
                "198.51.100.2",
                "-s",
                "0",
            ],
            "--size 0 is out of range",
        ),
    ] {
        let out = Command::new(XSKIT).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}
