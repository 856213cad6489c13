//! `xskit demo`: probes across a veth testbed through xskit sockets on both ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use xskit::probe::{self, ProbeAddrs, SequenceCheck};
use xskit::{Mode, ModeInfo, Port, PortConfig, Statistics};
use xskit_testbed::{Testbed, TestbedConfig};

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Probes to send in each mode.
    #[arg(short = 'n', long, default_value_t = 10_000)]
    count: u64,
    /// Probe size in bytes (Ethernet frame without FCS).
    #[arg(short = 's', long = "packet-size", default_value_t = 64)]
    size: usize,
    /// Modes to run, in order.
    #[arg(
        short = 'm',
        long = "mode",
        value_delimiter = ',',
        default_value = "skb,drv"
    )]
    modes: Vec<String>,
}

/// Probes in flight at most: the veth receive ring holds 256, so a window below that keeps
/// the demo about correctness, not about overrunning the link.
const WINDOW: u64 = 192;
const BATCH: usize = 64;
const IDLE_TIMEOUT: Duration = Duration::from_secs(3);

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
    let modes: Vec<Mode> = args
        .modes
        .iter()
        .map(|m| m.parse::<Mode>())
        .collect::<Result<_, _>>()?;
    if !xskit_testbed::have_privileges() {
        bail!("the demo builds network namespaces and attaches XDP programs: run it as root (e.g. with sudo)");
    }
    let bed = Testbed::new(&TestbedConfig::default()).context("building the testbed")?;
    println!(
        "testbed: {} ({}) <-> {} ({}), {} probes of {} bytes per mode",
        bed.a.ns.name(),
        bed.a.ip,
        bed.b.ns.name(),
        bed.b.ip,
        args.count,
        args.size
    );
    let mut failed = false;
    for (mode, name) in modes.iter().zip(&args.modes) {
        let report = run_mode(&bed, *mode, name, args.count, args.size)
            .with_context(|| format!("mode {name}"))?;
        failed |= !print_report(&report);
    }
    drop(bed);
    Ok(if failed { 1 } else { 0 })
}

fn run_mode(bed: &Testbed, mode: Mode, name: &str, count: u64, size: usize) -> Result<ModeReport> {
    let config = PortConfig {
        mode,
        ..PortConfig::default()
    };
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
    let (sent, received) = std::thread::scope(|s| {
        let receiver = s.spawn(|| receive(&mut rx, count, &seen, &stop));
        let sent = send(&mut tx, count, size, &addrs, &seen, &stop);
        stop.store(true, Ordering::Relaxed);
        (sent, receiver.join())
    });
    let elapsed = start.elapsed();
    let sent = sent?;
    let (check, last) = match received {
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

/// Sends `count` probes, never more than WINDOW ahead of what the receiver has seen.
fn send(
    tx: &mut Port,
    count: u64,
    size: usize,
    addrs: &ProbeAddrs,
    seen: &AtomicU64,
    stop: &AtomicBool,
) -> Result<u64> {
    let umem = tx.umem().clone();
    let mut batch = Vec::with_capacity(BATCH);
    let mut seq = 0u64;
    let mut last_progress = Instant::now();
    while seq < count || !batch.is_empty() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if batch.is_empty() {
            let ahead = seq - seen.load(Ordering::Acquire);
            let room = WINDOW
                .saturating_sub(ahead)
                .min(count - seq)
                .min(BATCH as u64);
            if room > 0 {
                tx.alloc(&mut batch, room as usize);
                for frame in batch.iter_mut() {
                    let len = probe::write(umem.buffer_mut(frame), size, seq, addrs)
                        .context("frame too small for the probe")?;
                    umem.set_len(frame, len)?;
                    seq += 1;
                }
            }
        }
        if tx.send(&mut batch)? > 0 || batch.is_empty() && seen.load(Ordering::Relaxed) > 0 {
            last_progress = Instant::now();
        }
        if last_progress.elapsed() > IDLE_TIMEOUT {
            break;
        }
        if !batch.is_empty() || seq - seen.load(Ordering::Relaxed) >= WINDOW {
            std::hint::spin_loop();
        }
    }
    // Reap the last completions so every frame is back in the pool.
    let deadline = Instant::now() + IDLE_TIMEOUT;
    while tx.tx_in_flight() > 0 && Instant::now() < deadline {
        tx.complete();
        if let Some(ring) = tx.socket().tx() {
            ring.wakeup_if_needed()?;
        }
    }
    Ok(seq - batch.len() as u64)
}

/// Receives until `count` probes arrived, the sender stopped and the line went quiet, or
/// nothing arrived for IDLE_TIMEOUT. Returns the check and when the last probe arrived.
fn receive(
    rx: &mut Port,
    count: u64,
    seen: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(SequenceCheck, Option<Duration>)> {
    let umem = rx.umem().clone();
    let start = Instant::now();
    let mut batch = Vec::with_capacity(BATCH);
    let mut check = SequenceCheck::default();
    let mut last = None;
    let mut last_progress = Instant::now();
    while check.probes() < count {
        let n = rx.receive(&mut batch, BATCH)?;
        if n > 0 {
            for frame in &batch {
                check.observe(umem.data(frame));
            }
            rx.recycle(&mut batch);
            seen.store(check.probes(), Ordering::Release);
            last = Some(start.elapsed());
            last_progress = Instant::now();
        } else if last_progress.elapsed() > IDLE_TIMEOUT
            || stop.load(Ordering::Relaxed) && last_progress.elapsed() > Duration::from_millis(500)
        {
            break;
        }
    }
    Ok((check, last))
}

/// Prints one mode's summary; returns true if every probe arrived intact and in order.
fn print_report(r: &ModeReport) -> bool {
    let ok = r.sent == r.check.valid && r.check.is_perfect(r.sent);
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    println!(
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
        println!("     fallback: {reason}");
    }
    println!("     kernel: {}", r.rx_stats);
    ok
}
