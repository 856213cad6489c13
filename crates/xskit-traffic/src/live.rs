//! The kernel's own generators and sinks for benchmarks: the live-frames generator (a
//! BPF_PROG_TEST_RUN loop that transmits copies of one frame) and the XDP_DROP ceiling (a
//! program that counts and drops, its l2fwd sibling that sends every packet back, and its
//! forwarding sibling that redirects every packet to another device through a devmap).

use std::fmt;

use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::Xdp;
use aya::Ebpf;
use xskit::{AttachedMode, Interface, Mode, ProgramObject, XdpProgram};

use crate::error::{Error, Result};

static COUNT_DROP_FRAGS_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_count_drop_frags.o"));
static COUNT_DROP_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_count_drop.o"));
static COUNT_TX_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_count_tx.o"));
static COUNT_SRC_PORT_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_count_src_port.o"));
static COUNT_REDIRECT_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_count_redirect.o"));
static LIVE_REDIRECT_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_live_redirect.o"));

fn bpf_error(what: &'static str, e: &dyn std::error::Error) -> Error {
    let reason = xskit::error_chain(e);
    if reason.contains("Operation not permitted") || reason.contains("EPERM") {
        Error::NotPermitted {
            what,
            advice: xskit::privileges::advice_now(),
        }
    } else {
        Error::Bpf { what, reason }
    }
}

/// The kernel's ceilings for benchmarks: a program that counts packets per CPU and drops them
/// ([`XdpCounter::drop_all`]), or sends them back with the MAC addresses swapped
/// ([`XdpCounter::reflect_all`], XDP_TX; on a bond the packet leaves through the bond's
/// transmit hash). Detached on drop, like every xskit program.
pub struct XdpCounter {
    counts: PerCpuArray<aya::maps::MapData, u64>,
    program: XdpProgram,
    // The redirect ceiling's devmap, held for as long as the program runs.
    _out: Option<aya::maps::DevMap<aya::maps::MapData>>,
}

impl fmt::Debug for XdpCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpCounter")
            .field("mode", &self.program.mode())
            .finish_non_exhaustive()
    }
}

impl XdpCounter {
    /// Attaches the counting drop program to `iface`; with `multi_buffer`, the `xdp.frags`
    /// variant, which native XDP needs on links with an MTU above a page.
    pub fn drop_all(iface: &Interface, mode: Mode, multi_buffer: bool) -> Result<Self> {
        let object = if multi_buffer {
            ProgramObject::new(COUNT_DROP_FRAGS_OBJ, "xskit_count_drop_frags")
        } else {
            ProgramObject::new(COUNT_DROP_OBJ, "xskit_count_drop")
        };
        Self::attach(iface, object, mode, multi_buffer)
    }

    /// Attaches the floor of a filter by source port to `iface`: it reads each packet's
    /// headers and drops (and counts) untagged IPv4 UDP from `port`; every other packet
    /// passes, uncounted. Against [`XdpCounter::drop_all`], which reads nothing, it shows
    /// what reading the packet costs any filter.
    pub fn drop_udp_from(iface: &Interface, mode: Mode, port: u16) -> Result<Self> {
        let globals = [("drop_src_port", u32::from(port))];
        let object =
            ProgramObject::new(COUNT_SRC_PORT_OBJ, "xskit_count_src_port").with_globals(&globals);
        Self::attach(iface, object, mode, false)
    }

    /// Attaches the counting reflector to `iface`: every packet goes back out with its MAC
    /// addresses swapped (XDP_TX).
    pub fn reflect_all(iface: &Interface, mode: Mode) -> Result<Self> {
        let object = ProgramObject::new(COUNT_TX_OBJ, "xskit_count_tx");
        Self::attach(iface, object, mode, false)
    }

    /// Attaches the counting forwarder to `iface`: every packet is redirected out of `out`
    /// through a devmap, the kernel's own forwarding path (its xdp_redirect_map sample's).
    pub fn redirect_all(iface: &Interface, out: &Interface, mode: Mode) -> Result<Self> {
        let object = ProgramObject::new(COUNT_REDIRECT_OBJ, "xskit_count_redirect");
        let mut counter = Self::attach(iface, object, mode, false)?;
        let mut devmap: aya::maps::DevMap<aya::maps::MapData> =
            counter.program.take_map("out_port")?;
        devmap
            .set(0, out.index(), None, 0)
            .map_err(|e| bpf_error("setting the device packets are redirected to", &e))?;
        counter._out = Some(devmap);
        Ok(counter)
    }

    fn attach(
        iface: &Interface,
        object: ProgramObject<'_>,
        mode: Mode,
        multi_buffer: bool,
    ) -> Result<Self> {
        let program = XdpProgram::attach_object(iface, object, mode, multi_buffer)?;
        let counts = program.take_map("drop_count")?;
        Ok(XdpCounter {
            counts,
            program,
            _out: None,
        })
    }

    /// Packets counted so far (dropped or sent back), summed over CPUs.
    pub fn packets(&self) -> Result<u64> {
        let per_cpu = self
            .counts
            .get(&0, 0)
            .map_err(|e| bpf_error("reading the packet counter", &e))?;
        Ok(per_cpu.iter().sum())
    }

    /// The mode the program runs in.
    pub fn mode(&self) -> AttachedMode {
        self.program.mode()
    }
}

