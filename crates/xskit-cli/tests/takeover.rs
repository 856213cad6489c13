//! `xskit fwd --takeover`: a forwarder takes over from the one running on the same
//! interfaces, its sockets, UMEM and programs handed over, and no packet of a stream through
//! the wire is lost across twenty takeovers, one of them by a forwarder with other rules.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use xskit_testbed::Chain;

const RULES_A: &str =
    "[[rule]]\nname = \"drop-7\"\nprotocol = \"udp\"\ndst_port = 7\naction = \"drop\"\n";
const RULES_B: &str = "[[rule]]\nname = \"fwd-9\"\nprotocol = \"udp\"\ndst_port = 9\n\
     action = \"forward\"\n[[rule]]\nname = \"drop-all\"\naction = \"drop\"\n";

/// A runtime directory of the test's own, removed when dropped.
struct RunDir(std::path::PathBuf);

impl RunDir {
    fn new(name: &str) -> RunDir {
        let dir = std::env::temp_dir().join(format!("xskit-to-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        RunDir(dir)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `xskit fwd` between the chain's middle interfaces, `--json-lines -I 0.1`, runtime
/// directory `run`, and `extra`; returned once it says where its control socket is. Its
/// standard error is passed on.
fn start_fwd_in(chain: &Chain, run: &RunDir, extra: &[&str]) -> Live {
    let mut child = chain
        .m_a
        .ns
        .command(XSKIT)
        .env("XSKIT_RUN_DIR", &run.0)
        .args(["fwd", "-i", &chain.m_a.ifname, "-i", &chain.m_c.ifname])
        .args(["--json-lines", "-I", "0.1"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("control socket") {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "{said}");
        said.push_str(&line);
    }
    std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            eprintln!("{line}");
        }
    });
    Live::new(KillOnDrop::new(child))
}

/// A stream of probes from a to c's UDP port 9 at `rate` a second through the forwarder,
/// until stopped (SIGINT: its summary says how many it sent).
fn stream_to_c(chain: &Chain, rate: u64) -> KillOnDrop {
    let (mac, src, dst) = (
        mac(&chain.c),
        chain.a.ip.to_string(),
        chain.c.ip.to_string(),
    );
    let rate = rate.to_string();
    let mut args = vec!["gen", "-i", &chain.a.ifname, "--dst-mac", &mac, "--json"];
    args.extend(["--src-ip", &src, "--dst-ip", &dst, "--dst-port", "9"]);
    args.extend(["-n", "100000000", "-r", &rate]);
    KillOnDrop::new(start(&chain.a, &args))
}

/// Probes that crossed a forwarder, by its rules: both rule files forward port 9.
fn crossed(line: &serde_json::Value) -> u64 {
    let rules = line["counters"]["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    rules
        .iter()
        .filter(|r| r["name"] == "default" || r["name"] == "fwd-9")
        .filter_map(|r| r["packets"].as_u64())
        .sum()
}

/// Waits until two interval lines in a row count the same probes crossed: the stream has
/// drained through the forwarder.
fn drained(fwd: &mut Live) {
    let before = std::cell::Cell::new(u64::MAX);
    let settled = fwd.wait(Duration::from_secs(60), |l| {
        let now = crossed(l);
        now == before.replace(now)
    });
    assert!(settled.is_some(), "{}", fwd.last());
}

/// Twenty takeovers under a stream of 2,000 probes a second, the tenth by a forwarder
/// with other rules (which forward the stream too): each predecessor exits by itself
/// naming its successor, and every probe arrives, once, in order.
#[test]
fn twenty_takeovers_under_a_stream_lose_no_probe() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("twenty");
    let (a, b) = (RulesFile::new(RULES_A), RulesFile::new(RULES_B));
    let mut fwd = start_fwd_in(&chain, &dir, &["--rules", a.path()]);
    let receiver = recv(&chain.c, &["-d", "600"]);
    let sender = stream_to_c(&chain, 2_000);
    let flowing = fwd.wait(Duration::from_secs(60), |l| crossed(l) > 100);
    assert!(flowing.is_some(), "{}", fwd.last());
    for i in 0..20 {
        let rules = if i == 9 { b.path() } else { a.path() };
        let next = start_fwd_in(&chain, &dir, &["--rules", rules, "--takeover"]);
        let summary = fwd.ended();
        assert_eq!(summary["handed_to"], next.id(), "takeover {i}: {summary}");
        fwd = next;
        let carries = fwd.wait(Duration::from_secs(60), |l| crossed(l) > 50);
        assert!(carries.is_some(), "takeover {i}: {}", fwd.last());
    }
    let sent = signal(sender, "-INT")["tx_packets"].as_u64().unwrap();
    drained(&mut fwd);
    let r = signal(receiver, "-INT");
    assert_eq!(
        (r["valid"].as_u64(), &r["lost"], &r["out_of_order"]),
        (Some(sent), &0.into(), &0.into()),
        "every probe crossed twenty takeovers: {r}"
    );
    let last = stop_live_fwd(fwd);
    assert!(crossed(&last) > 0, "{last}");
}

/// `xskit fwd --takeover ARGS` in the middle namespace with runtime directory `run`, to its
/// end.
fn takeover_output(chain: &Chain, run: &RunDir, extra: &[&str]) -> std::process::Output {
    chain
        .m_a
        .ns
        .command(XSKIT)
        .env("XSKIT_RUN_DIR", &run.0)
        .args([
            "fwd",
            "-i",
            &chain.m_a.ifname,
            "-i",
            &chain.m_c.ifname,
            "--takeover",
        ])
        .args(extra)
        .output()
        .unwrap()
}

/// A successor that could not carry on (asked for zero-copy where the sockets copy) is
/// refused before anything pauses, and the running forwarder goes on; a takeover with no
/// forwarder to take over from says so.
#[test]
fn a_takeover_that_cannot_carry_on_is_refused_and_the_forwarder_goes_on() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("refused");
    let mut fwd = start_fwd_in(&chain, &dir, &[]);
    let out = takeover_output(&chain, &dir, &["-m", "zc"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("keeps its mode") && said.contains("goes on"),
        "{said}"
    );
    let sender = stream_to_c(&chain, 10_000);
    let carries = fwd.wait(Duration::from_secs(60), |l| crossed(l) > 1_000);
    assert!(carries.is_some(), "still forwarding: {}", fwd.last());
    drop(sender);
    let empty = RunDir::new("empty");
    let out = takeover_output(&chain, &empty, &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("no forwarder answers"), "{said}");
    stop_live_fwd(fwd);
}
