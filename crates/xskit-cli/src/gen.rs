//! `xskit gen`: a transmit-only traffic generator on an xskit socket.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use xskit::clock::process_cpu_ns;
use xskit::{Interface, Port};
use xskit_traffic::probe::{Endpoints, Flows, Template};
use xskit_traffic::sender;

use crate::opts::{parse_mac, stop_flag, stopped, thousands, Live, PortArgs, RunArgs};

mod multi;
mod replay;

/// How packets are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Engine {
    /// An xskit AF_XDP socket: every packet numbered and timestamped.
    Xsk,
    /// The kernel's live-frames test run redirecting one frame (several Mpps, but every copy
    /// is the same packet; the receiving side needs native XDP or GRO on). Frames the
    /// receiving end cannot take vanish without a count on either device (veth), so "sent"
    /// is what the kernel ran, not what arrived: count at the receiver.
    Live,
}

#[derive(Args, Debug)]
pub(crate) struct GenArgs {
    /// Packet engine.
    #[arg(long, value_enum, default_value = "xsk")]
    engine: Engine,
    #[command(flatten)]
    port: PortArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Frame length in bytes WITHOUT the 4-byte FCS, as the UMEM, pcap and tcpdump hold it:
    /// RFC 2544's (xdpsock's, xdp-trafficgen's) 64-byte frame is -s 60. From 60 (more with
    /// IPv6 and a tag) to 9018; above the frame size packets go out as multi-buffer chains.
    /// Frames shorter than a probe (62 bytes, 82 with -6, 4 more with --vlan) go out
    /// unnumbered: recv counts them as other traffic. Default: the smallest probe, at least
    /// 64.
    #[arg(short = 's', long = "packet-size")]
    size: Option<usize>,
    /// Packets to send (default: until --duration or Ctrl-C).
    #[arg(short = 'n', long)]
    count: Option<u64>,
    /// Threads, one socket each, on queues -q, -q+1, ... (as xdp-trafficgen's -t): probes
    /// are numbered across them (thread k sends k, k+N, ...), -r and -n are split evenly.
    #[arg(short = 't', long, default_value_t = 1, value_name = "N")]
    threads: u32,
    /// The queues to send on, one thread each, instead of -q and -t: `0,2,3`.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "LIST",
        conflicts_with = "threads"
    )]
    queues: Vec<u32>,
    /// The rate: packets per second as a plain number or with a unit (10kpps, 1Mpps), or
    /// bits per second of whole frames as -s counts them, without FCS (100Mbps, 1Gbps);
    /// 0: as fast as possible.
    #[arg(short = 'r', long, default_value = "0", value_parser = parse_gen_rate)]
    rate: GenRate,
    /// IPv6 (default addresses 2001:db8::1 -> 2001:db8::2).
    #[arg(short = '6', long)]
    ipv6: bool,
    /// Source MAC (default: the interface's).
    #[arg(long)]
    src_mac: Option<String>,
    /// Destination MAC (default: broadcast, so that any receiver takes the probes; `bench`'s
    /// txpush sends to a MAC nobody owns instead, to be dropped at layer 2 as in xdpsock).
    #[arg(long)]
    dst_mac: Option<String>,
    /// Source address (default 198.51.100.1 or 2001:db8::1).
    #[arg(long)]
    src_ip: Option<IpAddr>,
    /// Destination address (default 198.51.100.2 or 2001:db8::2).
    #[arg(long)]
    dst_ip: Option<IpAddr>,
    /// First source port (default 9).
    #[arg(long)]
    src_port: Option<u16>,
    /// First destination port (default 9).
    #[arg(long)]
    dst_port: Option<u16>,
    /// Source MACs to cycle through (default 1).
    #[arg(long)]
    src_macs: Option<u32>,
    /// Source addresses to cycle through (default 1); with --engine live, IPv4 only, each
    /// copy of the frame leaves from the next one.
    #[arg(long)]
    src_ips: Option<u32>,
    /// With --engine live: send each copy of the frame from the next address of FILE, round
    /// and round, checksums updated: a flood from many sources. FILE is written as a set
    /// file (one address or prefix a line, `#` and `;` comments; a prefix sends from its
    /// first address): give it a blocklist to flood from the addresses it holds. IPv4, up to
    /// 16,777,216 addresses.
    #[arg(long, value_name = "FILE", conflicts_with = "src_ips")]
    src_list: Option<std::path::PathBuf>,
    /// Destination addresses to cycle through (default 1).
    #[arg(long)]
    dst_ips: Option<u32>,
    /// Source ports to cycle through (default 1).
    #[arg(long)]
    src_ports: Option<u32>,
    /// Destination ports to cycle through (default 1).
    #[arg(long)]
    dst_ports: Option<u32>,
    /// N flows: shorthand for --src-ports N.
    #[arg(long)]
    flows: Option<u32>,
    /// 802.1Q VLAN id to tag packets with.
    #[arg(long)]
    vlan: Option<u16>,
    /// The VLAN tag's priority (PCP, 0 to 7).
    #[arg(long = "vlan-priority", value_name = "PCP", requires = "vlan")]
    vlan_priority: Option<u8>,
    /// Replay the packets of a capture (pcap or pcapng, Ethernet) instead of building probes,
    /// as tcpreplay does: at the capture's own timing, at -r RATE, or with --topspeed flat
    /// out; packets larger than a frame go out as multi-buffer chains.
    #[arg(long, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
    /// With --pcap: times to play the capture (0: until -d, -n or Ctrl-C).
    #[arg(
        long = "loop",
        value_name = "N",
        default_value_t = 1,
        requires = "pcap"
    )]
    loops: u64,
    /// With --pcap: as fast as possible, not at the capture's timing.
    #[arg(long, requires = "pcap")]
    topspeed: bool,
    /// Leave each UDP checksum partial, as a sender that offloads it to the device does: the
    /// pseudo-header's sum alone, for whoever transmits the frame to finish. A forwarder that
    /// finishes checksums (`xskit fwd`) delivers the probes intact; a host that receives them
    /// unfinished drops them as damaged.
    #[arg(long, conflicts_with = "pcap")]
    partial_csum: bool,
}

