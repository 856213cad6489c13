//! `xskit gen --pcap FILE`: a capture's packets sent again out of an AF_XDP socket, as
//! tcpreplay does — at the capture's own timing, at a fixed rate, or flat out, once or in a
//! loop — including packets larger than a frame, as multi-buffer chains.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use xskit::clock::process_cpu_ns;
use xskit::{Frame, Interface, Port};
use xskit_pipeline::PcapSource;

use xskit_traffic::sender::{count_packets, push_bytes};

use super::{stats_json, tx_dropped, Engine, GenArgs, TxProgress};
use crate::opts::{stop_flag, stopped, thousands};

/// The most a capture may hold to be replayed: it is read into memory first, so that the
/// file's speed never paces the sending.
const MAX_BYTES: usize = 1 << 30;

/// A capture in memory: each packet's time since the first, and its bytes.
struct Capture {
    packets: Vec<(Duration, Vec<u8>)>,
    /// Packets left out: larger than the link's MTU allows, or shorter than an Ethernet
    /// header.
    skipped: u64,
    longest: usize,
}

fn load(path: &Path, max_len: usize) -> Result<Capture> {
    let mut source = PcapSource::open(path)?;
    let (mut packets, mut skipped, mut bytes, mut longest) = (Vec::new(), 0u64, 0usize, 0usize);
    let mut first = None;
    while let Some(()) = source.next_timed_packet_with(|time, data| {
        if data.len() < 14 || data.len() > max_len {
            skipped += 1;
            return;
        }
        let start = *first.get_or_insert(time);
        bytes += data.len();
        longest = longest.max(data.len());
        packets.push((time.saturating_sub(start), data.to_vec()));
    })? {
        if bytes > MAX_BYTES {
            bail!(
                "{} holds more than {} MiB of packets: replay a smaller capture (editcap -r \
                 cuts one)",
                path.display(),
                MAX_BYTES >> 20
            );
        }
    }
    if packets.is_empty() {
        bail!(
            "{} has no packet to replay ({skipped} left out: shorter than an Ethernet header \
             or longer than the link's MTU allows)",
            path.display()
        );
    }
    Ok(Capture {
        packets,
        skipped,
        longest,
    })
}

#[derive(Serialize)]
struct ReplayReport {
    command: &'static str,
    interface: String,
    queue: u32,
    mode: String,
    pcap: String,
    /// original, rate or topspeed.
    timing: &'static str,
    rate_pps: u64,
    loops: u64,
    capture_packets: usize,
    /// Packets of the capture left out (too long for the link's MTU, or runts).
    skipped: u64,
    duration_s: f64,
    tx_packets: u64,
    tx_pps: f64,
    tx_bytes: u64,
    statistics: serde_json::Value,
    device_tx_dropped: u64,
    cpu_share: f64,
}

/// When a replay's packets are due: at the capture's own offsets ("original"), at a rate,
/// or as fast as they go ("topspeed").
struct Pace {
    timing: &'static str,
    rate: u64,
    start: Instant,
}

/// The capture's passes (`--loop`) until `over`: each packet queued, sent when due or when a
/// batch is full. Returns the packets queued, their bytes and the passes made.
fn replay_passes(
    args: &GenArgs,
    (port, pending): (&mut Port, &mut Vec<Frame>),
    capture: &Capture,
    pace: &Pace,
    progress: &mut TxProgress,
    over: impl Fn(u64) -> bool,
) -> Result<(u64, u64, u64)> {
    let (mut queued, mut bytes, mut loops) = (0u64, 0u64, 0u64);
    'replay: while args.loops == 0 || loops < args.loops {
        let pass = Instant::now();
        for (offset, data) in &capture.packets {
            if over(queued) {
                break 'replay;
            }
            let due = match pace.timing {
                "original" => Some(pass + *offset),
                "rate" => {
                    let after = Duration::from_secs_f64(queued as f64 / pace.rate as f64);
                    Some(pace.start + after)
                }
                _ => None,
            };
            if let Some(due) = due.filter(|&d| d > Instant::now()) {
                // What is queued goes out before the wait, so the timing holds per packet.
                send_all(port, pending)?;
                std::thread::sleep(due - Instant::now());
            }
            while !push_bytes(port, data, pending)? {
                send_all(port, pending)?;
                if over(queued) {
                    break 'replay;
                }
            }
            queued += 1;
            bytes += data.len() as u64;
            if pending.len() >= args.port.batch {
                send_all(port, pending)?;
            }
            let sent = queued - count_packets(pending);
            progress.update(sent, bytes, || port.statistics().ok());
        }
        loops += 1;
    }
    Ok((queued, bytes, loops))
}

/// Sends what is still queued, for up to 2 s in all, and waits for the kernel to finish;
/// returns the packets that could not be sent.
fn drain(port: &mut Port, pending: &mut Vec<Frame>) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !pending.is_empty() && Instant::now() < deadline {
        send_all(port, pending)?;
    }
    let unsent = count_packets(pending);
    port.recycle(pending);
    port.finish_sending(deadline.saturating_duration_since(Instant::now()))?;
    Ok(unsent)
}

