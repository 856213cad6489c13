//! Packets as an interface's XDP hook sees them, for `xskit dump`: through the capture hook
//! of the xskit program attached there (the redirect program, the forwarder's filter), or
//! through a capture program of its own on an interface with none. Each packet is copied,
//! up to the snap length, into a per-CPU perf buffer and goes on unchanged.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, SystemTime};

use aya::maps::perf::{PerfEvent, PerfEventArray, PerfEventArrayBuffer};
use aya::maps::{Array, Map, MapData, MapInfo, PerCpuArray};

use crate::error::Result;
use crate::program::{ProgramObject, XdpProgram};
use crate::{Error, Interface, Mode};

static DUMP_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xskit_dump.o"));

/// The perf buffer's map and the switch, as the hook names them (kernel names are cut at 15
/// characters; the switch is a global whose data section the loader makes a map of that
/// name).
const BUFFER_MAP: &str = "xskit_capture";
const SWITCH_MAP: &str = ".data.xskit_cap";
const RATE_MAP: &str = "xskit_cap_rate";
/// `struct xskit_capture_meta`: ktime_ns, len, caplen, ifindex, queue, verdict, why.
const META_LEN: usize = 32;
/// A verdict or reason the program does not give.
const NONE: u32 = u32::MAX;

/// `struct xskit_capture_config`: enabled, snaplen, max_per_cpu, pad.
type SwitchValue = [u32; 4];
/// `struct xskit_capture_rate`: window_ns, taken, skipped.
type RateValue = [u64; 3];

/// How to capture: `CaptureConfig::default()` and the setters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CaptureConfig {
    /// Bytes of each packet copied out at most (the rest is counted in its length).
    pub snaplen: u32,
    /// Where the capture program runs when one of xskit's own is attached (`Auto`: native,
    /// else generic).
    pub mode: Mode,
    /// Pages of perf buffer per CPU (a power of two).
    pub pages_per_cpu: usize,
    /// Packets captured a second at most (0: all), so that capture cannot starve the
    /// program's own work; the others are counted ([`Capture::skipped`]). Kept per CPU, as
    /// this over the CPUs, rounded up.
    pub max_per_sec: u32,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            snaplen: 262_144,
            mode: Mode::Auto,
            pages_per_cpu: 64,
            max_per_sec: 0,
        }
    }
}

impl CaptureConfig {
    /// Sets the snap length.
    #[must_use]
    pub fn snaplen(mut self, snaplen: u32) -> Self {
        self.snaplen = snaplen;
        self
    }
    /// Sets the mode of a capture program of its own.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    /// Sets the perf buffer's pages per CPU.
    #[must_use]
    pub fn pages_per_cpu(mut self, pages: usize) -> Self {
        self.pages_per_cpu = pages;
        self
    }
    /// Sets the cap on captures a second (0: none).
    #[must_use]
    pub fn max_per_sec(mut self, max: u32) -> Self {
        self.max_per_sec = max;
        self
    }
}

/// One captured packet.
#[derive(Clone, Copy, Debug)]
pub struct CapturedPacket<'a> {
    /// When the XDP hook saw it.
    pub time: SystemTime,
    /// Its whole length (all buffers of a multi-buffer packet).
    pub len: u32,
    /// Its first bytes, up to the snap length.
    pub data: &'a [u8],
    /// The interface it arrived on.
    pub ifindex: u32,
    /// The receive queue it arrived on.
    pub queue: u32,
    /// The XDP action the program returned, as the kernel numbers them ([`XdpAction`]),
    /// where it says (the forwarder's filter does).
    pub verdict: Option<u32>,
    /// The reason the program gives: the forwarder's rule or counter index.
    pub why: Option<u32>,
}

impl CapturedPacket<'_> {
    /// The program's verdict, if it gave one the kernel defines.
    pub fn action(&self) -> Option<XdpAction> {
        self.verdict.and_then(XdpAction::from_code)
    }
}

/// What an XDP program returns, numbered as the kernel's `enum xdp_action` numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum XdpAction {
    /// An error: dropped, with a tracepoint.
    Aborted = 0,
    /// Dropped.
    Drop = 1,
    /// Passed on to the kernel stack.
    Pass = 2,
    /// Sent back out of the interface it arrived on.
    Tx = 3,
    /// Redirected: to an AF_XDP socket, another interface, or a CPU.
    Redirect = 4,
}

impl XdpAction {
    /// The action numbered `code`, if the kernel defines one.
    pub fn from_code(code: u32) -> Option<XdpAction> {
        [
            XdpAction::Aborted,
            XdpAction::Drop,
            XdpAction::Pass,
            XdpAction::Tx,
            XdpAction::Redirect,
        ]
        .into_iter()
        .find(|a| *a as u32 == code)
    }
}

