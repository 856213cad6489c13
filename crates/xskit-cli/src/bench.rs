//! `xskit bench`: the xdpsock benchmarks (rxdrop, txpush, l2fwd), the AF_PACKET baselines and
//! the XDP_DROP ceiling on one interface; with no interface, all of them on a testbed, as the
//! table of receive, transmit and forwarding rates.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use xskit::clock::process_cpu_ns;
use xskit::{Interface, Port, Statistics};
use xskit_traffic::baseline::{PacketRxRing, PacketTx};
use xskit_traffic::probe::ProbeAddrs;
use xskit_traffic::XdpCounter;

use crate::opts::{parse_mac, stop_flag, stopped, thousands, Live, PortArgs, RunArgs};

#[cfg(feature = "bench-harness")]
mod harness;

/// The benchmarks, their names and help, as xskit-bench lists them.
pub(crate) use xskit_bench::Benchmark as Kind;

#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    /// What to measure. Without -i: every benchmark on a testbed, as a table.
    kind: Option<Kind>,
    /// bench plot: the saved table (`xskit bench --json` output) to draw.
    #[arg(value_name = "RESULTS.json")]
    results: Option<PathBuf>,
    #[command(flatten)]
    port: PortArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Frame length for txpush and afpacket-tx (and the generator in testbed mode), WITHOUT
    /// the 4-byte FCS: RFC 2544's (xdpsock's) 64-byte frame is -s 60.
    #[arg(short = 's', long = "packet-size", default_value_t = 64)]
    size: usize,
    /// Destination MAC of txpush and afpacket-tx frames. The default is a unicast address no
    /// host owns, so the receiving side drops frames at layer 2, as xdpsock and testpmd do.
    #[arg(long, default_value = "02:00:00:00:00:00")]
    dst_mac: String,
    /// xdp-redirect: the interface every packet is redirected to.
    #[arg(long, value_name = "IFACE")]
    to: Option<String>,
    /// xdp-drop: drop (and count) only untagged IPv4 UDP from this source port, read from
    /// each packet, and pass the rest: the least any filter by source port does, where the
    /// plain xdp-drop reads nothing of the packet.
    #[arg(long, value_name = "PORT")]
    src_port: Option<u16>,
    /// Add the six kernel statistics and app counters to each line.
    #[arg(short = 'x', long = "extra-stats")]
    extra: bool,
    /// Testbed mode: the txpush table by packet size (64, 512, 1024, 1500).
    #[arg(long)]
    sizes: bool,
    /// Testbed mode: also draw the table as an SVG bar chart.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Testbed mode: runs per cell; the median is reported, with the spread.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// bench pipeline: packets per case.
    #[arg(long, default_value_t = 2_000_000)]
    packets: u64,
    /// On an interface: stop after this many packets (received, or sent for txpush and
    /// afpacket-tx), counted at the clock's looks (every 64 rounds).
    #[arg(short = 'n', long)]
    count: Option<u64>,
    /// On an interface, rxdrop and l2fwd: stop after this many polls found the rx ring empty,
    /// a fixed amount of idle work whatever the machine's load (bench/callgrind.sh measures
    /// what an empty poll costs this way).
    #[arg(long, value_name = "N")]
    idle_polls: Option<u64>,
}

/// One measurement, as printed by `--json`.
#[derive(Serialize, serde::Deserialize, Default, Clone, Debug)]
pub(crate) struct BenchResult {
    pub(crate) bench: String,
    pub(crate) mode: String,
    pub(crate) interface: String,
    pub(crate) queue: u32,
    /// The whole run, from opening to stopping.
    pub(crate) duration_s: f64,
    /// From the first to the last packet seen: the rates and CPU per packet are over this.
    pub(crate) window_s: f64,
    pub(crate) rx_pps: f64,
    pub(crate) tx_pps: f64,
    pub(crate) rx_packets: u64,
    pub(crate) tx_packets: u64,
    /// Process CPU per packet over the window; `None` when no packet came.
    pub(crate) cpu_ns_per_packet: Option<f64>,
    pub(crate) rx_dropped: u64,
    pub(crate) rx_invalid_descs: u64,
    pub(crate) tx_invalid_descs: u64,
    pub(crate) rx_ring_full: u64,
    pub(crate) rx_fill_ring_empty_descs: u64,
    pub(crate) tx_ring_empty_descs: u64,
    pub(crate) empty_polls: u64,
    pub(crate) wakeups: u64,
}

