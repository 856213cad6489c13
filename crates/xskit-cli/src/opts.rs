//! Options shared by the commands that open a port, named as in xdpsock and xdp-tools. A short
//! flag means the same thing in every command.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::MetricsServer;
use anyhow::{bail, Context, Result};
use clap::Args;
use xskit::{BusyPoll, Mode, PortConfig, SocketConfig, UmemConfig};

/// Frames in a UMEM when `--frames` is not given.
const DEFAULT_FRAMES: u32 = 8192;

#[derive(Args, Clone, Debug)]
pub(crate) struct PortArgs {
    /// The interface.
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    pub(crate) interface: Option<String>,
    /// The queue.
    #[arg(short = 'q', long, default_value_t = 0)]
    pub(crate) queue: u32,
    /// Where the XDP program runs and whether the socket copies.
    #[arg(short = 'm', long, value_enum, default_value_t = ModeArg::Auto)]
    pub(crate) mode: ModeArg,
    /// Descriptors per ring operation.
    #[arg(short = 'b', long = "batch-size", default_value_t = 64)]
    pub(crate) batch: usize,
    /// Sleep in poll() when there is nothing to do, instead of spinning.
    #[arg(short = 'p', long)]
    pub(crate) poll: bool,
    /// Busy polling (SO_PREFER_BUSY_POLL, SO_BUSY_POLL 20 us, budget = batch size).
    #[arg(short = 'B', long = "busy-poll")]
    pub(crate) busy_poll: bool,
    /// Turn need_wakeup off: the kernel is kicked on every batch.
    #[arg(short = 'W', long = "no-need-wakeup")]
    pub(crate) no_need_wakeup: bool,
    /// Frame size: 2048 or 4096 (any size between them with --unaligned).
    #[arg(short = 'f', long = "frame-size", default_value_t = 4096)]
    pub(crate) frame_size: u32,
    /// Unaligned-chunk UMEM.
    #[arg(short = 'u', long)]
    pub(crate) unaligned: bool,
    /// Frames in the UMEM [default: 8192; in `bench`, the fill ring's size, as in xdpsock,
    /// so that every frame received can go straight back to the fill ring].
    #[arg(long, value_name = "N")]
    pub(crate) frames: Option<u32>,
    /// Entries in the rx, tx and completion rings; the fill ring gets twice as many, as in
    /// xdpsock, so a burst never finds it empty.
    #[arg(long = "ring-size", default_value_t = 2048)]
    pub(crate) ring_size: u32,
    /// Frames one transmit system call may send in copy mode (XDP_MAX_TX_SKB_BUDGET, clamped
    /// to the ring size); 0 keeps the kernel's default of 32.
    #[arg(long = "tx-budget", value_name = "N", default_value_t = xskit::DEFAULT_TX_SKB_BUDGET)]
    pub(crate) tx_budget: u32,
}

/// `--mode` of the commands that open ports (xskit::Mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModeArg {
    /// Zero-copy, else native copy, else generic (skb).
    Auto,
    /// Generic XDP, copy: works on every device.
    Skb,
    /// Native XDP in the driver, copy.
    #[value(alias = "native")]
    Drv,
    /// Native XDP, zero-copy.
    #[value(name = "zc", alias = "zero-copy")]
    ZeroCopy,
}

impl From<ModeArg> for Mode {
    fn from(mode: ModeArg) -> Mode {
        match mode {
            ModeArg::Auto => Mode::Auto,
            ModeArg::Skb => Mode::Skb,
            ModeArg::Drv => Mode::Drv,
            ModeArg::ZeroCopy => Mode::ZeroCopy,
        }
    }
}

impl PortArgs {
    pub(crate) fn mode(&self) -> Mode {
        self.mode.into()
    }

    pub(crate) fn interface(&self) -> Result<&str> {
        match &self.interface {
            Some(i) => Ok(i),
            None => bail!("this command needs an interface: -i IFACE"),
        }
    }

    /// These options with `--frames` defaulting to the fill ring's size (twice `--ring-size`),
    /// as xdpsock sizes its UMEM: a frame the kernel hands back then always has room on the
    /// fill ring, which the benchmark loops give it straight back to.
    pub(crate) fn with_frames_filling_the_ring(&self) -> PortArgs {
        PortArgs {
            frames: self.frames.or(Some(self.ring_size.saturating_mul(2))),
            ..self.clone()
        }
    }

