//! `xskit fwd` when the world changes under it: an interface deleted or moved to another
//! namespace, or xskit's XDP link detached from outside, while it runs. Each is noticed
//! within a fraction of a second, named, summarised, and ends the run with exit status 1 and
//! nothing left attached. Two forwarders started at the same instant: exactly one runs.

mod common;

use common::*;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use xskit_testbed::{Chain, Host};

/// Waits up to 5 s for the forwarder to end by itself.
fn ends_by_itself(fwd: KillOnDrop) -> Output {
    let mut child = fwd.take();
    let deadline = Instant::now() + Duration::from_secs(5);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("xskit fwd did not notice");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn attached(host: &Host, ifname: &str) -> bool {
    let out = host
        .ns
        .command("ip")
        .args(["-d", "link", "show", "dev", ifname])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

fn traffic(chain: &Chain) {
    far_ends_take_xdp_frames(chain);
    let c = chain.c.ip.to_string();
    ok(&run(
        &chain.a,
        "ping",
        &["-c", "2", "-i", "0.2", "-W", "1", &c],
    ));
}

/// Checks the run ended with status 1, a complete summary naming `expected`, and every frame
/// accounted for.
fn check_fault(out: &Output, expected: &str) -> serde_json::Value {
    // (stderr's header line was read by `start`, which closed the pipe: the message is
    // checked in the JSON summary.)
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{:?}: {text}", out.status);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the summary");
    assert!(
        report["fault"].as_str().unwrap().contains(expected),
        "{report}"
    );
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
    let moved: u64 = report["counters"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["rx_packets"].as_u64().unwrap() + p["xdp_forwarded"].as_u64().unwrap())
        .sum();
    assert!(
        moved > 0,
        "the traffic before the fault is counted: {report}"
    );
    report
}

#[test]
fn an_interface_deleted_mid_run_ends_it_with_a_summary() {
    if !privileged() {
        return;
    }
    for extra in [&[][..], &["--xdp-forward"]] {
        let chain = Chain::bridged().unwrap();
        let fwd = start_fwd(&chain, extra);
        traffic(&chain);
        delete_link(&chain.m_c);
        let out = ends_by_itself(fwd);
        check_fault(&out, &format!("{} is gone", chain.m_c.ifname));
        assert!(!attached(&chain.m_a, &chain.m_a.ifname), "{extra:?}");
    }
}

#[test]
fn an_interface_moved_to_another_namespace_ends_it() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let fwd = start_fwd(&chain, &[]);
    traffic(&chain);
    let st = Command::new("ip")
        .args(["-n", chain.m_c.ns.name(), "link", "set", &chain.m_c.ifname])
        .args(["netns", chain.c.ns.name()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = ends_by_itself(fwd);
    check_fault(&out, "moved to another network namespace");
    assert!(!attached(&chain.m_a, &chain.m_a.ifname));
    assert!(!attached(&chain.c, &chain.m_c.ifname), "the moved one too");
}

#[test]
fn a_link_detached_from_outside_ends_it() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let fwd = start_fwd(&chain, &["--xdp-forward"]);
    traffic(&chain);
    // The program attached to m_a, and the bpf_link that holds it.
    let show = chain
        .m_a
        .ns
        .command("ip")
        .args(["-d", "link", "show", "dev", &chain.m_a.ifname])
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout).to_string();
    let prog: u64 = show
        .split("prog/xdp id ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no program on m_a: {show}"));
    let links = Command::new("bpftool")
        .args(["-j", "link", "show"])
        .stderr(Stdio::inherit())
        .output()
        .expect("bpftool (scripts/setup.sh installs it)");
    let links: serde_json::Value = serde_json::from_slice(&links.stdout).unwrap();
    let link = links
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["prog_id"] == prog)
        .and_then(|l| l["id"].as_u64())
        .expect("xskit's link");
    let st = Command::new("bpftool")
        .args(["link", "detach", "id", &link.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = ends_by_itself(fwd);
    check_fault(&out, "was detached from outside xskit");
    assert!(!attached(&chain.m_c, &chain.m_c.ifname));
}

#[test]
fn two_forwarders_started_at_once_exactly_one_runs() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let (ma, mc) = (chain.m_a.ifname.as_str(), chain.m_c.ifname.as_str());
    for round in 0..6 {
        // Opposite orders, the case where each could take one interface and fail on the other.
        let spawn = |first: &str, second: &str| {
            KillOnDrop::new(
                chain
                    .m_a
                    .ns
                    .command(XSKIT)
                    .args(["fwd", "-i", first, "-i", second, "-d", "1", "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            )
        };
        let (a, b) = (spawn(ma, mc), spawn(mc, ma));
        let outs = [
            a.take().wait_with_output().unwrap(),
            b.take().wait_with_output().unwrap(),
        ];
        let ran = outs.iter().filter(|o| o.status.success()).count();
        assert_eq!(ran, 1, "round {round}: {outs:?}");
        let loser = outs.iter().find(|o| !o.status.success()).unwrap();
        let err = String::from_utf8_lossy(&loser.stderr);
        assert!(err.contains("already has an XDP program attached"), "{err}");
        assert!(!attached(&chain.m_a, ma) && !attached(&chain.m_c, mc));
    }
}

#[test]
fn cpus_are_checked_against_the_machine_and_the_affinity() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let (ma, mc) = (chain.m_a.ifname.as_str(), chain.m_c.ifname.as_str());
    let fwd = |cpus: &str| {
        chain
            .m_a
            .ns
            .command("taskset")
            .args([
                "-c", "1", XSKIT, "fwd", "-i", ma, "-i", mc, "-d", "0.5", "--cpus", cpus,
            ])
            .output()
            .unwrap()
    };
    // Under `taskset -c 1`, CPU 1 exists and is allowed: the worker runs there.
    let ok = fwd("1");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let outside = fwd("0");
    let err = String::from_utf8_lossy(&outside.stderr);
    assert_eq!(outside.status.code(), Some(1), "{err}");
    assert!(
        err.contains("CPU 0 is outside this process's allowed CPUs (1)"),
        "{err}"
    );
    let absent = fwd("4096");
    let err = String::from_utf8_lossy(&absent.stderr);
    assert!(err.contains("CPU 4096 does not exist"), "{err}");
    assert!(!attached(&chain.m_a, ma) && !attached(&chain.m_c, mc));
}
