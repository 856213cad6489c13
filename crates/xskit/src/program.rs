//! The XDP program that steers packets to AF_XDP sockets, and its lifecycle on an interface:
//! xskit's own redirect program, or an object of yours with an `xsks_map` (a filter, a
//! counter) attached the same careful way.

use std::fmt;
use std::sync::Mutex;

use aya::maps::{Array, MapData, PerCpuArray, XskMap};
use aya::programs::{Xdp, XdpMode};
use aya::Ebpf;

use crate::error::{error_chain, Error, Result};
use crate::interface::Interface;
use crate::mode::{AttachedMode, Mode};
use crate::socket::Socket;
use crate::sys::SyscallError;
use std::os::fd::BorrowedFd;
use xskit_os::sync::LockUnpoisoned;

static REDIRECT_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xsk_redirect.o"));
static REDIRECT_FRAGS_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xsk_redirect_frags.o"));

/// An XDP program attached to an interface. xskit's redirect program: a packet received on queue `q` goes to
/// the socket registered for `q`, and everything else to the kernel stack.
///
/// The program is attached through a bpf_link, so it disappears when this value is dropped
/// and also when the process dies, however it dies.
pub struct XdpProgram {
    /// A link handed over by another process, which keeps this program attached.
    _link: Option<std::os::fd::OwnedFd>,
    // Owns the loaded program and its link; dropping it detaches the program.
    ebpf: Mutex<Ebpf>,
    /// The socket map, for objects that redirect to sockets.
    xsks: Option<Mutex<XskMap<MapData>>>,
    /// The switch that refuses everything (a bond's inactive member) and its counter, for
    /// objects that have them (xskit's redirect program).
    refuse: Option<Mutex<RefuseMaps>>,
    iface: Interface,
    mode: AttachedMode,
    fallback: Option<String>,
    multi_buffer: bool,
    id: u32,
    rx_queues: RxQueues,
}

/// The redirect program's refuse switch and the count of what it refused.
type RefuseMaps = (Array<MapData, u32>, PerCpuArray<MapData, u64>);

impl fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpProgram")
            .field("iface", &self.iface)
            .field("mode", &self.mode)
            .field("multi_buffer", &self.multi_buffer)
            .finish_non_exhaustive()
    }
}

/// The kernel's refusal of `program` at `step`, or a missing privilege when that is the
/// reason (found in the error chain: aya keeps the errno deep inside it).
fn program_error(
    program: &str,
    step: &'static str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    let text = error_chain(&e);
    // The verifier answers EACCES to a program it would take with CAP_PERFMON: a refusal
    // for want of privilege when the process lacks one xskit needs, else the verifier's own.
    let denied = text.contains("Permission denied") && crate::privileges::lacks_any();
    if text.contains("Operation not permitted")
        || text.contains("EPERM")
        || text.contains("permission")
        || denied
    {
        Error::not_permitted("loading the XDP program")
    } else {
        Error::ProgramRefused {
            program: program.to_string(),
            step,
            source: Box::new(e),
        }
    }
}

/// Explains a refused native attach. ERANGE is the kernel's "MTU too large for a program
/// without multi-buffer support" (veth, and drivers with page-sized buffers).
fn native_error(iface: &Interface, mtu: u32, multi_buffer: bool, reason: &str) -> Error {
    if reason.contains("os error 34") && !multi_buffer {
        return Error::MtuNeedsMultiBuffer {
            iface: iface.name().to_string(),
            mtu,
            reason: reason.to_string(),
        };
    }
    if multi_buffer && mtu as usize + 18 > 4096 - 256 - 320 {
        return Error::NativeXdpUnsupported {
            iface: iface.name().to_string(),
            reason: format!(
                "its MTU {mtu} needs a multi-buffer (xdp.frags) program, which the driver \
                 refused: lower the MTU to 3000 or less, or use SKB mode; kernel said: {reason}"
            ),
        };
    }
    Error::NativeXdpUnsupported {
        iface: iface.name().to_string(),
        reason: reason.to_string(),
    }
}

fn map_error(name: &str, step: impl Into<String>, source: aya::maps::MapError) -> Error {
    Error::Map {
        name: name.to_string(),
        step: step.into(),
        source: Box::new(source),
    }
}