/// What a benchmark loop does after a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Go on.
    Go,
    /// Print the interval's line, then go on.
    Line,
    /// Stop: the duration is over or a signal came.
    Stop,
}

/// Counts packets over the window from the first to the last look at the clock that saw
/// traffic, so time before the generator starts or after it ends does not dilute the rate
/// (as testpmd and xdpsock count); prints one line per interval. The clock is read only every
/// `every` rounds: reading it twice per round cost most of rxdrop's spare CPU in this VM.
struct Meter {
    label: String,
    interval: Duration,
    every: u32,
    rounds: u32,
    start: Instant,
    deadline: Option<Instant>,
    limit: u64,
    stop: Arc<AtomicBool>,
    /// Packets at the last look.
    seen: u64,
    /// The first and the latest look that found new packets: (time, process CPU ns, packets).
    first: Option<(Instant, u64, u64)>,
    last: Option<(Instant, u64, u64)>,
    tick: Instant,
    at_tick: (u64, u64),
    quiet: bool,
    extra: bool,
    live: Live,
    interface: String,
    queue: u32,
}

/// Rounds between looks at the clock in the busy loops.
const CLOCK_ROUNDS: u32 = 64;

impl Meter {
    fn new(
        label: String,
        args: &BenchArgs,
        times: crate::opts::RunTimes,
        stop: Arc<AtomicBool>,
        every: u32,
    ) -> Result<Self> {
        let now = Instant::now();
        Ok(Meter {
            label,
            interval: times.interval,
            every: every.max(1),
            rounds: 0,
            start: now,
            deadline: times.duration.map(|d| now + d),
            limit: args.count.unwrap_or(u64::MAX),
            stop,
            seen: 0,
            first: None,
            last: None,
            tick: now,
            at_tick: (0, 0),
            quiet: args.run.json_output(),
            extra: args.extra,
            live: args.run.live("bench")?,
            interface: args.port.interface.clone().unwrap_or_default(),
            queue: args.port.queue,
        })
    }

    /// Called once per round with the packets counted so far.
    #[inline]
    fn round(&mut self, packets: u64) -> Next {
        self.rounds = self.rounds.wrapping_add(1);
        if !self.rounds.is_multiple_of(self.every) {
            return Next::Go;
        }
        let now = Instant::now();
        if packets != self.seen {
            let look = (now, process_cpu_ns(), packets);
            if self.first.is_none() {
                self.first = Some(look);
            }
            self.last = Some(look);
            self.seen = packets;
        }
        if stopped(&self.stop) || self.deadline.is_some_and(|d| now >= d) || packets >= self.limit {
            Next::Stop
        } else if now - self.tick >= self.interval {
            Next::Line
        } else {
            Next::Go
        }
    }

    fn line(
        &mut self,
        rx: u64,
        tx: u64,
        stats: Option<Statistics>,
        empty_polls: u64,
        wakeups: u64,
    ) {
        let secs = self.tick.elapsed().as_secs_f64();
        if !self.quiet {
            let mut line = format!(
                "{}  rx {:>11} pps  tx {:>11} pps  total rx {:>13} tx {:>13}",
                self.label,
                thousands(((rx - self.at_tick.0) as f64 / secs) as u64),
                thousands(((tx - self.at_tick.1) as f64 / secs) as u64),
                thousands(rx),
                thousands(tx)
            );
            if self.extra {
                if let Some(s) = stats {
                    line.push_str(&format!("  {s}"));
                }
                line.push_str(&format!(" empty_polls={empty_polls} wakeups={wakeups}"));
            }
            out!("{line}");
        }
        self.live.tick(&serde_json::json!({
            "ports": [{
                "interface": self.interface,
                "queue": self.queue,
                "rx_packets": rx,
                "tx_packets": tx,
                "empty_polls": empty_polls,
                "wakeups": wakeups,
                "statistics": stats.as_ref().map(crate::gen::stats_json),
            }]
        }));
        self.tick = Instant::now();
        self.at_tick = (rx, tx);
    }

