//! `xskit bench`: the xdpsock benchmarks (rxdrop, txpush, l2fwd), the AF_PACKET baselines and
//! the XDP_DROP ceiling on one interface; with no interface, all of them on a testbed, as the
//! table of seed 000.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use xskit::baseline::{PacketRxRing, PacketTx};
use xskit::clock::process_cpu_ns;
use xskit::probe::ProbeAddrs;
use xskit::{AttachMode, Interface, Mode, Port, Statistics, XdpDropCounter};
use xskit_wire::ethernet;

use crate::opts::{announce, parse_mac, stop_flag, stopped, thousands, PortArgs, RunArgs};

mod pipeline;
mod table;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// Receive and drop (recycle every frame to the fill ring).
    Rxdrop,
    /// Transmit pre-built frames as fast as possible.
    Txpush,
    /// Receive, swap MACs, send back on the same socket.
    L2fwd,
    /// Baseline: AF_PACKET TPACKET_V3 receive ring.
    AfpacketRx,
    /// Baseline: AF_PACKET sendmmsg with qdisc bypass.
    AfpacketTx,
    /// Kernel ceiling: an XDP program that counts and drops.
    XdpDrop,
    /// In memory, no interface: verdict mixes through the pipeline, pool against per-packet
    /// allocation (seed 003).
    Pipeline,
    /// Testbed only: `xskit fwd` between two namespaces, against the kernel's bridge.
    Fwd,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Rxdrop => "rxdrop",
            Kind::Txpush => "txpush",
            Kind::L2fwd => "l2fwd",
            Kind::AfpacketRx => "afpacket-rx",
            Kind::AfpacketTx => "afpacket-tx",
            Kind::XdpDrop => "xdp-drop",
            Kind::Pipeline => "pipeline",
            Kind::Fwd => "fwd",
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    /// What to measure. Without -i: every benchmark on a testbed, as a table.
    kind: Option<Kind>,
    #[command(flatten)]
    port: PortArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Frame size for txpush and afpacket-tx (and the generator in testbed mode).
    #[arg(short = 's', long = "packet-size", default_value_t = 64)]
    size: usize,
    /// Destination MAC of txpush and afpacket-tx frames. The default is a unicast address no
    /// host owns, so the receiving side drops frames at layer 2, as xdpsock and testpmd do.
    #[arg(long, default_value = "02:00:00:00:00:00")]
    dst_mac: String,
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
}

/// One measurement, as printed by `--json`.
#[derive(Serialize, serde::Deserialize, Default, Clone, Debug)]
pub(crate) struct BenchResult {
    pub(crate) bench: String,
    pub(crate) mode: String,
    pub(crate) interface: String,
    pub(crate) queue: u32,
    pub(crate) duration_s: f64,
    pub(crate) rx_pps: f64,
    pub(crate) tx_pps: f64,
    pub(crate) rx_packets: u64,
    pub(crate) tx_packets: u64,
    pub(crate) cpu_ns_per_packet: f64,
    pub(crate) rx_dropped: u64,
    pub(crate) rx_invalid_descs: u64,
    pub(crate) tx_invalid_descs: u64,
    pub(crate) rx_ring_full: u64,
    pub(crate) rx_fill_ring_empty_descs: u64,
    pub(crate) tx_ring_empty_descs: u64,
    pub(crate) empty_polls: u64,
    pub(crate) wakeups: u64,
}

/// Counts and prints one line per interval.
struct Meter {
    label: String,
    interval: Duration,
    start: Instant,
    /// When traffic was first seen: rates are measured from here, so the time before an
    /// external generator starts does not count (testpmd and xdpsock measure the same way).
    first: Option<Instant>,
    tick: Instant,
    last: (u64, u64),
    quiet: bool,
    extra: bool,
    cpu_start: u64,
}

impl Meter {
    fn new(label: String, interval: Duration, quiet: bool, extra: bool) -> Self {
        let now = Instant::now();
        Meter {
            label,
            interval,
            start: now,
            first: None,
            tick: now,
            last: (0, 0),
            quiet,
            extra,
            cpu_start: process_cpu_ns(),
        }
    }

