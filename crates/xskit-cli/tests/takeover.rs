//! `xskit fwd --takeover`: a forwarder takes over from the one running on the same
//! interfaces, its sockets, UMEM and programs handed over, and no packet of a stream through
//! the wire is lost across twenty takeovers, one of them by a forwarder with other rules.

mod common;

use std::time::Duration;

use common::*;
use xskit_testbed::Chain;

const RULES_A: &str =
    "[[rule]]\nname = \"drop-7\"\nprotocol = \"udp\"\ndst_port = 7\naction = \"drop\"\n";
const RULES_B: &str = "[[rule]]\nname = \"fwd-9\"\nprotocol = \"udp\"\ndst_port = 9\n\
     action = \"forward\"\n[[rule]]\nname = \"drop-all\"\naction = \"drop\"\n";

/// A rule dropped in XDP and one that blocks a source over its rate, both on ports no
/// other probe uses.
const LIMITED: &str = "[[rule]]\nname = \"drop-7\"\nprotocol = \"udp\"\ndst_port = 7\n\
     action = \"drop\"\n[[rule]]\nname = \"limited\"\nprotocol = \"udp\"\ndst_port = 8\n\
     action = \"rate-limit\"\nrate = \"1pps\"\nburst = 2\nper = \"source\"\nblock = \"1h\"\n";

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
    let sender = stream_probes(&chain.a, &chain.c, 9, 2_000);
    let flowing = fwd.wait(Duration::from_secs(60), |l| crossed(l) > 100);
    assert!(flowing.is_some(), "{}", fwd.last());
    let mut longest = Duration::ZERO;
    for i in 0..20 {
        let rules = if i == 9 { b.path() } else { a.path() };
        let began = std::time::Instant::now();
        let next = start_fwd_in(&chain, &dir, &["--rules", rules, "--takeover"]);
        let summary = fwd.ended();
        longest = longest.max(began.elapsed());
        assert_eq!(summary["handed_to"], next.id(), "takeover {i}: {summary}");
        fwd = next;
        // Its counts go on from its predecessor's: it carries the stream once they grow.
        let first = fwd.wait(Duration::from_secs(60), |_| true).map(crossed);
        let first = first.unwrap_or_else(|| panic!("takeover {i}: no line"));
        let carries = fwd.wait(Duration::from_secs(60), |l| crossed(l) > first + 50);
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
    // What the guide quotes, for whoever runs this with --nocapture.
    eprintln!(
        "twenty takeovers: {sent} probes, none lost; the longest takeover {:.2} s from start \
         to the predecessor's exit; the longest a probe waited {:.1} ms",
        longest.as_secs_f64(),
        r["latency_max_us"].as_f64().unwrap_or(0.0) / 1000.0
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
    let sender = stream_probes(&chain.a, &chain.c, 9, 10_000);
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

/// A BPF file system of the test's own, mounted where the namespaces' commands see it (a
/// mount made before `ip netns exec` is copied into its mount namespace, the same file
/// system), unmounted and removed when dropped.
struct BpfDir(std::path::PathBuf);

impl BpfDir {
    fn new(name: &str) -> BpfDir {
        let dir = std::env::temp_dir().join(format!("xskit-bpf-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success());
        BpfDir(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for BpfDir {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Whether an XDP program is attached to `host`'s interface.
fn has_xdp(host: &xskit_testbed::Host) -> bool {
    let out = host
        .ns
        .command("ip")
        .args(["-d", "link", "show", "dev", &host.ifname])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

/// `n` probes from a to c's UDP `port`, sent to the end.
fn probes(chain: &Chain, port: &str, n: &str) {
    let (mac, src, dst) = (
        mac(&chain.c),
        chain.a.ip.to_string(),
        chain.c.ip.to_string(),
    );
    let mut args = vec!["gen", "-i", &chain.a.ifname, "--dst-mac", &mac];
    args.extend(["--src-ip", &src, "--dst-ip", &dst, "--dst-port", port]);
    args.extend(["-n", n, "-r", "10000", "--json"]);
    json_of(start(&chain.a, &args));
}

/// `--on-exit kernel`: a forwarder killed with SIGKILL leaves its programs attached, which go
/// on deciding in the kernel (a drop rule drops, forwarding in XDP forwards) with no process
/// at all; the next forwarder on the interfaces takes them over in one step, and with
/// `--on-exit close` they go when it ends.
#[test]
fn programs_kept_in_the_kernel_go_on_after_a_kill_and_are_taken_over() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    far_ends_take_xdp_frames(&chain);
    let (dir, bpf) = (RunDir::new("kept"), BpfDir::new("kept"));
    let rules = RulesFile::new(RULES_A);
    let keep = [
        "--xdp-forward",
        "--on-exit",
        "kernel",
        "--bpf-dir",
        bpf.path(),
    ];
    let mut fwd = start_fwd_in(
        &chain,
        &dir,
        &[&["--rules", rules.path()][..], &keep].concat(),
    );
    assert!(fwd.wait(Duration::from_secs(60), |_| true).is_some());
    drop(fwd); // SIGKILL
    assert!(
        has_xdp(&chain.m_a) && has_xdp(&chain.m_c),
        "the programs stay"
    );
    // No forwarder runs: port 7's probes are dropped by the kept rule, port 9's forwarded in
    // XDP. Were port 7's to cross, their numbers would end the receiver's count early.
    let receiver = recv(&chain.c, &["--expect", "300", "-d", "60"]);
    probes(&chain, "7", "200");
    probes(&chain, "9", "300");
    let r = json_of(receiver.take());
    assert_eq!((&r["valid"], &r["lost"]), (&300.into(), &0.into()), "{r}");
    // A forwarder started on the interfaces takes the kept programs over, and forwards.
    let again = ["--rules", rules.path(), "--bpf-dir", bpf.path()];
    let (mut fwd, said) = start_fwd_saying(&chain, &dir, &again, "took over the XDP");
    let names = format!(
        "{}, {} (--on-exit kernel)",
        chain.m_a.ifname, chain.m_c.ifname
    );
    let said = said.lock().unwrap().clone();
    assert!(said.contains(&names), "{said}");
    let sender = stream_probes(&chain.a, &chain.c, 9, 10_000);
    let carries = fwd.wait(Duration::from_secs(60), |l| crossed(l) > 500);
    assert!(carries.is_some(), "{}", fwd.last());
    drop(sender);
    stop_live_fwd(fwd);
    assert!(
        !has_xdp(&chain.m_a) && !has_xdp(&chain.m_c),
        "--on-exit close: they went with it"
    );
}

/// A successor that pauses the forwarder and then goes away without committing: the
/// forwarder resumes at once and forwards on, saying so.
#[test]
fn a_successor_that_pauses_and_goes_away_leaves_the_forwarder_forwarding() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("abandoned");
    let (mut fwd, said) = start_fwd_saying(&chain, &dir, &[], "control socket");
    let socket = std::fs::read_dir(&dir.0)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("the control socket");
    let (mut client, inherited) = xskit_fwd::control::HandoverClient::request(&socket).unwrap();
    assert_eq!(inherited.state().pid, fwd.id());
    let paused = client.pause().unwrap();
    assert_eq!(paused.held.len(), inherited.state().sockets.len());
    drop((client, inherited));
    let sender = stream_probes(&chain.a, &chain.c, 9, 10_000);
    let carries = fwd.wait(Duration::from_secs(60), |l| crossed(l) > 1_000);
    assert!(carries.is_some(), "resumed: {}", fwd.last());
    drop(sender);
    let summary = stop_live_fwd(fwd);
    assert!(summary.get("handed_to").is_none(), "{summary}");
    let said = said.lock().unwrap().clone();
    assert!(said.contains("a handover did not happen"), "{said}");
}

/// Rule `name`'s counts in a line of `--json-lines` or a summary.
fn rule_in<'a>(line: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    line["counters"]["rules"]
        .as_array()
        .and_then(|rules| rules.iter().find(|r| r["name"] == name))
        .unwrap_or(&serde_json::Value::Null)
}

/// Sends `n` probes from `from` to `to`'s UDP port `port`, 1,000 a second; how many went.
fn send_probes(from: &xskit_testbed::Host, to: &xskit_testbed::Host, port: u16, n: u64) -> u64 {
    let (mac, src, dst) = (mac(to), from.ip.to_string(), to.ip.to_string());
    let (port, n) = (port.to_string(), n.to_string());
    let mut args = vec!["gen", "-i", &from.ifname, "--dst-mac", &mac, "--json"];
    args.extend(["--src-ip", &src, "--dst-ip", &dst, "--dst-port", &port]);
    args.extend(["-n", &n, "-r", "1000"]);
    json_of(start(from, &args))["tx_packets"].as_u64().unwrap()
}

/// Starts a `--takeover` successor with `rules`, waits for its predecessor `fwd` to hand
/// over, and returns it with what it said.
fn take_over_with(chain: &Chain, dir: &RunDir, fwd: Live, rules: &RulesFile) -> (Live, String) {
    let args = ["--rules", rules.path(), "--takeover"];
    let (next, said) = start_fwd_saying(chain, dir, &args, "control socket");
    let summary = fwd.ended();
    assert_eq!(summary["handed_to"], next.id(), "{summary}");
    let said = said.lock().unwrap().clone();
    (next, said)
}

/// A successor carries each rule's counters, rate-limit counts and the sources its limit
/// blocked by the rule's name: a source blocked before the takeover stays blocked after it
/// (its probes counted as blocked, not over the rate), and a renamed rule starts at zero.
#[test]
fn a_successor_carries_each_rules_counters_and_blocks_by_name() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("carry");
    let rules = RulesFile::new(LIMITED);
    let mut fwd = start_fwd_in(&chain, &dir, &["--rules", rules.path()]);
    let dropped = send_probes(&chain.a, &chain.c, 7, 500);
    let limited = send_probes(&chain.a, &chain.c, 8, 20);
    let counted = |l: &serde_json::Value| {
        rule_in(l, "drop-7")["packets"] == dropped
            && rule_in(l, "limited")["packets"] == limited
            && rule_in(l, "limited")["sources_blocked"] == 1
    };
    let before = fwd.wait(Duration::from_secs(60), counted).cloned();
    let before = before.unwrap_or_else(|| panic!("counted: {}", fwd.last()));
    let (mut fwd, said) = take_over_with(&chain, &dir, fwd, &rules);
    assert!(said.contains("state of 2 rules"), "{said}");
    let carried = fwd
        .wait(Duration::from_secs(60), |_| true)
        .cloned()
        .unwrap();
    assert!(counted(&carried), "carried over: {carried}");
    let was = rule_in(&before, "limited");
    assert_eq!(rule_in(&carried, "limited"), was, "{carried}");
    // Blocked for an hour: the successor drops the source as blocked, never over the rate.
    let later = send_probes(&chain.a, &chain.c, 8, 5);
    let blocked = |l: &serde_json::Value| rule_in(l, "limited")["packets"] == limited + later;
    let after = fwd.wait(Duration::from_secs(60), blocked).cloned();
    let after = after.unwrap_or_else(|| panic!("counted: {}", fwd.last()));
    let now = rule_in(&after, "limited");
    assert_eq!(now["over_rate"], was["over_rate"], "{after}");
    assert_eq!(
        now["blocked"].as_u64(),
        Some(was["blocked"].as_u64().unwrap() + later),
        "{after}"
    );
    let renamed = RulesFile::new(&LIMITED.replace("drop-7", "drop-seven"));
    let (fwd, said) = take_over_with(&chain, &dir, fwd, &renamed);
    assert!(said.contains("state of 1 rules"), "{said}");
    let last = stop_live_fwd(fwd);
    assert_eq!(rule_in(&last, "drop-seven")["packets"], 0, "{last}");
    assert_eq!(
        rule_in(&last, "limited")["packets"],
        limited + later,
        "{last}"
    );
}

/// The kernel's TCP with its defaults (iperf3, 8 s) through two takeovers: the transfer goes
/// on across both and ends cleanly, and the last forwarder accounts for every frame.
#[test]
fn kernel_tcp_runs_on_through_two_takeovers() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let dir = RunDir::new("tcp");
    let mut fwd = start_fwd_in(&chain, &dir, &[]);
    let _server = KillOnDrop::new(
        chain
            .c
            .ns
            .command("iperf3")
            .args(["-s", "-1", "-p", "5299"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("iperf3 (scripts/setup.sh installs it)"),
    );
    wait_listening(&chain.c, "5299");
    let client = chain
        .a
        .ns
        .command("iperf3")
        .args(["-c", &chain.c.ip.to_string(), "-p", "5299", "-t", "8", "-J"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client = KillOnDrop::new(client);
    for i in 0..2 {
        let flowing = fwd.wait(Duration::from_secs(60), |l| crossed(l) > 1_000 * (i + 1));
        assert!(flowing.is_some(), "takeover {i}: {}", fwd.last());
        let next = start_fwd_in(&chain, &dir, &["--takeover"]);
        let summary = fwd.ended();
        assert_eq!(summary["handed_to"], next.id(), "takeover {i}: {summary}");
        fwd = next;
    }
    let out = client.take().wait_with_output().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out.status.success() && j.get("error").is_none(), "{j}");
    let received = j["end"]["sum_received"]["bytes"].as_u64().unwrap();
    assert!(received > 10 << 20, "iperf3 moved {received} bytes");
    let last = stop_live_fwd(fwd);
    assert!(crossed(&last) > 0, "{last}");
}

/// Scrapes `url` in `ns` as fast as curl goes until stopped (SIGINT), a status per line
/// (`000` where no connection was made).
fn scraping(ns: &xskit_testbed::Netns, url: &str) -> KillOnDrop {
    let script = format!(
        "trap 'exit 0' INT; while :; do curl -s -o /dev/null -w '%{{http_code}}\\n' \
         --max-time 5 {url}; done"
    );
    KillOnDrop::new(
        ns.command("sh")
            .args(["-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// The metrics endpoint stays up through a takeover: the successor serves on the listening
/// socket its predecessor hands over, so a scraper that never stops is never refused.
#[test]
fn the_metrics_endpoint_answers_every_scrape_through_a_takeover() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("metrics");
    let metrics = ["--metrics", "127.0.0.1:9471"];
    let fwd = start_fwd_in(&chain, &dir, &metrics);
    let scraper = scraping(&chain.m_a.ns, "http://127.0.0.1:9471/metrics");
    let mut fwd = fwd;
    for i in 0..3 {
        let args = [&metrics[..], &["--takeover"]].concat();
        let next = start_fwd_in(&chain, &dir, &args);
        let summary = fwd.ended();
        assert_eq!(summary["handed_to"], next.id(), "takeover {i}: {summary}");
        fwd = next;
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &scraper.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = scraper.take().wait_with_output().unwrap();
    let codes = String::from_utf8_lossy(&out.stdout);
    let answered = codes.lines().filter(|c| *c == "200").count();
    let others: Vec<&str> = codes.lines().filter(|c| *c != "200").collect();
    let refused = others.len();
    assert!(answered > 10, "{codes}");
    eprintln!("metrics through three takeovers: {answered} scrapes, {refused} refused");
    assert_eq!(
        refused, 0,
        "{answered} scrapes answered, {refused} not: {others:?}"
    );
    stop_live_fwd(fwd);
}