/// The capture's maps, the program of its own it attached (if any), and through what it
/// captures.
type Hook = (
    PerfEventArray<MapData>,
    Array<MapData, SwitchValue>,
    PerCpuArray<MapData, RateValue>,
    Option<XdpProgram>,
    String,
);

/// The capture hook of the xskit program `attached` to `iface`, or (none attached) a capture
/// program of its own.
fn hook(iface: &Interface, config: &CaptureConfig, attached: Option<u32>) -> Result<Hook> {
    let typed = |buffer: Map, switch: Map, rate: Map| -> Result<_> {
        let buffer = PerfEventArray::try_from(buffer)
            .map_err(|e| map_error("taking the capture buffer", e))?;
        let switch: Array<MapData, SwitchValue> =
            Array::try_from(switch).map_err(|e| map_error("taking the capture switch", e))?;
        let rate: PerCpuArray<MapData, RateValue> = PerCpuArray::try_from(rate)
            .map_err(|e| map_error("taking the capture's rate counters", e))?;
        Ok((buffer, switch, rate))
    };
    Ok(match attached {
        Some(id) => {
            let name = aya::programs::loaded_programs()
                .filter_map(|p| p.ok())
                .find(|p| p.id() == id)
                .and_then(|p| p.name_as_str().map(str::to_string))
                .unwrap_or_else(|| "?".into());
            let Some((buffer, switch, rate)) = hook_maps(id)? else {
                return Err(Error::CaptureForeignProgram {
                    iface: iface.name().to_string(),
                    id,
                    name,
                });
            };
            let (buffer, switch, rate) = typed(
                Map::PerfEventArray(buffer),
                Map::Array(switch),
                Map::PerCpuArray(rate),
            )?;
            let through = format!("the attached xskit program {name} (id {id})");
            (buffer, switch, rate, None, through)
        }
        None => {
            let program = XdpProgram::attach_object(
                iface,
                ProgramObject::new(DUMP_OBJ, "xskit_dump"),
                config.mode,
                false,
            )?;
            let buffer: PerfEventArray<MapData> = program.take_map(BUFFER_MAP)?;
            let switch: Array<MapData, SwitchValue> = program.take_map(SWITCH_MAP)?;
            let rate: PerCpuArray<MapData, RateValue> = program.take_map(RATE_MAP)?;
            let through = format!("xskit's capture program ({})", program.mode());
            (buffer, switch, rate, Some(program), through)
        }
    })
}

/// A running capture; the hook is switched off (or the program of its own detached) on drop.
pub struct Capture {
    buffers: Vec<PerfEventArrayBuffer<MapData>>,
    switch: Array<MapData, SwitchValue>,
    rate: PerCpuArray<MapData, RateValue>,
    through: String,
    _own: Option<XdpProgram>,
    lost: u64,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC, ns: turns the hook's times into wall times.
    wall_offset_ns: i128,
    pollfds: xskit_os::PollSet,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("through", &self.through)
            .field("cpus", &self.buffers.len())
            .field("lost", &self.lost)
            .finish_non_exhaustive()
    }
}

fn map_error(what: &str, e: impl std::error::Error) -> Error {
    Error::Capture {
        reason: format!("{what}: {}", crate::error_chain(&e)),
    }
}

/// The capture maps of the xskit program with id `id`, if it has them: the perf buffer, the
/// switch and the rate cap's.
fn hook_maps(id: u32) -> Result<Option<(MapData, MapData, MapData)>> {
    let Some(program) = aya::programs::loaded_programs()
        .filter_map(|p| p.ok())
        .find(|p| p.id() == id)
    else {
        return Ok(None);
    };
    let ids = program
        .map_ids()
        .map_err(|e| map_error("listing the attached program's maps", e))?
        .unwrap_or_default();
    let (mut buffer, mut switch, mut rate) = (None, None, None);
    for map in ids {
        let Ok(info) = MapInfo::from_id(map) else {
            continue;
        };
        match info.name_as_str() {
            Some(BUFFER_MAP) => buffer = Some(map),
            Some(SWITCH_MAP) => switch = Some(map),
            Some(RATE_MAP) => rate = Some(map),
            _ => {}
        }
    }
    let (Some(buffer), Some(switch), Some(rate)) = (buffer, switch, rate) else {
        return Ok(None);
    };
    let open = |id| MapData::from_id(id).map_err(|e| map_error("opening a capture map", e));
    Ok(Some((open(buffer)?, open(switch)?, open(rate)?)))
}

