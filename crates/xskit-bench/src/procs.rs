//! Benchmark processes: `xskit` children pinned to a CPU in a host's namespace, their JSON,
//! and the host settings a measurement depends on.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};
use xskit_testbed::Host;

/// The generator's CPU.
pub(crate) const GEN_CPU: &str = "0";
/// The measured process's CPU.
pub(crate) const BENCH_CPU: &str = "1";

/// `taskset -c CPU EXE ARGS` in `host`'s namespace, output piped.
pub(crate) fn command(exe: &str, host: &Host, cpu: &str, args: &[String]) -> Command {
    let mut cmd = host.ns.command("taskset");
    cmd.args(["-c", cpu, exe]).args(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A benchmark process, with the rest of its stderr read in the background so it never
/// blocks on (or dies of) a full or closed pipe.
pub(crate) struct Proc {
    child: Child,
    stderr: std::thread::JoinHandle<String>,
}

/// Starts a `--json` command and waits for its header on stderr (its port is open).
pub(crate) fn start(exe: &str, host: &Host, cpu: &str, args: &[String]) -> Result<Proc> {
    let mut child = command(exe, host, cpu, args)
        .spawn()
        .context("starting a benchmark process (is taskset installed?)")?;
    let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
    let mut header = String::new();
    stderr.read_line(&mut header)?;
    if header.starts_with("xskit:") || header.is_empty() {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        let _ = child.kill();
        let _ = child.wait();
        bail!(
            "{} {}: {}{}",
            args[0],
            args.get(1).map_or("", |s| s.as_str()),
            header.trim(),
            rest.trim()
        );
    }
    let stderr = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });
    Ok(Proc { child, stderr })
}

pub(crate) fn finish(proc: Proc) -> Result<serde_json::Value> {
    let out = proc.child.wait_with_output()?;
    let stderr = proc.stderr.join().unwrap_or_default();
    if !out.status.success() {
        bail!("a benchmark process failed ({}): {stderr}", out.status);
    }
    serde_json::from_slice(&out.stdout).context("reading a benchmark's JSON")
}

/// As [`finish`], for a command whose status says whether it met a target (`recv --expect`):
/// its JSON is the result either way.
/// Waits for a process that prints text, not JSON; its stdout, if it succeeded.
pub(crate) fn finish_text(proc: Proc) -> Result<String> {
    let out = proc.child.wait_with_output()?;
    let stderr = proc.stderr.join().unwrap_or_default();
    if !out.status.success() {
        bail!("a benchmark process failed ({}): {stderr}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn finish_any(proc: Proc) -> Result<serde_json::Value> {
    let out = proc.child.wait_with_output()?;
    let stderr = proc.stderr.join().unwrap_or_default();
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("reading a benchmark's JSON ({}): {stderr}", out.status))
}

pub(crate) fn interrupt(proc: &Proc) {
    let _ = Command::new("kill")
        .args(["-INT", &proc.child.id().to_string()])
        .status();
}

/// GRO on `host`'s interface. Frames redirected at the XDP level (the live-frames generator)
/// reach a veth without a native program only through its GRO/NAPI path, so SKB-mode and
/// AF_PACKET receivers need it; on a native receiver it only costs (about 15%).
pub(crate) fn set_gro(host: &Host, on: bool) -> Result<()> {
    let out = host
        .ns
        .command("ethtool")
        .args(["-K", &host.ifname, "gro", if on { "on" } else { "off" }])
        .output()
        .context("running ethtool (install it: apt-get install ethtool)")?;
    if !out.status.success() {
        bail!(
            "ethtool -K {} gro failed: {}",
            host.ifname,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Owned arguments for a command.
pub(crate) fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The live-frames generator's arguments: flat out from `host` for `secs`.
pub(crate) fn live_gen_args(host: &Host, dst_mac: &str, size: usize, secs: f64) -> Vec<String> {
    strings(&[
        "gen",
        "--engine",
        "live",
        "-i",
        &host.ifname,
        "--dst-mac",
        dst_mac,
        "-s",
        &size.to_string(),
        "-d",
        &secs.to_string(),
        "--json",
    ])
}

/// Packets `host`'s interface has received (its kernel counter).
pub(crate) fn rx_packets(host: &Host) -> Result<u64> {
    let out = host
        .ns
        .command("ip")
        .args(["-s", "-j", "link", "show", "dev", &host.ifname])
        .output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("reading {}'s counters", host.ifname))?;
    v[0]["stats64"]["rx"]["packets"]
        .as_u64()
        .with_context(|| format!("{} has no rx counter", host.ifname))
}
