//! `xskit dump`: what an interface receives at its XDP hook, read back by Wireshark's tools.

// A scenario reads top to bottom as the steps it takes, however many there are.
#![allow(clippy::too_many_lines)]

mod common;

use common::*;

use std::io::{BufRead, BufReader};
use std::process::Command;

use xskit_testbed::{Chain, Host, Testbed, TestbedConfig};

fn xdp_programs(host: &Host) -> Vec<String> {
    let out = run(host, "ip", &["-d", "link", "show", "dev", &host.ifname]);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with("id"))
        .map(str::to_string)
        .collect()
}

/// A file in a temporary directory of its own, both removed when dropped, whether the test
/// passes or fails.
struct Temp(std::path::PathBuf);

impl std::ops::Deref for Temp {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for Temp {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Temp {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn temp(name: &str) -> Temp {
    let dir = std::env::temp_dir().join(format!("xskit-dump-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Temp(dir.join(name))
}

/// `-w -` writes the pcap to stdout, tcpdump's habit, for a pipe into Wireshark's tools;
/// `-s` cuts each packet to the snap length while keeping its length; `--json` with it is
/// refused (both would go to stdout).
#[test]
fn dump_writes_pcap_to_stdout_with_a_snap_length() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let args = [
        "dump",
        "-i",
        &bed.b.ifname,
        "-w",
        "-",
        "-s",
        "60",
        "-c",
        "5",
        "-d",
        "20",
        "icmp",
    ];
    let dump = KillOnDrop::new(start(&bed.b, &args));
    let ping = run(
        &bed.a,
        "ping",
        &[
            "-c",
            "5",
            "-i",
            "0.2",
            "-s",
            "500",
            "-W",
            "2",
            &bed.b.ip.to_string(),
        ],
    );
    ok(&ping);
    let out = dump.take().wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = temp("stdout.pcap");
    std::fs::write(&file, &out.stdout).unwrap();
    let path = file.to_str().unwrap();
    let info = wireshark("capinfos", &["-c", "-M", path]);
    assert!(info.contains("Number of packets:   5"), "{info}");
    let lengths = wireshark(
        "tshark",
        &[
            "-r",
            path,
            "-T",
            "fields",
            "-e",
            "frame.cap_len",
            "-e",
            "frame.len",
        ],
    );
    assert!(
        lengths
            .lines()
            .all(|l| l.split_whitespace().collect::<Vec<_>>() == ["60", "542"]),
        "{lengths}"
    );
    let refused = bed
        .b
        .ns
        .command(XSKIT)
        .args(["dump", "-i", &bed.b.ifname, "-w", "-", "--json"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("drop one of them"));
}

/// On an interface with no program, dump attaches its own, which passes every packet on:
/// ping works through it, the filter keeps the echo requests, Wireshark reads the file, and
/// the program is gone afterwards.
#[test]
fn dump_with_a_program_of_its_own_passes_everything_on() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let file = temp("own.pcap");
    let path = file.to_str().unwrap();
    let args = [
        "dump",
        "-i",
        &bed.b.ifname,
        "-w",
        path,
        "-c",
        "5",
        "-d",
        "20",
        "--json",
        "icmp",
    ];
    let dump = KillOnDrop::new(start(&bed.b, &args));
    let ping = run(
        &bed.a,
        "ping",
        &["-c", "5", "-i", "0.2", "-W", "2", &bed.b.ip.to_string()],
    );
    ok(&ping);
    let report = json_of(dump.take());
    assert_eq!(report["captured"], 5, "{report}");
    assert!(
        report["through"]
            .as_str()
            .unwrap()
            .contains("capture program"),
        "{report}"
    );
    assert!(report["filtered_out"].as_u64().unwrap() < 10, "{report}");
    let info = wireshark("capinfos", &["-c", "-M", path]);
    assert!(info.contains("Number of packets:   5"), "{info}");
    let requests = wireshark("tshark", &["-r", path, "-Y", "icmp.type == 8"]);
    assert_eq!(requests.lines().count(), 5, "{requests}");
    assert!(xdp_programs(&bed.b).is_empty(), "its program went with it");
    std::fs::remove_file(&file).unwrap();
}

/// Where xskit fwd runs, dumpcap (the kernel's capture tap) sees none of the probes the
/// forwarder's program redirects; xskit dump captures every one through that same program,
/// with no second program attached.
#[test]
fn dump_sees_through_the_forwarders_program_what_dumpcap_cannot() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let fwd = start_fwd(&chain, &[]);
    let programs = xdp_programs(&chain.m_a);
    assert_eq!(programs.len(), 1, "{programs:?}");
    let (ours, theirs) = (temp("fwd-xskit.pcap"), temp("fwd-dumpcap.pcap"));
    let mut dumpcap = chain
        .m_a
        .ns
        .command("dumpcap")
        .args(["-q", "-i", &chain.m_a.ifname, "-a", "duration:4", "-w"])
        .arg(&theirs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // dumpcap names its file once it captures: the probes must come after that, or its
    // seeing none of them would prove nothing.
    let mut said = BufReader::new(dumpcap.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("File:") {
        line.clear();
        assert!(
            said.read_line(&mut line).unwrap() > 0,
            "dumpcap ended before capturing"
        );
    }
    std::thread::spawn(move || std::io::copy(&mut said, &mut std::io::sink()));
    let args = [
        "dump",
        "-i",
        &chain.m_a.ifname,
        "-w",
        ours.to_str().unwrap(),
        "-c",
        "300",
        "-d",
        "20",
        "--json",
        "udp",
    ];
    let dump = KillOnDrop::new(start(&chain.m_a, &args));
    let (mac, src, dst) = (
        mac(&chain.c),
        chain.a.ip.to_string(),
        chain.c.ip.to_string(),
    );
    let sent = run(
        &chain.a,
        XSKIT,
        &[
            "gen",
            "-i",
            &chain.a.ifname,
            "--dst-mac",
            &mac,
            "--src-ip",
            &src,
            "--dst-ip",
            &dst,
            "-n",
            "300",
            "-r",
            "1000",
        ],
    );
    ok(&sent);
    let report = json_of(dump.take());
    assert_eq!(report["captured"], 300, "{report}");
    assert!(
        report["through"].as_str().unwrap().contains("xskit_filter"),
        "{report}"
    );
    assert_eq!(xdp_programs(&chain.m_a), programs, "no second program");
    assert!(dumpcap.wait().unwrap().success());
    let ours = ours.to_str().unwrap();
    let probes = wireshark("tshark", &["-r", ours, "-Y", "udp.dstport == 9"]);
    assert_eq!(probes.lines().count(), 300, "{probes}");
    let missed = wireshark("tshark", &["-r", theirs.to_str().unwrap(), "-Y", "udp"]);
    assert_eq!(
        missed.lines().count(),
        0,
        "the tap never sees them: {missed}"
    );
    let summary = signal(fwd, "-INT");
    assert!(
        summary["counters"]["ports"][0]["rx_packets"]
            .as_u64()
            .unwrap()
            >= 300
    );
    std::fs::remove_file(ours).unwrap();
    std::fs::remove_file(&theirs).unwrap();
}

/// What dump cannot do is said, and nothing is left attached.
#[test]
fn dump_refuses_clearly() {
    if !privileged() {
        return;
    }
    let bed = Testbed::new(&TestbedConfig::default()).unwrap();
    let dump = |args: &[&str]| {
        let out = bed
            .b
            .ns
            .command(XSKIT)
            .arg("dump")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = dump(&["-i", "xskit-no-such-if", "-c", "1"]);
    assert!(err.contains("xskit-no-such-if"), "{err}");
    let err = dump(&["-i", &bed.b.ifname, "-c", "1", "udp", "port", "seventy"]);
    assert!(err.contains("not tcpdump's language"), "{err}");
    assert!(xdp_programs(&bed.b).is_empty());
    let err = dump(&["-i", &bed.b.ifname, "-c", "1", "--snaplen", "0"]);
    assert!(err.contains("snap length"), "{err}");
    // A program that is not xskit's: named, with what to do.
    let object = foreign_program();
    let status = bed
        .b
        .ns
        .command("ip")
        .args(["link", "set", "dev", &bed.b.ifname, "xdpgeneric", "obj"])
        .arg(&object)
        .args(["sec", "xdp"])
        .status()
        .unwrap();
    assert!(status.success());
    let err = dump(&["-i", &bed.b.ifname, "-c", "1"]);
    assert!(
        err.contains("has no xskit capture hook") && err.contains("udp_to_socket"),
        "{err}"
    );
    ok(&run(
        &bed.b,
        "ip",
        &["link", "set", "dev", &bed.b.ifname, "xdpgeneric", "off"],
    ));
}

/// The library example's own program, compiled with clang: a program that is not xskit's.
fn foreign_program() -> Temp {
    let object = temp("udp_to_socket.o");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../xskit/examples/bpf/udp_to_socket.c"
    );
    let status = Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf"])
        .arg(format!(
            "-I/usr/include/{}-linux-gnu",
            std::env::consts::ARCH
        ))
        .args(["-c", source, "-o"])
        .arg(&object)
        .status()
        .unwrap();
    assert!(status.success());
    object
}