    fn result(
        &self,
        kind: Kind,
        mode: String,
        iface: &str,
        queue: u32,
        rx: u64,
        tx: u64,
    ) -> BenchResult {
        let counted = if matches!(kind, Kind::Txpush | Kind::AfpacketTx) {
            tx
        } else {
            rx
        };
        // The window: from the first look that saw packets to the last; the packets in it are
        // those counted between the two looks.
        let (window, packets, cpu) = match (self.first, self.last) {
            (Some(f), Some(l)) if l.0 > f.0 => (
                (l.0 - f.0).as_secs_f64(),
                l.2 - f.2,
                l.1.saturating_sub(f.1),
            ),
            _ => (0.0, 0, 0),
        };
        let pps = |n: u64| {
            if window > 0.0 {
                n as f64 * packets as f64 / counted.max(1) as f64 / window
            } else {
                0.0
            }
        };
        BenchResult {
            bench: kind.name().into(),
            mode,
            interface: iface.into(),
            queue,
            duration_s: self.start.elapsed().as_secs_f64(),
            window_s: window,
            rx_pps: pps(rx),
            tx_pps: pps(tx),
            rx_packets: rx,
            tx_packets: tx,
            // A few stray packets (a neighbour's solicitation on an idle link) over a window
            // of idle polling would make a nonsense figure: CPU per packet needs traffic.
            cpu_ns_per_packet: (packets >= MIN_PACKETS_FOR_CPU)
                .then(|| cpu as f64 / packets as f64),
            ..BenchResult::default()
        }
    }
}

/// Packets a window must hold for CPU per packet to be reported.
const MIN_PACKETS_FOR_CPU: u64 = 1_000;

fn with_stats(mut r: BenchResult, s: &Statistics, empty_polls: u64, wakeups: u64) -> BenchResult {
    r.rx_dropped = s.rx_dropped;
    r.rx_invalid_descs = s.rx_invalid_descs;
    r.tx_invalid_descs = s.tx_invalid_descs;
    r.rx_ring_full = s.rx_ring_full;
    r.rx_fill_ring_empty_descs = s.rx_fill_ring_empty_descs;
    r.tx_ring_empty_descs = s.tx_ring_empty_descs;
    r.empty_polls = empty_polls;
    r.wakeups = wakeups;
    r
}

pub(crate) fn run(args: &BenchArgs) -> Result<i32> {
    check_files_and_outputs(args)?;
    check_redirect_target(args)?;
    let Some(ifname) = args.port.interface.clone() else {
        return on_testbed(args);
    };
    // Every mistake at once, each option read once.
    let mut m = crate::opts::Mistakes::default();
    m.take(crate::opts::interface_exists(Ok(&ifname)));
    let kind = m.take(interface_benchmark(args, &ifname).and_then(|kind| {
        sent_frame_fits(args, kind)?;
        Ok(kind)
    }));
    let times = m.take(args.run.times());
    let config = m.take(
        args.port
            .with_frames_filling_the_ring()
            .config(false, false),
    );
    let (kind, times, config) =
        m.finish_with(kind.zip(times).zip(config).map(|((k, t), c)| (k, t, c)))?;
    let stop = stop_flag()?;
    let on = OnInterface {
        args,
        ifname: &ifname,
        label: format!("{ifname}:{} {}", args.port.queue, kind.name()),
        stop,
        times,
        config,
    };
    let result = match kind {
        Kind::Rxdrop | Kind::Txpush | Kind::L2fwd => on.ring_loop(kind)?,
        Kind::AfpacketRx => on.afpacket_rx()?,
        Kind::AfpacketTx => on.afpacket_tx()?,
        Kind::XdpDrop | Kind::XdpTx | Kind::XdpRedirect => on.xdp_counter(kind)?,
        Kind::Pipeline | Kind::Fwd | Kind::Bond | Kind::Plot => {
            bail!("{} does not run on an interface", kind.name())
        }
    };
    if args.run.json_output() {
        crate::opts::print_json("bench", &result)?;
    } else {
        match result.cpu_ns_per_packet {
            Some(cpu) => out!(
                "{} {}: rx {} pps, tx {} pps over the {:.2} s from the first packet to the last \
                 (of {:.2} s); {:.0} ns CPU per packet",
                result.bench,
                result.mode,
                thousands(result.rx_pps as u64),
                thousands(result.tx_pps as u64),
                result.window_s,
                result.duration_s,
                cpu
            ),
            None if result.rx_packets + result.tx_packets == 0 => out!(
                "{} {}: no packets in {:.2} s",
                result.bench,
                result.mode,
                result.duration_s
            ),
            None => out!(
                "{} {}: only {} packets in {:.2} s, too few to measure a rate or CPU per packet \
                 (is anything sending?)",
                result.bench,
                result.mode,
                result.rx_packets + result.tx_packets,
                result.duration_s
            ),
        }
    }
    Ok(0)
}

