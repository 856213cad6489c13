//! `xskit bench` with no interface: every benchmark on a testbed, generator and benchmark in
//! separate processes pinned to different CPUs, printed as one table.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use xskit_testbed::{Chain, Host, Testbed, TestbedConfig};

use super::{BenchArgs, BenchResult, Kind};

pub(super) const GEN_CPU: &str = "0";
const BENCH_CPU: &str = "1";

/// One row of the table: a benchmark in a mode, with every run's Mpps.
#[derive(Serialize, serde::Deserialize, Clone, Debug)]
pub(super) struct Cell {
    pub(super) bench: String,
    pub(super) mode: String,
    pub(super) size: usize,
    pub(super) mpps: Vec<f64>,
    pub(super) cpu_ns_per_packet: Vec<f64>,
}

impl Cell {
    pub(super) fn median(&self) -> f64 {
        median(&self.mpps)
    }
}

pub(super) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub(super) fn spread(v: &[f64]) -> f64 {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.is_empty() {
        0.0
    } else {
        hi - lo
    }
}

struct Runner {
    exe: String,
    secs: f64,
    bed: Testbed,
}

/// `taskset -c CPU EXE ARGS` in `host`'s namespace, output piped.
fn command(exe: &str, host: &Host, cpu: &str, args: &[String]) -> Command {
    let mut cmd = host.ns.command("taskset");
    cmd.args(["-c", cpu, exe]).args(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A benchmark process, with the rest of its stderr read in the background so it never
/// blocks on (or dies of) a full or closed pipe.
pub(super) struct Proc {
    child: Child,
    stderr: std::thread::JoinHandle<String>,
}

/// Starts a `--json` command and waits for its header on stderr (its port is open).
pub(super) fn start(exe: &str, host: &Host, cpu: &str, args: &[String]) -> Result<Proc> {
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

pub(super) fn finish(proc: Proc) -> Result<serde_json::Value> {
    let out = proc.child.wait_with_output()?;
    let stderr = proc.stderr.join().unwrap_or_default();
    if !out.status.success() {
        bail!("a benchmark process failed ({}): {stderr}", out.status);
    }
    serde_json::from_slice(&out.stdout).context("reading a benchmark's JSON")
}

/// As [`finish`], for a command whose status says whether it met a target (`recv --expect`):
/// its JSON is the result either way.
fn finish_any(proc: Proc) -> Result<serde_json::Value> {
    let out = proc.child.wait_with_output()?;
    let stderr = proc.stderr.join().unwrap_or_default();
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("reading a benchmark's JSON ({}): {stderr}", out.status))
}

fn interrupt(proc: &Proc) {
    let _ = Command::new("kill")
        .args(["-INT", &proc.child.id().to_string()])
        .status();
}

/// GRO on `host`'s interface. Frames redirected at the XDP level (the live-frames generator)
/// reach a veth without a native program only through its GRO/NAPI path, so SKB-mode and
/// AF_PACKET receivers need it; on a native receiver it only costs (about 15%).
fn set_gro(host: &Host, on: bool) -> Result<()> {
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
pub(super) fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The live-frames generator's arguments: flat out from `host` for `secs`.
pub(super) fn live_gen_args(host: &Host, dst_mac: &str, size: usize, secs: f64) -> Vec<String> {
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

impl Runner {
    fn start(&self, host: &Host, cpu: &str, args: &[String]) -> Result<Proc> {
        start(&self.exe, host, cpu, args)
    }

    fn bench_args(&self, kind: Kind, host: &Host, mode: &str, size: usize) -> Vec<String> {
        strings(&[
            "bench",
            kind.name(),
            "-i",
            &host.ifname,
            "-m",
            mode,
            "-s",
            &size.to_string(),
            "-d",
            &self.secs.to_string(),
            "--json",
        ])
    }

    /// A receive-side benchmark on b, fed by the live-frames generator flat out from a.
    fn receive_side(&self, kind: Kind, mode: &str, size: usize) -> Result<(BenchResult, f64)> {
        let (a, b) = (&self.bed.a, &self.bed.b);
        set_gro(b, kind == Kind::AfpacketRx || mode == "skb")?;
        let receiver = self.start(b, BENCH_CPU, &self.bench_args(kind, b, mode, size))?;
        let mac: Vec<String> = b.mac.iter().map(|x| format!("{x:02x}")).collect();
        let gen_args = live_gen_args(a, &mac.join(":"), size, self.secs + 2.0);
        let generator = self.start(a, GEN_CPU, &gen_args)?;
        let result: BenchResult = serde_json::from_value(finish(receiver)?)?;
        // The measurement is over: stop the generator early and collect its rate.
        interrupt(&generator);
        let gen = finish_any(generator)?; // its status reports device drops: informational here
        Ok((result, gen["tx_pps"].as_f64().unwrap_or(0.0)))
    }

    /// A transmit-side benchmark on a.
    fn transmit_side(&self, kind: Kind, mode: &str, size: usize) -> Result<BenchResult> {
        let a = &self.bed.a;
        let child = self.start(a, GEN_CPU, &self.bench_args(kind, a, mode, size))?;
        Ok(serde_json::from_value(finish(child)?)?)
    }
}

/// Packets `host`'s interface has received (its kernel counter).
fn rx_packets(host: &Host) -> Result<u64> {
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

/// `xskit fwd` between m's two interfaces of a bridged chain, and the kernel's own bridge as
/// the peer, measured alike: the live-frames generator sends flat out from a to a MAC nobody
/// owns (c drops it at layer 2), and the rate is what reaches c's interface over the window.
struct FwdRunner {
    exe: String,
    secs: f64,
    chain: Chain,
}

impl FwdRunner {
    fn ip_m(&self, args: &[&str]) -> Result<()> {
        let out = self.chain.m_a.ns.command("ip").args(args).output()?;
        if !out.status.success() {
            bail!("ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    /// Packets per second through m; `mode` is skb or drv for xskit fwd (forwarding in XDP
    /// with `xdp`), or "bridge".
    fn measure(&self, mode: &str, xdp: bool, size: usize) -> Result<f64> {
        let (a, m_a, m_c, c) = (
            &self.chain.a,
            &self.chain.m_a,
            &self.chain.m_c,
            &self.chain.c,
        );
        set_gro(m_a, mode != "drv")?;
        // XDP frames forwarded out of m_c reach c only through its GRO/NAPI path.
        set_gro(c, xdp)?;
        let forwarder = if mode == "bridge" {
            self.ip_m(&["link", "add", "xsk-br0", "type", "bridge"])?;
            self.ip_m(&["link", "set", &m_a.ifname, "master", "xsk-br0"])?;
            self.ip_m(&["link", "set", &m_c.ifname, "master", "xsk-br0"])?;
            self.ip_m(&["link", "set", "xsk-br0", "up"])?;
            None
        } else {
            let mut args: Vec<String> = strings(&[
                "fwd",
                "-i",
                &m_a.ifname,
                "-i",
                &m_c.ifname,
                "-m",
                mode,
                "--json",
            ]);
            if xdp {
                args.push("--xdp-forward".into());
            }
            Some(start(&self.exe, m_a, BENCH_CPU, &args)?)
        };
        let gen = start(
            &self.exe,
            a,
            GEN_CPU,
            &live_gen_args(a, "02:00:00:00:00:00", size, self.secs + 3.0),
        );
        let window = gen.and_then(|gen| {
            std::thread::sleep(Duration::from_millis(500));
            let (c0, t0) = (rx_packets(c)?, std::time::Instant::now());
            std::thread::sleep(Duration::from_secs_f64(self.secs));
            let (c1, dt) = (rx_packets(c)?, t0.elapsed().as_secs_f64());
            interrupt(&gen);
            finish_any(gen)?;
            Ok((c1 - c0) as f64 / dt)
        });
        let cleanup = match forwarder {
            Some(child) => {
                interrupt(&child);
                finish(child).and_then(|r| {
                    if r["frames"]["unaccounted"] != 0 {
                        bail!("xskit fwd lost frames: {r}");
                    }
                    Ok(())
                })
            }
            None => self.ip_m(&["link", "del", "xsk-br0"]),
        };
        let pps = window?;
        cleanup?;
        Ok(pps)
    }
}

/// A DDoS filter's run: the attack dropped by a kernel rule and the native XDP_DROP ceiling,
/// both in packets per second of the same generator, and the legitimate probes delivered.
struct Ddos {
    dropped_pps: f64,
    ceiling_pps: f64,
    legit_expected: u64,
    legit_valid: u64,
}

impl FwdRunner {
    fn live_attack(&self, secs: f64) -> Result<Proc> {
        // UDP to port 9, from the live-frames generator flat out (the rule below drops it).
        start(
            &self.exe,
            &self.chain.a,
            GEN_CPU,
            &live_gen_args(&self.chain.a, "02:00:00:00:00:00", 64, secs),
        )
    }

    /// The generator's sending time, from its JSON.
    fn gen_seconds(gen: &serde_json::Value) -> f64 {
        gen["duration_s"].as_f64().unwrap_or(0.0).max(1e-3)
    }

    /// Legitimate probes at 20 kpps from a to c's port 5000 for the run, on the attack
    /// generator's CPU: a sender on the other CPU would move part of the receive work (veth's
    /// NAPI) there and change what is measured. Its JSON whatever its status: the attack's
    /// drops on the same device count in the device counter it checks.
    fn legit(&self, n: &str) -> Result<serde_json::Value> {
        let (a, c) = (&self.chain.a, &self.chain.c);
        let mac: Vec<String> = c.mac.iter().map(|x| format!("{x:02x}")).collect();
        let out = command(
            &self.exe,
            a,
            GEN_CPU,
            &strings(&[
                "gen",
                "-i",
                &a.ifname,
                "-m",
                "drv",
                "--dst-port",
                "5000",
                "-r",
                "20000",
                "--json",
            ])
            .into_iter()
            .chain([
                "-n".into(),
                n.into(),
                "--dst-mac".into(),
                mac.join(":"),
                "--src-ip".into(),
                a.ip.to_string(),
                "--dst-ip".into(),
                c.ip.to_string(),
            ])
            .collect::<Vec<_>>(),
        )
        .output()?;
        serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "the legitimate generator failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// The mix (the attack flat out on UDP port 9 and the legitimate probes) into, first, a
    /// bare native XDP_DROP program on m's interface, the ceiling; then `xskit fwd` in DRV
    /// mode with a kernel rule dropping port 9, the probes forwarded to c and checked there.
    fn ddos(&self) -> Result<Ddos> {
        let (m_a, m_c, c) = (&self.chain.m_a, &self.chain.m_c, &self.chain.c);
        set_gro(m_a, false)?;
        set_gro(c, false)?;
        let legit_expected = (20_000.0 * self.secs) as u64;
        let n = legit_expected.to_string();
        let bench = start(
            &self.exe,
            m_a,
            BENCH_CPU,
            &strings(&["bench", "xdp-drop", "-i", &m_a.ifname, "-m", "drv", "-d"])
                .into_iter()
                .chain([format!("{}", self.secs + 1.0), "--json".into()])
                .collect::<Vec<_>>(),
        )?;
        std::thread::sleep(Duration::from_millis(300));
        let attack = self.live_attack(self.secs)?;
        let legit_sent = self.legit(&n)?["tx_packets"].as_u64().unwrap_or(0);
        // Its status reports the frames the device dropped when the mix overflowed its ring.
        let gen = finish_any(attack)?;
        let all: serde_json::Value = finish(bench)?;
        let ceiling_pps = all["rx_packets"]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(legit_sent) as f64
            / Self::gen_seconds(&gen);

        let rules = std::env::temp_dir().join(format!("xskit-ddos-{}.toml", std::process::id()));
        std::fs::write(
            &rules,
            "[[rule]]\nname = \"attack\"\nprotocol = \"udp\"\ndst_port = 9\naction = \"drop\"\n",
        )?;
        let fwd = start(
            &self.exe,
            m_a,
            BENCH_CPU,
            &strings(&[
                "fwd",
                "-i",
                &m_a.ifname,
                "-i",
                &m_c.ifname,
                "-m",
                "drv",
                "--json",
                "--rules",
            ])
            .into_iter()
            .chain([rules.display().to_string()])
            .collect::<Vec<_>>(),
        );
        let _ = std::fs::remove_file(&rules);
        let fwd = fwd?;
        // The receiver sleeps in poll(2) between packets, off the generator's CPU.
        let recv = start(
            &self.exe,
            c,
            BENCH_CPU,
            &strings(&[
                "recv", "-i", &c.ifname, "-m", "drv", "-p", "--expect", &n, "-d",
            ])
            .into_iter()
            .chain([format!("{}", self.secs + 4.0), "--json".into()])
            .collect::<Vec<_>>(),
        )?;
        let attack = self.live_attack(self.secs)?;
        self.legit(&n)?;
        let gen = finish_any(attack)?;
        let delivered = finish_any(recv)?;
        interrupt(&fwd);
        let report = finish(fwd)?;
        if report["frames"]["unaccounted"] != 0 {
            bail!("xskit fwd lost frames: {report}");
        }
        let dropped = report["counters"]["rules"][0]["in_kernel"]
            .as_u64()
            .unwrap_or(0);
        if delivered["corrupt"] != 0 {
            bail!("legitimate probes arrived damaged: {delivered}");
        }
        Ok(Ddos {
            dropped_pps: dropped as f64 / Self::gen_seconds(&gen),
            ceiling_pps,
            legit_expected,
            legit_valid: delivered["valid"].as_u64().unwrap_or(0),
        })
    }
}

/// The DDoS rows: the attack rate `xskit fwd` drops in XDP against the XDP_DROP ceiling of
/// the same generator, and the legitimate traffic delivered intact meanwhile.
fn ddos_cells(exe: &str, secs: f64, runs: usize, json: bool) -> Result<(Vec<Cell>, f64)> {
    let runner = FwdRunner {
        exe: exe.to_string(),
        secs,
        chain: Chain::bridged().context("building the three-namespace testbed")?,
    };
    let cell = |bench: &str| Cell {
        bench: bench.to_string(),
        mode: "drv".into(),
        size: 64,
        mpps: vec![],
        cpu_ns_per_packet: vec![],
    };
    let (mut dropped, mut ceiling) = (
        cell("ddos: fwd drops in XDP"),
        cell("ddos: XDP_DROP ceiling"),
    );
    let (mut valid, mut expected) = (0u64, 0u64);
    for run in 0..runs {
        let d = runner.ddos()?;
        dropped.mpps.push(d.dropped_pps / 1e6);
        ceiling.mpps.push(d.ceiling_pps / 1e6);
        valid += d.legit_valid;
        expected += d.legit_expected;
        if !json {
            out!(
                "  run {} ddos   attack dropped {:>7.3} Mpps, XDP_DROP ceiling {:>7.3} Mpps, legitimate {}/{} intact",
                run + 1,
                d.dropped_pps / 1e6,
                d.ceiling_pps / 1e6,
                d.legit_valid,
                d.legit_expected
            );
        }
    }
    Ok((
        vec![dropped, ceiling],
        valid as f64 / expected.max(1) as f64,
    ))
}

/// The forwarding rows: xskit fwd in SKB and DRV mode, and the kernel bridge.
fn fwd_cells(exe: &str, secs: f64, runs: usize, size: usize, json: bool) -> Result<Vec<Cell>> {
    let runner = FwdRunner {
        exe: exe.to_string(),
        secs,
        chain: Chain::bridged().context("building the three-namespace testbed")?,
    };
    let modes = [
        ("fwd", "skb", false),
        ("fwd", "drv", false),
        ("fwd --xdp-forward", "skb", true),
        ("fwd --xdp-forward", "drv", true),
        ("kernel bridge", "bridge", false),
    ];
    let mut cells: Vec<Cell> = modes
        .iter()
        .map(|(bench, mode, _)| Cell {
            bench: bench.to_string(),
            mode: if *mode == "bridge" { "-" } else { mode }.to_string(),
            size,
            mpps: vec![],
            cpu_ns_per_packet: vec![],
        })
        .collect();
    for run in 0..runs {
        for (cell, (bench, mode, xdp)) in cells.iter_mut().zip(modes.iter()) {
            let pps = runner.measure(mode, *xdp, size)?;
            cell.mpps.push(pps / 1e6);
            if !json {
                out!(
                    "  run {} {:<11} {:<6} {:>5} B  {:>7.3} Mpps",
                    run + 1,
                    bench,
                    mode,
                    size,
                    pps / 1e6
                );
            }
        }
    }
    Ok(cells)
}

/// "cell 3 of 24, 1:20 elapsed, about 4:00 left" on stderr while the table runs, when
/// stdout is a terminal (never into a file or a pipe, never under --json).
struct Progress {
    done: usize,
    total: usize,
    started: std::time::Instant,
    shown: bool,
}

impl Progress {
    fn new(total: usize, text: bool) -> Progress {
        use std::io::IsTerminal as _;
        let shown = text && std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        let p = Progress {
            done: 0,
            total,
            started: std::time::Instant::now(),
            shown,
        };
        p.draw();
        p
    }

    fn done_one(&mut self) {
        self.done += 1;
        self.draw();
    }

    fn draw(&self) {
        if !self.shown || self.done >= self.total {
            return;
        }
        let elapsed = self.started.elapsed().as_secs();
        let left = if self.done == 0 {
            String::new()
        } else {
            let per_cell = elapsed as f64 / self.done as f64;
            let secs = (per_cell * (self.total - self.done) as f64) as u64;
            format!(", about {}:{:02} left", secs / 60, secs % 60)
        };
        eprint!(
            "\r\x1b[K  cell {} of {}, {}:{:02} elapsed{left}",
            self.done + 1,
            self.total,
            elapsed / 60,
            elapsed % 60
        );
    }

    /// Takes the progress line off the terminal before a line of the table is printed.
    fn clear(&self) {
        if self.shown {
            eprint!("\r\x1b[K");
        }
    }
}

/// The table as `--json` prints it, and as `bench plot` reads it back.
#[derive(Serialize, serde::Deserialize)]
pub(super) struct Table {
    pub(super) seconds_per_cell: f64,
    pub(super) runs: usize,
    pub(super) cells: Vec<Cell>,
    pub(super) ratios: Vec<(String, f64)>,
    /// Where and when it was measured, and how (for the chart's caption).
    #[serde(default)]
    pub(super) machine: super::chart::Machine,
}

pub(super) fn run(args: &BenchArgs) -> Result<i32> {
    if !xskit_testbed::have_privileges() {
        bail!("xskit bench without -i builds a testbed of network namespaces: run it as root (e.g. with sudo), or give -i IFACE");
    }
    if args.runs == 0 || args.runs > 20 {
        bail!("--runs {} is out of range: use 1 to 20", args.runs);
    }
    if args.port.mode != crate::opts::ModeArg::Auto {
        bail!("without -i the table covers both skb and drv mode; --mode applies only with -i");
    }
    let secs = args
        .run
        .duration()?
        .unwrap_or(Duration::from_secs(3))
        .as_secs_f64();
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let bed = Testbed::new(&TestbedConfig::default()).context("building the testbed")?;
    let runner = Runner { exe, secs, bed };
    // (kind, mode, size): the plan, interleaved across runs so that drift hits every cell alike.
    let mut plan: Vec<(Kind, &str, usize)> = Vec::new();
    let wanted = |k: Kind| args.kind.is_none_or(|w| w == k);
    if args.sizes {
        for size in [64, 512, 1024, 1500] {
            for mode in ["skb", "drv"] {
                plan.push((Kind::Txpush, mode, size));
            }
        }
    } else {
        for kind in [Kind::Rxdrop, Kind::Txpush, Kind::L2fwd] {
            for mode in ["skb", "drv"] {
                if wanted(kind) {
                    plan.push((kind, mode, args.size));
                }
            }
        }
        for (kind, mode) in [
            (Kind::AfpacketRx, "skb"),
            (Kind::AfpacketTx, "skb"),
            (Kind::XdpDrop, "drv"),
        ] {
            if wanted(kind) {
                plan.push((kind, mode, args.size));
            }
        }
    }
    let mut cells: Vec<Cell> = plan
        .iter()
        .map(|(k, m, s)| Cell {
            bench: k.name().into(),
            mode: (*m).into(),
            size: *s,
            mpps: vec![],
            cpu_ns_per_packet: vec![],
        })
        .collect();
    // The generator's rate into each receiving mode: what a receive cell can reach at most.
    let mut generators: Vec<Cell> = ["skb", "drv"]
        .iter()
        .map(|mode| Cell {
            bench: super::chart::GENERATOR.into(),
            mode: (*mode).into(),
            size: args.size,
            mpps: vec![],
            cpu_ns_per_packet: vec![],
        })
        .collect();
    if !args.run.json_output() {
        out!(
            "testbed {} <-> {}: {} cell(s) x {} run(s), {:.1} s each; generator (live frames) on CPU {GEN_CPU}, benchmark on CPU {BENCH_CPU}",
            runner.bed.a.ns.name(),
            runner.bed.b.ns.name(),
            plan.len(),
            args.runs,
            secs
        );
    }
    let live = args.run.live("bench")?;
    live.announce_metrics();
    let mut progress = Progress::new(plan.len() * args.runs, !args.run.json_output());
    for run in 0..args.runs {
        for (i, &(kind, mode, size)) in plan.iter().enumerate() {
            let (result, gen_pps) = match kind {
                Kind::Txpush | Kind::AfpacketTx => (runner.transmit_side(kind, mode, size)?, 0.0),
                _ => runner.receive_side(kind, mode, size)?,
            };
            let pps = match kind {
                Kind::Txpush | Kind::AfpacketTx | Kind::L2fwd => result.tx_pps,
                _ => result.rx_pps,
            };
            cells[i].mpps.push(pps / 1e6);
            cells[i].cpu_ns_per_packet.extend(result.cpu_ns_per_packet);
            if gen_pps > 0.0 && kind == Kind::Rxdrop {
                if let Some(g) = generators.iter_mut().find(|g| g.mode == mode) {
                    g.mpps.push(gen_pps / 1e6);
                }
            }
            if !args.run.json_output() {
                progress.clear();
                out!(
                    "  run {} {:<11} {:<4} {:>5} B  {:>7.3} Mpps",
                    run + 1,
                    kind.name(),
                    mode,
                    size,
                    pps / 1e6
                );
            }
            progress.done_one();
            live.tick(&serde_json::json!({
                "cells_done": progress.done,
                "cells_total": progress.total,
                "cells": cells.iter().map(|c| serde_json::json!({
                    "name": format!("{} {} {} B", c.bench, c.mode, c.size),
                    "runs_done": c.mpps.len(),
                    "mpps": c.mpps.last(),
                })).collect::<Vec<_>>(),
            }));
        }
    }
    progress.clear();
    cells.extend(generators.into_iter().filter(|g| !g.mpps.is_empty()));
    let mut legit_share = None;
    if wanted(Kind::Fwd) && !args.sizes {
        cells.extend(fwd_cells(
            &runner.exe,
            secs,
            args.runs,
            args.size,
            args.run.json_output(),
        )?);
        let (ddos, share) = ddos_cells(&runner.exe, secs, args.runs, args.run.json_output())?;
        cells.extend(ddos);
        legit_share = Some(share);
    }
    let find = |bench: &str, mode: &str| {
        cells
            .iter()
            .find(|c| c.bench == bench && c.mode == mode)
            .map(Cell::median)
    };
    let mut ratios = Vec::new();
    if let (Some(x), Some(p)) = (find("rxdrop", "drv"), find("afpacket-rx", "skb")) {
        ratios.push(("rxdrop drv / AF_PACKET rx".to_string(), x / p));
    }
    if let (Some(x), Some(p)) = (find("rxdrop", "drv"), find("xdp-drop", "drv")) {
        ratios.push(("rxdrop drv / XDP_DROP ceiling".to_string(), x / p));
    }
    if let (Some(x), Some(p)) = (find("txpush", "skb"), find("afpacket-tx", "skb")) {
        ratios.push(("txpush skb / AF_PACKET tx".to_string(), x / p));
    }
    for bench in ["fwd", "fwd --xdp-forward"] {
        for mode in ["skb", "drv"] {
            if let (Some(x), Some(p)) = (find(bench, mode), find("kernel bridge", "-")) {
                ratios.push((format!("{bench} {mode} / kernel bridge"), x / p));
            }
        }
    }
    if let (Some(x), Some(p)) = (
        find("ddos: fwd drops in XDP", "drv"),
        find("ddos: XDP_DROP ceiling", "drv"),
    ) {
        ratios.push(("ddos drops in XDP / XDP_DROP ceiling".to_string(), x / p));
    }
    if let Some(share) = legit_share {
        ratios.push(("ddos legitimate delivered intact".to_string(), share));
    }
    let table = Table {
        seconds_per_cell: secs,
        runs: args.runs,
        cells,
        ratios,
        machine: super::chart::Machine::here(),
    };
    if args.run.json_output() {
        crate::opts::print_json("bench", &table)?;
    } else {
        out!("");
        out!(
            "{:<24} {:>6} {:>6} {:>10} {:>10} {:>12}",
            "benchmark",
            "mode",
            "bytes",
            "Mpps",
            "spread",
            "CPU ns/pkt"
        );
        for c in &table.cells {
            out!(
                "{:<24} {:>6} {:>6} {:>10.3} {:>10.3} {:>12.0}",
                c.bench,
                c.mode,
                c.size,
                c.median(),
                spread(&c.mpps),
                median(&c.cpu_ns_per_packet)
            );
        }
        for (name, r) in &table.ratios {
            out!("{name:<32} {r:>6.2}x");
        }
        for note in super::chart::generator_bound(&table) {
            out!("note: {note}");
        }
    }
    if let Some(path) = &args.plot {
        super::chart::write(&table, path)?;
        if !args.run.json_output() {
            out!("chart written to {}", path.display());
        }
    }
    Ok(0)
}