impl GenArgs {
    /// The queues to send on: --queues, or -t of them from -q.
    fn queues(&self) -> Result<Vec<u32>> {
        if !(1..=64).contains(&self.threads) {
            bail!("-t {} is out of range: use 1 to 64 threads", self.threads);
        }
        let queues: Vec<u32> = if self.queues.is_empty() {
            (0..self.threads).map(|i| self.port.queue + i).collect()
        } else {
            self.queues.clone()
        };
        let mut seen = queues.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != queues.len() {
            bail!("--queues {queues:?} names a queue twice: one thread per queue");
        }
        if queues.len() > 64 {
            bail!("--queues names {} queues: at most 64", queues.len());
        }
        if queues.len() > 1 && (self.pcap.is_some() || self.engine == Engine::Live) {
            bail!(
                "several queues (-t, --queues) are for the xsk engine's probes, not --pcap or \
                 --engine live"
            );
        }
        Ok(queues)
    }
}

#[derive(Serialize)]
struct GenReport {
    command: &'static str,
    interface: String,
    queue: u32,
    mode: String,
    packet_size: usize,
    flows: u64,
    rate_pps: u64,
    duration_s: f64,
    tx_packets: u64,
    tx_pps: f64,
    tx_bytes: u64,
    wakeups: u64,
    statistics: serde_json::Value,
    /// Packets the device itself dropped on transmit during the run (its tx_dropped counter;
    /// other traffic on the device counts too).
    device_tx_dropped: u64,
    /// Per queue, when several sent (-t, --queues).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    queues: Vec<QueueReport>,
    /// The process's CPU time over the sending loop, as a share of its wall time (1.0: one
    /// CPU kept busy).
    cpu_share: f64,
}

impl GenReport {
    /// The figures of `sent` packets of `t` over `elapsed` seconds (rate `rate`, the process's
    /// CPU time at the start `cpu_start`); the caller names the port and adds its counters.
    fn measured(t: &Template, rate: u64, sent: u64, elapsed: f64, cpu_start: u64) -> GenReport {
        GenReport {
            command: "gen",
            interface: String::new(),
            queue: 0,
            mode: String::new(),
            packet_size: t.len(),
            flows: t.flows().total(),
            rate_pps: rate,
            duration_s: elapsed,
            tx_packets: sent,
            tx_pps: sent as f64 / elapsed.max(1e-9),
            tx_bytes: sent * t.len() as u64,
            wakeups: 0,
            statistics: serde_json::Value::Null,
            device_tx_dropped: 0,
            cpu_share: (process_cpu_ns() - cpu_start) as f64 / 1e9 / elapsed.max(1e-9),
            queues: Vec::new(),
        }
    }
}

