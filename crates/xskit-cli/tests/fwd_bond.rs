//! `xskit fwd` with a bond as one side: a host behind a Linux bridge (the switch) reaches a
//! far host only through an xskit bond of two links into that bridge, forwarded to a plain
//! link. Kernel TCP and ICMP cross it in every mode; active-backup fails over under load.

// A scenario reads top to bottom as the steps it takes, however many there are.
#![allow(clippy::too_many_lines)]

mod common;

use common::*;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use xskit_testbed::{Host, Switched, FAR_END};

/// The bond's side as a host (its namespace; its link to the far host).
fn bonded_side(sw: &Switched) -> Host {
    Host {
        ns: sw.bonded.clone(),
        ifname: FAR_END.into(),
        ip: std::net::Ipv4Addr::UNSPECIFIED,
        ip6: None,
        mac: [0; 6],
    }
}

/// Starts `xskit fwd -i bond0 -i xsf --bond bond0=xsb0,xsb1 --json EXTRA` in the bond's
/// namespace and waits for its header.
fn start_bond_fwd(sw: &Switched, extra: &[&str]) -> KillOnDrop {
    start_bond_fwd_printing(sw, &["--json"], extra)
}

/// As [`start_bond_fwd`], with its counters every 100 ms to wait on.
fn start_bond_fwd_live(sw: &Switched, extra: &[&str]) -> Live {
    Live::new(start_bond_fwd_printing(
        sw,
        &["--json-lines", "-I", "0.1"],
        extra,
    ))
}

fn start_bond_fwd_printing(sw: &Switched, output: &[&str], extra: &[&str]) -> KillOnDrop {
    let bond = format!("bond0={}", sw.members.join(","));
    let mut args = vec!["fwd", "-i", "bond0", "-i", FAR_END, "--bond", &bond];
    args.extend_from_slice(output);
    args.extend_from_slice(extra);
    KillOnDrop::new(start(&bonded_side(sw), &args))
}

/// Waits until the forwarder's bond is as `done` says, failing with its last counters if it
/// never is.
fn until_bond(fwd: &mut Live, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
    let seen = fwd
        .wait(Duration::from_secs(30), |line| done(bond_of(line)))
        .is_some();
    assert!(seen, "{what}: {}", fwd.last());
}

/// `xskit fwd -i bond0 -i xsf --bond bond0=xsb0,xsb1` in the bond's namespace.
fn bond_fwd(sw: &Switched) -> std::process::Command {
    let mut command = sw.bonded.command(XSKIT);
    command.args(["fwd", "-i", "bond0", "-i", FAR_END, "--bond"]);
    command.arg(format!("bond0={}", sw.members.join(",")));
    command
}

/// A one-shot iperf3 server on `host`.
fn iperf3_server(host: &Host, port: &str) -> KillOnDrop {
    let server = host
        .ns
        .command("iperf3")
        .args(["-s", "-1", "-p", port])
        .stdout(Stdio::null())
        .spawn()
        .expect("iperf3 (scripts/setup.sh installs it)");
    let server = KillOnDrop::new(server);
    wait_listening(host, port);
    server
}

/// Packets the switch's port to member 0 has carried, both ways.
fn port_0_packets(sw: &Switched) -> u64 {
    let out = sw
        .switch
        .command("ip")
        .args(["-j", "-s", "link", "show", &sw.ports[0]])
        .output()
        .unwrap();
    let link: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stats = &link[0]["stats64"];
    stats["rx"]["packets"].as_u64().unwrap() + stats["tx"]["packets"].as_u64().unwrap()
}

/// Lets `load` run until member 0's port has carried a thousand packets of it, then breaks
/// that port (`ip link set PORT ARGS`: `down` cuts the carrier, `nomaster` only the path
/// behind it), and waits for the load to finish.
fn break_member_0_during(sw: &Switched, how: &[&str], load: KillOnDrop) -> std::process::Output {
    let before = port_0_packets(sw);
    // No assertion: the load's own checks say what it got if it never came this way.
    xskit_testbed::wait_for(Duration::from_secs(20), || {
        (port_0_packets(sw) >= before + 1000).then_some(())
    });
    let cut = sw
        .switch
        .command("ip")
        .args(["link", "set", &sw.ports[0]])
        .args(how)
        .status()
        .unwrap();
    assert!(cut.success());
    load.take().wait_with_output().unwrap()
}

/// Takes the switch's port to member 0 down.
fn cut_switch_port_0(sw: &Switched) {
    let cut = sw
        .switch
        .command("ip")
        .args(["link", "set", &sw.ports[0], "down"])
        .status()
        .unwrap();
    assert!(cut.success());
}

fn cut_member_0_during(sw: &Switched, load: KillOnDrop) -> std::process::Output {
    break_member_0_during(sw, &["down"], load)
}

