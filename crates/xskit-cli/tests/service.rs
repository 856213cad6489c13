//! `xskit fwd` as a service: the systemd unit in dist/systemd (checked by systemd-analyze,
//! its capabilities the ones xskit names), the forwarder run as an unprivileged user with
//! exactly those capabilities (and refusing, naming it, with any one taken away), and its
//! readiness and stop told through a socket standing in for systemd's NOTIFY_SOCKET.

mod common;

use std::collections::BTreeSet;
use std::io::BufRead;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use xskit_testbed::Chain;

const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../dist/systemd/xskit-fwd@.service"
);

/// The unit's value of `key` (its last line setting it).
fn unit_value(unit: &str, key: &str) -> String {
    unit.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the unit sets no {key}"))
        .to_string()
}

/// The capabilities the unit gives, as xskit names them (`CAP_BPF`), from `key`.
fn unit_caps(unit: &str, key: &str) -> BTreeSet<String> {
    unit_value(unit, key)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// A directory in the temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("xskit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_unit_passes_systemd_analyze_and_gives_exactly_the_capabilities_xskit_needs() {
    let unit = std::fs::read_to_string(UNIT).unwrap();
    let needed: BTreeSet<String> = xskit::privileges::NEEDED
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    assert_eq!(unit_caps(&unit, "CapabilityBoundingSet"), needed);
    assert_eq!(unit_caps(&unit, "AmbientCapabilities"), needed);
    assert_eq!(unit_value(&unit, "Type"), "notify");
    assert_eq!(unit_value(&unit, "NoNewPrivileges"), "yes");
    // systemctl reload is SIGHUP, which the forwarder takes as "apply --rules again"
    // (ctl.rs tests it).
    assert_eq!(unit_value(&unit, "ExecReload"), "/bin/kill -HUP $MAINPID");
    // systemd-analyze checks that ExecStart's program exists: point it at the one built.
    let dir = TempDir::new("unit");
    let copy = dir.0.join("xskit-fwd@.service");
    std::fs::write(&copy, unit.replace("/usr/local/bin/xskit", XSKIT)).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.0.join("xskit-fwd@check.service"))
        .output()
        .expect("systemd-analyze (scripts/setup.sh installs systemd)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(
        !said.contains("xskit-fwd@"),
        "systemd-analyze found fault with the unit: {said}"
    );
}

/// `xskit fwd` between the chain's middle interfaces as user nobody, with no new privileges,
/// only `caps` (names as the unit spells them) and the RLIMIT_MEMLOCK a service starts with
/// (8 MiB), as the unit runs it.
fn fwd_as_nobody(chain: &Chain, caps: &[&str]) -> std::process::Child {
    let set: Vec<String> = caps
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let set = format!(
        "-all{}",
        set.iter().map(|c| format!(",{c}")).collect::<String>()
    );
    chain
        .m_a
        .ns
        .command("prlimit")
        .args(["--memlock=8388608:8388608", "setpriv"])
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--no-new-privs",
        ])
        .args([
            format!("--inh-caps={set}"),
            format!("--ambient-caps={set}"),
            format!("--bounding-set={set}"),
        ])
        .args([
            XSKIT,
            "fwd",
            "-i",
            &chain.m_a.ifname,
            "-i",
            &chain.m_c.ifname,
        ])
        .args(["-m", "drv", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux)")
}

#[test]
fn an_unprivileged_forwarder_runs_with_the_units_capabilities_and_names_any_it_lacks() {
    if !privileged() {
        return;
    }
    let unit = std::fs::read_to_string(UNIT).unwrap();
    let caps = unit_caps(&unit, "AmbientCapabilities");
    let caps: Vec<&str> = caps.iter().map(String::as_str).collect();
    let chain = Chain::bridged().unwrap();
    let mut child = fwd_as_nobody(&chain, &caps);
    let mut header = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut header)
        .unwrap();
    let fwd = KillOnDrop::new(child);
    assert!(header.contains("Ctrl-C stops"), "{header}");
    assert!(
        answers_ping(&chain.a, &chain.c.ip.to_string()),
        "a reaches c through the unprivileged forwarder"
    );
    let report = stop_fwd(fwd);
    assert!(report["counters"]["ports"][0]["rx_packets"].as_u64() > Some(0));
    for lacking in &caps {
        let fewer: Vec<&str> = caps.iter().copied().filter(|c| c != lacking).collect();
        let out = fwd_as_nobody(&chain, &fewer).wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "without {lacking}: {said}");
        assert!(said.contains(lacking), "without {lacking}, said so: {said}");
        for other in fewer {
            let lacks = said.split(" or give it ").next().unwrap();
            assert!(
                !lacks.contains(other),
                "without {lacking}, blamed {other}: {said}"
            );
        }
    }
}