    pub(crate) fn config(&self, multi_buffer: bool, tx_only: bool) -> Result<PortConfig> {
        let mut mistakes = Mistakes::default();
        if self.batch == 0 || self.batch > 4096 {
            mistakes.note(anyhow::anyhow!(
                "batch size {} is out of range: use 1 to 4096",
                self.batch
            ));
        }
        mistakes.take(check_ring_size(
            self.ring_size,
            "batch size (-b)",
            self.batch,
        ));
        mistakes.finish()?;
        Ok(PortConfig::default()
            .mode(self.mode())
            .umem(
                UmemConfig::default()
                    .frame_size(self.frame_size)
                    .frame_count(self.frames.unwrap_or(DEFAULT_FRAMES))
                    .unaligned(self.unaligned),
            )
            .socket(
                SocketConfig::default()
                    .rx_size(self.ring_size)
                    .tx_size(self.ring_size)
                    .fill_size(self.ring_size.saturating_mul(2))
                    .completion_size(self.ring_size)
                    .need_wakeup(!self.no_need_wakeup)
                    .multi_buffer(multi_buffer)
                    .tx_skb_budget((self.tx_budget > 0).then_some(self.tx_budget))
                    .busy_poll(
                        self.busy_poll
                            .then_some(BusyPoll::new(Duration::from_micros(20), self.batch as u32)),
                    ),
            )
            .tx_only(tx_only))
    }
}

/// Checks `--ring-size` (the fill ring gets twice as many entries) against xskit's range and
/// against `what` (a batch or vector size), which one ring must hold whole.
pub(crate) fn check_ring_size(size: u32, what: &str, per_call: usize) -> Result<()> {
    let max = xskit::MAX_RING_SIZE / 2;
    if !size.is_power_of_two() || !(xskit::MIN_RING_SIZE..=max).contains(&size) {
        bail!(
            "--ring-size {size} must be a power of two from {} to {max} (the fill ring gets \
             twice as many entries)",
            xskit::MIN_RING_SIZE
        );
    }
    if per_call > size as usize {
        bail!(
            "--ring-size {size} is smaller than the {what} {per_call}: a ring must hold a \
             whole {what}; give a larger ring or a smaller {what}"
        );
    }
    Ok(())
}

/// The version of the JSON every command prints: raised when a field changes meaning or goes.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// Rounds every fractional number in `v` to 3 decimals (rates, ratios, seconds): the digits
/// past that are noise of the clock, not information.
fn round_floats(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            if let Some(r) = n.as_f64().map(|f| (f * 1000.0).round() / 1000.0) {
                if let Some(r) = serde_json::Number::from_f64(r) {
                    *n = r;
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(round_floats),
        serde_json::Value::Object(map) => map.values_mut().for_each(round_floats),
        _ => {}
    }
}

/// `value` as one line of JSON on stdout, with the schema every command shares: `command`
/// and `schema_version` on the object (a list goes under `rows`), fractions rounded.
pub(crate) fn print_json(command: &str, value: &impl serde::Serialize) -> Result<()> {
    out!("{}", serde_json::to_string(&json_object(command, value)?)?);
    Ok(())
}

/// `value` as the object `--json` prints: rows under `rows`, floats rounded, the command
/// and the schema's version named.
fn json_object(command: &str, value: &impl serde::Serialize) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(value)?;
    if v.is_array() {
        v = serde_json::json!({ "rows": v });
    }
    round_floats(&mut v);
    if let serde_json::Value::Object(map) = &mut v {
        map.insert("command".into(), command.into());
        map.insert("schema_version".into(), SCHEMA_VERSION.into());
    }
    Ok(v)
}

/// A command's counters every interval, for machines: a JSON Lines object and the
/// `--metrics` snapshot.
#[derive(Debug)]
pub(crate) struct Live {
    command: &'static str,
    json: bool,
    json_lines: bool,
    metrics: Option<MetricsServer>,
    start: std::time::Instant,
    /// The loop the command's endpoints share (the metrics, a control socket), made when
    /// the first needs it; after them, so that it ends last.
    events: Option<crate::serve::EventLoop>,
}

impl Live {
    /// Prints the command's header line ([`announce`]), then where the metrics are served.
    pub(crate) fn announce(&self, header: &str) {
        announce(self.json, header);
        self.announce_metrics();
    }

    /// Says on stderr where the metrics are served, if they are.
    pub(crate) fn announce_metrics(&self) {
        if let Some(m) = &self.metrics {
            note!(
                "xskit {}: metrics at http://{}/metrics",
                self.command,
                m.addr()
            );
        }
    }