/// A sending benchmark's frame (-s, --dst-mac) can be built and, for txpush, fits one frame:
/// checked before anything is opened.
fn sent_frame_fits(args: &BenchArgs, kind: Kind) -> Result<()> {
    if !matches!(kind, Kind::Txpush | Kind::AfpacketTx) {
        return Ok(());
    }
    probe_frame_from([2, 0, 0, 0, 0, 1], args.size, parse_mac(&args.dst_mac)?)?;
    if kind == Kind::Txpush && args.size > args.port.frame_size as usize {
        bail!(
            "txpush sends single-frame packets: -s {} is larger than the frame size {} (-f)",
            args.size,
            args.port.frame_size
        );
    }
    Ok(())
}

/// The benchmark to run on `ifname`, after refusing what does not apply to one interface.
fn interface_benchmark(args: &BenchArgs, ifname: &str) -> Result<Kind> {
    if matches!(
        args.kind,
        Some(Kind::Pipeline | Kind::Bond | Kind::Plot | Kind::Fwd)
    ) {
        bail!("{}", testbed_only(args.kind.unwrap_or(Kind::Fwd)));
    }
    // The testbed table's options would do nothing on one interface: say so.
    for (given, flag) in [
        (args.plot.is_some(), "--plot"),
        (args.sizes, "--sizes"),
        (args.runs != 1, "--runs"),
    ] {
        if given {
            bail!(
                "{flag} is for the testbed table (xskit bench without -i); on {ifname} one \
                 benchmark runs once"
            );
        }
    }
    let Some(kind) = args.kind else {
        bail!("say which benchmark to run on {ifname}: rxdrop, txpush, l2fwd, afpacket-rx, afpacket-tx, xdp-drop, xdp-tx or xdp-redirect");
    };
    Ok(kind)
}

/// `--to` goes with xdp-redirect, which needs it and an interface to redirect from;
/// `--src-port` with xdp-drop.
fn check_redirect_target(args: &BenchArgs) -> Result<()> {
    let redirect = args.kind == Some(Kind::XdpRedirect);
    if args.src_port.is_some() && args.kind != Some(Kind::XdpDrop) {
        bail!("--src-port is for xdp-drop (the UDP source port it drops)");
    }
    if args.src_port.is_some() && args.port.interface.is_none() {
        bail!("xdp-drop --src-port runs on your interface: -i IFACE --src-port PORT");
    }
    match (&args.to, redirect, &args.port.interface) {
        (Some(_), false, _) => bail!("--to is for xdp-redirect (the interface it redirects to)"),
        (None, true, _) => {
            bail!("xdp-redirect needs --to IFACE: the interface every packet is redirected to")
        }
        (Some(_), true, None) => bail!(
            "xdp-redirect runs on your interfaces: -i IN --to OUT (the testbed table measures \
             it beside fwd --xdp-forward)"
        ),
        _ => Ok(()),
    }
}

/// A benchmark on the user's interface.
struct OnInterface<'a> {
    args: &'a BenchArgs,
    ifname: &'a str,
    /// "IF:QUEUE KIND", the lines' prefix.
    label: String,
    stop: Arc<AtomicBool>,
    times: crate::opts::RunTimes,
    /// The socket's configuration for the ring loops.
    config: xskit::PortConfig,
}

