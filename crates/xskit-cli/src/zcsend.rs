//! `xskit zcsend`: zero-copy sends on kernel sockets, like the kernel's msg_zerocopy selftest,
//! and `--table`, a comparison of sender CPU for copy and zero-copy.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use xskit::clock::process_cpu_ns;
use xskit::{Interface, Mode};
use xskit_testbed::{Chain, Host, Testbed, TestbedConfig};
use xskit_traffic::XdpCounter;
use xskit_zerocopy::{UringZeroCopySender, ZeroCopyConfig, ZeroCopySender, ZeroCopyStats};

use crate::opts::{stop_flag, stopped};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Role {
    /// Send to --addr for --duration seconds.
    Sender,
    /// Accept (TCP) or receive (UDP) on --addr and count.
    Receiver,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Proto {
    /// A TCP stream.
    Tcp,
    /// UDP datagrams (at most 65507 bytes each).
    Udp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnOff {
    /// MSG_ZEROCOPY (or SEND_ZC with --uring).
    On,
    /// Plain copying sends.
    Off,
}

#[derive(Args, Debug)]
pub(crate) struct ZcArgs {
    /// sender or receiver (not needed with --table).
    #[arg(long, value_enum)]
    role: Option<Role>,
    /// Transport.
    #[arg(long, value_enum, default_value = "tcp")]
    proto: Proto,
    /// Peer address (sender) or local address to bind (receiver); IPv4 or IPv6.
    #[arg(long)]
    addr: Option<IpAddr>,
    /// Port.
    #[arg(long, default_value_t = 9000)]
    port: u16,
    /// Bytes per send call.
    #[arg(short = 's', long = "size", default_value_t = 65536)]
    size: usize,
    /// How long to send (sender) or to wait at most (receiver): seconds (2.5) or a
    /// duration (30s, 5m).
    #[arg(short = 'd', long, value_name = "DURATION", default_value = "2", value_parser = crate::opts::seconds)]
    duration: f64,
    /// Zero-copy on or off.
    #[arg(short = 'z', long = "zerocopy", value_enum, default_value = "on")]
    zerocopy: OnOff,
    /// Use io_uring SEND_ZC with registered buffers instead of MSG_ZEROCOPY.
    #[arg(long)]
    uring: bool,
    /// UDP: cork, sending four writes as one datagram.
    #[arg(long)]
    cork: bool,
    /// A table on a testbed: sender CPU for copy and zero-copy by write size.
    #[arg(long)]
    table: bool,
    /// Print one JSON object at the end.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Default)]
struct ZcReport {
    role: &'static str,
    proto: String,
    size: usize,
    zerocopy_asked: bool,
    uring: bool,
    duration_s: f64,
    bytes: u64,
    mb_per_s: f64,
    sends: u64,
    zerocopy_completions: u64,
    copied_completions: u64,
    went_zerocopy: bool,
    zerocopy_disabled: Option<String>,
    cpu_s_per_gb: f64,
    notify_latency_mean_us: f64,
}

pub(crate) fn run(args: &ZcArgs) -> Result<i32> {
    if args.table {
        return table(args);
    }
    let Some(role) = args.role else {
        bail!("say --role sender or --role receiver (or --table)");
    };
    let Some(addr) = args.addr else {
        bail!("--addr is required: the peer's address (sender) or the address to bind (receiver)");
    };
    if args.size == 0 || args.size > 16 << 20 {
        bail!("--size {} is out of range: use 1 byte to 16 MiB", args.size);
    }
    if args.proto == Proto::Udp && args.size > 65507 {
        bail!(
            "--size {} is too large for one UDP datagram (at most 65507 bytes)",
            args.size
        );
    }
    if !(args.duration > 0.0 && args.duration < 1e6) {
        bail!(
            "--duration {} must be a positive number of seconds",
            args.duration
        );
    }
    if args.cork && args.proto != Proto::Udp {
        bail!("--cork applies to UDP only");
    }
    let target = SocketAddr::new(addr, args.port);
    let report = match role {
        Role::Sender => send(args, target)?,
        Role::Receiver => receive(args, target)?,
    };
    if args.json {
        crate::opts::print_json("zcsend", &report)?;
    } else {
        out!(
            "{} {:?} {} B: {:.1} MB/s, {} sends, {} zero-copy / {} copied completions{}; sender CPU {:.3} s/GB",
            report.role,
            args.proto,
            report.size,
            report.mb_per_s,
            report.sends,
            report.zerocopy_completions,
            report.copied_completions,
            report.zerocopy_disabled.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
            report.cpu_s_per_gb
        );
    }
    Ok(0)
}

fn fill(buf: &mut [u8], seq: u64) {
    buf.fill(seq as u8);
}

/// A connected socket to `target` (TCP or UDP, as asked).
fn connect(args: &ZcArgs, target: SocketAddr) -> Result<(Option<TcpStream>, Option<UdpSocket>)> {
    Ok(match args.proto {
        Proto::Tcp => (
            Some(TcpStream::connect(target).with_context(|| format!("connecting to {target}"))?),
            None,
        ),
        Proto::Udp => {
            let bind: SocketAddr = if target.is_ipv6() {
                "[::]:0".parse()?
            } else {
                "0.0.0.0:0".parse()?
            };
            let s = UdpSocket::bind(bind)?;
            s.connect(target)
                .with_context(|| format!("connecting to {target}"))?;
            (None, Some(s))
        }
    })
}

/// io_uring SEND_ZC until `over`: 16 registered buffers, each refilled when it comes back.
fn send_uring(
    args: &ZcArgs,
    fd: std::os::fd::OwnedFd,
    over: impl Fn() -> bool,
) -> Result<ZeroCopyStats> {
    let mut sender = UringZeroCopySender::new(fd, 16, args.size)?;
    let mut seq = 0u64;
    while !over() {
        match sender.take_slot() {
            Some(idx) => {
                fill(&mut sender.slot_mut(idx)[..args.size], seq);
                sender.send(idx, args.size)?;
                seq += 1;
            }
            None => {
                sender.wait()?;
            }
        }
    }
    sender.flush(Duration::from_secs(10))?;
    Ok(sender.stats().clone())
}

/// send(2) with MSG_ZEROCOPY (or copying) until `over`: 16 buffers, each reused when its
/// completion comes back; with --cork, every four sends corked into one.
fn send_msg(
    args: &ZcArgs,
    fd: std::os::fd::OwnedFd,
    zerocopy: bool,
    over: impl Fn() -> bool,
) -> Result<ZeroCopyStats> {
    let config = ZeroCopyConfig::default()
        .zerocopy(zerocopy)
        .threshold(if zerocopy { 0 } else { usize::MAX });
    let mut sender = ZeroCopySender::new(fd, config)?;
    let mut free: Vec<Vec<u8>> = (0..16).map(|_| vec![0u8; args.size]).collect();
    let mut seq = 0u64;
    while !over() {
        let Some(mut buf) = free.pop() else {
            sender.reap(&mut free)?;
            if free.is_empty() {
                std::thread::yield_now();
            }
            continue;
        };
        fill(&mut buf, seq);
        let corked = args.cork && seq.is_multiple_of(4);
        if corked {
            sender.set_cork(true)?;
        }
        sender.send(buf)?;
        if args.cork && seq % 4 == 3 {
            sender.set_cork(false)?;
        }
        seq += 1;
    }
    if args.cork {
        sender.set_cork(false)?;
    }
    sender.flush(Duration::from_secs(10), &mut free)?;
    Ok(sender.stats().clone())
}

fn send(args: &ZcArgs, target: SocketAddr) -> Result<ZcReport> {
    let stop = stop_flag()?;
    let duration = Duration::from_secs_f64(args.duration);
    let zerocopy = args.zerocopy == OnOff::On;
    let (tcp, udp) = connect(args, target)?;
    let fd: std::os::fd::OwnedFd = match (&tcp, &udp) {
        (Some(t), _) => t.try_clone()?.into(),
        (_, Some(u)) => u.try_clone()?.into(),
        _ => unreachable!("one socket is open"),
    };
    let start = Instant::now();
    let cpu_start = process_cpu_ns();
    let over = || start.elapsed() >= duration || stopped(&stop);
    let stats = if args.uring && zerocopy {
        send_uring(args, fd, over)?
    } else {
        send_msg(args, fd, zerocopy, over)?
    };
    let secs = start.elapsed().as_secs_f64();
    let cpu = (process_cpu_ns() - cpu_start) as f64 / 1e9;
    if let Some(t) = tcp {
        let _ = t.shutdown(std::net::Shutdown::Write);
    }
    let completions = stats.zerocopy_completions + stats.copied_completions;
    Ok(ZcReport {
        role: "sender",
        proto: format!("{:?}", args.proto).to_lowercase(),
        size: args.size,
        zerocopy_asked: zerocopy,
        uring: args.uring,
        duration_s: secs,
        bytes: stats.bytes,
        mb_per_s: stats.bytes as f64 / secs / 1e6,
        sends: stats.zerocopy_calls + stats.copy_calls,
        zerocopy_completions: stats.zerocopy_completions,
        copied_completions: stats.copied_completions,
        went_zerocopy: stats.zerocopy_completions > 0 && stats.copied_completions == 0,
        zerocopy_disabled: stats.disabled.clone(),
        cpu_s_per_gb: cpu / (stats.bytes.max(1) as f64 / 1e9),
        notify_latency_mean_us: if completions > 0 {
            stats.notify_latency_sum_ns as f64 / stats.buffers.max(1) as f64 / 1000.0
        } else {
            0.0
        },
    })
}

fn receive(args: &ZcArgs, local: SocketAddr) -> Result<ZcReport> {
    let stop = stop_flag()?;
    let limit = Duration::from_secs_f64(args.duration);
    let mut buf = vec![0u8; args.size.max(65536)];
    let mut bytes = 0u64;
    let start = Instant::now();
    match args.proto {
        Proto::Tcp => {
            let listener = TcpListener::bind(local).with_context(|| format!("binding {local}"))?;
            if !args.json {
                out!("listening on {local}");
            } else {
                eprintln!("listening on {local}");
            }
            let (mut conn, _) = listener.accept()?;
            conn.set_read_timeout(Some(Duration::from_millis(200)))?;
            while start.elapsed() < limit && !stopped(&stop) {
                match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => bytes += n as u64,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Proto::Udp => {
            let socket = UdpSocket::bind(local).with_context(|| format!("binding {local}"))?;
            eprintln!("listening on {local}");
            socket.set_read_timeout(Some(Duration::from_millis(200)))?;
            while start.elapsed() < limit && !stopped(&stop) {
                if let Ok(n) = socket.recv(&mut buf) {
                    bytes += n as u64;
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(ZcReport {
        role: "receiver",
        proto: format!("{:?}", args.proto).to_lowercase(),
        size: args.size,
        duration_s: secs,
        bytes,
        mb_per_s: bytes as f64 / secs / 1e6,
        ..ZcReport::default()
    })
}

/// One cell of the table: a sender process in `host`'s namespace.
fn sender_run(
    host: &Host,
    proto: &str,
    addr: IpAddr,
    size: usize,
    zc: bool,
    secs: f64,
) -> Result<serde_json::Value> {
    let exe = std::env::current_exe()?;
    let out = host
        .ns
        .command("taskset")
        .arg("-c")
        .arg("0")
        .arg(&exe)
        .args([
            "zcsend",
            "--role",
            "sender",
            "--proto",
            proto,
            "--addr",
            &addr.to_string(),
            "--port",
            "9000",
        ])
        .args([
            "-s",
            &size.to_string(),
            "-d",
            &secs.to_string(),
            "-z",
            if zc { "on" } else { "off" },
            "--json",
        ])
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!(
            "zcsend sender failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// A row of the table: path, write size, and (copy s/GB, zero-copy s/GB, COPIED reported),
/// or None where the path cannot carry the size.
type ZcRow = (&'static str, usize, Option<(f64, f64, bool)>);

/// The table's sizes.
const ZC_SIZES: [usize; 5] = [4096, 16384, 65536, 262144, 1 << 20];

fn table(args: &ZcArgs) -> Result<i32> {
    if !xskit_testbed::have_privileges() {
        bail!("zcsend --table builds network namespaces: run it as root (e.g. with sudo)");
    }
    let secs = args.duration.clamp(0.2, 60.0);
    let mut rows = udp_forwarded_rows(secs)?;
    rows.extend(tcp_local_rows(secs)?);
    print_table(secs, rows);
    Ok(0)
}

/// UDP from a, routed by m, dropped by XDP on c: no local delivery, no copy. The links carry
/// 64K datagrams whole: IP fragmentation would copy the pages (and say COPIED).
fn udp_forwarded_rows(secs: f64) -> Result<Vec<ZcRow>> {
    let chain = Chain::with_mtu(Some(65535)).context("building the a - m - c testbed")?;
    let ping = chain
        .a
        .ns
        .command("ping")
        .args(["-c", "1", "-W", "2", &chain.c.ip.to_string()])
        .output()?;
    if !ping.status.success() {
        bail!("the chain testbed does not forward");
    }
    let c_if = chain.c.ifname.clone();
    // Native XDP (generic XDP would linearise the zero-copy skb, which copies), in its
    // multi-buffer variant, which native XDP requires at a 64K MTU.
    let _sink = chain
        .c
        .ns
        .run(|| XdpCounter::drop_all(&Interface::by_name(&c_if)?, Mode::Drv, true))??;
    let mut rows = Vec::new();
    for size in ZC_SIZES {
        if size > 65536 {
            rows.push(("udp, forwarded, XDP drop", size, None));
            continue;
        }
        let datagram = size.min(65507);
        let copy = sender_run(&chain.a, "udp", chain.c.ip.into(), datagram, false, secs)?;
        let zc = sender_run(&chain.a, "udp", chain.c.ip.into(), datagram, true, secs)?;
        rows.push((
            "udp, forwarded, XDP drop",
            size,
            Some((
                copy["cpu_s_per_gb"].as_f64().unwrap_or(0.0),
                zc["cpu_s_per_gb"].as_f64().unwrap_or(0.0),
                zc["copied_completions"].as_u64().unwrap_or(0) > 0,
            )),
        ));
    }
    Ok(rows)
}

/// TCP into another namespace: local delivery, so the kernel copies and says so.
fn tcp_local_rows(secs: f64) -> Result<Vec<ZcRow>> {
    let bed = Testbed::new(&TestbedConfig::default())?;
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for size in ZC_SIZES {
        let mut cells = [0.0f64; 2];
        let mut copied = false;
        for (i, zc) in [false, true].into_iter().enumerate() {
            let mut receiver = bed
                .b
                .ns
                .command("taskset")
                .arg("-c")
                .arg("1")
                .arg(&exe)
                .args(["zcsend", "--role", "receiver", "--proto", "tcp", "--addr"])
                .args([&bed.b.ip.to_string(), "--port", "9000"])
                .args(["-d", &(secs + 5.0).to_string(), "--json"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(receiver.stderr.take().expect("piped")),
                &mut line,
            )?;
            let s = sender_run(&bed.a, "tcp", bed.b.ip.into(), size, zc, secs)?;
            let _ = receiver.wait_with_output()?;
            cells[i] = s["cpu_s_per_gb"].as_f64().unwrap_or(0.0);
            if zc {
                copied = s["copied_completions"].as_u64().unwrap_or(0) > 0;
            }
        }
        rows.push((
            "tcp, local delivery",
            size,
            Some((cells[0], cells[1], copied)),
        ));
    }
    Ok(rows)
}

fn print_table(secs: f64, rows: Vec<ZcRow>) {
    out!("sender process CPU (user+sys) per GB sent, {secs:.1} s per cell");
    out!(
        "{:<26} {:>8} {:>12} {:>12} {:>8}  {}",
        "path",
        "write",
        "copy s/GB",
        "zc s/GB",
        "zc/copy",
        "COPIED reported"
    );
    for (path, size, cell) in rows {
        let size_s = if size >= 1 << 20 {
            format!("{}M", size >> 20)
        } else {
            format!("{}K", size >> 10)
        };
        match cell {
            Some((copy, zc, copied)) => out!(
                "{path:<26} {size_s:>8} {copy:>12.3} {zc:>12.3} {:>8.2}  {}",
                zc / copy.max(1e-12),
                if copied { "yes: the kernel copied, zero-copy switched off" } else { "no" }
            ),
            None => out!("{path:<26} {size_s:>8} {:>12} {:>12} {:>8}  a UDP datagram holds at most 65507 bytes", "-", "-", "-"),
        }
    }
}