/// One queue's part of a run with several.
#[derive(Serialize)]
struct QueueReport {
    queue: u32,
    tx_packets: u64,
    statistics: serde_json::Value,
}

pub(crate) fn stats_json(s: &xskit::Statistics) -> serde_json::Value {
    serde_json::Value::Object(
        s.fields()
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect(),
    )
}

/// The source MAC when --src-mac does not give one: `iface`'s, else a local address.
fn own_mac(iface: Option<&Interface>) -> Result<[u8; 6]> {
    let mac = match iface {
        Some(iface) => iface.link_info()?.mac,
        None => None,
    };
    Ok(mac.unwrap_or([0x02, 0, 0, 0, 0, 1]))
}

/// The live engine's source addresses: `--src-list`'s, or `--src-ips` from `--src-ip` on;
/// none when the frame's own source is sent. The live engine varies nothing else.
fn live_sources(args: &GenArgs, t: Option<&Template>) -> Result<Vec<Ipv4Addr>> {
    if args.engine != Engine::Live {
        if args.src_list.is_some() {
            bail!("--src-list is for --engine live: the xsk engine cycles --src-ips addresses");
        }
        return Ok(Vec::new());
    }
    for (flag, n) in [
        ("--flows", args.flows),
        ("--src-ports", args.src_ports),
        ("--dst-ports", args.dst_ports),
        ("--dst-ips", args.dst_ips),
        ("--src-macs", args.src_macs),
    ] {
        if n.is_some_and(|n| n > 1) {
            bail!(
                "{flag}: --engine live sends one frame and varies only its source address \
                 (--src-ips, --src-list): leave {flag} out or use --engine xsk"
            );
        }
    }
    let several = args.src_list.is_some() || args.src_ips.is_some_and(|n| n > 1);
    if several && args.partial_csum {
        bail!(
            "--partial-csum with --engine live sends from one source: the live program rewrites \
             the source as a full checksum's update; use --engine xsk with --src-ips"
        );
    }
    let Some(t) = t else { return Ok(Vec::new()) };
    let from = match t.ends().src_ip {
        IpAddr::V4(from) => from,
        IpAddr::V6(_) if args.src_list.is_some() || args.src_ips.is_some_and(|n| n > 1) => {
            bail!("--engine live varies IPv4 sources only: leave out -6, or use --engine xsk")
        }
        IpAddr::V6(_) => return Ok(Vec::new()),
    };
    match (&args.src_list, args.src_ips) {
        (Some(path), _) => read_source_list(path),
        (None, Some(n)) if n > 1 => Ok((0..n)
            .map(|k| Ipv4Addr::from(u32::from(from).wrapping_add(k)))
            .collect()),
        _ => Ok(Vec::new()),
    }
}

/// `--src-list FILE`'s addresses, each prefix's first.
fn read_source_list(path: &std::path::Path) -> Result<Vec<Ipv4Addr>> {
    let shown = path.display();
    let text = xskit_fwd::text_file::read_bounded(path, xskit_fwd::rules::MAX_SET_FILE_BYTES)
        .map_err(|e| anyhow::anyhow!("--src-list {e}"))?;
    let all = xskit_fwd::rules::set_first_addresses(&text)
        .map_err(|e| anyhow::anyhow!("--src-list {shown} line {}: {}", e.line, e.message))?;
    let count = all.len();
    let v4: Vec<Ipv4Addr> = all
        .into_iter()
        .filter_map(|a| match a {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        })
        .collect();
    if v4.len() != count {
        bail!(
            "--src-list {shown}: {} of its {count} prefixes are IPv6; --engine live sends from              IPv4 sources only",
            count - v4.len()
        );
    }
    if v4.is_empty() {
        bail!("--src-list {shown} holds no address: write one address or prefix a line");
    }
    let max = xskit_traffic::LiveFrames::MAX_SOURCES as usize;
    if v4.len() > max {
        bail!("--src-list {shown}: {count} addresses, more than the {max} the engine holds");
    }
    Ok(v4)
}

/// Says so when the template's frames are too short to carry a probe's number.
fn note_if_unnumbered(args: &GenArgs, t: &Template) {
    if !t.numbered() {
        note!(
            "xskit gen: {}-byte frames are too short for a probe header ({} bytes with these \
             options): they go out unnumbered, and recv counts them as other traffic",
            t.len(),
            Template::min_len(args.ipv6, args.vlan.is_some())
        );
    }
}