    /// Checks the interval, and notes when traffic first appeared.
    fn due(&mut self, packets: u64) -> bool {
        if self.first.is_none() && packets > 0 {
            self.first = Some(Instant::now());
        }
        self.tick.elapsed() >= self.interval
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
                thousands(((rx - self.last.0) as f64 / secs) as u64),
                thousands(((tx - self.last.1) as f64 / secs) as u64),
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
        self.tick = Instant::now();
        self.last = (rx, tx);
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
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let packets = if matches!(kind, Kind::Txpush | Kind::AfpacketTx) {
            tx
        } else {
            rx
        };
        BenchResult {
            bench: kind.name().into(),
            mode,
            interface: iface.into(),
            queue,
            duration_s: secs,
            rx_pps: rx as f64 / secs,
            tx_pps: tx as f64 / secs,
            rx_packets: rx,
            tx_packets: tx,
            cpu_ns_per_packet: (process_cpu_ns() - self.cpu_start) as f64 / packets.max(1) as f64,
            ..BenchResult::default()
        }
    }
}

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
    if args.kind == Some(Kind::Pipeline) {
        return pipeline::run(args.runs, args.packets, args.run.json);
    }
    let Some(ifname) = args.port.interface.clone() else {
        return table::run(args);
    };
    let Some(kind) = args.kind else {
        bail!("say which benchmark to run on {ifname}: rxdrop, txpush, l2fwd, afpacket-rx, afpacket-tx or xdp-drop");
    };
    if kind == Kind::Fwd {
        bail!("bench fwd builds its own testbed: run it without -i (`xskit fwd -i A -i B` prints the rates of a forwarder on your interfaces)");
    }
    let duration = args.run.duration()?;
    let interval = args.run.interval()?;
    let stop = stop_flag()?;
    let deadline = duration.map(|d| Instant::now() + d);
    let running = || !stopped(&stop) && deadline.is_none_or(|d| Instant::now() < d);
    let queue = args.port.queue;
    let label = format!("{ifname}:{queue} {}", kind.name());
    let result = match kind {
        Kind::Pipeline | Kind::Fwd => bail!("{} does not run on an interface", kind.name()),
        Kind::Rxdrop | Kind::Txpush | Kind::L2fwd => {
            let config = args.port.config(false, false)?;
            let mut port = Port::open(&ifname, queue, &config)
                .with_context(|| format!("opening {ifname} queue {queue}"))?;
            announce(args.run.json, &format!("{label} {}", port.mode()));
            let mut meter = Meter::new(label, interval, args.run.json, args.extra);
            let (rx, tx, empty) = match kind {
                Kind::Rxdrop => rxdrop(&mut port, args, &mut meter, &running)?,
                Kind::Txpush => txpush(&mut port, args, &ifname, &mut meter, &running)?,
                _ => l2fwd(&mut port, args, &mut meter, &running)?,
            };
            let stats = port.statistics()?;
            let wakeups = port.socket().tx().map_or(0, |t| t.wakeups())
                + port.socket().fill().map_or(0, |f| f.wakeups());
            with_stats(
                meter.result(kind, port.mode().to_string(), &ifname, queue, rx, tx),
                &stats,
                empty,
                wakeups,
            )
        }
        Kind::AfpacketRx => {
            let iface = Interface::by_name(&ifname)?;
            let mut ring =
                PacketRxRing::open(iface.index()).context("opening the TPACKET_V3 ring")?;
            announce(args.run.json, &format!("{label} tpacket-v3"));
            let mut meter = Meter::new(label, interval, args.run.json, args.extra);
            let mut rx = 0;
            while running() {
                rx += ring.receive(100, |_| {})?;
                if meter.due(rx) {
                    meter.line(rx, 0, None, 0, 0);
                }
            }
            meter.result(kind, "tpacket-v3".into(), &ifname, queue, rx, 0)
        }
        Kind::AfpacketTx => {
            let iface = Interface::by_name(&ifname)?;
            let tx_sock = PacketTx::open(iface.index()).context("opening the AF_PACKET socket")?;
            let frame = probe_frame(&iface, args.size, parse_mac(&args.dst_mac)?)?;
            announce(args.run.json, &format!("{label} sendmmsg"));
            let mut meter = Meter::new(label, interval, args.run.json, args.extra);
            let mut tx = 0;
            while running() {
                tx += tx_sock.send_copies(&frame, args.port.batch)? as u64;
                if meter.due(tx) {
                    meter.line(0, tx, None, 0, 0);
                }
            }
            meter.result(kind, "sendmmsg".into(), &ifname, queue, 0, tx)
        }
        Kind::XdpDrop => {
            let iface = Interface::by_name(&ifname)?;
            let attach = match args.port.mode()? {
                Mode::Skb => AttachMode::Skb,
                Mode::Drv | Mode::ZeroCopy => AttachMode::Drv,
                Mode::Auto => AttachMode::Auto,
            };
            let counter = XdpDropCounter::attach(&iface, attach, false)?;
            announce(args.run.json, &format!("{label} {}", counter.mode()));
            let mut meter = Meter::new(label, interval, args.run.json, args.extra);
            let mut rx = 0;
            while running() {
                std::thread::sleep(Duration::from_millis(20));
                rx = counter.dropped()?;
                if meter.due(rx) {
                    meter.line(rx, 0, None, 0, 0);
                }
            }
            meter.result(kind, counter.mode().to_string(), &ifname, queue, rx, 0)
        }
    };
    if args.run.json {
        out!("{}", serde_json::to_string(&result)?);
    } else {
        out!(
            "{} {}: rx {} pps, tx {} pps over {:.2} s; {:.0} ns CPU per packet",
            result.bench,
            result.mode,
            thousands(result.rx_pps as u64),
            thousands(result.tx_pps as u64),
            result.duration_s,
            result.cpu_ns_per_packet
        );
    }
    Ok(0)
}

