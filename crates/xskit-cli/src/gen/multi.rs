//! `xskit gen -t N` / `--queues LIST`: one thread and socket per queue, for receivers that
//! spread a device's queues over cores. Probes are numbered across the threads, so one
//! receiver of all of them sees every number once (interleaved: out of order between
//! threads).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xskit::clock::process_cpu_ns;
use xskit::{Interface, Port, PortConfig};
use xskit_traffic::probe::Template;

use super::{
    send_share, stats_json, tx_dropped, verdict_on_drops, GenArgs, GenReport, QueueReport, Share,
    TxProgress,
};
use crate::opts::{stop_flag, stopped, thousands};

/// Share `k` of `n`: packets k, k+n, ... of `count` (the first shares take the remainder),
/// at a rate of `rate / n`, with the remainder's packets a second on the first shares.
fn share(k: u64, n: u64, count: u64, rate: u64) -> Share {
    let split = |total: u64| total / n + u64::from(k < total % n);
    Share {
        first: k,
        stride: n,
        count: if count == u64::MAX {
            u64::MAX
        } else {
            split(count)
        },
        rate: if rate == 0 { 0 } else { split(rate).max(1) },
    }
}

/// Each queue's count and kernel statistics, and the wakeups over all of them.
fn queue_reports(
    ports: &mut [Port],
    queues: &[u32],
    sent: &[u64],
) -> Result<(Vec<QueueReport>, u64)> {
    let mut per_queue = Vec::with_capacity(queues.len());
    let mut wakeups = 0;
    for ((port, &queue), &tx_packets) in ports.iter_mut().zip(queues).zip(sent) {
        wakeups += port.socket().tx().map_or(0, |t| t.wakeups());
        per_queue.push(QueueReport {
            queue,
            tx_packets,
            statistics: stats_json(&port.statistics()?),
        });
    }
    Ok((per_queue, wakeups))
}

/// The run's summary: JSON, or a line with each queue's count.
fn print_summary(args: &GenArgs, report: &GenReport, queues: &[u32], sent: &[u64]) -> Result<()> {
    if args.run.json_output() {
        return crate::opts::print_json("gen", report);
    }
    out!(
        "sent {} packets in {:.2} s on {} queues ({}): {} pps; device dropped {}",
        thousands(sent.iter().sum::<u64>()),
        report.duration_s,
        queues.len(),
        sent.iter()
            .zip(queues)
            .map(|(s, q)| format!("{q}: {}", thousands(*s)))
            .collect::<Vec<_>>()
            .join(", "),
        thousands(report.tx_pps as u64),
        thousands(report.device_tx_dropped)
    );
    Ok(())
}

pub(super) fn run(
    args: &GenArgs,
    iface: &Interface,
    t: &Template,
    config: &PortConfig,
    queues: &[u32],
    rate: u64,
    dropped_before: u64,
) -> Result<i32> {
    let ifname = iface.name().to_string();
    let mut ports = queues
        .iter()
        .map(|&q| {
            Port::open(&ifname, q, config).with_context(|| format!("opening {ifname} queue {q}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let stop = stop_flag()?;
    let duration = args.run.duration()?;
    let interval = args.run.interval()?;
    let limit = args.count.unwrap_or(u64::MAX);
    let n = queues.len() as u64;
    if limit != u64::MAX && limit < n {
        bail!("-n {limit} is fewer packets than the {n} queues: one at least each");
    }
    let mut progress = TxProgress::new(args, &ifname, interval)?;
    progress.live.announce(&format!(
        "{ifname}:{queues:?} gen {} {} bytes, {} flow(s), {n} threads",
        ports[0].mode(),
        t.len(),
        t.flows().total()
    ));
    crate::opts::note_caveats("gen", ports[0].mode());
    let counts: Vec<AtomicU64> = queues.iter().map(|_| AtomicU64::new(0)).collect();
    let start = Instant::now();
    let cpu_start = process_cpu_ns();
    let batch = args.port.batch;
    let sent: Vec<Result<u64>> = std::thread::scope(|s| {
        let senders: Vec<_> = ports
            .iter_mut()
            .zip(&counts)
            .enumerate()
            .map(|(k, (port, count))| {
                let share = share(k as u64, n, limit, rate);
                let stop = &stop;
                s.spawn(move || {
                    send_share(port, t, share, batch, stop, (start, duration), |sent, _| {
                        count.store(sent, Ordering::Relaxed)
                    })
                })
            })
            .collect();
        while !senders.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            let total: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
            progress.update(total, total * t.len() as u64, || None);
        }
        senders
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| bail!("a sending thread panicked"))
            })
            .collect()
    });
    let sent = sent.into_iter().collect::<Result<Vec<u64>>>()?;
    let elapsed = start.elapsed().as_secs_f64();
    let total: u64 = sent.iter().sum();
    let dropped = tx_dropped(iface)?.saturating_sub(dropped_before);
    let (per_queue, wakeups) = queue_reports(&mut ports, queues, &sent)?;
    let report = GenReport {
        interface: ifname,
        queue: queues[0],
        mode: ports[0].mode().to_string(),
        wakeups,
        device_tx_dropped: dropped,
        queues: per_queue,
        ..GenReport::measured(t, rate, total, elapsed, cpu_start)
    };
    print_summary(args, &report, queues, &sent)?;
    if limit != u64::MAX && total < limit && !stopped(&stop) && duration.is_none() {
        bail!("only {total} of {limit} packets could be sent");
    }
    Ok(verdict_on_drops(iface, total, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_every_number_once_and_split_the_rate() {
        let shares: Vec<Share> = (0..3).map(|k| share(k, 3, 10, 1000)).collect();
        let mut numbers: Vec<u64> = shares
            .iter()
            .flat_map(|s| (0..s.count).map(move |i| s.first + i * s.stride))
            .collect();
        numbers.sort_unstable();
        assert_eq!(numbers, (0..10).collect::<Vec<_>>());
        assert_eq!(shares.iter().map(|s| s.rate).sum::<u64>(), 1000);
        assert_eq!(
            share(0, 2, u64::MAX, 0).count,
            u64::MAX,
            "no -n: until stopped"
        );
        assert_eq!(share(1, 4, 100, 2).rate, 1, "a share never paces at zero");
    }
}