/// The probe template the options describe, `own_mac` the source MAC unless --src-mac.
fn template_from(args: &GenArgs, own_mac: [u8; 6]) -> Result<Template> {
    let src_mac = match &args.src_mac {
        Some(m) => parse_mac(m)?,
        None => own_mac,
    };
    let dst_mac = match &args.dst_mac {
        Some(m) => parse_mac(m)?,
        None => [0xff; 6],
    };
    let (default_src, default_dst): (IpAddr, IpAddr) = if args.ipv6 {
        ("2001:db8::1".parse()?, "2001:db8::2".parse()?)
    } else {
        ("198.51.100.1".parse()?, "198.51.100.2".parse()?)
    };
    let flows = Flows {
        src_macs: args.src_macs.unwrap_or(1),
        src_ips: args.src_ips.unwrap_or(1),
        dst_ips: args.dst_ips.unwrap_or(1),
        src_ports: args.flows.or(args.src_ports).unwrap_or(1),
        dst_ports: args.dst_ports.unwrap_or(1),
    };
    let ends = Endpoints {
        src_mac,
        dst_mac,
        src_ip: args.src_ip.unwrap_or(default_src),
        dst_ip: args.dst_ip.unwrap_or(default_dst),
        src_port: args.src_port.unwrap_or(9),
        dst_port: args.dst_port.unwrap_or(9),
    };
    let size = args
        .size
        .unwrap_or_else(|| Template::min_len(args.ipv6, args.vlan.is_some()).max(64));
    // What Template::new would refuse one at a time, said all at once.
    let mut mistakes = crate::opts::Mistakes::default();
    for (flag, n) in [
        ("--flows", args.flows),
        ("--src-ports", args.src_ports),
        ("--dst-ports", args.dst_ports),
        ("--src-ips", args.src_ips),
        ("--dst-ips", args.dst_ips),
        ("--src-macs", args.src_macs),
    ] {
        if n == Some(0) {
            mistakes.note(anyhow::anyhow!(
                "{flag} 0: a flow range needs at least one value"
            ));
        }
    }
    if ends.src_ip.is_ipv4() != ends.dst_ip.is_ipv4() || ends.dst_ip.is_ipv6() != args.ipv6 {
        mistakes.note(anyhow::anyhow!(
            "--src-ip {} and --dst-ip {} must both be IPv4, or both IPv6 with -6 (--ipv6)",
            ends.src_ip,
            ends.dst_ip
        ));
    } else {
        // The size and the rest, with the flow ranges' own mistakes set aside.
        let some = Flows {
            src_macs: flows.src_macs.max(1),
            src_ips: flows.src_ips.max(1),
            dst_ips: flows.dst_ips.max(1),
            src_ports: flows.src_ports.max(1),
            dst_ports: flows.dst_ports.max(1),
        };
        mistakes.take(Template::new(ends, some, args.vlan, size).map_err(anyhow::Error::from));
    }
    mistakes.finish()?;
    let t = Template::new(ends, flows, args.vlan, size).map_err(|e| match e {
        xskit_traffic::Error::EmptyFlowRange { range } => {
            let flag = match range {
                "src_ports" if args.flows.is_some() => "--flows".to_string(),
                other => format!("--{}", other.replace('_', "-")),
            };
            anyhow::anyhow!("{flag} 0: a flow range needs at least one value")
        }
        other => other.into(),
    })?;
    with_frame_options(args, t)
}

/// The template with what --partial-csum and --vlan-priority ask.
fn with_frame_options(args: &GenArgs, t: Template) -> Result<Template> {
    let t = if args.partial_csum {
        t.with_partial_checksum()
    } else {
        t
    };
    match args.vlan_priority {
        Some(pcp) => t
            .with_vlan_priority(pcp)
            .map_err(|e| anyhow::anyhow!("--vlan-priority: {e}")),
        None => Ok(t),
    }
}

/// A gen command line, checked once (every mistake at once) into what the run uses.
struct GenPlan {
    iface: Interface,
    /// The probes' template; none when replaying a capture (`--pcap`).
    template: Option<Template>,
    config: xskit::PortConfig,
    times: crate::opts::RunTimes,
    queues: Vec<u32>,
    /// The live engine's source addresses (none: the frame's own).
    sources: Vec<Ipv4Addr>,
}