impl OnInterface<'_> {
    fn meter(&self, what: &str, every: u32) -> Result<Meter> {
        let meter = Meter::new(
            self.label.clone(),
            self.args,
            self.times,
            self.stop.clone(),
            every,
        )?;
        meter.live.announce(&format!("{} {what}", self.label));
        Ok(meter)
    }

    /// rxdrop, txpush or l2fwd on an AF_XDP socket, with the kernel's statistics.
    fn ring_loop(&self, kind: Kind) -> Result<BenchResult> {
        let (args, ifname, queue) = (self.args, self.ifname, self.args.port.queue);
        let mut port = Port::open(ifname, queue, &self.config)
            .with_context(|| format!("opening {ifname} queue {queue}"))?;
        let mut meter = self.meter(&port.mode().to_string(), CLOCK_ROUNDS)?;
        crate::opts::note_caveats("bench", port.mode());
        let (rx, tx, empty) = match kind {
            Kind::Rxdrop => rxdrop(&mut port, args, &mut meter)?,
            Kind::Txpush => txpush(&mut port, args, ifname, &mut meter)?,
            _ => l2fwd(&mut port, args, &mut meter)?,
        };
        let stats = port.statistics()?;
        let wakeups = port.socket().tx().map_or(0, |t| t.wakeups())
            + port.socket().fill().map_or(0, |f| f.wakeups());
        let result = meter.result(kind, port.mode().to_string(), ifname, queue, rx, tx);
        Ok(with_stats(result, &stats, empty, wakeups))
    }

    /// The AF_PACKET baseline's receive side: a TPACKET_V3 ring.
    fn afpacket_rx(&self) -> Result<BenchResult> {
        let iface = Interface::by_name(self.ifname)?;
        let mut ring = PacketRxRing::open(iface.index()).context("opening the TPACKET_V3 ring")?;
        let mut meter = self.meter("tpacket-v3", 1)?;
        let mut rx = 0;
        loop {
            rx += ring.receive(Some(Duration::from_millis(100)), |_| {})?;
            match meter.round(rx) {
                Next::Stop => break,
                Next::Line => meter.line(rx, 0, None, 0, 0),
                Next::Go => {}
            }
        }
        let queue = self.args.port.queue;
        Ok(meter.result(
            Kind::AfpacketRx,
            "tpacket-v3".into(),
            self.ifname,
            queue,
            rx,
            0,
        ))
    }

    /// The AF_PACKET baseline's transmit side: sendmmsg with the qdisc bypassed.
    fn afpacket_tx(&self) -> Result<BenchResult> {
        let args = self.args;
        let iface = Interface::by_name(self.ifname)?;
        let tx_sock = PacketTx::open(iface.index()).context("opening the AF_PACKET socket")?;
        let frame = probe_frame(&iface, args.size, parse_mac(&args.dst_mac)?)?;
        let mut meter = self.meter("sendmmsg", 1)?;
        let mut tx = 0;
        loop {
            tx += tx_sock.send_copies(&frame, args.port.batch)? as u64;
            match meter.round(tx) {
                Next::Stop => break,
                Next::Line => meter.line(0, tx, None, 0, 0),
                Next::Go => {}
            }
        }
        let queue = args.port.queue;
        Ok(meter.result(
            Kind::AfpacketTx,
            "sendmmsg".into(),
            self.ifname,
            queue,
            0,
            tx,
        ))
    }

    /// The kernel's ceilings: an XDP program that counts and drops, or sends back (XDP_TX).
    fn xdp_counter(&self, kind: Kind) -> Result<BenchResult> {
        let iface = Interface::by_name(self.ifname)?;
        let mode = self.args.port.mode();
        let counter = match (kind, &self.args.to, self.args.src_port) {
            (Kind::XdpTx, _, _) => XdpCounter::reflect_all(&iface, mode)?,
            (Kind::XdpDrop, _, Some(port)) => XdpCounter::drop_udp_from(&iface, mode, port)?,
            (Kind::XdpRedirect, Some(to), _) => {
                let out = Interface::by_name(to).with_context(|| format!("--to {to}"))?;
                XdpCounter::redirect_all(&iface, &out, mode)?
            }
            _ => XdpCounter::drop_all(&iface, mode, false)?,
        };
        let mut meter = self.meter(&counter.mode().to_string(), 1)?;
        // XDP_TX and redirects send on what they count; a full transmit queue drops there,
        // uncounted here (the device's statistics have it).
        let forwards = matches!(kind, Kind::XdpTx | Kind::XdpRedirect);
        let sent = |rx: u64| if forwards { rx } else { 0 };
        let rx = loop {
            std::thread::sleep(Duration::from_millis(20));
            let rx = counter.packets()?;
            match meter.round(rx) {
                Next::Stop => break rx,
                Next::Line => meter.line(rx, sent(rx), None, 0, 0),
                Next::Go => {}
            }
        };
        let (ifname, queue) = (self.ifname, self.args.port.queue);
        Ok(meter.result(
            kind,
            counter.mode().to_string(),
            ifname,
            queue,
            rx,
            sent(rx),
        ))
    }
}