impl Capture {
    /// Starts capturing what `iface` receives: through the capture hook of the xskit program
    /// attached there, or with a capture program of its own if none is. Refuses an interface
    /// where another program is attached.
    pub fn open(iface: &Interface, config: &CaptureConfig) -> Result<Capture> {
        if config.snaplen == 0 || !config.pages_per_cpu.is_power_of_two() {
            return Err(Error::Capture {
                reason: format!(
                    "snap length {} and {} pages per CPU: the snap length must be positive and \
                     the pages a power of two",
                    config.snaplen, config.pages_per_cpu
                ),
            });
        }
        let attached = iface.link_info()?.xdp.any();
        let (mut buffer, mut switch, rate, own, through) = hook(iface, config, attached)?;
        let cpus = aya::util::online_cpus().map_err(|(what, e)| Error::Capture {
            reason: format!("reading {what}: {e}"),
        })?;
        let buffers = cpus
            .iter()
            .map(|&cpu| {
                buffer
                    .open(cpu, Some(config.pages_per_cpu))
                    .map_err(|e| map_error("opening a CPU's perf buffer", e))
            })
            .collect::<Result<Vec<_>>>()?;
        let per_cpu = config.max_per_sec.div_ceil(cpus.len().max(1) as u32);
        switch
            .set(0, [1, config.snaplen, per_cpu, 0], 0)
            .map_err(|e| map_error("switching the capture on", e))?;
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as i128;
        Ok(Capture {
            buffers,
            switch,
            rate,
            through,
            _own: own,
            lost: 0,
            wall_offset_ns: wall - i128::from(xskit_os::monotonic_ns()),
            pollfds: xskit_os::PollSet::default(),
            scratch: Vec::new(),
        })
    }

    /// Which program captures: the attached xskit program, or xskit's capture program.
    pub fn through(&self) -> &str {
        &self.through
    }

    /// Packets the perf buffers had no room for (the kernel counts them).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Packets not captured because of the cap on captures a second
    /// ([`CaptureConfig::max_per_sec`]), since the program was loaded.
    pub fn skipped(&self) -> u64 {
        self.rate
            .get(&0, 0)
            .map(|per_cpu| per_cpu.iter().map(|r| r[2]).sum())
            .unwrap_or(0)
    }

    /// Waits up to `timeout` (`None`: forever; a signal ends the wait early) for packets and
    /// hands each to `f`; returns how many.
    pub fn poll(
        &mut self,
        timeout: Option<Duration>,
        mut f: impl FnMut(CapturedPacket<'_>),
    ) -> Result<usize> {
        if !self.buffers.iter().any(PerfEventArrayBuffer::readable) {
            let fds: Vec<BorrowedFd<'_>> = self.buffers.iter().map(AsFd::as_fd).collect();
            xskit_os::poll_readable(&fds, &mut self.pollfds, timeout)?;
        }
        let (offset, scratch) = (self.wall_offset_ns, &mut self.scratch);
        let mut seen = 0;
        let mut lost = 0;
        for buffer in &mut self.buffers {
            buffer.for_each(|event| match event {
                PerfEvent::Lost { count } => lost += count,
                PerfEvent::Sample { head, tail } => {
                    let sample = if tail.is_empty() {
                        head
                    } else {
                        scratch.clear();
                        scratch.extend_from_slice(head);
                        scratch.extend_from_slice(tail);
                        scratch.as_slice()
                    };
                    if let Some(packet) = parse(sample, offset) {
                        seen += 1;
                        f(packet);
                    }
                }
            });
        }
        self.lost += lost;
        Ok(seen)
    }
}

fn parse(sample: &[u8], wall_offset_ns: i128) -> Option<CapturedPacket<'_>> {
    let u32_at = |i: usize| {
        sample
            .get(i..i + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().unwrap_or_default()))
    };
    let ktime = u64::from_ne_bytes(sample.get(..8)?.try_into().ok()?);
    let (len, caplen, ifindex, queue) = (u32_at(8)?, u32_at(12)?, u32_at(16)?, u32_at(20)?);
    let known = |v: u32| (v != NONE).then_some(v);
    let (verdict, why) = (known(u32_at(24)?), known(u32_at(28)?));
    let data = sample.get(META_LEN..META_LEN + caplen as usize)?;
    let wall = i128::from(ktime) + wall_offset_ns;
    Some(CapturedPacket {
        time: SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(wall).unwrap_or(0)),
        len,
        data,
        ifindex,
        queue,
        verdict,
        why,
    })
}

impl Drop for Capture {
    fn drop(&mut self) {
        // A program of its own goes with the link; xskit's stays, its hook switched off.
        let _ = self.switch.set(0, [0; 4], 0);
    }
}