fn print_report(args: &GenArgs, report: &ReplayReport, stats: &xskit::Statistics) -> Result<()> {
    if args.run.json_output() {
        return crate::opts::print_json("gen", report);
    }
    out!(
        "replayed {} packets of {} ({} left out) in {:.2} s, {} loop(s): {} pps; device dropped {}; kernel {}",
        thousands(report.tx_packets),
        report.pcap,
        report.skipped,
        report.duration_s,
        report.loops,
        thousands(report.tx_pps as u64),
        thousands(report.device_tx_dropped),
        stats
    );
    Ok(())
}

/// Refuses what does not apply to a replay: the live engine and the options that build
/// probes.
fn check_replay_args(args: &GenArgs) -> Result<()> {
    if args.engine == Engine::Live {
        bail!("--pcap replays through an AF_XDP socket: drop --engine live");
    }
    let builds = [
        (args.size.is_some(), "-s"),
        (args.ipv6, "-6"),
        (args.vlan.is_some(), "--vlan"),
        (args.flows.is_some(), "--flows"),
        (args.src_mac.is_some(), "--src-mac"),
        (args.dst_mac.is_some(), "--dst-mac"),
        (args.src_ip.is_some(), "--src-ip"),
        (args.dst_ip.is_some(), "--dst-ip"),
        (args.src_port.is_some(), "--src-port"),
        (args.dst_port.is_some(), "--dst-port"),
        (args.src_macs.is_some(), "--src-macs"),
        (args.src_ips.is_some(), "--src-ips"),
        (args.dst_ips.is_some(), "--dst-ips"),
        (args.src_ports.is_some(), "--src-ports"),
        (args.dst_ports.is_some(), "--dst-ports"),
    ];
    let given: Vec<&str> = builds.iter().filter(|b| b.0).map(|b| b.1).collect();
    if !given.is_empty() {
        bail!(
            "--pcap sends the capture's own packets, unchanged: drop the options that build \
             probes ({})",
            given.join(", ")
        );
    }
    Ok(())
}

pub(super) fn run(args: &GenArgs, iface: &Interface, path: &Path) -> Result<i32> {
    check_replay_args(args)?;
    let info = iface.link_info()?;
    // The MTU bounds the IP packet; the frame adds its Ethernet header and up to two tags.
    let capture = load(path, info.mtu as usize + 22)?;
    let rate = args.rate.pps(capture.packets[0].1.len());
    let timing = match (args.topspeed, rate) {
        (true, _) => "topspeed",
        (false, 0) => "original",
        (false, _) => "rate",
    };
    let ifname = iface.name().to_string();
    let multi_buffer = capture.longest > args.port.frame_size as usize;
    let config = args.port.config(multi_buffer, true)?;
    let mut port = Port::open(&ifname, args.port.queue, &config)
        .with_context(|| format!("opening {ifname} queue {}", args.port.queue))?;
    let stop = stop_flag()?;
    let duration = args.run.duration()?;
    let interval = args.run.interval()?;
    let dropped_before = tx_dropped(iface)?;
    let mut progress = TxProgress::new(args, &ifname, interval)?;
    progress.live.announce(&format!(
        "{ifname}:{} gen {} replaying {} ({} packets, {timing})",
        args.port.queue,
        port.mode(),
        path.display(),
        capture.packets.len()
    ));
    crate::opts::note_caveats("gen", port.mode());
    let mut pending: Vec<Frame> = Vec::with_capacity(args.port.batch * 4);
    let start = Instant::now();
    let cpu_start = process_cpu_ns();
    let limit = args.count.unwrap_or(u64::MAX);
    let over = |queued: u64| {
        stopped(&stop) || queued >= limit || duration.is_some_and(|d| start.elapsed() >= d)
    };
    let pace = Pace {
        timing,
        rate,
        start,
    };
    let (queued, bytes, loops) = replay_passes(
        args,
        (&mut port, &mut pending),
        &capture,
        &pace,
        &mut progress,
        over,
    )?;
    let sent = queued - drain(&mut port, &mut pending)?;
    let elapsed = start.elapsed().as_secs_f64();
    let stats = port.statistics()?;
    let report = ReplayReport {
        command: "gen",
        interface: ifname,
        queue: args.port.queue,
        mode: port.mode().to_string(),
        pcap: path.display().to_string(),
        timing,
        rate_pps: rate,
        loops,
        capture_packets: capture.packets.len(),
        skipped: capture.skipped,
        duration_s: elapsed,
        tx_packets: sent,
        tx_pps: sent as f64 / elapsed.max(1e-9),
        tx_bytes: bytes,
        statistics: stats_json(&stats),
        device_tx_dropped: tx_dropped(iface)?.saturating_sub(dropped_before),
        cpu_share: (process_cpu_ns() - cpu_start) as f64 / 1e9 / elapsed.max(1e-9),
    };
    print_report(args, &report, &stats)?;
    Ok(if report.device_tx_dropped > 0 { 1 } else { 0 })
}

/// Hands what is queued to the transmit ring (what does not fit stays queued) and reaps
/// completions.
fn send_all(port: &mut Port, pending: &mut Vec<Frame>) -> Result<()> {
    port.send(pending)?;
    port.complete();
    Ok(())
}
