//! `xskit recv`: receive probe traffic (from `xskit gen`) and report loss, reordering, damage
//! and one-way latency.

use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use serde::Serialize;
use xskit::clock::monotonic_ns;
use xskit::Port;
use xskit_traffic::probe::SequenceCheck;

use crate::gen::stats_json;
use crate::opts::{stop_flag, stopped, thousands, PortArgs, RunArgs};

#[derive(Args, Debug)]
pub(crate) struct RecvArgs {
    #[command(flatten)]
    port: PortArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Stop after this many probes.
    #[arg(short = 'n', long)]
    count: Option<u64>,
    /// Multi-buffer: accept packets larger than a frame as frame chains.
    #[arg(short = 'F', long)]
    frags: bool,
    /// The sender sends this many probes (sequence 0 to N-1): every one missing at the end
    /// counts as lost, probes numbered N or above count as foreign, and the exit status is 1
    /// if more are lost than --max-loss allows or any is corrupt. Stops after N probes unless
    /// -n says otherwise.
    #[arg(long, value_name = "N")]
    expect: Option<u64>,
    /// Loss allowed before the exit status is 1: a count (`10`) or a share of the probes
    /// expected (`0.5%`). [default: 0 with --expect]
    #[arg(long = "max-loss", value_name = "N|P%")]
    max_loss: Option<String>,
    /// Also write every packet received (whole, chains gathered) to FILE, as pcap.
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    write: Option<std::path::PathBuf>,
}

/// The loss allowed by `--max-loss` for a stream of `expected` probes (or of the span seen).
fn allowed_loss(spec: Option<&str>, expected: u64) -> Result<u64> {
    let Some(spec) = spec else { return Ok(0) };
    let bad = || anyhow::anyhow!("--max-loss {spec:?} is not a count (10) or a share (0.5%)");
    match spec.strip_suffix('%') {
        Some(p) => {
            let p: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(0.0..=100.0).contains(&p) {
                return Err(bad());
            }
            Ok((expected as f64 * p / 100.0).floor() as u64)
        }
        None => spec.trim().parse().map_err(|_| bad()),
    }
}

#[derive(Serialize)]
struct RecvReport {
    command: &'static str,
    interface: String,
    queue: u32,
    mode: String,
    duration_s: f64,
    rx_packets: u64,
    rx_pps: f64,
    valid: u64,
    corrupt: u64,
    out_of_order: u64,
    lost: u64,
    foreign: u64,
    latency_min_us: Option<f64>,
    latency_mean_us: Option<f64>,
    latency_max_us: Option<f64>,
    statistics: serde_json::Value,
}