    /// Serves `--metrics` for a forwarder that took over: on the listening socket its
    /// predecessor handed over (`handed`), so that no scrape is refused meanwhile, when it
    /// listens where `--metrics` says; else once the port is free (the predecessor still
    /// listens there until it leaves: waited for at most
    /// [`xskit_fwd::handover::HANDOVER_WAIT`]).
    pub(crate) fn start_metrics_when_free(
        &mut self,
        run: &RunArgs,
        handed: Option<std::os::fd::OwnedFd>,
    ) -> Result<()> {
        let Some(addr) = &run.metrics else {
            return Ok(());
        };
        let handed = handed
            .map(std::net::TcpListener::from)
            .filter(|l| same_address(l, addr));
        if let Some(listener) = handed {
            self.metrics = Some(MetricsServer::start_on(
                listener,
                addr,
                self.command,
                self.events()?,
            )?);
            return Ok(());
        }
        let deadline = std::time::Instant::now() + xskit_fwd::handover::HANDOVER_WAIT;
        loop {
            match MetricsServer::start(addr, self.command, self.events()?) {
                Ok(m) => {
                    self.metrics = Some(m);
                    return Ok(());
                }
                // The forwarder leaving still listens.
                Err(e)
                    if e.downcast_ref::<std::io::Error>()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Leaves the metrics' listening socket to the successor that took over: see
    /// [`MetricsServer::leave_to_successor`].
    pub(crate) fn leave_metrics_to_successor(&self) {
        if let Some(m) = &self.metrics {
            m.leave_to_successor();
        }
    }

    /// Its metrics server's listening socket, for a successor.
    pub(crate) fn metrics_listener(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.metrics.as_ref().map(MetricsServer::listener)
    }

    /// The event loop the command's endpoints share, started now if none runs yet.
    pub(crate) fn events(&mut self) -> Result<&crate::serve::EventLoop> {
        if self.events.is_none() {
            self.events = Some(crate::serve::EventLoop::start("xskit-serve")?);
        }
        Ok(self.events.as_ref().expect("just made"))
    }

    /// Shows `counters` (what the command counted so far, as its --json names them).
    pub(crate) fn tick(&self, counters: &impl serde::Serialize) {
        if let Some(m) = &self.metrics {
            m.publish(counters);
        }
        if self.json_lines {
            // A closed stdout ends nothing here: the run goes on to its summary.
            if let Ok(line) = self.interval_line(counters) {
                out!("{line}");
            }
        }
    }

    /// The interval line `--json-lines` prints for `counters` (what a control socket's
    /// `status` answers too).
    pub(crate) fn interval_line(
        &self,
        counters: &impl serde::Serialize,
    ) -> Result<serde_json::Value> {
        json_object(
            self.command,
            &serde_json::json!({
                "interval": true,
                "elapsed_s": self.start.elapsed().as_secs_f64(),
                "counters": counters,
            }),
        )
    }
}

/// A `-d` value in seconds: a number of seconds (`2.5`) or a duration with its unit (`30s`,
/// `5m`, `1h`, `500ms`, `1h 30m`).
pub(crate) fn seconds(s: &str) -> Result<f64, String> {
    if let Ok(n) = s.trim().parse::<f64>() {
        return Ok(n);
    }
    humantime::parse_duration(s.trim())
        .map(|d| d.as_secs_f64())
        .map_err(|e| format!("{e}: give seconds (2.5) or a duration such as 30s, 5m or 1h"))
}

/// How long a command runs: a count, a duration, or until interrupted.
#[derive(Args, Clone, Debug)]
pub(crate) struct RunArgs {
    /// Stop after this long: seconds (2.5) or a duration (30s, 5m, 1h).
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = seconds)]
    pub(crate) duration: Option<f64>,
    /// Seconds between progress lines.
    #[arg(short = 'I', long, default_value_t = 1.0)]
    pub(crate) interval: f64,
    /// Print one JSON object at the end instead of progress lines.
    #[arg(long)]
    pub(crate) json: bool,
    /// JSON Lines: an object with the counters every interval (`"interval": true`), then
    /// the summary --json prints.
    #[arg(long = "json-lines")]
    pub(crate) json_lines: bool,
    /// Serve the live counters for Prometheus at http://HOST:PORT/metrics (OpenMetrics text,
    /// updated every interval; port 0 picks a free port, printed on stderr).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) metrics: Option<String>,
}

impl RunArgs {
    pub(crate) fn duration(&self) -> Result<Option<Duration>> {
        match self.duration {
            Some(d) if !(d > 0.0 && d < 1e6) => {
                bail!("--duration {d} must be a positive number of seconds")
            }
            Some(d) => Ok(Some(Duration::from_secs_f64(d))),
            None => Ok(None),
        }
    }