impl GenPlan {
    fn new(args: &GenArgs) -> Result<GenPlan> {
        let mut m = crate::opts::Mistakes::default();
        let iface = m.take(args.port.interface().and_then(|name| {
            crate::opts::interface_exists(Ok(name))?;
            Ok(Interface::by_name(name)?)
        }));
        let template = match &args.pcap {
            Some(_) => Some(None),
            None => m.take(match &args.src_mac {
                Some(_) => template_from(args, [0; 6]).map(Some),
                None => own_mac(iface.as_ref())
                    .and_then(|mac| template_from(args, mac))
                    .map(Some),
            }),
        };
        let frame = args.port.frame_size as usize;
        let multi_buffer = template
            .as_ref()
            .and_then(Option::as_ref)
            .is_some_and(|t| t.len() > frame);
        let config = m.take(args.port.config(multi_buffer, true));
        let times = m.take(args.run.times());
        let queues = m.take(args.queues());
        let sources = m.take(live_sources(
            args,
            template.as_ref().and_then(Option::as_ref),
        ));
        let plan = (iface
            .zip(template)
            .zip(config)
            .zip(times)
            .zip(queues)
            .zip(sources))
        .map(
            |(((((iface, template), config), times), queues), sources)| GenPlan {
                iface,
                template,
                config,
                times,
                queues,
                sources,
            },
        );
        m.finish_with(plan)
    }
}

/// Refuses frames the device would drop for their size: the IP packet (the frame less its
/// Ethernet header and VLAN tag) must fit the MTU.
fn check_mtu(iface: &Interface, frame_len: usize, vlan: bool) -> Result<()> {
    let mtu = iface.link_info()?.mtu as usize;
    let header = 14 + if vlan { 4 } else { 0 };
    if frame_len > mtu + header {
        bail!(
            "-s {frame_len}: the frame carries {} bytes above its Ethernet header, more than \
             {}'s MTU of {mtu}, so the device would drop every one: use -s {} or less, or \
             raise the MTU (ip link set {} mtu {})",
            frame_len - header,
            iface.name(),
            mtu + header,
            iface.name(),
            frame_len - header
        );
    }
    Ok(())
}

/// The device's transmit drops so far.
fn tx_dropped(iface: &Interface) -> Result<u64> {
    Ok(iface.link_info()?.stats.tx_dropped)
}

/// Says how many of the packets sent the device dropped; an error status if it dropped any.
fn verdict_on_drops(iface: &Interface, sent: u64, dropped: u64) -> i32 {
    if dropped == 0 {
        return 0;
    }
    note!(
        "xskit gen: {} dropped {} of the {} packets sent (its tx_dropped counter): they never \
         left",
        iface.name(),
        thousands(dropped),
        thousands(sent)
    );
    1
}

/// `gen -r`: packets or bits per second (0 for flat out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GenRate {
    Packets(u64),
    Bits(u64),
}

impl GenRate {
    /// Packets per second for frames of `frame_len` bytes (0: flat out).
    fn pps(self, frame_len: usize) -> u64 {
        match self {
            GenRate::Packets(n) => n,
            GenRate::Bits(b) => (b / (8 * frame_len.max(1) as u64)).max(1),
        }
    }
}

/// A plain number of packets per second (0: flat out), or a rate with a unit as the rules
/// file takes it.
fn parse_gen_rate(s: &str) -> std::result::Result<GenRate, String> {
    if let Ok(n) = s.trim().parse::<u64>() {
        return Ok(GenRate::Packets(n));
    }
    match xskit_fwd::rules::Rate::parse(s)? {
        (n, xskit_fwd::rules::RateUnit::Packets) => Ok(GenRate::Packets(n)),
        (n, xskit_fwd::rules::RateUnit::Bits) => Ok(GenRate::Bits(n)),
    }
}

pub(crate) fn run(args: &GenArgs) -> Result<i32> {
    let plan = GenPlan::new(args)?;
    let iface = plan.iface.clone();
    // An interface deleted under a sender fails its next system call with the kernel's
    // words (ENXIO): say what happened instead.
    run_on(args, plan).map_err(|e| match still_there(&iface, None) {
        Err(gone) if !e.to_string().contains(GONE) => e.context(gone.to_string()),
        _ => e,
    })
}

