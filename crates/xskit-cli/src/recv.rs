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
    /// expected (`0.5%`). Default 0 with --expect.
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
    let ifname = args.port.interface()?.to_string();
    let duration = args.run.duration()?;
    let interval = args.run.interval()?;
    let config = args.port.config(args.frags, false)?;
    let mut port = Port::open(&ifname, args.port.queue, &config).map_err(|e| {
        let flag = match e {
            xskit::Error::MtuNeedsMultiBuffer { .. } => " (multi-buffer is --frags)",
            _ => "",
        };
        anyhow::Error::new(e).context(format!("opening {ifname} queue {}{flag}", args.port.queue))
    })?;
    let stop = stop_flag()?;
    let live = args.run.live("recv")?;
    let umem = port.umem().clone();
    let mut frames = Vec::with_capacity(args.port.batch);
    let mut packet = Vec::new();
    if args.expect == Some(0) {
        anyhow::bail!("--expect 0: expect at least one probe");
    }
    allowed_loss(args.max_loss.as_deref(), 0)?;
    let mut check = match args.expect {
        Some(n) => SequenceCheck::expecting(n),
        None => SequenceCheck::default(),
    };
    let mut capture = args
        .write
        .as_ref()
        .map(xskit_pipeline::PcapSink::create)
        .transpose()?;
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
    };
    let mut packets = 0u64;
    let start = Instant::now();
    let (mut tick, mut at_tick) = (start, 0u64);
    let limit = args.count.or(args.expect).unwrap_or(u64::MAX);
    // The header goes to stderr under --json, so a driver can wait for readiness and still
    // read one JSON object from stdout.
    let header = format!("{ifname}:{} recv {}", args.port.queue, port.mode());
    live.announce(&header);
    while !stopped(&stop) && check.probes() < limit {
        let now = Instant::now();
        if duration.is_some_and(|d| now - start >= d) {
            break;
        }
        let n = if args.port.poll {
            port.poll_receive(
                &mut frames,
                args.port.batch,
                Some(Duration::from_millis(100)),
            )?
        } else {
            port.receive(&mut frames, args.port.batch)?
        };
        if n > 0 {
            let stamp = monotonic_ns();
            // `packet` holds the start of a chain cut by the end of the last receive.
            let mut chains = xskit::packets(&frames);
            for chain in chains.by_ref() {
                match chain {
                    [single] if packet.is_empty() => {
                        check.observe_at(umem.data(single), Some(stamp));
                        if let Some(c) = capture.as_mut() {
                            c.write(wall(), umem.data(single))?;
                        }
                    }
                    _ => {
                        umem.gather(chain, &mut packet);
                        check.observe_at(&packet, Some(stamp));
                        if let Some(c) = capture.as_mut() {
                            c.write(wall(), &packet)?;
                        }
                        packet.clear();
                    }
                }
                packets += 1;
            }
            umem.gather(chains.remainder(), &mut packet);
            port.recycle(&mut frames);
        }
        if now - tick >= interval {
            if !args.run.json_output() {
                out!(
                    "{ifname}:{}  rx {:>12} pps  total {:>14}  lost {}  corrupt {}",
                    args.port.queue,
                    thousands(((packets - at_tick) as f64 / (now - tick).as_secs_f64()) as u64),
                    thousands(packets),
                    check.lost(),
                    check.corrupt
                );
            }
            live.tick(&serde_json::json!({
                "ports": [{
                    "interface": ifname,
                    "queue": args.port.queue,
                    "rx_packets": packets,
                    "valid": check.valid,
                    "corrupt": check.corrupt,
                    "out_of_order": check.out_of_order,
                    "foreign": check.foreign,
                    "statistics": port.statistics().ok().as_ref().map(stats_json),
                }]
            }));
            tick = now;
            at_tick = packets;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(c) = capture {
        c.finish()?;
    }
    let stats = port.statistics()?;
    let us = |ns: u64| ns as f64 / 1000.0;
    let report = RecvReport {
        command: "recv",
        interface: ifname,
        queue: args.port.queue,
        mode: port.mode().to_string(),
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
        statistics: stats_json(&stats),
    };
    if args.run.json_output() {
        crate::opts::print_json("recv", &report)?;
    } else {
        out!(
            "received {} packets: {} valid, {} corrupt, {} out of order, {} lost, {} other; latency us min/mean/max {:.1}/{:.1}/{:.1}; kernel {}",
            thousands(packets),
            check.valid,
            check.corrupt,
            check.out_of_order,
            report.lost,
            check.foreign,
            report.latency_min_us.unwrap_or(0.0),
            report.latency_mean_us.unwrap_or(0.0),
            report.latency_max_us.unwrap_or(0.0),
            stats
        );
    }
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