/// What a benchmark that takes no interface says when given one.
fn testbed_only(kind: Kind) -> &'static str {
    match kind {
        Kind::Plot => "bench plot measures nothing: run it without -i",
        Kind::Pipeline => "bench pipeline runs in memory: run it without -i",
        Kind::Bond => "bench bond builds its own testbed: run it without -i",
        _ => "bench fwd builds its own testbed: run it without -i (`xskit fwd -i A -i B` prints the rates of a forwarder on your interfaces)",
    }
}

/// The checks of a file argument and of live outputs, which apply with and without -i.
fn check_files_and_outputs(args: &BenchArgs) -> Result<()> {
    if let Some(results) = &args.results {
        if args.kind != Some(Kind::Plot) {
            bail!(
                "{} is for bench plot (xskit bench plot RESULTS.json); bench {} takes no file",
                results.display(),
                args.kind.map_or("", Kind::name)
            );
        }
    }
    if matches!(args.kind, Some(Kind::Pipeline | Kind::Bond))
        && (args.run.json_lines || args.run.metrics.is_some())
    {
        bail!(
            "--json-lines and --metrics show a benchmark while it runs on an interface (-i) or \
             the testbed table; bench {} prints its result at the end (--json)",
            args.kind.map_or("", Kind::name)
        );
    }
    Ok(())
}

/// The benchmarks without -i, from the `xskit-bench` harness.
#[cfg(feature = "bench-harness")]
fn on_testbed(args: &BenchArgs) -> Result<i32> {
    match args.kind {
        Some(Kind::Plot) => harness::plot(args),
        Some(Kind::Pipeline) => harness::pipeline(args),
        Some(Kind::Bond) => harness::bond(args),
        _ => harness::table(args),
    }
}

/// Without the harness, the benchmarks without -i say how to get it.
#[cfg(not(feature = "bench-harness"))]
fn on_testbed(args: &BenchArgs) -> Result<i32> {
    bail!("{}", harness_missing(args.kind))
}

/// Why a benchmark without -i cannot run in a build without the harness, and what to do.
#[cfg_attr(feature = "bench-harness", allow(dead_code))]
fn harness_missing(kind: Option<Kind>) -> String {
    let what = match kind {
        None => "the testbed table".to_string(),
        Some(kind)
            if !matches!(kind, Kind::Pipeline | Kind::Bond | Kind::Plot)
                && !kind.in_testbed_table() =>
        {
            return not_in_table(kind);
        }
        Some(kind) => format!("bench {}", kind.name()),
    };
    format!(
        "{what} comes with the benchmark harness, which this xskit was built without: build \
         it with `cargo install --locked --path crates/xskit-cli --features bench-harness` (or run \
         `sudo bash scripts/setup.sh bench`); on your own interface, `xskit bench KIND -i IF` \
         needs no harness"
    )
}

/// Why `kind` cannot run without -i, with the harness or without it.
pub(crate) fn not_in_table(kind: Kind) -> String {
    format!(
        "bench {} is not in the testbed table: run it on an interface (-i IF)",
        kind.name()
    )
}

/// The header: stdout normally, stderr under --json (a driver waits for it as "ready").
fn probe_frame(iface: &Interface, size: usize, dst_mac: [u8; 6]) -> Result<Vec<u8>> {
    probe_frame_from(
        iface.link_info()?.mac.unwrap_or([2, 0, 0, 0, 0, 1]),
        size,
        dst_mac,
    )
}

/// The frame a sending benchmark sends, from `src_mac`.
fn probe_frame_from(src_mac: [u8; 6], size: usize, dst_mac: [u8; 6]) -> Result<Vec<u8>> {
    let addrs = ProbeAddrs {
        src_mac,
        dst_mac,
        src_ip: [198, 51, 100, 1],
        dst_ip: [198, 51, 100, 2],
    };
    let template = addrs.template(size)?;
    let mut frame = vec![0u8; size];
    template
        .write(&mut frame, 0, 0)
        .context("building the frame")?;
    Ok(frame)
}