fn run_on(args: &GenArgs, plan: GenPlan) -> Result<i32> {
    let GenPlan {
        iface,
        template,
        config,
        times,
        queues,
        sources,
    } = plan;
    let t = match (template, &args.pcap) {
        (_, Some(path)) => return replay::run(args, &iface, path),
        (Some(t), None) => t,
        (None, None) => bail!("gen: neither probes nor a capture to send"),
    };
    note_if_unnumbered(args, &t);
    let rate = args.rate.pps(t.len());
    check_mtu(&iface, t.len(), args.vlan.is_some())?;
    let dropped_before = tx_dropped(&iface)?;
    if args.engine == Engine::Live {
        return run_live(args, (&iface, &sources), &t, times, rate);
    }
    if queues.len() > 1 {
        return multi::run(args, &iface, &t, &config, &queues, rate, dropped_before);
    }
    send_on_one_queue(args, &iface, &t, &config, times, (rate, dropped_before))
}

/// gen on one queue: its port opened, the probes sent at `rate`, the report printed; the
/// exit status says whether the device dropped any (beyond `dropped_before`).
fn send_on_one_queue(
    args: &GenArgs,
    iface: &Interface,
    t: &Template,
    config: &xskit::PortConfig,
    times: crate::opts::RunTimes,
    (rate, dropped_before): (u64, u64),
) -> Result<i32> {
    let ifname = iface.name().to_string();
    let (duration, interval) = (times.duration, times.interval);
    let mut port = Port::open(&ifname, args.port.queue, config)
        .with_context(|| format!("opening {ifname} queue {}", args.port.queue))?;
    let stop = stop_flag()?;
    let start = Instant::now();
    let cpu_start = process_cpu_ns();
    let mut progress = TxProgress::new(args, &ifname, interval)?;
    let limit = args.count.unwrap_or(u64::MAX);
    let header = format!(
        "{ifname}:{} gen {} {} bytes, {} flow(s)",
        args.port.queue,
        port.mode(),
        t.len(),
        t.flows().total()
    );
    progress.live.announce(&header);
    crate::opts::note_caveats("gen", port.mode());
    let share = Share {
        first: 0,
        stride: 1,
        count: limit,
        rate,
    };
    let sent = send_share(
        &mut port,
        t,
        share,
        args.port.batch,
        &stop,
        (start, duration),
        |sent, port| progress.update(sent, sent * t.len() as u64, || port.statistics().ok()),
    )?;
    let elapsed = start.elapsed().as_secs_f64();
    let stats = port.statistics()?;
    let wakeups = port.socket().tx().map_or(0, |t| t.wakeups());
    let dropped = tx_dropped(iface)?.saturating_sub(dropped_before);
    let report = GenReport {
        interface: ifname.clone(),
        queue: args.port.queue,
        mode: port.mode().to_string(),
        wakeups,
        statistics: stats_json(&stats),
        device_tx_dropped: dropped,
        ..GenReport::measured(t, rate, sent, elapsed, cpu_start)
    };
    if args.run.json_output() {
        crate::opts::print_json("gen", &report)?;
    } else {
        out!(
            "sent {} packets in {:.2} s: {} pps; device dropped {}; kernel {}",
            thousands(sent),
            elapsed,
            thousands(report.tx_pps as u64),
            thousands(dropped),
            stats
        );
    }
    if args.count.is_some_and(|n| sent < n) && !stopped(&stop) && duration.is_none() {
        bail!("only {sent} of {} packets could be sent", limit);
    }
    Ok(verdict_on_drops(iface, sent, dropped))
}

/// One sender's part of a run: the packets numbered `first`, `first + stride`, ... (`count`
/// of them) at `rate` packets a second (0: flat out).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Share {
    pub(crate) first: u64,
    pub(crate) stride: u64,
    pub(crate) count: u64,
    pub(crate) rate: u64,
}