/// 12,500 datagrams a second (100 Mbit/s of 1000 bytes) for 3 s from the far host to the
/// switch's host, out through the bond, with member 0's port broken (`how`) after 1 s.
/// Returns (sent, lost) as iperf3 counts them.
fn udp_stream_across(sw: &Switched, port: &str, how: &[&str]) -> (u64, u64) {
    let far = sw.far.as_ref().unwrap();
    let server = iperf3_server(&sw.host, port);
    let client = far
        .ns
        .command("iperf3")
        .args([
            "-c",
            &sw.host.ip.to_string(),
            "-p",
            port,
            "-u",
            "-b",
            "100M",
        ])
        .args(["-l", "1000", "-t", "3", "-J"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = break_member_0_during(sw, how, KillOnDrop::new(client));
    drop(server);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sum = &j["end"]["sum"];
    (
        sum["packets"].as_u64().unwrap(),
        sum["lost_packets"].as_u64().unwrap(),
    )
}

/// Whether an XDP program is attached to `iface` on the bond's side.
fn xdp_attached_to(sw: &Switched, iface: &str) -> bool {
    let link = sw
        .bonded
        .command("ip")
        .args(["-d", "link", "show", iface])
        .output()
        .unwrap();
    String::from_utf8_lossy(&link.stdout).contains("prog/xdp")
}

/// iperf3 from the switch's host to the far host, the far host sending (-R), so that the
/// data leaves through the bond; returns the bytes received.
fn iperf3_through(sw: &Switched, port: &str) -> u64 {
    let far = sw.far.as_ref().unwrap();
    let server = iperf3_server(far, port);
    let out = sw
        .host
        .ns
        .command("iperf3")
        .args([
            "-c",
            &far.ip.to_string(),
            "-p",
            port,
            "-t",
            "1",
            "-R",
            "-P",
            "4",
        ])
        .args(["-J"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    drop(server);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    j["end"]["sum_received"]["bytes"].as_u64().unwrap()
}

/// The bond side's counts in a report.
fn bond_of(report: &serde_json::Value) -> &serde_json::Value {
    &report["counters"]["ports"][0]["bond"]
}

fn member_tx(report: &serde_json::Value, i: usize) -> u64 {
    bond_of(report)["members"][i]["tx_packets"]
        .as_u64()
        .unwrap()
}

fn kernel_tcp_crosses(mode: &[&str], port: &str) -> serde_json::Value {
    let sw = Switched::with_far_host(2).unwrap();
    let fwd = start_bond_fwd(&sw, mode);
    let received = iperf3_through(&sw, port);
    assert!(received > 1 << 20, "iperf3 moved {received} bytes");
    let report = stop_fwd(fwd);
    let bond = bond_of(&report);
    let side_tx = report["counters"]["ports"][0]["tx_packets"]
        .as_u64()
        .unwrap();
    assert!(side_tx > 0, "{report}");
    assert_eq!(bond["tx_no_member"], 0, "{report}");
    eprintln!("{mode:?}: {received} bytes; bond {bond}");
    report
}

#[test]
fn kernel_tcp_crosses_a_balance_rr_bond_on_both_members() {
    if !privileged() {
        return;
    }
    let report = kernel_tcp_crosses(&["--bond-mode", "balance-rr"], "5301");
    let (a, b) = (member_tx(&report, 0), member_tx(&report, 1));
    // Members in turn, one packet each: they differ by at most one per vector sent.
    assert!(a > 0 && b > 0, "{report}");
    assert!(a.abs_diff(b) * 10 < a + b, "rr spreads evenly: {a} and {b}");
}

#[test]
fn kernel_tcp_crosses_a_balance_xor_bond_by_the_hash() {
    if !privileged() {
        return;
    }
    let report = kernel_tcp_crosses(
        &["--bond-mode", "balance-xor", "--xmit-hash", "layer3+4"],
        "5302",
    );
    let side_tx = report["counters"]["ports"][0]["tx_packets"]
        .as_u64()
        .unwrap();
    assert_eq!(
        member_tx(&report, 0) + member_tx(&report, 1),
        side_tx,
        "every packet the side sent went to exactly one member: {report}"
    );
    assert_eq!(bond_of(&report)["xmit_hash_policy"], "layer3+4");
}

#[test]
fn kernel_tcp_crosses_an_active_backup_bond_on_the_primary_only() {
    if !privileged() {
        return;
    }
    let report = kernel_tcp_crosses(
        &["--bond-mode", "active-backup", "--primary", "xsb1"],
        "5303",
    );
    assert_eq!(bond_of(&report)["active"], "xsb1", "{report}");
    assert_eq!(
        member_tx(&report, 0),
        0,
        "the backup sends nothing: {report}"
    );
    assert!(member_tx(&report, 1) > 0, "{report}");
    // The host's first ARP request is flooded to both ports: the backup drops its copy.
    assert!(
        bond_of(&report)["members"][0]["rx_inactive"]
            .as_u64()
            .unwrap()
            > 0,
        "{report}"
    );
}

#[test]
fn kernel_tcp_crosses_a_broadcast_bond_with_a_copy_on_each_member() {
    if !privileged() {
        return;
    }
    let report = kernel_tcp_crosses(&["--bond-mode", "broadcast"], "5304");
    let (a, b) = (member_tx(&report, 0), member_tx(&report, 1));
    assert_eq!(a, b, "a copy on every member: {report}");
    assert_eq!(bond_of(&report)["tx_no_frame"], 0, "{report}");
}

/// ping's "N packets transmitted, M received".
fn ping_counts(text: &str) -> (u64, u64) {
    let line = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("ping's summary: {text}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

#[test]
fn active_backup_fails_over_under_load_and_the_switch_follows() {
    if !privileged() {
        return;
    }
    let sw = Switched::with_far_host(2).unwrap();
    let far = sw.far.as_ref().unwrap();
    let fwd = start_bond_fwd(&sw, &["--bond-mode", "active-backup"]);
    // Pings every 2 ms from the far host: requests leave through the bond, replies come
    // back through it. 1500 of them take 3 s; the active member's link is cut once it has
    // carried a thousand packets (about 1 s).
    let ping = ping_flood(far, &sw.host);
    xskit_testbed::wait_for(Duration::from_secs(20), || {
        sw.port_of(far.mac).unwrap().is_some().then_some(())
    });
    let before = sw.port_of(far.mac).unwrap();
    assert_eq!(
        before.as_deref(),
        Some("sw0"),
        "the switch learnt the active member"
    );
    let out = cut_member_0_during(&sw, ping);
    let (sent, received) = ping_counts(&String::from_utf8_lossy(&out.stdout));
    let lost = sent - received;
    eprintln!(
        "active-backup failover under 500 pings/s: {lost} of {sent} lost, an outage of about \
         {} ms",
        lost * 2
    );
    assert!(
        received > sent / 2,
        "traffic continued on the backup: {received} of {sent} answered"
    );
    assert_eq!(
        sw.port_of(far.mac).unwrap().as_deref(),
        Some("sw1"),
        "the switch learnt the new member from the traffic"
    );
    let report = stop_fwd(fwd);
    let bond = bond_of(&report);
    assert_eq!(bond["active"], "xsb1", "{report}");
    assert_eq!(bond["failovers"], 1, "{report}");
    assert_eq!(bond["members"][0]["up"], false, "{report}");
    assert!(member_tx(&report, 1) > 0, "{report}");
}

#[test]
fn members_with_different_mtus_are_refused() {
    if !privileged() {
        return;
    }
    let sw = Switched::with_far_host(2).unwrap();
    let st = sw
        .bonded
        .command("ip")
        .args(["link", "set", "xsb1", "mtu", "1400"])
        .status()
        .unwrap();
    assert!(st.success());
    let out = bond_fwd(&sw).args(["-d", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("different MTUs") && err.contains("xsb1 has 1400"),
        "{err}"
    );
    assert!(!xdp_attached_to(&sw, "xsb0"), "nothing left attached");
}

/// Bad bond options, refused before anything is opened (no privileges needed).
#[test]
fn bad_bond_options_are_refused_with_what_to_do() {
    let cases: &[(&[&str], &str)] = &[
        (&["-i", "a", "-i", "b", "--bond", "bond0"], "NAME=IFACE"),
        (&["-i", "bond0", "-i", "b", "--bond", "bond0=x,"], "empty"),
        (&["-i", "a", "-i", "b", "--bond", "bond0=x,y"], "not used"),
        (
            &["-i", "bond0", "-i", "b", "--bond", "bond0=x,x"],
            "x is used twice",
        ),
        (
            &["-i", "bond0", "-i", "x", "--bond", "bond0=x,y"],
            "x is used twice",
        ),
        (
            &[
                "-i",
                "bond0",
                "-i",
                "b",
                "--bond",
                "bond0=x,y",
                "--bond-mode",
                "roundrobin",
            ],
            "balance-rr",
        ),
        (
            &[
                "-i",
                "bond0",
                "-i",
                "b",
                "--bond",
                "bond0=x,y",
                "--xmit-hash",
                "layer5",
            ],
            "layer3+4",
        ),
        (
            &[
                "-i",
                "bond0",
                "-i",
                "b",
                "--bond",
                "bond0=x,y",
                "--primary",
                "z",
            ],
            "takes --bond-mode active-backup",
        ),
        (
            &[
                "-i",
                "bond0",
                "-i",
                "b",
                "--bond",
                "bond0=x,y",
                "--bond-mode",
                "1",
                "--primary",
                "z",
            ],
            "no bond's member",
        ),
        (
            &[
                "-i",
                "bond0",
                "-i",
                "b",
                "--bond",
                "bond0=x,y",
                "--bond-mode",
                "broadcast",
                "--xdp-forward",
            ],
            "every member of a broadcast bond",
        ),
        (
            &[
                "-i",
                "bond0",
                "-i",
                "b",
                "--bond",
                "bond0=a,b,c,d,e,f,g,h,i",
            ],
            "1 to 8 members",
        ),
    ];
    let arp_cases: &[(&[&str], &str)] = &[
        (&["--arp-interval", "100"], "needs --arp-ip-target"),
        (&["--arp-ip-target", "203.0.113.1"], "needs --arp-interval"),
        (
            &[
                "--arp-interval",
                "100",
                "--arp-ip-target",
                "255.255.255.255",
            ],
            "not a host's address",
        ),
        (
            &[
                "--arp-interval",
                "100",
                "--arp-ip-target",
                "203.0.113.1",
                "--arp-missed-max",
                "0",
            ],
            "arp_missed_max",
        ),
    ];
    let lacp_cases: &[(&[&str], &str)] = &[
        (&["--lacp-rate", "fast"], "takes --bond-mode 802.3ad"),
        (&["--min-links", "1"], "--min-links is an 802.3ad setting"),
        (&["--bond-mode", "4", "--lacp-rate", "medium"], "slow, fast"),
        (&["--bond-mode", "4", "--ad-select", "random"], "stable"),
        (&["--bond-mode", "4", "--lacp-active", "maybe"], "on, off"),
        (
            &["--bond-mode", "802.3ad", "--ad-actor-sys-prio", "0"],
            "1 to 65535",
        ),
        (
            &["--bond-mode", "802.3ad", "--ad-user-port-key", "1024"],
            "0 to 1023",
        ),
        (
            &["--bond-mode", "802.3ad", "--min-links", "9"],
            "--min-links 9",
        ),
    ];
    let bond = ["-i", "bond0", "-i", "b", "--bond", "bond0=x,y"];
    let arp_cases: Vec<(Vec<&str>, &str)> = arp_cases
        .iter()
        .chain(lacp_cases)
        .map(|(args, expect)| ([&bond[..], args].concat(), *expect))
        .collect();
    let cases = cases.iter().map(|(a, e)| (a.to_vec(), *e)).chain(arp_cases);
    for (args, expect) in cases {
        let out = std::process::Command::new(XSKIT)
            .arg("fwd")
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(expect), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn active_backup_failover_loss_under_a_udp_stream_is_measured() {
    if !privileged() {
        return;
    }
    let sw = Switched::with_far_host(2).unwrap();
    let fwd = start_bond_fwd(&sw, &["--bond-mode", "active-backup"]);
    let (sent, lost) = udp_stream_across(&sw, "5305", &["down"]);
    let report = stop_fwd(fwd);
    let bond = bond_of(&report);
    eprintln!(
        "active-backup failover under 12,500 datagrams/s: {lost} of {sent} lost (about {} ms \
         of the stream); bond {bond}",
        lost * 1000 / 12_500
    );
    assert_eq!(bond["failovers"], 1, "{report}");
    assert!(
        lost * 2 < sent,
        "the stream continued on the backup: {lost} of {sent} lost"
    );
    assert!(member_tx(&report, 1) > 0, "{report}");
}

#[test]
fn a_member_deleted_while_running_stops_the_forwarder_with_a_clear_error() {
    if !privileged() {
        return;
    }
    let sw = Switched::with_far_host(2).unwrap();
    let mut child = bond_fwd(&sw)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let fwd = KillOnDrop::new(child);
    let mut header = String::new();
    stderr.read_line(&mut header).unwrap();
    assert!(header.starts_with("xskit fwd:"), "{header}");
    let del = sw
        .bonded
        .command("ip")
        .args(["link", "del", "xsb1"])
        .status()
        .unwrap();
    assert!(del.success());
    let out = fwd.take().wait_with_output().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("stopped early") && err.contains("xsb1"),
        "{err}"
    );
    eprintln!("{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the summary");
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
    assert!(
        !xdp_attached_to(&sw, "xsb0"),
        "nothing left attached to the other member"
    );
}

/// `ethtool -K IFACE FEATURE STATE` in `ns`.
fn ethtool(ns: &xskit_testbed::Netns, iface: &str, feature: &str, state: &str) {
    let st = ns
        .command("ethtool")
        .args(["-K", iface, feature, state])
        .status()
        .unwrap();
    assert!(st.success(), "ethtool -K {iface} {feature} {state}");
}

/// Turns GRO on where the forwarder's XDP redirects arrive (the switch's member ports and
/// the far host): veth takes XDP frames only into a peer with GRO or an XDP program.
fn take_xdp_frames(sw: &Switched) {
    let far = sw.far.as_ref().unwrap();
    for port in &sw.ports {
        ethtool(&sw.switch, port, "gro", "on");
    }
    ethtool(&far.ns, &far.ifname, "gro", "on");
}

/// 1,500 pings every 2 ms from `from` to `to`, counted at the end (`ping_counts`).
fn ping_flood(from: &Host, to: &Host) -> KillOnDrop {
    let ping = from
        .ns
        .command("ping")
        .args(["-n", "-q", "-i", "0.002", "-c", "1500", "-W", "1"])
        .arg(to.ip.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    KillOnDrop::new(ping)
}

#[test]
fn kernel_tcp_crosses_a_balance_xor_bond_forwarded_in_xdp() {
    if !privileged() {
        return;
    }
    let sw = Switched::with_far_host(2).unwrap();
    take_xdp_frames(&sw);
    // With the hosts' default offloads their TCP leaves with partial checksums, which the
    // filter sends to user space to finish (the test above covers that path). Whole
    // checksums let XDP forward everything.
    let far = sw.far.as_ref().unwrap();
    for host in [&sw.host, far] {
        ethtool(&host.ns, &host.ifname, "tx", "off");
    }
    let args = [
        "--bond-mode",
        "balance-xor",
        "--xmit-hash",
        "layer3+4",
        "--xdp-forward",
    ];
    let fwd = start_bond_fwd(&sw, &args);
    let received = iperf3_through(&sw, "5306");
    assert!(received > 1 << 20, "iperf3 moved {received} bytes");
    let report = stop_fwd(fwd);
    let ports = &report["counters"]["ports"];
    let into_bond = ports[1]["xdp_forwarded"].as_u64().unwrap();
    let out_of_bond = ports[0]["xdp_forwarded"].as_u64().unwrap();
    assert!(into_bond > 100 && out_of_bond > 100, "{report}");
    let bond = bond_of(&report);
    assert_eq!(bond["tx_no_member"], 0, "{report}");
    let left: u64 = (0..2)
        .map(|i| bond["members"][i]["device_tx_packets"].as_u64().unwrap())
        .sum();
    assert!(
        left >= into_bond,
        "what the far side's filter forwarded left through the members: {report}"
    );
    eprintln!("{received} bytes; bond {bond}");
}

#[test]
fn active_backup_fails_over_while_forwarding_in_xdp() {
    if !privileged() {
        return;
    }
    let sw = Switched::with_far_host(2).unwrap();
    take_xdp_frames(&sw);
    let far = sw.far.as_ref().unwrap();
    let fwd = start_bond_fwd(&sw, &["--bond-mode", "active-backup", "--xdp-forward"]);
    let out = cut_member_0_during(&sw, ping_flood(far, &sw.host));
    let (sent, received) = ping_counts(&String::from_utf8_lossy(&out.stdout));
    eprintln!(
        "active-backup failover, forwarding in XDP, under 500 pings/s: {} of {sent} lost",
        sent - received
    );
    assert!(received > sent / 2, "{received} of {sent} answered");
    let report = stop_fwd(fwd);
    let bond = bond_of(&report);
    assert_eq!(bond["active"], "xsb1", "{report}");
    assert_eq!(bond["failovers"], 1, "{report}");
    assert!(
        bond["members"][1]["device_tx_packets"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert_eq!(
        report["counters"]["ports"][0]["tx_packets"], 0,
        "everything was forwarded in XDP: {report}"
    );
}

#[test]
fn arp_monitoring_takes_out_a_member_whose_path_fails_with_its_carrier_up() {
    if !privileged() {
        return;
    }
    let sw = Switched::with_far_host(2).unwrap();
    let target = sw.host.ip.to_string();
    let mut fwd = start_bond_fwd_live(
        &sw,
        &[
            "--bond-mode",
            "active-backup",
            "--arp-interval",
            "100",
            "--arp-ip-target",
            &target,
        ],
    );
    // The switch's port to member 0 leaves the bridge: both ends keep their carrier, but
    // nothing behind the port answers any more.
    let (sent, lost) = udp_stream_across(&sw, "5307", &["nomaster"]);
    eprintln!(
        "ARP monitoring every 100 ms, 2 missed checks, under 12,500 datagrams/s: {lost} of \
         {sent} lost (about {} ms of the stream)",
        lost * 1000 / 12_500
    );
    assert!(
        lost * 2 < sent,
        "the stream continued on the backup: {lost} of {sent} lost"
    );
    // Plugged back in, member 0 answers again and rejoins (as a backup: there is no
    // primary to return to). A second is ten checks.
    let replug = sw
        .switch
        .command("ip")
        .args(["link", "set", &sw.ports[0], "master", "xbr0"])
        .status()
        .unwrap();
    assert!(replug.success());
    until_bond(&mut fwd, "member 0 back up by ARP", |bond| {
        bond["members"][0]["up"] == true && bond["link_changes"] == 2
    });
    let report = stop_live_fwd(fwd);
    let bond = bond_of(&report);
    let first = &bond["members"][0];
    eprintln!("bond {bond}");
    assert_eq!(bond["active"], "xsb1", "{report}");
    assert_eq!(bond["failovers"], 1, "{report}");
    assert_eq!(
        (&first["carrier"], &first["arp_up"], &first["up"]),
        (
            &serde_json::json!(true),
            &serde_json::json!(true),
            &serde_json::json!(true)
        ),
        "{report}"
    );
    assert_eq!(bond["link_changes"], 2, "out by ARP, then back: {report}");
    for m in 0..2 {
        assert!(
            bond["members"][m]["arp_alive"].as_u64().unwrap() > 0,
            "the target answered member {m} before the cut: {report}"
        );
    }
}

#[test]
fn a_member_in_use_by_another_forwarder_is_refused_and_the_first_keeps_running() {
    if !privileged() {
        return;
    }
    let sw = Switched::with_far_host(2).unwrap();
    let first = start_bond_fwd(&sw, &["--bond-mode", "balance-xor"]);
    let out = bond_fwd(&sw).args(["-d", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a second forwarder on the same members started"
    );
    assert!(
        err.contains("xsb0") && err.contains("XDP program"),
        "the error names the member and what holds it: {err}"
    );
    // The first forwarder still carries traffic.
    let far = sw.far.as_ref().unwrap();
    let ping = far
        .ns
        .command("ping")
        .args(["-n", "-q", "-c", "5", "-i", "0.1", "-W", "1"])
        .arg(sw.host.ip.to_string())
        .output()
        .unwrap();
    let (sent, received) = ping_counts(&String::from_utf8_lossy(&ping.stdout));
    assert_eq!(received, sent, "{}", String::from_utf8_lossy(&ping.stdout));
    stop_fwd(first);
}

/// Active-backup with member 0 as primary: its port goes down and comes back; returns the
/// report.
fn primary_goes_and_returns(reselect: &str) -> serde_json::Value {
    let sw = Switched::with_far_host(2).unwrap();
    let mut fwd = start_bond_fwd_live(
        &sw,
        &[
            "--bond-mode",
            "active-backup",
            "--primary",
            "xsb0",
            "--primary-reselect",
            reselect,
        ],
    );
    for state in ["down", "up"] {
        let st = sw
            .switch
            .command("ip")
            .args(["link", "set", &sw.ports[0], state])
            .status()
            .unwrap();
        assert!(st.success());
        let up = state == "up";
        until_bond(&mut fwd, &format!("xsb0 {state}"), |bond| {
            bond["members"][0]["up"] == up
                && (!up || reselect != "always" || bond["failovers"] == 2)
        });
    }
    stop_live_fwd(fwd)
}

#[test]
fn the_primary_takes_over_again_as_primary_reselect_says() {
    if !privileged() {
        return;
    }
    let always = primary_goes_and_returns("always");
    let bond = bond_of(&always);
    assert_eq!(
        bond["active"], "xsb0",
        "always: the primary is back: {bond}"
    );
    assert_eq!(bond["failovers"], 2, "{bond}");
    let failure = primary_goes_and_returns("failure");
    let bond = bond_of(&failure);
    assert_eq!(bond["active"], "xsb1", "failure: the backup stays: {bond}");
    assert_eq!(bond["failovers"], 1, "{bond}");
    // veth links all run at 10 Gbit/s full duplex: the primary is no better.
    let better = primary_goes_and_returns("better");
    assert_eq!(bond_of(&better)["active"], "xsb1", "{}", bond_of(&better));
}

/// Active-backup answering for 203.0.113.30 (`--respond`): after member 0's port goes down,
/// where the switch has learnt the bond's MAC, with no traffic from anyone.
fn bond_mac_port_after_failover(grat_arps: &str) -> Option<String> {
    let sw = Switched::with_far_host(2).unwrap();
    let bond_mac = [0x02, 0x58, 0x53, 0x42, 0x00, 0x00];
    let mut fwd = start_bond_fwd_live(
        &sw,
        &[
            "--bond-mode",
            "active-backup",
            "--respond",
            "203.0.113.30",
            "--num-grat-arp",
            grat_arps,
        ],
    );
    cut_switch_port_0(&sw);
    until_bond(&mut fwd, "the failover", |bond| bond["failovers"] == 1);
    // Announced, the switch learns the new port; not announced, there is nothing to wait for.
    if grat_arps != "0" {
        xskit_testbed::wait_for(Duration::from_secs(10), || {
            (sw.port_of(bond_mac).unwrap().as_deref() == Some("sw1")).then_some(())
        });
    }
    let port = sw.port_of(bond_mac).unwrap();
    let report = stop_live_fwd(fwd);
    assert_eq!(bond_of(&report)["active"], "xsb1", "{report}");
    port
}

#[test]
fn a_failover_announces_the_bonds_address_from_the_new_member() {
    if !privileged() {
        return;
    }
    assert_eq!(
        bond_mac_port_after_failover("3").as_deref(),
        Some("sw1"),
        "gratuitous ARPs taught the switch the new port"
    );
    assert_eq!(
        bond_mac_port_after_failover("0"),
        None,
        "without them the switch does not know where the bond is"
    );
}

#[test]
fn xskit_info_shows_a_running_forwarders_bond() {
    if !privileged() {
        return;
    }
    let sw = Switched::with_far_host(2).unwrap();
    let fwd = start_bond_fwd(&sw, &["--bond-mode", "active-backup", "-I", "0.2"]);
    let info = |iface: &str| {
        let out = sw
            .bonded
            .command(XSKIT)
            .args(["info", "-i", iface])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    // The forwarder publishes its bonds every interval: wait for the first.
    let mut member = String::new();
    for _ in 0..100 {
        member = info("xsb0").1;
        if member.contains("xskit bond") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        member.contains("xskit bond        bond0 (xskit fwd, pid")
            && member.contains("active-backup")
            && member.contains("xsb0 (up), xsb1 (up)")
            && member.contains("xskit active      xsb0"),
        "{member}"
    );
    let (ok, bond) = info("bond0");
    assert!(
        ok && bond.contains("xskit members     xsb0 (up), xsb1 (up)"),
        "{bond}"
    );
    stop_fwd(fwd);
    let (ok, gone) = info("bond0");
    assert!(!ok, "the bond went with its forwarder: {gone}");
    assert!(!info("xsb0").1.contains("xskit bond"));
}

/// Active-backup answering for 203.0.113.30: the MAC the switch's host has for that address
/// before and after member 0's port goes down, and whether pings were answered both times.
fn answering_mac_across_a_failover(fail_over_mac: &str) -> (String, String) {
    let sw = Switched::with_far_host(2).unwrap();
    let mut fwd = start_bond_fwd_live(
        &sw,
        &[
            "--bond-mode",
            "active-backup",
            "--respond",
            "203.0.113.30",
            "--fail-over-mac",
            fail_over_mac,
            "--num-grat-arp",
            "2",
        ],
    );
    let ping_and_neigh = || {
        let ping = sw
            .host
            .ns
            .command("ping")
            .args(["-n", "-c", "3", "-i", "0.2", "-W", "1", "203.0.113.30"])
            .output()
            .unwrap();
        assert!(
            ping.status.success(),
            "{}",
            String::from_utf8_lossy(&ping.stdout)
        );
        let neigh = sw
            .host
            .ns
            .command("ip")
            .args(["neigh", "show", "203.0.113.30"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&neigh.stdout).into_owned()
    };
    let before = ping_and_neigh();
    cut_switch_port_0(&sw);
    until_bond(&mut fwd, "the failover", |bond| bond["failovers"] == 1);
    let after = ping_and_neigh();
    let report = stop_live_fwd(fwd);
    assert_eq!(bond_of(&report)["active"], "xsb1", "{report}");
    (before, after)
}

#[test]
fn fail_over_mac_active_moves_the_bonds_address_to_the_new_member() {
    if !privileged() {
        return;
    }
    let (first, second) = ("02:58:53:42:00:00", "02:58:53:42:00:01");
    let (before, after) = answering_mac_across_a_failover("active");
    assert!(before.contains(first), "{before}");
    assert!(
        after.contains(second),
        "the gratuitous ARPs told the host the new MAC: {after}"
    );
    let (before, after) = answering_mac_across_a_failover("none");
    assert!(before.contains(first), "{before}");
    assert!(
        after.contains(first),
        "the bond keeps its MAC on the new member: {after}"
    );
}

/// `-v` says on stderr what the bond did: a member's carrier going down changes the bond's
/// members, and the diagnostics name the bond. Without `-v`, nothing is said.
#[test]
fn verbose_diagnostics_report_member_changes() {
    if !privileged() {
        return;
    }
    for (verbose, expect) in [(true, true), (false, false)] {
        let sw = Switched::with_far_host(2).unwrap();
        let log = std::env::temp_dir().join(format!(
            "xskit-verbose-{}-{verbose}.log",
            std::process::id()
        ));
        let mut command = bond_fwd(&sw);
        if verbose {
            command.arg("-v");
        }
        let child = command
            .args(["--bond-mode", "active-backup", "--json-lines", "-I", "0.1"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut fwd = Live::new(KillOnDrop::new(child));
        // Its header says the ports are open and the bond watched.
        for _ in 0..200 {
            if std::fs::read_to_string(&log).is_ok_and(|t| t.contains("Ctrl-C stops")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        cut_switch_port_0(&sw);
        until_bond(&mut fwd, "the failover", |bond| bond["failovers"] == 1);
        let report = fwd.stop();
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(bond_of(&report)["failovers"], 1, "{report}");
        std::fs::remove_file(&log).unwrap();
        assert_eq!(
            text.contains("bond members changed") && text.contains("bond=bond0"),
            expect,
            "-v {verbose}: {text}"
        );
    }
}

/// What the soak samples of the forwarder: resident memory (kB), threads, open descriptors.
fn process_sample(pid: u32) -> (u64, u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {status}"))
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (field("VmRSS"), field("Threads"), fds)
}

/// The soak, a long test run by hand, not in every CI run (`XSKIT_SOAK_SECS`, 300 by
/// default): `sudo cargo test -p xskit-cli --features bench-harness --test fwd_bond soak --
/// --ignored --nocapture`. `xskit fwd` with rules (a kernel drop, a user-space rate limit),
/// a balance-xor bond and `--metrics`, under mixed traffic the whole time: kernel TCP through
/// the bond (iperf3, 4 streams, again and again), a flood the drop rule takes (UDP to port 9
/// from `xskit gen`), pings the rate limit thins, and a scrape every 5 s. After a warm-up of a
/// fifth of the run, the forwarder's threads and descriptors do not change and its memory
/// grows by less than 4 MB; at the end the frame ledger balances.
#[test]
#[ignore = "long: minutes of traffic; run with --ignored"]
fn soak_rules_bond_and_metrics_under_mixed_traffic() {
    if !privileged() {
        return;
    }
    let secs: u64 = std::env::var("XSKIT_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let sw = Switched::with_far_host(2).unwrap();
    let far = sw.far.clone().unwrap();
    let rules = RulesFile::new(
        "[[rule]]\nname = \"discard\"\nprotocol = \"udp\"\ndst_port = 9\naction = \"drop\"\n\
         [[rule]]\nname = \"pings\"\nprotocol = \"icmp\"\naction = \"rate-limit\"\nrate = \"50pps\"\n",
    );
    let fwd = start_bond_fwd(
        &sw,
        &[
            "--bond-mode",
            "balance-xor",
            "--rules",
            rules.path(),
            "--metrics",
            "127.0.0.1:9464",
        ],
    );
    let pid = fwd.id();
    let until = std::time::Instant::now() + Duration::from_secs(secs);
    let host_mac: Vec<String> = sw.host.mac.iter().map(|b| format!("{b:02x}")).collect();
    let flood = KillOnDrop::new(
        far.ns
            .command(XSKIT)
            .args(["gen", "-i", &far.ifname, "--dst-mac", &host_mac.join(":")])
            .args([
                "--src-ip",
                &far.ip.to_string(),
                "--dst-ip",
                &sw.host.ip.to_string(),
            ])
            .args(["--dst-port", "9", "-r", "20000", "-d", &secs.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pings = KillOnDrop::new(
        sw.host
            .ns
            .command("ping")
            .args([
                "-q",
                "-i",
                "0.005",
                "-w",
                &secs.to_string(),
                &far.ip.to_string(),
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut samples = Vec::new();
    let mut moved = 0;
    let mut scrapes = 0;
    while std::time::Instant::now() < until {
        moved += iperf3_through(&sw, "5201");
        let scrape = sw
            .bonded
            .command("curl")
            .args(["-sf", "http://127.0.0.1:9464/metrics"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&scrape.stdout).contains("xskit_rule_packets_total") {
            scrapes += 1;
        }
        samples.push(process_sample(pid));
        std::thread::sleep(Duration::from_secs(4));
    }
    drop(pings);
    drop(flood);
    let report = stop_fwd(fwd);
    eprintln!("soak {secs} s: {moved} bytes by TCP, {scrapes} scrapes, samples {samples:?}");
    assert!(samples.len() >= 5, "{samples:?}");
    assert_eq!(scrapes, samples.len(), "every scrape answered");
    let warm = &samples[samples.len() / 5..];
    let (rss0, threads0, fds0) = warm[0];
    for &(rss, threads, fds) in warm {
        assert_eq!(
            (threads, fds),
            (threads0, fds0),
            "threads, fds: {samples:?}"
        );
        assert!(
            rss < rss0 + 4096,
            "RSS grew from {rss0} to {rss} kB: {samples:?}"
        );
    }
    let rules = &report["counters"]["rules"];
    assert!(rules[0]["packets"].as_u64().unwrap() > 0, "{report}");
    assert!(rules[1]["packets"].as_u64().unwrap() > 0, "{report}");
    assert!(rules[1]["over_rate"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(bond_of(&report)["tx_no_member"], 0, "{report}");
}