/// Waits for a datagram on `socket` that holds `line`, for up to a minute; what came.
fn wait_for_state(socket: &UnixDatagram, line: &str) -> String {
    let mut said = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 4096];
    while !said.lines().any(|l| l == line) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {line} in a minute: {said:?}"
        );
        if let Ok(n) = socket.recv(&mut buf) {
            said.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    said
}

/// Where the forwarders of the readiness test serve metrics (in their own namespace).
const METRICS: &str = "127.0.0.1:9464";

/// Waits until a forwarder's counters are scraped at [`METRICS`] in `ns` (it publishes them
/// once it has counted).
fn counters_scraped(ns: &xskit_testbed::Netns) {
    let url = format!("http://{METRICS}/metrics");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let scrape = ns
            .command("curl")
            .args(["-sf", "--max-time", "10", &url])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&scrape.stdout).contains("xskit_rules_generation") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no counters at {url}: {}",
            ok_or_text(&scrape)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_forwarder_tells_the_service_manager_when_it_is_ready_and_when_it_stops() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let dir = TempDir::new("notify");
    let path: &Path = &dir.0.join("notify");
    let socket = UnixDatagram::bind(path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let start = |extra: &[&str]| {
        let fwd = chain
            .m_a
            .ns
            .command(XSKIT)
            .args(["fwd", "-i", &chain.m_a.ifname, "-i", &chain.m_c.ifname])
            .args(["-m", "drv", "--json", "--metrics", METRICS])
            .args(extra)
            .env("NOTIFY_SOCKET", path)
            .env("XSKIT_RUN_DIR", &dir.0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        KillOnDrop::new(fwd)
    };
    let fwd = start(&[]);
    let ready = wait_for_state(&socket, "READY=1");
    assert!(
        ready.contains(&format!(
            "STATUS=forwarding {} <-> {}",
            chain.m_a.ifname, chain.m_c.ifname
        )),
        "{ready}"
    );
    // Ready means forwarding: the first ping after it crosses.
    let ping = run(
        &chain.a,
        "ping",
        &["-c", "1", "-W", "5", &chain.c.ip.to_string()],
    );
    assert!(ping.status.success(), "{}", ok_or_text(&ping));
    // A takeover: the successor says it is the main process now, and the forwarder it took
    // over from ends without saying it stops (the service goes on).
    let next = start(&["--takeover"]);
    let said = wait_for_state(&socket, "READY=1");
    assert!(said.contains(&format!("MAINPID={}", next.id())), "{said}");
    let handed = json_of(fwd.take());
    assert_eq!(handed["handed_to"], next.id(), "{handed}");
    let fwd = next;
    let ping = run(
        &chain.a,
        "ping",
        &["-c", "1", "-W", "5", &chain.c.ip.to_string()],
    );
    assert!(ping.status.success(), "{}", ok_or_text(&ping));
    // The metrics port its predecessor left is the successor's.
    counters_scraped(&chain.m_a.ns);
    // The predecessor has ended: all it said is queued.
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        let late = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(
            !late.contains("STOPPING=1"),
            "the predecessor said it stops: {late}"
        );
    }
    socket.set_nonblocking(false).unwrap();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &fwd.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    wait_for_state(&socket, "STOPPING=1");
    let report = json_of(fwd.take());
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
}

/// A command's stdout and stderr, to show when it failed.
fn ok_or_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