/// A loaded, attached object: the link lives as long as `ebpf`.
struct Attached {
    ebpf: Ebpf,
    mode: AttachedMode,
    fallback: Option<String>,
    /// The kernel's id of the attached program (0 if it could not be read).
    id: u32,
    rx_queues: RxQueues,
}

/// A device's receive queues before and after an XDP program was attached. A driver may
/// start receiving on more queues once a program is attached: virtio_net gives XDP a transmit
/// queue pair per CPU when it has spare ones, and the device then spreads what it receives
/// over those too. AF_XDP sockets belong on the device's own queues only (on virtio_net one
/// on an added queue never transmits, and a zero-copy one there has crashed Linux 7.3), so
/// packets arriving on an added queue reach no socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxQueues {
    /// Receive queues before the program was attached: the device's own.
    pub own: u32,
    /// Receive queues with the program attached.
    pub total: u32,
    /// The most combined channels the driver offers, when it says.
    pub max_combined: Option<u32>,
}

impl RxQueues {
    /// The queues the driver added for XDP (empty on most drivers).
    pub fn added(&self) -> std::ops::Range<u32> {
        self.own..self.total.max(self.own)
    }

    /// How to make the driver add none: every queue pair in use, so XDP shares them.
    pub fn advice(&self, iface: &str) -> String {
        let n = self.max_combined.unwrap_or(self.total).max(self.total);
        format!(
            "put every queue pair in use before starting (ethtool -L {iface} combined {n}), \
             so that XDP shares the queues instead of adding its own"
        )
    }

    /// Refuses `queue` when it is one the driver added for XDP.
    pub fn check(&self, iface: &str, queue: u32) -> Result<()> {
        if !self.added().contains(&queue) {
            return Ok(());
        }
        Err(Error::XdpQueue {
            iface: iface.to_string(),
            queue,
            own: self.own,
            total: self.total,
            advice: self.advice(iface),
        })
    }
}

/// The device's receive queues in use now and the most combined channels it offers.
fn rx_queue_counts(iface: &Interface) -> (Option<u32>, Option<u32>) {
    let channels = crate::sys::ethtool::channels(iface.name()).ok().flatten();
    let rx = match channels {
        Some(c) => Some(c.rx),
        None => iface.active_rx_queues().ok(),
    };
    (rx, channels.map(|c| c.max_combined))
}

/// Loads program `prog_name` of `obj` and attaches it to `iface` in `mode`, after making sure
/// no other program is there (which is named in the error, never replaced).
fn attach_object(
    iface: &Interface,
    object: &ProgramObject<'_>,
    mode: Mode,
    multi_buffer: bool,
) -> Result<Attached> {
    let prog_name = object.program;
    let link = iface.link_info()?;
    if let Some(id) = link.xdp.any() {
        return Err(Error::ProgramAttached {
            iface: iface.name().to_string(),
            id,
            name: program_name(id),
            mode: link.xdp.mode_name(),
        });
    }
    let (own, _) = rx_queue_counts(iface);
    let mut ebpf = load_object(object)?;
    let program = loaded_program(&mut ebpf, prog_name)?;
    let (mode, fallback) =
        attach_in_mode(iface, program, prog_name, mode, (link.mtu, multi_buffer))?;
    // The link is ours, so the id the interface reports now is our program's.
    let id = iface
        .link_info()
        .ok()
        .and_then(|l| l.xdp.any())
        .unwrap_or(0);
    let (total, max_combined) = rx_queue_counts(iface);
    let total = total.unwrap_or(1);
    Ok(Attached {
        ebpf,
        mode,
        fallback,
        id,
        rx_queues: RxQueues {
            own: own.unwrap_or(total),
            total,
            max_combined,
        },
    })
}

/// Loads (and verifies) the object's maps and programs.
fn load_object(object: &ProgramObject<'_>) -> Result<Ebpf> {
    let prog_name = object.program;
    let mut loader = aya::EbpfLoader::new();
    for &(map, entries) in object.sizes {
        loader.map_max_entries(map, entries);
    }
    for (name, value) in object.globals {
        loader.override_global(name, value, true);
    }
    let mut ebpf = loader
        .load(object.elf)
        .map_err(|e| program_error(prog_name, "loading", e))?;
    loaded_program(&mut ebpf, prog_name)?
        .load()
        .map_err(|e| program_error(prog_name, "verifying", e))?;
    Ok(ebpf)
}

