//! The forwarding rows of the testbed table: `xskit fwd` in SKB and DRV mode, with and
//! without forwarding in XDP, against the kernel's bridge and (forwarding in XDP) against a
//! program that redirects every packet through a devmap, the kernel's bound; and a DDoS mix,
//! the attack dropped by a kernel rule against the XDP_DROP ceiling of the same generator, the
//! attack alone, and the attack as a reflection flood dropped by its source port.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use xskit_testbed::{Chain, Host};

use crate::crossing::{Crossed, Crossing};
use crate::ddos::{self, Case, Peer, Rule, Sources, CASES};
use crate::procs::{
    command, finish, finish_any, finish_text, interrupt, live_gen_args, rx_packets, set_gro, start,
    strings, Proc, BENCH_CPU, GEN_CPU,
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

/// A row of what crossed during the floods: its name, and the share of what was sent.
pub(crate) type Share = (String, f64);

/// One DDoS run: the attack that `xskit fwd`'s kernel rule drops on m_a, and the attack the
/// bare XDP_DROP ceiling takes on the side link, from two generators on one CPU.
struct Ddos {
    dropped: Rates,
    /// The peer's drops: the ceiling's, or xdp-filter's.
    peer: Rates,
    legit_expected: u64,
    legit_valid: u64,
    /// The kernel's pings and download from a to c during the flood, in the cases whose c
    /// has no probe receiver taking its interface.
    crossed: Option<Crossed>,
}

/// How the two sides of a DDoS run share the generators' CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    /// Both generators at once, each side's rate in packets per second of its generator's
    /// own CPU time, so that the machine's drift (±10% over seconds here) falls on both
    /// alike. On veth the receiver's XDP program runs in softirq in the sender's context,
    /// and a kernel that does not account interrupt time apart charges it to the sender: a
    /// costlier program shows as fewer packets per CPU second.
    SideBySide,
    /// One generator after the other, each in packets per second of its run: where the
    /// kernel accounts interrupt time apart (or does not say), the generators' CPU time
    /// leaves the programs' work out, and side by side both would read alike.
    OneAfterTheOther,
}

impl Method {
    /// Side by side only where the kernel's configuration shows that the generators' CPU
    /// time includes the softirq work it runs in their context.
    fn for_kernel(irq_time_accounted: Option<bool>) -> Method {
        match irq_time_accounted {
            Some(false) => Method::SideBySide,
            _ => Method::OneAfterTheOther,
        }
    }

    /// The method `XSKIT_DDOS_METHOD` names, or the kernel's (see [`Method::for_kernel`]),
    /// and what the lines and the table say of it: how, and why.
    pub(crate) fn from_env() -> Result<(Method, String)> {
        let var = std::env::var(METHOD_VAR).ok().filter(|v| !v.is_empty());
        let method = Method::chosen(var.as_deref())?;
        let why = match &var {
            Some(v) => format!("{METHOD_VAR}={v}"),
            None => method.kernel_reason().to_string(),
        };
        Ok((method, format!("{} ({why})", method.describe())))
    }

    fn chosen(var: Option<&str>) -> Result<Method> {
        match var {
            None | Some("") => Ok(Method::for_kernel(irq_time_accounted())),
            Some("side-by-side") => Ok(Method::SideBySide),
            Some("one-after-the-other") => Ok(Method::OneAfterTheOther),
            Some(other) => bail!(
                "{METHOD_VAR}={other:?}: say side-by-side or one-after-the-other, or leave it \
                 unset for what this kernel's CPU accounting allows"
            ),
        }
    }

    /// The rate this method compares.
    fn rate(self, r: Rates) -> f64 {
        match self {
            Method::SideBySide => r.per_cpu_second,
            Method::OneAfterTheOther => r.pps,
        }
    }

    /// How the two sides were measured.
    fn describe(self) -> &'static str {
        match self {
            Method::SideBySide => {
                "side by side, in packets per second of each generator's CPU time"
            }
            Method::OneAfterTheOther => "one after the other, in packets per second",
        }
    }

    /// Why the kernel's accounting picks this method.
    fn kernel_reason(self) -> &'static str {
        match self {
            Method::SideBySide => "this kernel charges softirq work to the task it interrupts",
            Method::OneAfterTheOther => {
                "this kernel accounts interrupt time apart, or does not say: side by side, \
                 CPU time would leave the XDP programs' work out"
            }
        }
    }
}

