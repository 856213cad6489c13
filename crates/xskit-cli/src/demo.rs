//! `xskit demo`: probes across a veth testbed through xskit sockets on both ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use xskit::{Mode, ModeInfo, Port, PortConfig, Statistics};
use xskit_testbed::{Testbed, TestbedConfig};

use crate::opts::ModeArg;
use xskit_traffic::probe::{
    self, ProbeAddrs, ReceiveOptions, ReceiveReport, SendOptions, SequenceCheck,
};

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Probes to send in each mode.
    #[arg(short = 'n', long, default_value_t = 10_000)]
    count: u64,
    /// Probe size in bytes: the Ethernet frame WITHOUT the 4-byte FCS (RFC 2544's 64-byte
    /// frame is 60 here; probes take at least 62).
    #[arg(short = 's', long = "packet-size", default_value_t = 64)]
    size: usize,
    /// Modes to run, in order.
    #[arg(
        short = 'm',
        long = "mode",
        value_enum,
        value_delimiter = ',',
        default_values_t = [ModeArg::Skb, ModeArg::Drv]
    )]
    modes: Vec<ModeArg>,
}

struct ModeReport {
    name: String,
    mode: ModeInfo,
    sent: u64,
    check: SequenceCheck,
    elapsed: Duration,
    rx_stats: Statistics,
}

pub(crate) fn run(args: &DemoArgs) -> Result<i32> {
    if args.size < probe::MIN_LEN || args.size > 1514 {
        bail!(
            "packet size {} is out of range: use {} to 1514 bytes",
            args.size,
            probe::MIN_LEN
        );
    }
    if args.count == 0 {
        bail!("--count must be at least 1");
    }
    let modes: Vec<Mode> = args.modes.iter().map(|&m| Mode::from(m)).collect();
    if !xskit_testbed::have_privileges() {
        bail!("the demo builds network namespaces and attaches XDP programs: run it as root (e.g. with sudo)");
    }
    let bed = Testbed::new(&TestbedConfig::default()).context("building the testbed")?;
    out!(
        "testbed: {} ({}) <-> {} ({}), {} probes of {} bytes per mode",
        bed.a.ns.name(),
        bed.a.ip,
        bed.b.ns.name(),
        bed.b.ip,
        args.count,
        args.size
    );
    let mut failed = false;
    for &mode in &modes {
        let name = mode.name();
        let report = run_mode(&bed, mode, name, args.count, args.size)
            .with_context(|| format!("mode {name}"))?;
        failed |= !print_report(&report);
    }
    drop(bed);
    Ok(if failed { 1 } else { 0 })
}

fn run_mode(bed: &Testbed, mode: Mode, name: &str, count: u64, size: usize) -> Result<ModeReport> {
    let config = PortConfig::default().mode(mode);
    let b_if = bed.b.ifname.clone();
    let a_if = bed.a.ifname.clone();
    let mut rx = bed.b.ns.run(|| Port::open(&b_if, 0, &config))??;
    let mut tx = bed.a.ns.run(|| Port::open(&a_if, 0, &config))??;
    let addrs = ProbeAddrs {
        src_mac: bed.a.mac,
        dst_mac: bed.b.mac,
        src_ip: bed.a.ip.octets(),
        dst_ip: bed.b.ip.octets(),
    };
    let seen = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let send_opts = SendOptions {
        count,
        size,
        ..SendOptions::default()
    };
    let recv_opts = ReceiveOptions::default().count(count);
    let (sent, received) = std::thread::scope(|s| {
        let receiver = s.spawn(|| probe::receive(&mut rx, &recv_opts, &seen, &stop));
        let sent = probe::send(&mut tx, &addrs, &send_opts, &seen, &stop);
        stop.store(true, Ordering::Relaxed);
        (sent, receiver.join())
    });
    let elapsed = start.elapsed();
    let sent = sent?;
    let ReceiveReport { check, last } = match received {
        Ok(r) => r?,
        Err(_) => bail!("the receiver thread panicked"),
    };
    Ok(ModeReport {
        name: name.to_string(),
        mode: rx.mode().clone(),
        sent,
        check,
        elapsed: last.unwrap_or(elapsed),
        rx_stats: rx.statistics()?,
    })
}

/// Prints one mode's summary; returns true if every probe arrived intact and in order.
fn print_report(r: &ModeReport) -> bool {
    let ok = r.sent == r.check.valid && r.check.is_perfect(r.sent);
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    out!(
        "{:<4} {}: sent {} received {} in order {} corrupt {} lost {} foreign {}  {:.0} pps  [{}]",
        r.name,
        r.mode,
        r.sent,
        r.check.valid,
        r.check.valid - r.check.out_of_order.min(r.check.valid),
        r.check.corrupt,
        r.sent.saturating_sub(r.check.probes()),
        r.check.foreign,
        r.check.probes() as f64 / secs,
        if ok { "OK" } else { "FAILED" }
    );
    for reason in &r.mode.fallbacks {
        out!("     fallback: {reason}");
    }
    out!("     kernel: {}", r.rx_stats);
    ok
}