/// The XDP program `prog_name` of `ebpf`.
fn loaded_program<'e>(ebpf: &'e mut Ebpf, prog_name: &str) -> Result<&'e mut Xdp> {
    ebpf.program_mut(prog_name)
        .ok_or_else(|| Error::NoSuchProgram {
            name: prog_name.to_string(),
        })?
        .try_into()
        .map_err(|e| program_error(prog_name, "taking it as an XDP program", e))
}

/// Loads the object to replace the program on `link`, the bpf_link another process
/// attached to `iface` and handed over; the link is not touched yet
/// ([`XdpProgram::put_on_link`] does that in one step).
fn load_for_link(iface: &Interface, object: &ProgramObject<'_>) -> Result<Attached> {
    let prog_name = object.program;
    let before = iface.link_info()?;
    let mode = if before.xdp.drv_prog_id != 0 {
        AttachedMode::Drv
    } else if before.xdp.skb_prog_id != 0 {
        AttachedMode::Skb
    } else {
        return Err(Error::NothingToTakeOver {
            iface: iface.name().to_string(),
        });
    };
    let mut ebpf = load_object(object)?;
    let program = loaded_program(&mut ebpf, prog_name)?;
    let id = program
        .info()
        .map_err(|e| program_error(prog_name, "reading its id", e))?
        .id();
    let (total, max_combined) = rx_queue_counts(iface);
    let total = total.unwrap_or(1);
    Ok(Attached {
        ebpf,
        mode,
        fallback: None,
        id,
        // The queues the device had before any program are no longer known: the ones it
        // has now are taken as its own.
        rx_queues: RxQueues {
            own: total,
            total,
            max_combined,
        },
    })
}

/// Attaches `program` to `iface` in `mode` (auto: native, else SKB, saying why); the
/// attached mode and the fallback's reason. `(mtu, multi_buffer)` explain a native refusal.
fn attach_in_mode(
    iface: &Interface,
    program: &mut Xdp,
    prog_name: &str,
    mode: Mode,
    (mtu, multi_buffer): (u32, bool),
) -> Result<(AttachedMode, Option<String>)> {
    let attach = |program: &mut Xdp, m: XdpMode| program.attach_to_if_index(iface.index(), m);
    // Another program attached between the check above and our attach: the kernel refused
    // ours. Name the winner instead of trying another mode.
    let taken = || {
        iface.link_info().ok().and_then(|l| {
            l.xdp.any().map(|id| Error::ProgramAttached {
                iface: iface.name().to_string(),
                id,
                name: program_name(id),
                mode: l.xdp.mode_name(),
            })
        })
    };
    let skb_refused =
        |e| taken().unwrap_or_else(|| program_error(prog_name, "attaching in SKB mode", e));
    // Zero-copy sockets need the program in the driver.
    Ok(match mode {
        Mode::Skb => {
            attach(program, XdpMode::Skb).map_err(skb_refused)?;
            (AttachedMode::Skb, None)
        }
        Mode::Drv | Mode::ZeroCopy => {
            attach(program, XdpMode::Driver).map_err(|e| {
                taken().unwrap_or_else(|| native_error(iface, mtu, multi_buffer, &error_chain(&e)))
            })?;
            (AttachedMode::Drv, None)
        }
        Mode::Auto => match attach(program, XdpMode::Driver) {
            Ok(_) => (AttachedMode::Drv, None),
            Err(native) => {
                if let Some(e) = taken() {
                    return Err(e);
                }
                attach(program, XdpMode::Skb).map_err(skb_refused)?;
                (
                    AttachedMode::Skb,
                    Some(format!(
                        "native XDP refused ({}), using SKB mode",
                        error_chain(&native)
                    )),
                )
            }
        },
    })
}

/// The name of the loaded program with id `id`, if it can be found.
fn program_name(id: u32) -> String {
    aya::programs::loaded_programs()
        .filter_map(|p| p.ok())
        .find(|p| p.id() == id)
        .and_then(|p| p.name_as_str().map(str::to_string))
        .unwrap_or_else(|| "?".to_string())
}

/// `path` as a C string.
fn c_path(path: &std::path::Path) -> Result<std::ffi::CString> {
    std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())).map_err(|_| {
        Error::Pin {
            path: path.display().to_string(),
            reason: "the path holds a zero byte".into(),
        }
    })
}