/// One generator's packets, per second of its run and per second of its CPU time.
#[derive(Clone, Copy)]
struct Rates {
    pps: f64,
    per_cpu_second: f64,
}

impl Rates {
    /// `packets` over the generator's sending time and CPU share, from its JSON.
    fn of(packets: u64, gen: &serde_json::Value) -> Rates {
        let secs = gen["duration_s"].as_f64().unwrap_or(0.0).max(1e-3);
        let share = gen["cpu_share"].as_f64().unwrap_or(0.0).max(1e-3);
        let pps = packets as f64 / secs;
        Rates {
            pps,
            per_cpu_second: pps / share,
        }
    }
}

/// The chain of the forwarding rows, and a second link from a to m for the ceiling.
struct DdosRunner {
    fwd: FwdRunner,
    a2: Host,
    m2: Host,
    method: Method,
    lists: Lists,
}

/// The floods' source lists and xdp-filter's batch, in a directory of their own, removed
/// on drop.
struct Lists {
    dir: std::path::PathBuf,
}

impl Lists {
    const BLOCKLIST: &'static str = "blocklist.txt";
    const SCATTERED: &'static str = "scattered.txt";
    const XDP_FILTER_BATCH: &'static str = "xdp-filter.batch";
    /// Where xdp-filter pins its IPv4 table, in the shell that loads it.
    const XDP_FILTER_MAP: &'static str = "/sys/fs/bpf/xdp-filter/filter_ipv4";