/// Sends `share` of the probes of `t` through `port` until it is sent, `stop` is set or the
/// run's (start, duration) is over; `tick` hears the packets sent so far after each transmit.
/// Returns the packets the device completed (waiting up to 2 s for the last completions).
pub(crate) fn send_share(
    port: &mut Port,
    t: &Template,
    share: Share,
    batch: usize,
    stop: &std::sync::atomic::AtomicBool,
    (start, duration): (Instant, Option<Duration>),
    tick: impl FnMut(u64, &Port),
) -> Result<u64> {
    let numbers = sender::Share {
        first: share.first,
        stride: share.stride,
        count: share.count,
    };
    let plan = sender::SendPlan {
        batch,
        until: duration.map(|d| start + d),
        ..sender::SendPlan::new(numbers, sender::Pace::Rate(share.rate))
    };
    let sent = sender::send(port, t, &plan, stop, tick)?;
    if sent.stuck_frames > 0 {
        note!(
            "xskit gen: {} frame(s) still on the transmit ring 2 s after the device last \
             completed one: it did not send them (link down, or a stalled queue)",
            sent.stuck_frames
        );
    }
    Ok(sent.packets)
}

/// A sender's progress every interval: a line of text, or a JSON Lines object and the
/// `--metrics` snapshot.
pub(crate) struct TxProgress {
    pub(crate) live: Live,
    interface: String,
    queue: u32,
    text: bool,
    interval: Duration,
    tick: Instant,
    at_tick: u64,
}

impl TxProgress {
    pub(crate) fn new(args: &GenArgs, interface: &str, interval: Duration) -> Result<TxProgress> {
        Ok(TxProgress {
            live: args.run.live("gen")?,
            interface: interface.to_string(),
            queue: args.port.queue,
            text: !args.run.json_output(),
            interval,
            tick: Instant::now(),
            at_tick: 0,
        })
    }

    /// Shows the counts once an interval has passed since the last time; `statistics` is
    /// asked for the socket's kernel counters only then.
    pub(crate) fn update(
        &mut self,
        sent: u64,
        bytes: u64,
        statistics: impl FnOnce() -> Option<xskit::Statistics>,
    ) {
        let secs = self.tick.elapsed().as_secs_f64();
        if secs < self.interval.as_secs_f64() {
            return;
        }
        if self.text {
            out!(
                "{}:{}  tx {:>12} pps  total {:>14}",
                self.interface,
                self.queue,
                thousands(((sent - self.at_tick.min(sent)) as f64 / secs) as u64),
                thousands(sent)
            );
        }
        self.live.tick(&serde_json::json!({
            "ports": [{
                "interface": self.interface,
                "queue": self.queue,
                "tx_packets": sent,
                "tx_bytes": bytes,
                "statistics": statistics().as_ref().map(stats_json),
            }]
        }));
        self.tick = Instant::now();
        self.at_tick = sent;
    }
}

/// Frames per live-frames call, flat out: the smallest, the largest, and the time a call aims at.
const LIVE_MIN_CHUNK: u64 = 65_536;
const LIVE_MAX_CHUNK: u64 = 1 << 22;
const LIVE_CALL: Duration = Duration::from_millis(500);

/// How often the live-frames engine looks whether its interface is still there (the kernel
/// runs its program on a device that is gone without a word).
const LOOK_EVERY: Duration = Duration::from_millis(200);

const GONE: &str = "went away while sending";

/// Fails if `iface` was deleted (or moved to another namespace) since it was looked up.
fn still_there(iface: &Interface, sent: Option<u64>) -> Result<()> {
    match Interface::by_name(iface.name()) {
        Ok(now) if now.index() == iface.index() => Ok(()),
        _ => {
            let sent = sent.map_or(String::new(), |n| {
                format!(" ({} packets sent)", thousands(n))
            });
            bail!(
                "{} {GONE}{sent}: check that the interface and its namespace \
                 still exist, then start xskit gen again",
                iface.name()
            )
        }
    }
}