/// Whether `dir` is on a BPF file system, where [`XdpProgram::pin_link`] can pin.
pub fn is_bpf_fs(dir: &std::path::Path) -> bool {
    c_path(dir).is_ok_and(|c| crate::sys::bpf::is_bpf_fs(&c))
}

/// The link pinned at `path` ([`XdpProgram::pin_link`]) when it still attaches a program to
/// `iface`, to take over with [`XdpProgram::take_over`]; `None` when nothing is pinned
/// there. A pin whose link no longer attaches anything to `iface` (the interface was
/// deleted and made again) is removed, and `None` returned.
pub fn kept_link(
    path: &std::path::Path,
    iface: &Interface,
) -> Result<Option<std::os::fd::OwnedFd>> {
    if !path.exists() {
        return Ok(None);
    }
    let c = c_path(path)?;
    let pin_error = |e: SyscallError| Error::Pin {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let link = crate::sys::bpf::obj_get(&c).map_err(pin_error)?;
    let (program, ifindex) =
        crate::sys::bpf::link_program(std::os::fd::AsFd::as_fd(&link)).map_err(pin_error)?;
    let attached = iface.link_info()?.xdp.any();
    if ifindex != iface.index() || attached != Some(program) {
        unpin_link(path)?;
        return Ok(None);
    }
    Ok(Some(link))
}

/// Removes the pin at `path`: the program its link attaches is detached once no process
/// holds the link either.
pub fn unpin_link(path: &std::path::Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Pin {
            path: path.display().to_string(),
            reason: e.to_string(),
        }),
    }
}

/// An XDP object of your own for [`XdpProgram::attach_object`]: ELF bytes (as clang builds them
/// for `-target bpf`) and the name of the program in it to attach.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ProgramObject<'a> {
    /// The object file's bytes, 8-byte aligned (`aya::include_bytes_aligned!`).
    pub elf: &'a [u8],
    /// The XDP program's function name.
    pub program: &'a str,
    /// Maps created with another size than the object declares: (name, max_entries).
    pub sizes: &'a [(&'a str, u32)],
    /// Read-only globals (`const volatile`) written before the program is verified, which
    /// the verifier then knows as constants: (name, value).
    pub globals: &'a [(&'a str, u32)],
}

impl ProgramObject<'static> {
    /// xskit's redirect program, the one [`XdpProgram::attach`] loads (the `xdp.frags`
    /// variant with `multi_buffer`): for [`XdpProgram::take_over`].
    pub fn redirect(multi_buffer: bool) -> Self {
        if multi_buffer {
            ProgramObject::new(REDIRECT_FRAGS_OBJ, "xskit_redirect_frags")
        } else {
            ProgramObject::new(REDIRECT_OBJ, "xskit_redirect")
        }
    }
}

impl<'a> ProgramObject<'a> {
    /// Program `program` of the object `elf`.
    pub fn new(elf: &'a [u8], program: &'a str) -> Self {
        ProgramObject {
            elf,
            program,
            sizes: &[],
            globals: &[],
        }
    }

    /// The same program, with the maps `sizes` names created with those `max_entries`
    /// (tables sized by what they will hold, known only when the program is loaded).
    pub fn with_sizes(self, sizes: &'a [(&'a str, u32)]) -> Self {
        ProgramObject { sizes, ..self }
    }

    /// The same program, with the read-only globals `globals` names set to those values.
    pub fn with_globals(self, globals: &'a [(&'a str, u32)]) -> Self {
        ProgramObject { globals, ..self }
    }
}

impl XdpProgram {
    /// Loads the redirect program and attaches it to `iface`.
    ///
    /// Refuses, naming the other program, if one is already attached. With `multi_buffer` the
    /// program is the `xdp.frags` variant, needed for sockets bound with multi-buffer.
    /// `Drv` and `ZeroCopy` attach in the driver; `Auto` tries the driver, then SKB.
    pub fn attach(iface: &Interface, mode: Mode, multi_buffer: bool) -> Result<Self> {
        Self::attach_object(
            iface,
            ProgramObject::redirect(multi_buffer),
            mode,
            multi_buffer,
        )
    }