    fn write() -> Result<Lists> {
        let dir = std::env::temp_dir().join(format!("xskit-ddos-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let lists = Lists { dir };
        let scattered = ddos::scattered_hosts(11, ddos::SCATTERED_SOURCES);
        let batch = ddos::xdp_filter_batch(&scattered, Self::XDP_FILTER_MAP);
        std::fs::write(lists.path(Self::SCATTERED), scattered)?;
        std::fs::write(lists.path(Self::XDP_FILTER_BATCH), batch)?;
        let blocklist = ddos::blocklist(7, ddos::BLOCKLIST_PREFIXES);
        std::fs::write(lists.path(Self::BLOCKLIST), blocklist)?;
        Ok(lists)
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.join(name)
    }

    /// The list a case's attack comes from, if not from one address.
    fn of(&self, sources: Sources) -> Option<std::path::PathBuf> {
        match sources {
            Sources::One => None,
            Sources::Blocklist => Some(self.path(Self::BLOCKLIST)),
            Sources::Scattered => Some(self.path(Self::SCATTERED)),
        }
    }
}

impl Drop for Lists {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one side of a run sent: the attack generator's JSON, and the legitimate probes.
struct Sent {
    attack: serde_json::Value,
    legit: u64,
}

impl DdosRunner {
    /// Seconds the generators of a run take: one's length, or both in turn.
    fn span(&self) -> f64 {
        match self.method {
            Method::SideBySide => self.fwd.secs,
            Method::OneAfterTheOther => 2.0 * self.fwd.secs + 1.0,
        }
    }

    /// UDP from port 53 to port 9 from `from` (a reflection flood's shape), the live-frames
    /// generator flat out, from each address of `sources` in turn when given; the rule
    /// drops it.
    fn attack(&self, from: &Host, sources: Option<&std::path::Path>) -> Result<Proc> {
        let args = live_gen_args(from, "02:00:00:00:00:00", 64, self.fwd.secs);
        let mut args = [args, strings(&["--src-port", "53"])].concat();
        if let Some(list) = sources {
            args.extend(["--src-list".to_string(), list.display().to_string()]);
        }
        start(&self.fwd.exe, from, GEN_CPU, &args)
    }

    /// Debian's xdp-filter on `on` in native mode, its IPv4 table filled with the scattered
    /// sources, until it is interrupted; its `status` on stdout at the end. One
    /// shell does it all: each `ip netns exec` mounts a /sys of its own, and xdp-filter
    /// keeps its tables pinned there. This kernel refuses libxdp's dispatcher (freplace):
    /// one program per interface. xdp-filter takes a lock file in /run, which every
    /// namespace shares, without waiting: two at once on the machine (two benchmarks, or
    /// test jobs side by side) make one fail, so each of its commands waits its turn: a
    /// lock (flock) on xdp-filter's own program file, which leaves nothing behind.
    fn xdp_filter(&self, on: &Host) -> Result<Proc> {
        let dev = &on.ifname;
        let batch = self.lists.path(Lists::XDP_FILTER_BATCH);
        let script = format!(
            "mount -t bpf bpf /sys/fs/bpf || exit 1\n\
             export LIBXDP_SKIP_DISPATCHER=1\n\
             xf() {{ flock \"$(command -v xdp-filter)\" xdp-filter \"$@\"; }}\n\
             xf load -m native -f ipv4 {dev} >/dev/null 2>&1 || {{ echo \"xskit: \
             xdp-filter could not load on {dev}: install xdp-tools (apt-get install \
             xdp-tools)\" >&2; exit 1; }}\n\
             trap 'xf unload {dev} >/dev/null 2>&1' EXIT\n\
             bpftool batch file {} >/dev/null || {{ echo \"xskit: bpftool could not fill \
             xdp-filter's table\" >&2; exit 1; }}\n\
             trap : INT\n\
             echo \"xdp-filter ready on {dev}\" >&2\n\
             sleep 3600 & wait $!\n\
             kill $! 2>/dev/null\n\
             xf status\n",
            batch.display()
        );
        start("sh", on, BENCH_CPU, &strings(&["-c", &script]))
    }

    /// `xskit bench xdp-drop` on `on`: the ceiling, until it is interrupted once the
    /// generators are done (however long they took to set up: a million sources take a
    /// second to load, more on a loaded machine).
    fn ceiling(&self, on: &Host) -> Result<Proc> {
        self.xdp_drop(on, &[])
    }

    /// `xskit bench xdp-drop --src-port 53` on `on`, as [`Self::ceiling`]: the floor of a
    /// filter by source port, which reads the packet where the ceiling reads nothing.
    fn src_port_floor(&self, on: &Host) -> Result<Proc> {
        self.xdp_drop(on, &["--src-port", "53"])
    }

    fn xdp_drop(&self, on: &Host, extra: &[&str]) -> Result<Proc> {
        let args = strings(
            &[
                &[
                    "bench", "xdp-drop", "-i", &on.ifname, "-m", "drv", "--json", "-d", "3600",
                ],
                extra,
            ]
            .concat(),
        );
        start(&self.fwd.exe, on, BENCH_CPU, &args)
    }

    /// The attack from `from` (from each of `sources`), and `n` legitimate probes beside it.
    fn send(&self, from: &Host, n: u64, sources: Option<&std::path::Path>) -> Result<Sent> {
        let gen = self.attack(from, sources)?;
        let legit = if n > 0 {
            self.legit(from, n)?["tx_packets"].as_u64().unwrap_or(0)
        } else {
            0
        };
        // Its status reports the frames the device dropped when the mix overflowed a ring.
        Ok(Sent {
            attack: finish_any(gen)?,
            legit,
        })
    }

    /// Both sides' traffic, in the order given, so that runs can alternate it; at once or
    /// in turn, as the method says.
    fn send_both(
        &self,
        filter_first: bool,
        n: u64,
        sources: Option<&std::path::Path>,
    ) -> Result<(Sent, Sent)> {
        let (a, a2) = (&self.fwd.chain.a, &self.a2);
        let (first, second) = if filter_first { (a, a2) } else { (a2, a) };
        let (first, second) = match self.method {
            Method::OneAfterTheOther => (
                self.send(first, n, sources)?,
                self.send(second, n, sources)?,
            ),
            Method::SideBySide => std::thread::scope(|s| {
                let first = s.spawn(|| self.send(first, n, sources));
                // A moment apart, so that the order given is the order they start in.
                std::thread::sleep(Duration::from_millis(50));
                let second = self.send(second, n, sources);
                let first = first
                    .join()
                    .map_err(|_| anyhow::anyhow!("a generator's thread panicked"))?;
                Ok::<_, anyhow::Error>((first?, second?))
            })?,
        };
        Ok(if filter_first {
            (first, second)
        } else {
            (second, first)
        })
    }

    /// Legitimate probes at 20 kpps, `n` of them, from `from` to c's port 5000, on the
    /// attack generators' CPU: a sender on the other CPU would move part of the receive
    /// work (veth's NAPI) there and change what is measured. Its JSON whatever its status:
    /// the attack's drops on the same device count in the device counter it checks.
    fn legit(&self, from: &Host, n: u64) -> Result<serde_json::Value> {
        let (a, c) = (&self.fwd.chain.a, &self.fwd.chain.c);
        let mac: Vec<String> = c.mac.iter().map(|x| format!("{x:02x}")).collect();
        let n = n.to_string();
        let args = strings(&[
            "gen",
            "-i",
            &from.ifname,
            "-m",
            "drv",
            "--dst-port",
            "5000",
            "-r",
            "20000",
            "--json",
            "-n",
            &n,
            "--dst-mac",
            &mac.join(":"),
            "--src-ip",
            &a.ip.to_string(),
            "--dst-ip",
            &c.ip.to_string(),
        ]);
        let out = command(&self.fwd.exe, from, GEN_CPU, &args).output()?;
        serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "the legitimate generator failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// `xskit fwd` on m_a and m_c in DRV mode, with the case's rule (a set's file is the
    /// attack's own list).
    fn start_fwd(&self, case: &Case) -> Result<Proc> {
        let rules = self.lists.path("rules.toml");
        let list = self.lists.of(case.sources).unwrap_or_default();
        std::fs::write(&rules, ddos::rules_text(case.rule, &list))?;
        let args = [
            self.fwd.fwd_args("drv"),
            vec!["--rules".into(), rules.display().to_string()],
        ]
        .concat();
        start(&self.fwd.exe, &self.fwd.chain.m_a, BENCH_CPU, &args)
    }

    /// The attack on both links, the probes beside it when the case has them (the mix):
    /// into `xskit fwd` (the case's rule drops it; the probes are forwarded to c and checked
    /// there) and into the case's peer on the side link.
    fn ddos(&self, filter_first: bool, case: &Case) -> Result<Ddos> {
        let chain = &self.fwd.chain;
        for host in [&chain.m_a, &chain.c, &self.m2] {
            set_gro(host, false)?;
        }
        let legit_expected = if case.legit {
            (20_000.0 * self.fwd.secs) as u64
        } else {
            0
        };
        let fwd = self.start_fwd(case)?;
        // The receiver sleeps in poll(2) between packets, off the generators' CPU.
        let recv = case
            .legit
            .then(|| self.ddos_receiver(legit_expected))
            .transpose()?;
        let peer = self.start_peer(case.peer, &self.m2)?;
        std::thread::sleep(Duration::from_millis(300));
        let sources = self.lists.of(case.sources);
        let crossing = (!case.legit)
            .then(|| Crossing::start(&chain.a, &chain.c, self.span()))
            .transpose()
            .context("the kernel's traffic through xskit fwd before the flood")?;
        let (to_filter, to_peer) =
            self.send_both(filter_first, legit_expected, sources.as_deref())?;
        let crossed = crossing.map(Crossing::finish).transpose()?;
        interrupt(&peer);
        let taken = peer_drops(case.peer, peer)?;
        let delivered = match recv {
            Some(recv) => finish_any(recv)?,
            None => serde_json::json!({ "valid": 0, "corrupt": 0 }),
        };
        interrupt(&fwd);
        let report = finish(fwd)?;
        if report["frames"]["unaccounted"] != 0 {
            bail!("xskit fwd lost frames: {report}");
        }
        if delivered["corrupt"] != 0 {
            bail!("legitimate probes arrived damaged: {delivered}");
        }
        let rule = &report["counters"]["rules"][0];
        let count = |key: &str| rule[key].as_u64().unwrap_or(0);
        let dropped = match case.rule {
            Rule::PerSourceLimit => count("over_rate") + count("blocked"),
            _ => count("in_kernel"),
        };
        if dropped == 0 {
            bail!("xskit fwd dropped nothing in XDP: {report}");
        }
        Ok(Ddos {
            dropped: Rates::of(dropped, &to_filter.attack),
            peer: Rates::of(taken.saturating_sub(to_peer.legit), &to_peer.attack),
            legit_expected,
            legit_valid: delivered["valid"].as_u64().unwrap_or(0),
            crossed,
        })
    }

    /// `peer`'s program on `host`.
    fn start_peer(&self, peer: Peer, host: &Host) -> Result<Proc> {
        match peer {
            Peer::Ceiling => self.ceiling(host),
            Peer::SrcPortFloor => self.src_port_floor(host),
            Peer::XdpFilter => self.xdp_filter(host),
        }
    }

    /// The method's check, `first` on m_a against the ceiling on the side link: with the
    /// ceiling, the method's own bias (1.0 when the two links are measured alike); with the
    /// minimal source-port drop, what reading the packet costs.
    fn check(&self, first: Peer) -> Result<(Rates, Rates)> {
        let chain = &self.fwd.chain;
        for host in [&chain.m_a, &self.m2] {
            set_gro(host, false)?;
        }
        let on_m_a = self.start_peer(first, &chain.m_a)?;
        let on_m2 = self.start_peer(Peer::Ceiling, &self.m2)?;
        std::thread::sleep(Duration::from_millis(300));
        let (f, c) = self.send_both(true, 0, None)?;
        interrupt(&on_m_a);
        interrupt(&on_m2);
        let (nf, nc) = (
            peer_drops(first, on_m_a)?,
            peer_drops(Peer::Ceiling, on_m2)?,
        );
        Ok((Rates::of(nf, &f.attack), Rates::of(nc, &c.attack)))
    }

    /// The receiver at c that counts the legitimate probes.
    fn ddos_receiver(&self, n: u64) -> Result<Proc> {
        let (c, n) = (&self.fwd.chain.c, n.to_string());
        let args = strings(&[
            "recv", "-i", &c.ifname, "-m", "drv", "-p", "--expect", &n, "--json", "-d",
        ]);
        let secs = format!("{}", self.span() + 4.0);
        start(&self.fwd.exe, c, BENCH_CPU, &[args, vec![secs]].concat())
    }
}

/// The packets `peer`'s program (`proc`, interrupted) dropped.
fn peer_drops(peer: Peer, proc: Proc) -> Result<u64> {
    Ok(match peer {
        Peer::Ceiling | Peer::SrcPortFloor => finish(proc)?["rx_packets"].as_u64().unwrap_or(0),
        Peer::XdpFilter => {
            let status = finish_text(proc)?;
            ddos::xdp_filter_drops(&status)
                .with_context(|| format!("reading xdp-filter's status: {status}"))?
        }
    })
}

/// The DDoS rows: the attack rate `xskit fwd` drops in XDP against the XDP_DROP ceiling's,
/// measured as [`Method::for_kernel`] says, with the legitimate traffic delivered intact
/// meanwhile (the mix), and the attack alone (the drop rule's own cost: on veth the
/// legitimate probes' delivery to c runs on the generators' CPU, and counts against the
/// filter's attack rate); first, once, the method's check, the ceiling against itself.
pub(crate) fn ddos_cells(
    exe: &str,
    secs: f64,
    runs: usize,
    (method, description, chosen): (Method, &str, &ChosenCases),
    observer: &mut dyn Observer,
) -> Result<(Vec<Cell>, Vec<Share>)> {
    let chain = Chain::bridged().context("building the three-namespace testbed")?;
    let (a2, m2) = chain
        .side_link()
        .context("adding the ceiling's link to the testbed")?;
    let runner = DdosRunner {
        fwd: FwdRunner {
            exe: exe.to_string(),
            secs,
            chain,
        },
        a2,
        m2,
        method,
        lists: Lists::write().context("writing the floods' source lists")?,
    };
    let mut cells = empty_ddos_cells();
    observer.line(&format!("  ddos: {description}"));
    let xdp_filter = on_path("xdp-filter") && on_path("bpftool");
    if !xdp_filter {
        observer.line(
            "  xdp-filter or bpftool is not installed (apt-get install xdp-tools bpftool): \
             the row beside xdp-filter is left out",
        );
    }
    let mut record = |at: usize, what: &str, x: Rates, p: Rates, tail: String| {
        let (x, p) = (method.rate(x), method.rate(p));
        cells[at].mpps.push(x / 1e6);
        cells[at + 1].mpps.push(p / 1e6);
        observer.line(&format!(
            "  {what:<22} {:>7.3} against {:>7.3} Mpps ({:.3}x){tail}",
            x / 1e6,
            p / 1e6,
            x / p.max(1.0),
        ));
    };
    let (x, p) = runner.check(Peer::Ceiling)?;
    record(2 * CASES.len(), "check: ceiling", x, p, String::new());
    for _ in 0..runs {
        let (x, p) = runner.check(Peer::SrcPortFloor)?;
        record(2 * CASES.len() + 2, "floor vs ceiling", x, p, String::new());
    }
    let (mut valid, mut expected) = (0u64, 0u64);
    let mut crossed = Vec::new();
    for run in 0..runs {
        for (at, case) in CASES.iter().enumerate() {
            if (case.peer == Peer::XdpFilter && !xdp_filter) || !chosen.contains(case.what) {
                continue;
            }
            let d = runner
                .ddos(run % 2 == 0, case)
                .with_context(|| format!("the DDoS case {}", case.what))?;
            valid += d.legit_valid;
            expected += d.legit_expected;
            let mut tail = if case.legit {
                format!(", legitimate {}/{} intact", d.legit_valid, d.legit_expected)
            } else {
                String::new()
            };
            if let Some(c) = d.crossed {
                tail.push_str(&c.words());
                crossed.push(c);
            }
            let what = format!("run {} {}", run + 1, case.what);
            record(2 * at, &what, d.dropped, d.peer, tail);
        }
    }
    cells.retain(|c| !c.mpps.is_empty());
    let mut shares = Vec::new();
    if expected > 0 {
        let share = valid as f64 / expected as f64;
        shares.push(("ddos legitimate delivered intact".to_string(), share));
    }
    shares.extend(crossed_shares(&crossed));
    Ok((cells, shares))
}

/// Every DDoS cell, nothing measured yet.
fn empty_ddos_cells() -> Vec<Cell> {
    ddos_cell_names()
        .map(|bench| Cell {
            bench: bench.to_string(),
            mode: "drv".into(),
            size: 64,
            mpps: vec![],
            cpu_ns_per_packet: vec![],
        })
        .collect()
}

/// The shares of the kernel's pings answered and downloads intact over the floods, when any
/// were tried.
fn crossed_shares(crossed: &[Crossed]) -> Vec<Share> {
    if crossed.is_empty() {
        return Vec::new();
    }
    let sent: u64 = crossed.iter().map(|c| c.pings_sent).sum();
    let answered: u64 = crossed.iter().map(|c| c.pings_answered).sum();
    let intact = crossed.iter().filter(|c| c.download_intact).count();
    vec![
        (
            "ddos pings answered during the floods".to_string(),
            answered as f64 / sent.max(1) as f64,
        ),
        (
            "ddos downloads intact during the floods".to_string(),
            intact as f64 / crossed.len() as f64,
        ),
    ]
}

/// The DDoS cases `XSKIT_DDOS_CASES` names (comma-separated, as the progress lines name
/// them: `set flood,vs xdp-filter`), or all of them.
pub(crate) struct ChosenCases(Option<Vec<String>>);

impl ChosenCases {
    const VAR: &'static str = "XSKIT_DDOS_CASES";

    /// Read before anything is measured, so a name it does not know stops the bench at once.
    pub(crate) fn from_env() -> Result<Self> {
        Self::from_value(std::env::var(Self::VAR).ok().as_deref())
    }

    /// The cases `list` names (the variable's value), or all of them without one.
    fn from_value(list: Option<&str>) -> Result<Self> {
        let Some(list) = list else {
            return Ok(ChosenCases(None));
        };
        let names: Vec<String> = list.split(',').map(|n| n.trim().to_string()).collect();
        if let Some(unknown) = names.iter().find(|n| !CASES.iter().any(|c| c.what == *n)) {
            let known: Vec<&str> = CASES.iter().map(|c| c.what).collect();
            bail!(
                "{}: no DDoS case is named {unknown:?}; the cases are {}",
                Self::VAR,
                known.join(", ")
            );
        }
        Ok(ChosenCases(Some(names)))
    }

    fn contains(&self, what: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == what))
    }
}

/// True if `program` is on the PATH.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The DDoS cells' names, in the order [`ddos_cells`] keeps them: each case's pair, then the
/// method's check.
fn ddos_cell_names() -> impl Iterator<Item = &'static str> {
    CASES.iter().flat_map(|c| [c.dropped, c.peer_cell]).chain([
        DDOS_CHECK_M_A,
        DDOS_CHECK_SIDE,
        DDOS_FLOOR,
        DDOS_FLOOR_CEILING,
    ])
}

/// Overrides the DDoS rows' method: `side-by-side` or `one-after-the-other`.
const METHOD_VAR: &str = "XSKIT_DDOS_METHOD";

/// Whether the running kernel accounts interrupt time apart from tasks, from its
/// configuration where it publishes it (`/boot/config-RELEASE`, `/proc/config.gz`).
fn irq_time_accounted() -> Option<bool> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let config = std::fs::read_to_string(format!("/boot/config-{}", release.trim()))
        .ok()
        .or_else(|| {
            let out = std::process::Command::new("zcat")
                .arg("/proc/config.gz")
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        })?;
    Some(irq_time_in(&config))
}