/// The header: stdout normally, stderr under --json (a driver waits for it as "ready").
fn probe_frame(iface: &Interface, size: usize, dst_mac: [u8; 6]) -> Result<Vec<u8>> {
    let addrs = ProbeAddrs {
        src_mac: iface.link_info()?.mac.unwrap_or([2, 0, 0, 0, 0, 1]),
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

fn rxdrop(
    port: &mut Port,
    args: &BenchArgs,
    meter: &mut Meter,
    running: &dyn Fn() -> bool,
) -> Result<(u64, u64, u64)> {
    let mut frames = Vec::with_capacity(args.port.batch);
    let (mut rx, mut empty) = (0u64, 0u64);
    while running() {
        let n = if args.port.poll {
            port.poll_receive(&mut frames, args.port.batch, 100)?
        } else {
            port.receive(&mut frames, args.port.batch)?
        };
        if n == 0 {
            empty += 1;
        } else {
            rx += n as u64;
            port.recycle(&mut frames);
        }
        if meter.due(rx) {
            let s = port.statistics().ok();
            meter.line(rx, 0, s, empty, 0);
        }
    }
    Ok((rx, 0, empty))
}

fn txpush(
    port: &mut Port,
    args: &BenchArgs,
    ifname: &str,
    meter: &mut Meter,
    running: &dyn Fn() -> bool,
) -> Result<(u64, u64, u64)> {
    let umem = port.umem().clone();
    let frame = probe_frame(
        &Interface::by_name(ifname)?,
        args.size,
        parse_mac(&args.dst_mac)?,
    )?;
    if frame.len() > umem.config().frame_size as usize {
        bail!("txpush sends single-frame packets: use a packet size up to the frame size");
    }
    // Write every frame once, as xdpsock does; the loop then only sets lengths and submits.
    let mut all = Vec::new();
    port.alloc(&mut all, usize::MAX);
    for f in all.iter_mut() {
        umem.write(f, &frame)?;
    }
    port.recycle(&mut all);
    let mut batch = Vec::with_capacity(args.port.batch);
    let (mut submitted, mut empty) = (0u64, 0u64);
    while running() {
        if batch.is_empty() {
            port.alloc(&mut batch, args.port.batch);
            for f in batch.iter_mut() {
                umem.set_len(f, frame.len())?;
            }
        }
        let n = port.send(&mut batch)?;
        if n == 0 {
            empty += 1;
        }
        submitted += n as u64;
        if meter.due(submitted) {
            let done = submitted - port.tx_in_flight() as u64;
            let s = port.statistics().ok();
            let wakeups = port.socket().tx().map_or(0, |t| t.wakeups());
            meter.line(0, done, s, empty, wakeups);
        }
    }
    port.recycle(&mut batch);
    Ok((0, submitted - port.tx_in_flight() as u64, empty))
}

fn l2fwd(
    port: &mut Port,
    args: &BenchArgs,
    meter: &mut Meter,
    running: &dyn Fn() -> bool,
) -> Result<(u64, u64, u64)> {
    let umem = port.umem().clone();
    let mut frames = Vec::with_capacity(args.port.batch * 2);
    let (mut rx, mut submitted, mut empty) = (0u64, 0u64, 0u64);
    while running() {
        let before = frames.len();
        let n = port.receive(&mut frames, args.port.batch)?;
        if n == 0 && before == 0 {
            empty += 1;
            port.complete();
        }
        for f in frames[before..].iter_mut() {
            if let Ok(mut eth) = ethernet::Frame::new_checked(umem.data_mut(f)) {
                eth.swap_addrs();
            }
        }
        rx += n as u64;
        submitted += port.send(&mut frames)? as u64;
        if meter.due(rx) {
            let done = submitted - port.tx_in_flight() as u64;
            let s = port.statistics().ok();
            let wakeups = port.socket().tx().map_or(0, |t| t.wakeups());
            meter.line(rx, done, s, empty, wakeups);
        }
    }
    port.recycle(&mut frames);
    Ok((rx, submitted - port.tx_in_flight() as u64, empty))
}