// bench/callgrind.sh counts the loop by its name: it must stay a function of its own.
#[inline(never)]
fn rxdrop(port: &mut Port, args: &BenchArgs, meter: &mut Meter) -> Result<(u64, u64, u64)> {
    let (mut rx, mut empty) = (0u64, 0u64);
    loop {
        // Received frames go straight back to the fill ring: no handle is made for them.
        let n = port.drop_received(args.port.batch)?;
        if n == 0 {
            empty += 1;
            if args.idle_polls.is_some_and(|most| empty >= most) {
                break;
            }
            if args.port.poll {
                port.socket()
                    .poll(true, false, Some(Duration::from_millis(100)))?;
            }
        }
        rx += n as u64;
        match meter.round(rx) {
            Next::Stop => break,
            Next::Line => {
                let s = port.statistics().ok();
                meter.line(rx, 0, s, empty, 0);
            }
            Next::Go => {}
        }
    }
    Ok((rx, 0, empty))
}

// bench/callgrind.sh counts the loop by its name: it must stay a function of its own.
#[inline(never)]
fn txpush(
    port: &mut Port,
    args: &BenchArgs,
    ifname: &str,
    meter: &mut Meter,
) -> Result<(u64, u64, u64)> {
    let umem = port.umem().clone();
    let frame = probe_frame(
        &Interface::by_name(ifname)?,
        args.size,
        parse_mac(&args.dst_mac)?,
    )?;
    if frame.len() > umem.room() {
        bail!("txpush sends single-frame packets: use a packet size up to the frame size");
    }
    // Write every frame once, as xdpsock does; the loop puts them on the tx ring, then sends
    // each again as the kernel hands it back.
    // No more frames circulate than the completion ring holds: the kernel sends only what it
    // has room to complete.
    let circulating = port.socket().completion().map_or(0, |c| c.size() as usize);
    let mut unsent = Vec::new();
    port.alloc(&mut unsent, circulating);
    for f in unsent.iter_mut() {
        umem.write(f, &frame)?;
    }
    let (mut done, mut empty, mut in_flight) = (0u64, 0u64, 0u64);
    loop {
        if !unsent.is_empty() {
            if let Some(tx) = port.socket().tx() {
                in_flight += tx.send(&mut unsent, args.port.batch) as u64;
            }
        }
        let n = port.resend(args.port.batch, frame.len())?;
        if n == 0 {
            empty += 1;
        }
        done += n as u64;
        match meter.round(done) {
            Next::Stop => break,
            Next::Line => {
                let s = port.statistics().ok();
                let wakeups = port.socket().tx().map_or(0, |t| t.wakeups());
                meter.line(0, done, s, empty, wakeups);
            }
            Next::Go => {}
        }
    }
    port.recycle(&mut unsent);
    // Frames still circulating leave after the window: they count, the rate does not change.
    done += finish_circulating(port, in_flight)?;
    Ok((0, done, empty))
}

/// Waits up to a second for `in_flight` frames sent outside the port's own count to
/// complete (kicking the kernel where it asks); returns how many did.
fn finish_circulating(port: &mut Port, in_flight: u64) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut completed = 0u64;
    while completed < in_flight && Instant::now() < deadline {
        if let Some(tx) = port.socket().tx() {
            tx.wakeup_if_needed()?;
        }
        completed += port.complete() as u64;
    }
    Ok(completed)
}

/// Swaps a frame's destination and source MAC addresses (a frame too short is left alone).
#[inline]
fn swap_macs(bytes: &mut [u8]) {
    if let Some((dst, rest)) = bytes.split_first_chunk_mut::<6>() {
        if let Some(src) = rest.first_chunk_mut::<6>() {
            std::mem::swap(dst, src);
        }
    }
}

// bench/callgrind.sh counts the loop by its name: it must stay a function of its own.
#[inline(never)]
fn l2fwd(port: &mut Port, args: &BenchArgs, meter: &mut Meter) -> Result<(u64, u64, u64)> {
    let (mut rx, mut empty) = (0u64, 0u64);
    loop {
        // Received frames go straight onto the tx ring, their MACs swapped; sent ones back to
        // the fill ring.
        let n = port.reflect(args.port.batch, swap_macs)?;
        if n == 0 {
            empty += 1;
            if args.idle_polls.is_some_and(|most| empty >= most) {
                break;
            }
        }
        rx += n as u64;
        match meter.round(rx) {
            Next::Stop => break,
            Next::Line => {
                let s = port.statistics().ok();
                let wakeups = port.socket().tx().map_or(0, |t| t.wakeups());
                let done = rx - port.tx_in_flight() as u64;
                meter.line(rx, done, s, empty, wakeups);
            }
            Next::Go => {}
        }
    }
    let left = port.finish_sending(Duration::from_secs(1))?;
    Ok((rx, rx - left as u64, empty))
}
