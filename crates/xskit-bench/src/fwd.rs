//! The forwarding rows of the testbed table: `xskit fwd` in SKB and DRV mode, with and
//! without forwarding in XDP, against the kernel's bridge and (forwarding in XDP) against a
//! program that redirects every packet through a devmap, the kernel's bound; and a DDoS mix,
//! the attack dropped by a kernel rule against the XDP_DROP ceiling of the same generator.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use xskit_testbed::Chain;

use crate::procs::{
    command, finish, finish_any, interrupt, live_gen_args, rx_packets, set_gro, start, strings,
    Proc, BENCH_CPU, GEN_CPU,
};
use crate::table::Cell;
use crate::Observer;

/// `xskit fwd` between m's two interfaces of a bridged chain, and the kernel's own bridge as
/// the peer, measured alike: the live-frames generator sends flat out from a to a MAC nobody
/// owns (c drops it at layer 2), and the rate is what reaches c's interface over the window.
struct FwdRunner {
    exe: String,
    secs: f64,
    chain: Chain,
}

impl FwdRunner {
    /// `xskit fwd` between m's two interfaces in `mode`, its summary in JSON.
    fn fwd_args(&self, mode: &str) -> Vec<String> {
        let (m_a, m_c) = (&self.chain.m_a.ifname, &self.chain.m_c.ifname);
        strings(&["fwd", "-i", m_a, "-i", m_c, "-m", mode, "--json"])
    }