/// Whether a kernel configuration accounts interrupt time apart from tasks.
fn irq_time_in(config: &str) -> bool {
    config
        .lines()
        .any(|l| l.trim() == "CONFIG_IRQ_TIME_ACCOUNTING=y")
}

/// The method check's cells, which the table pairs into a ratio as it does each case's.
pub(crate) const DDOS_CHECK_M_A: &str = "ddos check: XDP_DROP on fwd's link";
pub(crate) const DDOS_CHECK_SIDE: &str = "ddos check: XDP_DROP on the ceiling's link";
/// The minimal source-port drop on fwd's link, measured against the ceiling beside it.
pub(crate) const DDOS_FLOOR: &str = "ddos floor: minimal source-port drop";
pub(crate) const DDOS_FLOOR_CEILING: &str = "ddos floor: XDP_DROP ceiling beside it";

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_crossed_is_summed_over_the_floods() {
        assert!(
            crossed_shares(&[]).is_empty(),
            "no rows when nothing was tried"
        );
        let run = |answered, intact| Crossed {
            pings_sent: 10,
            pings_answered: answered,
            download_intact: intact,
        };
        let shares = crossed_shares(&[run(10, true), run(5, false)]);
        assert_eq!(
            shares,
            [
                ("ddos pings answered during the floods".to_string(), 0.75),
                ("ddos downloads intact during the floods".to_string(), 0.5)
            ]
        );
    }

    #[test]
    fn ddos_cases_are_picked_by_name_and_a_wrong_name_lists_them() {
        let all = ChosenCases::from_value(None).unwrap();
        assert!(CASES.iter().all(|c| all.contains(c.what)));
        let some = ChosenCases::from_value(Some("set flood, vs xdp-filter")).unwrap();
        assert!(some.contains("set flood") && some.contains("vs xdp-filter"));
        assert!(!some.contains("ddos mix"));
        let e = ChosenCases::from_value(Some("set flood,nope"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("XSKIT_DDOS_CASES: no DDoS case is named \"nope\"")
                && e.contains("per-source limit"),
            "{e}"
        );
    }

    #[test]
    fn side_by_side_only_where_the_generators_cpu_time_holds_the_softirq_work() {
        assert!(irq_time_in(
            "# x\nCONFIG_IRQ_TIME_ACCOUNTING=y\nCONFIG_HZ=250\n"
        ));
        assert!(!irq_time_in("# CONFIG_IRQ_TIME_ACCOUNTING is not set\n"));
        assert_eq!(Method::for_kernel(Some(false)), Method::SideBySide);
        assert_eq!(Method::for_kernel(Some(true)), Method::OneAfterTheOther);
        assert_eq!(Method::for_kernel(None), Method::OneAfterTheOther);
        assert_eq!(
            Method::chosen(Some("one-after-the-other")).unwrap(),
            Method::OneAfterTheOther
        );
        assert_eq!(
            Method::chosen(Some("side-by-side")).unwrap(),
            Method::SideBySide
        );
        let e = Method::chosen(Some("both")).unwrap_err().to_string();
        assert!(
            e.contains("XSKIT_DDOS_METHOD=\"both\"") && e.contains("side-by-side"),
            "{e}"
        );
        let r = Rates::of(
            600,
            &serde_json::json!({ "duration_s": 2.0, "cpu_share": 0.5 }),
        );
        assert_eq!(Method::SideBySide.rate(r), 600.0);
        assert_eq!(Method::OneAfterTheOther.rate(r), 300.0);
    }
}
