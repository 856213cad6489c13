//! `xskit recv`: receive probe traffic (from `xskit gen`) and report loss, reordering, damage
//! and one-way latency.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
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
    /// -n says otherwise, or once no probe has come for --idle after the first.
    #[arg(long, value_name = "N")]
    expect: Option<u64>,
    /// Loss allowed before the exit status is 1: a count (`10`) or a share of the probes
    /// expected (`0.5%`). [default: 0]
    #[arg(long = "max-loss", value_name = "N|P%", requires = "expect")]
    max_loss: Option<String>,
    /// With --expect: stop when no probe has arrived for this long after the first one (the
    /// rest of the stream was lost): seconds (2.5) or a duration (500ms, 1m).
    #[arg(long, value_name = "DURATION", value_parser = crate::opts::seconds, default_value = "2", requires = "expect")]
    idle: f64,
    /// Also write every packet received (whole, chains gathered) to FILE, as pcap.
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    write: Option<std::path::PathBuf>,
}

/// The loss `--max-loss` allows: a count of probes, or a share of those expected.
#[derive(Clone, Copy, Debug, PartialEq)]
enum MaxLoss {
    Probes(u64),
    Percent(f64),
}

impl MaxLoss {
    /// `--max-loss` read once; none allowed without it.
    fn parse(spec: Option<&str>) -> Result<MaxLoss> {
        let Some(spec) = spec else {
            return Ok(MaxLoss::Probes(0));
        };
        let bad = || anyhow::anyhow!("--max-loss {spec:?} is not a count (10) or a share (0.5%)");
        match spec.strip_suffix('%') {
            Some(p) => match p.trim().parse::<f64>() {
                Ok(p) if (0.0..=100.0).contains(&p) => Ok(MaxLoss::Percent(p)),
                _ => Err(bad()),
            },
            None => spec.trim().parse().map(MaxLoss::Probes).map_err(|_| bad()),
        }
    }

    /// The probes that may be lost of `expected`.
    fn of(self, expected: u64) -> u64 {
        match self {
            MaxLoss::Probes(n) => n,
            MaxLoss::Percent(p) => (expected as f64 * p / 100.0).floor() as u64,
        }
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

/// What a command line asks of a run, checked: every mistake is found before this is made.
struct RecvPlan {
    ifname: String,
    duration: Option<Duration>,
    interval: Duration,
    idle: Duration,
    config: xskit::PortConfig,
    max_loss: MaxLoss,
}

impl RecvPlan {
    /// Every mistake of the command line at once, before anything is opened.
    fn new(args: &RecvArgs) -> Result<RecvPlan> {
        let mut m = crate::opts::Mistakes::default();
        let ifname = m.take(args.port.interface().and_then(|name| {
            crate::opts::interface_exists(Ok(name))?;
            Ok(name.to_string())
        }));
        let times = m.take(args.run.times());
        if args.expect == Some(0) {
            m.note(anyhow::anyhow!("--expect 0: expect at least one probe"));
        }
        let max_loss = m.take(MaxLoss::parse(args.max_loss.as_deref()));
        let idle = m.take(match args.idle {
            d if d > 0.0 && d < 1e6 => Ok(Duration::from_secs_f64(d)),
            d => Err(anyhow::anyhow!(
                "--idle {d} must be a positive number of seconds"
            )),
        });
        let config = m.take(args.port.config(args.frags, false));
        let plan = ifname.zip(times).zip(idle).zip(config).zip(max_loss).map(
            |((((ifname, times), idle), config), max_loss)| RecvPlan {
                ifname,
                duration: times.duration,
                interval: times.interval,
                idle,
                config,
                max_loss,
            },
        );
        m.finish_with(plan)
    }
}

pub(crate) fn run(args: &RecvArgs) -> Result<i32> {
    let RecvPlan {
        ifname,
        duration,
        interval,
        idle,
        config,
        max_loss,
    } = RecvPlan::new(args)?;
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
    // With --expect, the time the last probe came: a stream whose tail was lost ends.
    let mut last_probe: Option<Instant> = None;
    let mut looked = start;
    while !stopped(&stop) && rx.check.probes() < limit {
        let now = Instant::now();
        if duration.is_some_and(|d| now - start >= d) {
            break;
        }
        if now - looked >= LOOK_EVERY {
            looked = now;
            still_attached(&rx.port, rx.packets)?;
        }
        if args.expect.is_some() && last_probe.is_some_and(|t| now - t >= idle) {
            note!(
                "xskit recv: no probe for {:?} (--idle): the {} still missing count as lost",
                idle,
                thousands(rx.check.lost())
            );
            break;
        }
        let probes = rx.check.probes();
        rx.take_vector(args)?;
        if let Some(c) = rx.capture.as_mut() {
            c.flush_if_due(now)?;
        }
        if rx.check.probes() > probes {
            last_probe = Some(now);
        }
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
    print_report(args, &report, &stats)?;
    exit_status(args, max_loss, &report)
}

/// The summary: one JSON object with --json, a line otherwise.
fn print_report(args: &RecvArgs, report: &RecvReport, stats: &xskit::Statistics) -> Result<()> {
    if args.run.json_output() {
        crate::opts::print_json("recv", report)?;
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
    Ok(())
}

/// How often recv looks whether its interface and program are still there: a socket whose
/// device was deleted (or moved to another namespace) just stops receiving.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// Fails once the port's interface or program is gone, saying what happened.
fn still_attached(port: &Port, received: u64) -> Result<()> {
    match port.program().and_then(|p| p.lost()) {
        None => Ok(()),
        Some(why) => bail!(
            "{why} ({} packets received): check that the interface and its namespace still \
             exist, then start xskit recv again",
            thousands(received)
        ),
    }
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
                check.missing_so_far(),
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
fn exit_status(args: &RecvArgs, max_loss: MaxLoss, report: &RecvReport) -> Result<i32> {
    // --max-loss requires --expect.
    if let Some(span) = args.expect {
        let allowed = max_loss.of(span);
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

#[cfg(test)]
mod tests {
    use super::MaxLoss;

    #[test]
    fn max_loss_is_read_once_as_a_count_or_a_share() {
        assert_eq!(MaxLoss::parse(None).unwrap().of(1000), 0);
        assert_eq!(MaxLoss::parse(Some("10")).unwrap().of(1000), 10);
        assert_eq!(MaxLoss::parse(Some("0.5%")).unwrap().of(1000), 5);
        assert_eq!(MaxLoss::parse(Some("100%")).unwrap().of(7), 7);
        for bad in ["-1", "ten", "101%", "%"] {
            let e = MaxLoss::parse(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("not a count (10) or a share"), "{bad}: {e}");
        }
    }
}