/// A generator that needs no socket: the kernel's live-frames test run sends copies of one
/// frame out of an interface in a tight loop (several Mpps on one core). The frames are
/// redirected at the XDP level, so the receiving device must run native XDP, or have GRO on
/// (veth), or it drops them silently. Nothing is attached to any interface.
pub struct LiveFrames {
    ebpf: Ebpf,
    target: Interface,
}

impl fmt::Debug for LiveFrames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveFrames")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

const LIVE_PROGRAM: &str = "xskit_live_redirect";

/// Writes the generator's source addresses, in network order.
fn write_sources(ebpf: &mut Ebpf, sources: &[std::net::Ipv4Addr]) -> Result<()> {
    const WHAT: &str = "writing the live-frames generator's sources";
    if sources.is_empty() {
        return Ok(());
    }
    let map = ebpf.map_mut("sources").ok_or_else(|| Error::Bpf {
        what: WHAT,
        reason: "the embedded object has no sources map".into(),
    })?;
    let mut array: Array<&mut MapData, u32> =
        Array::try_from(map).map_err(|e| bpf_error(WHAT, &e))?;
    for (i, addr) in (0u32..).zip(sources) {
        array
            .set(i, u32::from_ne_bytes(addr.octets()), 0)
            .map_err(|e| bpf_error(WHAT, &e))?;
    }
    Ok(())
}

impl LiveFrames {
    /// The most source addresses a generator cycles through (64 MiB of kernel memory).
    pub const MAX_SOURCES: u32 = 1 << 24;

    /// Prepares the program that transmits out of `target` (in this thread's namespace).
    pub fn new(target: &Interface) -> Result<Self> {
        Self::with_sources(target, &[])
    }

    /// [`LiveFrames::new`], sending each copy of an IPv4 frame from the next of `sources`
    /// in turn (checksums updated), so a flood comes from many addresses; none: every copy
    /// is the frame as given. At most [`LiveFrames::MAX_SOURCES`].
    pub fn with_sources(target: &Interface, sources: &[std::net::Ipv4Addr]) -> Result<Self> {
        let index = target.index();
        let count = u32::try_from(sources.len())
            .ok()
            .filter(|&n| n <= Self::MAX_SOURCES)
            .ok_or(Error::TooManySources {
                count: sources.len(),
                max: Self::MAX_SOURCES,
            })?;
        let mut ebpf = aya::EbpfLoader::new()
            .override_global("target_ifindex", &index, true)
            .override_global("source_count", &count, true)
            .map_max_entries("sources", count.max(1))
            .load(LIVE_REDIRECT_OBJ)
            .map_err(|e| bpf_error("loading the live-frames program", &e))?;
        write_sources(&mut ebpf, sources)?;
        let program: &mut Xdp = ebpf
            .program_mut(LIVE_PROGRAM)
            .ok_or_else(|| Error::Bpf {
                what: "loading the live-frames program",
                reason: format!("the embedded object has no {LIVE_PROGRAM}"),
            })?
            .try_into()
            .map_err(|e| bpf_error("loading the live-frames program", &e))?;
        program
            .load()
            .map_err(|e| bpf_error("verifying the live-frames program", &e))?;
        Ok(LiveFrames {
            ebpf,
            target: target.clone(),
        })
    }

    /// [`LiveFrames::send`] with SIGINT and SIGTERM held until the kernel is done, so all
    /// `count` copies leave and the count is known; a stop signal takes effect when it
    /// returns. Keep `count` to what the device sends in a fraction of a second.
    pub fn send_whole(&mut self, frame: &[u8], count: u32) -> Result<bool> {
        xskit_os::with_stop_signals_held(|| self.send(frame, count))
    }

    /// Transmits `count` copies of `frame`; returns when the kernel is done: true, or false if
    /// a signal interrupted the run (the kernel does not say how many of the copies left).
    pub fn send(&mut self, frame: &[u8], count: u32) -> Result<bool> {
        const WHAT: &str = "running the live-frames generator";
        let program: &mut Xdp = self
            .ebpf
            .program_mut(LIVE_PROGRAM)
            .ok_or_else(|| Error::Bpf {
                what: WHAT,
                reason: format!("{LIVE_PROGRAM} is gone"),
            })?
            .try_into()
            .map_err(|e| bpf_error(WHAT, &e))?;
        let fd = program.fd().map_err(|e| bpf_error(WHAT, &e))?;
        let run = xskit::program::test_run_live(std::os::fd::AsFd::as_fd(fd), frame, count, 64);
        if run.as_ref().is_err_and(|e| e.errno() == Some(libc::EINTR)) {
            return Ok(false);
        }
        run.map(|_| true).map_err(|e| match e.errno() {
            Some(libc::EPERM | libc::EACCES) => Error::NotPermitted {
                what: WHAT,
                advice: xskit::privileges::advice_now(),
            },
            Some(libc::EINVAL) => Error::Bpf {
                what: WHAT,
                reason: format!(
                    "the kernel refused live frames ({}): it needs Linux 5.18 or later and a \
                     frame of 14 to {} bytes",
                    e.os_error,
                    4096 - 256 - 320
                ),
            },
            _ => Error::Syscall(e),
        })
    }

    /// The interface frames leave from.
    pub fn target(&self) -> &Interface {
        &self.target
    }
}