    /// Whether the summary is JSON (`--json` or `--json-lines`), and progress lines are off.
    pub(crate) fn json_output(&self) -> bool {
        self.json || self.json_lines
    }

    /// What the command shows every interval besides its progress lines; starts the
    /// `--metrics` server, if asked for.
    pub(crate) fn live(&self, command: &'static str) -> Result<Live> {
        let mut live = self.live_without_metrics(command);
        if let Some(addr) = &self.metrics {
            let metrics = MetricsServer::start(addr, command, live.events()?)?;
            live.metrics = Some(metrics);
        }
        Ok(live)
    }

    /// [`RunArgs::live`] with the metrics started later ([`Live::start_metrics_when_free`]).
    pub(crate) fn live_without_metrics(&self, command: &'static str) -> Live {
        Live {
            command,
            json: self.json_output(),
            json_lines: self.json_lines,
            metrics: None,
            start: std::time::Instant::now(),
            events: None,
        }
    }

    pub(crate) fn interval(&self) -> Result<Duration> {
        if !(self.interval >= 0.05 && self.interval < 1e6) {
            bail!("--interval {} must be at least 0.05 seconds", self.interval);
        }
        Ok(Duration::from_secs_f64(self.interval))
    }

    /// `--duration` and `--interval`, checked once (both mistakes, if both are wrong).
    pub(crate) fn times(&self) -> Result<RunTimes> {
        let mut m = Mistakes::default();
        let duration = m.take(self.duration());
        let interval = m.take(self.interval());
        let times = duration
            .zip(interval)
            .map(|(duration, interval)| RunTimes { duration, interval });
        m.finish_with(times)
    }
}

/// How long a run lasts (until stopped, without `--duration`) and how often it reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunTimes {
    pub(crate) duration: Option<Duration>,
    pub(crate) interval: Duration,
}

/// Set by SIGINT or SIGTERM: long-running commands stop cleanly, print their summary and drop
/// their ports (detaching programs) instead of dying mid-run.
pub(crate) fn stop_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone()).context("installing a signal handler")?;
    }
    Ok(flag)
}

pub(crate) fn stopped(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed)
}

/// Says what the user should know of the mode `command`'s port obtained on its device (a
/// driver's zero-copy transmit caveat), after its header.
pub(crate) fn note_caveats(command: &str, mode: &xskit::ModeInfo) {
    for caveat in &mode.caveats {
        note!("xskit {command}: note: {caveat} (-m drv)");
    }
}

/// Prints a command's header line: to stdout, or to stderr under --json, where stdout carries
/// only the JSON (and a parent process waits for the header to know the command is ready).
pub(crate) fn announce(json: bool, header: &str) {
    if json {
        note!("{header}");
    } else {
        out!("{header}");
    }
}

/// Parses "02:00:00:00:00:01".
pub(crate) fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let parts: Vec<_> = s.split(':').collect();
    if parts.len() != 6 {
        bail!("'{s}' is not a MAC address (expected six hex bytes like 02:00:00:00:00:01)");
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).with_context(|| format!("'{s}' is not a MAC address"))?;
    }
    Ok(mac)
}

/// Groups digits by thousands: 1234567 -> "1,234,567".
pub(crate) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A transmit hash policy, named as Linux's xmit_hash_policy, or one of DPDK's bonding
/// PMD's, named apart (`dpdk-l2`, `dpdk-l23`, `dpdk-l34`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum PolicyArg {
    #[value(name = "layer2")]
    Layer2,
    #[value(name = "layer2+3")]
    Layer23,
    #[value(name = "layer3+4")]
    Layer34,
    #[value(name = "encap2+3")]
    Encap23,
    #[value(name = "encap3+4")]
    Encap34,
    #[value(name = "vlan+srcmac")]
    VlanSrcMac,
    /// DPDK's bonding PMD's l2 (not a Linux policy).
    #[value(name = "dpdk-l2")]
    DpdkL2,
    /// DPDK's bonding PMD's l23 (not a Linux policy).
    #[value(name = "dpdk-l23")]
    DpdkL23,
    /// DPDK's bonding PMD's l34 (not a Linux policy).
    #[value(name = "dpdk-l34")]
    DpdkL34,
}