    /// Loads program `object` and attaches it to `iface` as [`XdpProgram::attach`] does: never
    /// over another program, falling back from native to SKB mode in `Auto`, detached on drop.
    /// Sockets can be registered when the object has an XSKMAP named `xsks_map`; its other maps
    /// are taken with [`XdpProgram::take_map`]. `multi_buffer` says the program is an
    /// `xdp.frags` one (it only shapes the advice when a native attach is refused).
    pub fn attach_object(
        iface: &Interface,
        object: ProgramObject<'_>,
        mode: Mode,
        multi_buffer: bool,
    ) -> Result<Self> {
        let attached = attach_object(iface, &object, mode, multi_buffer)?;
        Self::from_attached(iface, attached, multi_buffer, None)
    }

    /// Loads program `object` to take the place of another process's program on `link`, the
    /// bpf_link attaching it to `iface`, which that process handed over
    /// ([`XdpProgram::link_fd`]). Its maps can be filled and sockets registered while the
    /// other program still runs; [`XdpProgram::put_on_link`] then replaces it in one step,
    /// so that packets never meet the interface without a program. The program keeps the
    /// link's mode; the link is this program's (detached when the last process holding it
    /// lets it go).
    pub fn take_over(
        iface: &Interface,
        object: ProgramObject<'_>,
        link: std::os::fd::OwnedFd,
        multi_buffer: bool,
    ) -> Result<Self> {
        let attached = load_for_link(iface, &object)?;
        Self::from_attached(iface, attached, multi_buffer, Some(link))
    }

    /// Puts the program [`XdpProgram::take_over`] loaded on its link, in place of the one
    /// there, in one step (BPF_LINK_UPDATE). Does nothing for a program attached otherwise.
    pub fn put_on_link(&self) -> Result<()> {
        let Some(link) = &self._link else {
            return Ok(());
        };
        let updated = self.with_program_fd(|fd| {
            crate::sys::bpf::link_update(std::os::fd::AsFd::as_fd(link), fd, None)
        })?;
        Ok(updated?)
    }