pub(crate) fn run(args: &RecvArgs) -> Result<i32> {
    crate::opts::all_mistakes([
        crate::opts::interface_exists(args.port.interface()),
        args.run.duration().map(|_| ()),
        args.run.interval().map(|_| ()),
        match args.expect {
            Some(0) => Err(anyhow::anyhow!("--expect 0: expect at least one probe")),
            _ => Ok(()),
        },
        allowed_loss(args.max_loss.as_deref(), 0).map(|_| ()),
    ])?;
    let ifname = args.port.interface()?.to_string();
    let duration = args.run.duration()?;
    let interval = args.run.interval()?;
    if args.expect == Some(0) {
        anyhow::bail!("--expect 0: expect at least one probe");
    }
    allowed_loss(args.max_loss.as_deref(), 0)?;
    let config = args.port.config(args.frags, false)?;
    let port = Port::open(&ifname, args.port.queue, &config).map_err(|e| {
        let flag = match e {
            xskit::Error::MtuNeedsMultiBuffer { .. } => " (multi-buffer is --frags)",
            _ => "",
        };
        anyhow::Error::new(e).context(format!("opening {ifname} queue {}{flag}", args.port.queue))
    })?;
    let stop = stop_flag()?;
    let live = args.run.live("recv")?;
    let mut rx = Receiver::new(args, port)?;
    let start = Instant::now();
    let (mut tick, mut at_tick) = (start, 0u64);
    let limit = args.count.or(args.expect).unwrap_or(u64::MAX);
    // The header goes to stderr under --json, so a driver can wait for readiness and still
    // read one JSON object from stdout.
    live.announce(&format!(
        "{ifname}:{} recv {}",
        args.port.queue,
        rx.port.mode()
    ));
    while !stopped(&stop) && rx.check.probes() < limit {
        let now = Instant::now();
        if duration.is_some_and(|d| now - start >= d) {
            break;
        }
        rx.take_vector(args)?;
        if now - tick >= interval {
            rx.show(args, &ifname, &live, now - tick, rx.packets - at_tick);
            tick = now;
            at_tick = rx.packets;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(c) = rx.capture.take() {
        c.finish()?;
    }
    let stats = rx.port.statistics()?;
    let report = rx.report(args, ifname, elapsed, &stats);
    if args.run.json_output() {
        crate::opts::print_json("recv", &report)?;
    } else {
        out!(
            "received {} packets: {} valid, {} corrupt, {} out of order, {} lost, {} other; latency us min/mean/max {:.1}/{:.1}/{:.1}; kernel {}",
            thousands(report.rx_packets),
            report.valid,
            report.corrupt,
            report.out_of_order,
            report.lost,
            report.foreign,
            report.latency_min_us.unwrap_or(0.0),
            report.latency_mean_us.unwrap_or(0.0),
            report.latency_max_us.unwrap_or(0.0),
            stats
        );
    }
    exit_status(args, &report)
}

/// The receiving side: the port, what it checks the probes with, and the capture.
struct Receiver {
    port: Port,
    umem: xskit::Umem,
    frames: Vec<xskit::Frame>,
    /// The start of a chain cut by the end of the last receive.
    packet: Vec<u8>,
    check: SequenceCheck,
    capture: Option<xskit_pipeline::PcapSink>,
    packets: u64,
}

impl Receiver {
    fn new(args: &RecvArgs, port: Port) -> Result<Receiver> {
        Ok(Receiver {
            umem: port.umem().clone(),
            port,
            frames: Vec::with_capacity(args.port.batch),
            packet: Vec::new(),
            check: match args.expect {
                Some(n) => SequenceCheck::expecting(n),
                None => SequenceCheck::default(),
            },
            capture: args
                .write
                .as_ref()
                .map(xskit_pipeline::PcapSink::create)
                .transpose()?,
            packets: 0,
        })
    }

    /// Receives a vector (waiting in poll(2) with --poll), checks and captures its packets.
    fn take_vector(&mut self, args: &RecvArgs) -> Result<()> {
        let n = if args.port.poll {
            let wait = Some(Duration::from_millis(100));
            self.port
                .poll_receive(&mut self.frames, args.port.batch, wait)?
        } else {
            self.port.receive(&mut self.frames, args.port.batch)?
        };
        if n == 0 {
            return Ok(());
        }
        let stamp = monotonic_ns();
        // The wall clock only where a capture records it.
        let wall = self.capture.as_ref().map_or(Duration::ZERO, |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
        });
        let mut chains = xskit::packets(&self.frames);
        for chain in chains.by_ref() {
            let data = match chain {
                [single] if self.packet.is_empty() => self.umem.data(single),
                _ => {
                    self.umem.gather(chain, &mut self.packet);
                    &self.packet
                }
            };
            self.check.observe_at(data, Some(stamp));
            if let Some(c) = self.capture.as_mut() {
                c.write(wall, data)?;
            }
            self.packet.clear();
            self.packets += 1;
        }
        self.umem.gather(chains.remainder(), &mut self.packet);
        self.port.recycle(&mut self.frames);
        Ok(())
    }

    /// The interval's line (text output) and the live counters.
    fn show(
        &self,
        args: &RecvArgs,
        ifname: &str,
        live: &crate::opts::Live,
        since: Duration,
        new_packets: u64,
    ) {
        let check = &self.check;
        if !args.run.json_output() {
            out!(
                "{ifname}:{}  rx {:>12} pps  total {:>14}  lost {}  corrupt {}",
                args.port.queue,
                thousands((new_packets as f64 / since.as_secs_f64()) as u64),
                thousands(self.packets),
                check.lost(),
                check.corrupt
            );
        }
        live.tick(&serde_json::json!({
            "ports": [{
                "interface": ifname,
                "queue": args.port.queue,
                "rx_packets": self.packets,
                "valid": check.valid,
                "corrupt": check.corrupt,
                "out_of_order": check.out_of_order,
                "foreign": check.foreign,
                "statistics": self.port.statistics().ok().as_ref().map(stats_json),
            }]
        }));
    }

    fn report(
        &self,
        args: &RecvArgs,
        interface: String,
        elapsed: f64,
        stats: &xskit::Statistics,
    ) -> RecvReport {
        let (check, packets) = (&self.check, self.packets);
        let us = |ns: u64| ns as f64 / 1000.0;
        RecvReport {
            command: "recv",
            interface,
            queue: args.port.queue,
            mode: self.port.mode().to_string(),
            duration_s: elapsed,
            rx_packets: packets,
            rx_pps: packets as f64 / elapsed.max(1e-9),
            valid: check.valid,
            corrupt: check.corrupt,
            out_of_order: check.out_of_order,
            lost: check.lost(),
            foreign: check.foreign,
            latency_min_us: (check.valid > 0).then(|| us(check.latency_min_ns)),
            latency_mean_us: check.latency_mean_ns().map(us),
            latency_max_us: (check.valid > 0).then(|| us(check.latency_max_ns)),
            statistics: stats_json(stats),
        }
    }
}

/// 1 when --expect or --max-loss was given and more were lost (or any corrupt) than allowed.
fn exit_status(args: &RecvArgs, report: &RecvReport) -> Result<i32> {
    if args.expect.is_some() || args.max_loss.is_some() {
        let span = args.expect.unwrap_or(report.valid + report.lost);
        let allowed = allowed_loss(args.max_loss.as_deref(), span)?;
        if report.lost > allowed || report.corrupt > 0 {
            note!(
                "xskit recv: {} lost (at most {} allowed) and {} corrupt of {} probes expected",
                thousands(report.lost),
                thousands(allowed),
                thousands(report.corrupt),
                thousands(span)
            );
            return Ok(1);
        }
    }
    Ok(0)
}