impl From<PolicyArg> for xskit_bond::XmitHashPolicy {
    fn from(p: PolicyArg) -> Self {
        match p {
            PolicyArg::Layer2 => xskit_bond::XmitHashPolicy::Layer2,
            PolicyArg::Layer23 => xskit_bond::XmitHashPolicy::Layer23,
            PolicyArg::Layer34 => xskit_bond::XmitHashPolicy::Layer34,
            PolicyArg::Encap23 => xskit_bond::XmitHashPolicy::Encap23,
            PolicyArg::Encap34 => xskit_bond::XmitHashPolicy::Encap34,
            PolicyArg::VlanSrcMac => xskit_bond::XmitHashPolicy::VlanSrcMac,
            PolicyArg::DpdkL2 => xskit_bond::XmitHashPolicy::DpdkL2,
            PolicyArg::DpdkL23 => xskit_bond::XmitHashPolicy::DpdkL23,
            PolicyArg::DpdkL34 => xskit_bond::XmitHashPolicy::DpdkL34,
        }
    }
}

/// The mistakes of a command line, gathered so that one run reports every one of them; a
/// check that found several (a port's options) adds each of its own.
#[derive(Debug, Default)]
pub(crate) struct Mistakes(Vec<String>);

impl std::fmt::Display for Mistakes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            many => write!(f, "{} mistakes:\n  - {}", many.len(), many.join("\n  - ")),
        }
    }
}

impl std::error::Error for Mistakes {}

impl Mistakes {
    /// `r`'s value, or `None` with its mistakes noted.
    pub(crate) fn take<T>(&mut self, r: Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                match e.downcast_ref::<Mistakes>() {
                    Some(inner) => self.0.extend(inner.0.iter().cloned()),
                    None => self.0.push(format!("{e:#}")),
                }
                None
            }
        }
    }

    /// Notes a mistake.
    pub(crate) fn note(&mut self, e: anyhow::Error) {
        self.take::<()>(Err(e));
    }

    /// Every mistake noted, as one error; `Ok` if there was none.
    pub(crate) fn finish(self) -> Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        Err(self.into())
    }

    /// `value`, made of what the checks gave, when they found no mistake.
    pub(crate) fn finish_with<T>(self, value: Option<T>) -> Result<T> {
        self.finish()?;
        // `take` gives `None` only when it notes a mistake.
        value.ok_or_else(|| anyhow::anyhow!("a check gave no value and noted no mistake"))
    }
}

/// A check that the interface is there (it needs no privileges).
pub(crate) fn interface_exists(name: Result<&str>) -> Result<()> {
    xskit::Interface::by_name(name?)?;
    Ok(())
}

/// Whether `listener` listens where `--metrics` `addr` asks: the same address (a port 0
/// asks for any port).
fn same_address(listener: &std::net::TcpListener, addr: &str) -> bool {
    let Ok(local) = listener.local_addr() else {
        return false;
    };
    std::net::ToSocketAddrs::to_socket_addrs(addr).is_ok_and(|mut asked| {
        asked.any(|a| a.ip() == local.ip() && (a.port() == 0 || a.port() == local.port()))
    })
}

#[cfg(test)]
mod tests {
    use super::seconds;

    #[test]
    fn run_times_are_read_once_with_both_mistakes_said() {
        let run = |duration, interval| super::RunArgs {
            duration,
            interval,
            json: false,
            json_lines: false,
            metrics: None,
        };
        let times = run(Some(2.5), 0.5).times().unwrap();
        assert_eq!(
            (times.duration, times.interval),
            (
                Some(std::time::Duration::from_millis(2500)),
                std::time::Duration::from_millis(500)
            )
        );
        let e = run(Some(-1.0), 0.0).times().unwrap_err().to_string();
        assert!(
            e.contains("2 mistakes") && e.contains("--duration") && e.contains("--interval"),
            "{e}"
        );
    }

    #[test]
    fn durations_are_seconds_or_have_a_unit() {
        for (text, want) in [
            ("2.5", 2.5),
            ("30s", 30.0),
            ("5m", 300.0),
            ("1h", 3600.0),
            ("500ms", 0.5),
            ("1h 30m", 5400.0),
            (" 10 ", 10.0),
        ] {
            assert_eq!(seconds(text), Ok(want), "{text}");
        }
        for bad in ["", "ten", "5x", "-"] {
            let e = seconds(bad).unwrap_err();
            assert!(e.contains("give seconds (2.5) or a duration"), "{bad}: {e}");
        }
    }
}