    /// Pins the link that attaches this program at `path`, on a BPF file system: the program
    /// stays attached when this process ends, however it ends, until the pin is removed
    /// ([`unpin_link`]) or another program replaces it on the link ([`kept_link`],
    /// [`XdpProgram::take_over`]).
    pub fn pin_link(&self, path: &std::path::Path) -> Result<()> {
        let link = self.link_fd()?;
        let c = c_path(path)?;
        crate::sys::bpf::obj_pin(std::os::fd::AsFd::as_fd(&link), &c).map_err(|e| Error::Pin {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// A new descriptor of the bpf_link that attaches this program, to hand to a process that
    /// takes the interface over ([`XdpProgram::take_over`]).
    pub fn link_fd(&self) -> Result<std::os::fd::OwnedFd> {
        let link = aya::programs::loaded_links()
            .filter_map(|l| l.ok())
            .find(|l| l.program_id() == self.id)
            .ok_or_else(|| Error::NothingToTakeOver {
                iface: self.iface.name().to_string(),
            })?;
        Ok(crate::sys::bpf::link_fd_by_id(link.id())?)
    }

    fn from_attached(
        iface: &Interface,
        mut attached: Attached,
        multi_buffer: bool,
        link: Option<std::os::fd::OwnedFd>,
    ) -> Result<Self> {
        let xsks = match attached.ebpf.take_map("xsks_map") {
            None => None,
            Some(map) => {
                Some(Mutex::new(XskMap::try_from(map).map_err(|e| {
                    map_error("xsks_map", "taking it as an XSKMAP", e)
                })?))
            }
        };
        let refuse = match (
            attached.ebpf.take_map("xskit_refuse"),
            attached.ebpf.take_map("xskit_refused"),
        ) {
            (Some(switch), Some(counter)) => Some(Mutex::new((
                Array::try_from(switch)
                    .map_err(|e| map_error("xskit_refuse", "taking it as an array", e))?,
                PerCpuArray::try_from(counter)
                    .map_err(|e| map_error("xskit_refused", "taking it as a per-CPU array", e))?,
            ))),
            _ => None,
        };
        Ok(XdpProgram {
            _link: link,
            ebpf: Mutex::new(attached.ebpf),
            xsks,
            refuse,
            iface: iface.clone(),
            mode: attached.mode,
            fallback: attached.fallback,
            multi_buffer,
            id: attached.id,
            rx_queues: attached.rx_queues,
        })
    }

    /// Takes map `name` out of the loaded object, typed (`aya::maps::Array`, `PerCpuArray`,
    /// `DevMap`, ...); each map can be taken once.
    pub fn take_map<T>(&self, name: &str) -> Result<T>
    where
        T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
    {
        self.ebpf
            .lock_unpoisoned()
            .take_map(name)
            .ok_or_else(|| Error::NoSuchMap {
                name: name.to_string(),
            })?
            .try_into()
            .map_err(|e| map_error(name, "taking it as the type asked for", e))
    }

    /// Refuses everything arriving (dropped and counted in the kernel, before any socket),
    /// or stops refusing: an active-backup bond's inactive member, as Linux's bond drops what
    /// arrives on a backup. Returns false, doing nothing, for programs without the switch
    /// (xskit's redirect program has it).
    pub fn refuse_all(&self, refuse: bool) -> Result<bool> {
        let Some(maps) = &self.refuse else {
            return Ok(false);
        };
        maps.lock_unpoisoned()
            .0
            .set(0, u32::from(refuse), 0)
            .map_err(|e| map_error("xskit_refuse", "writing it", e))?;
        Ok(true)
    }

    /// Packets refused while [`XdpProgram::refuse_all`] was on, summed over CPUs (0 for
    /// programs without the switch).
    pub fn refused(&self) -> Result<u64> {
        let Some(maps) = &self.refuse else {
            return Ok(0);
        };
        let per_cpu = maps
            .lock_unpoisoned()
            .1
            .get(&0, 0)
            .map_err(|e| map_error("xskit_refused", "reading it", e))?;
        Ok(per_cpu.iter().sum())
    }

    /// The kernel's id of this program.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// `None` while the program is attached where xskit put it; otherwise what happened to
    /// it: its interface was deleted or moved to another network namespace, or someone
    /// detached it (bpftool, ip link) or replaced it. One netlink request: call it about every
    /// 100 ms, not per packet.
    pub fn lost(&self) -> Option<String> {
        let name = self.iface.name();
        match self.iface.link_info() {
            Err(Error::NoSuchInterface { .. }) => Some(format!(
                "{name} is gone: it was deleted or moved to another network namespace"
            )),
            Err(e) => Some(format!("{name} can no longer be read: {e}")),
            Ok(info) => match info.xdp.any() {
                Some(id) if id == self.id => None,
                Some(other) => Some(format!(
                    "xskit's XDP program on {name} (id {}) was replaced by program {other} ({}) \
                     from outside xskit",
                    self.id,
                    program_name(other)
                )),
                None => Some(format!(
                    "xskit's XDP program on {name} (id {}) was detached from outside xskit \
                     (bpftool link detach, or the link was destroyed): no packets reach xskit",
                    self.id
                )),
            },
        }
    }

    fn socket_map(&self) -> Result<std::sync::MutexGuard<'_, XskMap<MapData>>> {
        self.xsks
            .as_ref()
            .map(|m| m.lock_unpoisoned())
            .ok_or_else(|| Error::NoSocketMap {
                iface: self.iface.name().to_string(),
            })
    }

    /// Sends packets of the socket's queue to the socket. Refuses a queue the driver added
    /// for XDP ([`RxQueues`]).
    pub fn register(&self, socket: &Socket) -> Result<()> {
        self.rx_queues.check(self.iface.name(), socket.queue())?;
        if socket.interface().index() != self.iface.index() {
            return Err(Error::InterfaceMismatch {
                socket_iface: socket.interface().name().to_string(),
                program_iface: self.iface.name().to_string(),
            });
        }
        let mut map = self.socket_map()?;
        map.set(
            socket.queue(),
            std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(socket)),
            0,
        )
        .map_err(|e| {
            map_error(
                "xsks_map",
                format!("registering queue {}", socket.queue()),
                e,
            )
        })
    }

    /// Stops steering queue `queue` to a socket; its packets go to the kernel stack again.
    pub fn unregister(&self, queue: u32) -> Result<()> {
        let mut map = self.socket_map()?;
        map.unset(queue)
            .map_err(|e| map_error("xsks_map", format!("unregistering queue {queue}"), e))
    }

    /// Runs the program once over `frame` without acting on the result (BPF_PROG_TEST_RUN) and
    /// returns its verdict: 1 XDP_DROP, 2 XDP_PASS (also a redirect to a queue with no
    /// socket), 4 XDP_REDIRECT. The filter's rule counters count the run, which is how a
    /// dry run shows which rule a packet hits.
    pub fn test_run(&self, frame: &[u8]) -> Result<u32> {
        Ok(self.with_program_fd(|fd| test_run(fd, frame))??)
    }

    /// [`XdpProgram::test_run`], also returning the packet as the program left it, from the
    /// XDP metadata it put in front of it (if any) to its end.
    pub fn test_run_output(&self, frame: &[u8]) -> Result<(u32, Vec<u8>)> {
        Ok(self.with_program_fd(|fd| crate::sys::bpf::test_run_output(fd, frame))??)
    }

    /// `f` of the loaded program's descriptor.
    fn with_program_fd<R>(&self, f: impl FnOnce(BorrowedFd<'_>) -> R) -> Result<R> {
        let ebpf = self.ebpf.lock_unpoisoned();
        let (name, program) = ebpf.programs().next().ok_or_else(|| Error::NoSuchProgram {
            name: "(any)".to_string(),
        })?;
        let fd = program
            .fd()
            .map_err(|e| program_error(name, "reading its descriptor", e))?;
        Ok(f(std::os::fd::AsFd::as_fd(fd)))
    }

    /// The interface the program is attached to.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }
    /// The mode the program runs in.
    pub fn mode(&self) -> AttachedMode {
        self.mode
    }
    /// Why the program is not in native mode, when `Auto` fell back.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }
    /// True for the `xdp.frags` (multi-buffer) variant.
    pub fn is_multi_buffer(&self) -> bool {
        self.multi_buffer
    }
    /// The device's receive queues before and since the program was attached.
    pub fn rx_queues(&self) -> RxQueues {
        self.rx_queues
    }
}

/// Runs the XDP program `program` once over a copy of `frame` without carrying out its verdict
/// (BPF_PROG_TEST_RUN); returns the verdict (XDP_ABORTED 0, DROP 1, PASS 2, TX 3, REDIRECT 4).
pub fn test_run(program: BorrowedFd<'_>, frame: &[u8]) -> Result<u32, SyscallError> {
    crate::sys::bpf::test_run(program, frame)
}

/// Runs the XDP program `program` over `repeat` fresh copies of `frame` and carries out what it
/// returns: a redirect transmits the copy (BPF_F_TEST_XDP_LIVE_FRAMES, Linux 5.18). `batch`
/// copies are handled per kernel iteration.
pub fn test_run_live(
    program: BorrowedFd<'_>,
    frame: &[u8],
    repeat: u32,
    batch: u32,
) -> Result<(), SyscallError> {
    crate::sys::bpf::test_run_live(program, frame, repeat, batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_a_driver_adds_for_xdp_are_refused_with_the_fix() {
        let virtio = RxQueues {
            own: 2,
            total: 4,
            max_combined: Some(4),
        };
        assert_eq!(virtio.added(), 2..4);
        assert!(virtio.check("eth0", 0).is_ok() && virtio.check("eth0", 1).is_ok());
        let e = virtio.check("eth0", 2).unwrap_err().to_string();
        assert!(
            e.contains("queue 2 of eth0 is one the driver added for XDP")
                && e.contains("received on 2 queues before")
                && e.contains("on 4 after")
                && e.contains("use a queue below 2")
                && e.contains("ethtool -L eth0 combined 4"),
            "{e}"
        );
        // A driver with more channels than it added: the advice is its maximum.
        let wide = RxQueues {
            own: 2,
            total: 4,
            max_combined: Some(8),
        };
        assert!(wide.advice("eth1").contains("combined 8"));
    }

    #[test]
    fn a_driver_that_adds_no_queue_refuses_none() {
        for q in [
            RxQueues {
                own: 4,
                total: 4,
                max_combined: Some(4),
            },
            // Fewer after (a device that dropped queues): nothing was added.
            RxQueues {
                own: 4,
                total: 2,
                max_combined: None,
            },
        ] {
            assert!(q.added().is_empty());
            assert!((0..8).all(|queue| q.check("veth0", queue).is_ok()));
        }
    }
}