    fn ip_m(&self, args: &[&str]) -> Result<()> {
        let out = self.chain.m_a.ns.command("ip").args(args).output()?;
        if !out.status.success() {
            bail!("ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    /// Packets per second through m; `mode` is skb or drv for xskit fwd (forwarding in XDP
    /// with `xdp`), "devmap-skb" or "devmap-drv" for the kernel's bound on forwarding in XDP
    /// (a program that redirects every packet through a devmap), or "bridge".
    fn measure(&self, mode: &str, xdp: bool, size: usize) -> Result<f64> {
        let (a, m_a, c) = (&self.chain.a, &self.chain.m_a, &self.chain.c);
        let xdp_mode = mode.strip_prefix("devmap-").unwrap_or(mode);
        set_gro(m_a, xdp_mode != "drv")?;
        // XDP frames forwarded out of m_c reach c only through its GRO/NAPI path.
        set_gro(c, xdp)?;
        let forwarder = self.start_forwarder(mode, xdp)?;
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
        let cleanup = self.stop_forwarder(forwarder);
        let pps = window?;
        cleanup?;
        Ok(pps)
    }

    fn start_forwarder(&self, mode: &str, xdp: bool) -> Result<Forwarder> {
        let (m_a, m_c) = (&self.chain.m_a, &self.chain.m_c);
        if mode == "bridge" {
            self.ip_m(&["link", "add", "xsk-br0", "type", "bridge"])?;
            self.ip_m(&["link", "set", &m_a.ifname, "master", "xsk-br0"])?;
            self.ip_m(&["link", "set", &m_c.ifname, "master", "xsk-br0"])?;
            self.ip_m(&["link", "set", "xsk-br0", "up"])?;
            return Ok(Forwarder::Bridge);
        }
        if let Some(xdp_mode) = mode.strip_prefix("devmap-") {
            let args = strings(&[
                "bench",
                "xdp-redirect",
                "-i",
                &m_a.ifname,
                "--to",
                &m_c.ifname,
                "-m",
                xdp_mode,
                "--json",
            ]);
            return Ok(Forwarder::Devmap(start(&self.exe, m_a, BENCH_CPU, &args)?));
        }
        let mut args = self.fwd_args(mode);
        if xdp {
            args.push("--xdp-forward".into());
        }
        Ok(Forwarder::Fwd(start(&self.exe, m_a, BENCH_CPU, &args)?))
    }

    fn stop_forwarder(&self, forwarder: Forwarder) -> Result<()> {
        match forwarder {
            Forwarder::Bridge => self.ip_m(&["link", "del", "xsk-br0"]),
            Forwarder::Devmap(child) => {
                interrupt(&child);
                finish(child).map(|_| ())
            }
            Forwarder::Fwd(child) => {
                interrupt(&child);
                let r = finish(child)?;
                if r["frames"]["unaccounted"] != 0 {
                    bail!("xskit fwd lost frames: {r}");
                }
                Ok(())
            }
        }
    }
}

/// What forwards between m's two interfaces in one measurement.
enum Forwarder {
    /// The kernel's bridge (the peer for forwarding through user space).
    Bridge,
    /// `xskit bench xdp-redirect`: the kernel's bound on forwarding in XDP.
    Devmap(Proc),
    /// `xskit fwd`.
    Fwd(Proc),
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

    /// The attack flat out on UDP port 9, with the legitimate probes beside it when `legit`
    /// (the mix), into a bare native XDP_DROP program on m's interface, the ceiling, and into
    /// `xskit fwd` in DRV mode with a kernel rule dropping port 9, the probes forwarded to c
    /// and checked there; in the order given, so that runs can alternate it and a drift of
    /// the machine's speed over a run falls on both sides.
    fn ddos(&self, ceiling_first: bool, legit: bool) -> Result<Ddos> {
        set_gro(&self.chain.m_a, false)?;
        set_gro(&self.chain.c, false)?;
        let legit_expected = if legit {
            (20_000.0 * self.secs) as u64
        } else {
            0
        };
        let (ceiling_pps, (dropped_pps, legit_valid)) = if ceiling_first {
            let ceiling = self.ddos_ceiling(legit_expected)?;
            (ceiling, self.ddos_filter(legit_expected)?)
        } else {
            let filter = self.ddos_filter(legit_expected)?;
            (self.ddos_ceiling(legit_expected)?, filter)
        };
        Ok(Ddos {
            dropped_pps,
            ceiling_pps,
            legit_expected,
            legit_valid,
        })
    }

    /// The attack rate the bare XDP_DROP program takes, the legitimate probes (if any) beside
    /// it.
    fn ddos_ceiling(&self, legit_expected: u64) -> Result<f64> {
        let m_a = &self.chain.m_a;
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
        let legit_sent = if legit_expected > 0 {
            self.legit(&n)?["tx_packets"].as_u64().unwrap_or(0)
        } else {
            0
        };
        // Its status reports the frames the device dropped when the mix overflowed its ring.
        let gen = finish_any(attack)?;
        let all: serde_json::Value = finish(bench)?;
        Ok(all["rx_packets"]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(legit_sent) as f64
            / Self::gen_seconds(&gen))
    }

    /// The attack rate `xskit fwd`'s kernel rule drops, and the legitimate probes (if any)
    /// that reached c intact meanwhile.
    fn ddos_filter(&self, legit_expected: u64) -> Result<(f64, u64)> {
        let m_a = &self.chain.m_a;
        let n = legit_expected.to_string();
        let rules = std::env::temp_dir().join(format!("xskit-ddos-{}.toml", std::process::id()));
        std::fs::write(
            &rules,
            "[[rule]]\nname = \"attack\"\nprotocol = \"udp\"\ndst_port = 9\naction = \"drop\"\n",
        )?;
        let fwd = start(
            &self.exe,
            m_a,
            BENCH_CPU,
            &[
                self.fwd_args("drv"),
                vec!["--rules".into(), rules.display().to_string()],
            ]
            .concat(),
        );
        let _ = std::fs::remove_file(&rules);
        let fwd = fwd?;
        // The receiver sleeps in poll(2) between packets, off the generator's CPU.
        let recv = (legit_expected > 0)
            .then(|| self.ddos_receiver(&n))
            .transpose()?;
        let attack = self.live_attack(self.secs)?;
        if legit_expected > 0 {
            self.legit(&n)?;
        }
        let gen = finish_any(attack)?;
        let delivered = match recv {
            Some(recv) => finish_any(recv)?,
            None => serde_json::json!({ "valid": 0, "corrupt": 0 }),
        };
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
        Ok((
            dropped as f64 / Self::gen_seconds(&gen),
            delivered["valid"].as_u64().unwrap_or(0),
        ))
    }

    /// The receiver at c that counts the legitimate probes.
    fn ddos_receiver(&self, n: &str) -> Result<Proc> {
        let c = &self.chain.c;
        start(
            &self.exe,
            c,
            BENCH_CPU,
            &strings(&[
                "recv", "-i", &c.ifname, "-m", "drv", "-p", "--expect", n, "-d",
            ])
            .into_iter()
            .chain([format!("{}", self.secs + 4.0), "--json".into()])
            .collect::<Vec<_>>(),
        )
    }
}

/// The DDoS rows: the attack rate `xskit fwd` drops in XDP against the XDP_DROP ceiling of
/// the same generator, with the legitimate traffic delivered intact meanwhile (the mix), and
/// the attack alone (the drop rule's own cost: on veth the legitimate probes' delivery to c
/// runs on the generator's CPU, and would count against the filter's attack rate).
pub(crate) fn ddos_cells(
    exe: &str,
    secs: f64,
    runs: usize,
    observer: &mut dyn Observer,
) -> Result<(Vec<Cell>, f64)> {
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
    let mut cells = [
        DDOS_MIX_DROPPED,
        DDOS_MIX_CEILING,
        DDOS_ALONE_DROPPED,
        DDOS_ALONE_CEILING,
    ]
    .map(cell);
    let (mut valid, mut expected) = (0u64, 0u64);
    for run in 0..runs {
        for (legit, what) in [(true, "ddos mix"), (false, "ddos alone")] {
            let d = runner.ddos(run % 2 == 0, legit)?;
            let at = if legit { 0 } else { 2 };
            cells[at].mpps.push(d.dropped_pps / 1e6);
            cells[at + 1].mpps.push(d.ceiling_pps / 1e6);
            valid += d.legit_valid;
            expected += d.legit_expected;
            observer.line(&format!(
                "  run {} {what:<10} attack dropped {:>7.3} Mpps, XDP_DROP ceiling {:>7.3} Mpps ({:.3}x), legitimate {}/{} intact",
                run + 1,
                d.dropped_pps / 1e6,
                d.ceiling_pps / 1e6,
                d.dropped_pps / d.ceiling_pps.max(1.0),
                d.legit_valid,
                d.legit_expected
            ));
        }
    }
    Ok((cells.into(), valid as f64 / expected.max(1) as f64))
}

/// The DDoS cells' names, which the table pairs into ratios.
pub(crate) const DDOS_MIX_DROPPED: &str = "ddos: fwd drops in XDP";
pub(crate) const DDOS_MIX_CEILING: &str = "ddos: XDP_DROP ceiling";
pub(crate) const DDOS_ALONE_DROPPED: &str = "ddos alone: fwd drops in XDP";
pub(crate) const DDOS_ALONE_CEILING: &str = "ddos alone: XDP_DROP ceiling";

/// The forwarding rows: xskit fwd in SKB and DRV mode, and the kernel bridge.
pub(crate) fn fwd_cells(
    exe: &str,
    secs: f64,
    runs: usize,
    size: usize,
    observer: &mut dyn Observer,
) -> Result<Vec<Cell>> {
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
        ("xdp redirect (devmap)", "devmap-skb", true),
        ("xdp redirect (devmap)", "devmap-drv", true),
        ("kernel bridge", "bridge", false),
    ];
    let mut cells: Vec<Cell> = modes
        .iter()
        .map(|(bench, mode, _)| Cell {
            bench: bench.to_string(),
            mode: match *mode {
                "bridge" => "-",
                m => m.strip_prefix("devmap-").unwrap_or(m),
            }
            .to_string(),
            size,
            mpps: vec![],
            cpu_ns_per_packet: vec![],
        })
        .collect();
    for run in 0..runs {
        for (cell, (bench, mode, xdp)) in cells.iter_mut().zip(modes.iter()) {
            let pps = runner.measure(mode, *xdp, size)?;
            cell.mpps.push(pps / 1e6);
            observer.line(&format!(
                "  run {} {:<11} {:<6} {:>5} B  {:>7.3} Mpps",
                run + 1,
                bench,
                mode,
                size,
                pps / 1e6
            ));
        }
    }
    Ok(cells)
}