/// The live-frames engine: the kernel sends copies of one probe in chunks; between chunks the
/// loop checks the clock, the count and the rate.
fn run_live(
    args: &GenArgs,
    (iface, sources): (&Interface, &[Ipv4Addr]),
    t: &Template,
    times: crate::opts::RunTimes,
    rate: u64,
) -> Result<i32> {
    let (duration, interval) = (times.duration, times.interval);
    if t.len() > 3520 {
        bail!("the live-frames engine sends single-page frames: use a packet size up to 3520");
    }
    let dropped_before = tx_dropped(iface)?;
    let mut frame = vec![0u8; t.len()];
    t.write(&mut frame, 0, 0).context("building the frame")?;
    let mut live = xskit_traffic::LiveFrames::with_sources(iface, sources)?;
    let stop = stop_flag()?;
    let header = format!(
        "{}:{} gen live-frames {} bytes",
        iface.name(),
        args.port.queue,
        t.len()
    );
    let mut progress = TxProgress::new(args, iface.name(), interval)?;
    progress.live.announce(&header);
    let limit = args.count.unwrap_or(u64::MAX);
    let start = Instant::now();
    let cpu_start = process_cpu_ns();
    let mut sent = 0u64;
    let mut last_look = Instant::now();
    // Each BPF_PROG_TEST_RUN call ends in an RCU grace period that leaves the CPU idle: with
    // 64k frames per call the engine waited most of the time (about 2 Mpps into a native XDP
    // drop here, where an engine issuing 1M per call reaches 5). Flat out, a call now carries
    // about LIVE_CALL of frames at the rate measured so far (64k to 1M), cut to the time left;
    // at a set rate, about 10 ms of it. Stop signals are held during a call, so every frame
    // counted was sent, and a stop takes effect within one call.
    let (mut chunk, mut pps) = if rate > 0 {
        ((rate / 100).clamp(1, 65536), rate as f64)
    } else {
        (LIVE_MIN_CHUNK, 0.0)
    };
    while sent < limit && !stopped(&stop) && duration.is_none_or(|d| start.elapsed() < d) {
        if rate > 0 {
            let allowed = (rate as f64 * start.elapsed().as_secs_f64()) as u64;
            if allowed <= sent {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
        }
        if rate == 0 && pps > 0.0 {
            let mut secs = LIVE_CALL.as_secs_f64();
            if let Some(d) = duration {
                secs = secs.min(d.saturating_sub(start.elapsed()).as_secs_f64());
            }
            chunk = ((pps * secs) as u64).clamp(LIVE_MIN_CHUNK, LIVE_MAX_CHUNK);
        }
        let n = chunk.min(limit - sent);
        let call = Instant::now();
        if !live.send_whole(&frame, n as u32)? {
            // Another signal cut the call short: its count is unknown, so it is not counted.
            break;
        }
        if rate == 0 {
            pps = n as f64 / call.elapsed().as_secs_f64().max(1e-6);
        }
        sent += n;
        progress.update(sent, sent * t.len() as u64, || None);
        if last_look.elapsed() >= LOOK_EVERY {
            last_look = Instant::now();
            still_there(iface, Some(sent))?;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let dropped = tx_dropped(iface)?.saturating_sub(dropped_before);
    let report = GenReport {
        interface: iface.name().to_string(),
        queue: args.port.queue,
        mode: "live-frames".into(),
        // One frame, sent again and again, from each source in turn.
        flows: sources.len().max(1) as u64,
        device_tx_dropped: dropped,
        ..GenReport::measured(t, rate, sent, elapsed, cpu_start)
    };
    if args.run.json_output() {
        crate::opts::print_json("gen", &report)?;
    } else {
        out!(
            "sent {} packets in {:.2} s: {} pps; device dropped {}; CPU {:.0}% busy",
            thousands(sent),
            elapsed,
            thousands(report.tx_pps as u64),
            thousands(dropped),
            report.cpu_share * 100.0
        );
    }
    Ok(verdict_on_drops(iface, sent, dropped))
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    #[test]
    fn a_rate_is_a_plain_number_of_packets_or_takes_the_rules_units() {
        assert_eq!(parse_gen_rate("0"), Ok(GenRate::Packets(0)));
        assert_eq!(parse_gen_rate("2500"), Ok(GenRate::Packets(2_500)));
        assert_eq!(parse_gen_rate("10kpps"), Ok(GenRate::Packets(10_000)));
        assert_eq!(parse_gen_rate("1Mpps"), Ok(GenRate::Packets(1_000_000)));
        assert_eq!(parse_gen_rate("100Mbps"), Ok(GenRate::Bits(100_000_000)));
        assert!(parse_gen_rate("fast").unwrap_err().contains("10kpps"));
        assert!(parse_gen_rate("10kg").unwrap_err().contains("Mbps"));
    }

    #[test]
    fn a_bit_rate_counts_whole_frames() {
        // 100 Mbit/s of 1,250-byte frames is 10,000 frames a second.
        assert_eq!(GenRate::Bits(100_000_000).pps(1_250), 10_000);
        assert_eq!(
            GenRate::Bits(1).pps(64),
            1,
            "never rounded down to flat out"
        );
        assert_eq!(GenRate::Packets(0).pps(64), 0);
    }
}
