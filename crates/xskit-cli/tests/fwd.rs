//! `xskit fwd` on a three-namespace bump in the wire: a — [m: xskit fwd] — c, a and c on one
//! subnet, m with no address, so every packet between a and c crosses xskit.

mod common;

use common::*;

use std::process::{Child, Command, Output};

use xskit_testbed::{Chain, Host};

/// Starts `xskit fwd` between m's two interfaces with `extra` options and `--json`.
fn start_fwd(chain: &Chain, extra: &[&str]) -> Child {
    let mut args = vec![
        "fwd",
        "-i",
        &chain.m_a.ifname,
        "-i",
        &chain.m_c.ifname,
        "--json",
    ];
    args.extend_from_slice(extra);
    start(&chain.m_a, &args)
}

/// SIGINT, then the JSON summary.
fn interrupt(child: Child) -> serde_json::Value {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    json_of(child)
}

fn run(host: &Host, program: &str, args: &[&str]) -> Output {
    host.ns.command(program).args(args).output().unwrap()
}

fn ok(out: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    text
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

fn recv(host: &Host, extra: &[&str]) -> Child {
    let mut args = vec!["recv", "-i", &host.ifname, "--json"];
    args.extend_from_slice(extra);
    start(host, &args)
}

/// A rules file, removed on drop.
struct RulesFile(std::path::PathBuf);

impl RulesFile {
    fn new(text: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "xskit-rules-{}-{}.toml",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&p, text).unwrap();
        RulesFile(p)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for RulesFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn xdp_attached(host: &Host) -> bool {
    let out = run(host, "ip", &["-d", "link", "show", "dev", &host.ifname]);
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

fn forwards_intact_in_order(mode: &str) {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let fwd = start_fwd(&chain, &["-m", mode, "--check"]);
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
    let r = json_of(receiver);
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
            "-r",
            rules.path(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 4, column 12"), "{err}");
    assert!(err.contains("\"x\" is not a port"), "{err}");
}
