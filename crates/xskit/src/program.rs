//! The XDP program that steers packets to AF_XDP sockets, and its lifecycle on an interface.

use std::fmt;
use std::sync::Mutex;

use aya::maps::{MapData, XskMap};
use aya::programs::{Xdp, XdpMode};
use aya::Ebpf;

use crate::error::{Error, Result};
use crate::interface::Interface;
use crate::socket::Socket;
use crate::sync::LockUnpoisoned;
use crate::sys::filter::{ConfigRepr, CounterRepr, RuleRepr};

static REDIRECT_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xsk_redirect.o"));
static COUNT_DROP_FRAGS_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_count_drop_frags.o"));
static COUNT_DROP_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_count_drop.o"));
static FILTER_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_filter.o"));
static FILTER_FRAGS_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_filter_frags.o"));
static LIVE_REDIRECT_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_live_redirect.o"));
static REDIRECT_FRAGS_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xsk_redirect_frags.o"));

/// Where to run the XDP program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttachMode {
    /// Native if the driver supports it, else generic (SKB).
    #[default]
    Auto,
    /// Generic XDP in the kernel's network stack (XDP_FLAGS_SKB_MODE): works on any device.
    Skb,
    /// Native XDP in the driver (XDP_FLAGS_DRV_MODE): fails if the driver lacks it.
    Drv,
}

/// The attach mode a program actually runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachedMode {
    /// Generic (SKB) XDP.
    Skb,
    /// Native (driver) XDP.
    Drv,
}

impl fmt::Display for AttachedMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttachedMode::Skb => "xdp-skb",
            AttachedMode::Drv => "xdp-drv",
        })
    }
}

/// xskit's redirect program attached to an interface: a packet received on queue `q` goes to
/// the socket registered for `q`, and everything else to the kernel stack.
///
/// The program is attached through a bpf_link, so it disappears when this value is dropped
/// and also when the process dies, however it dies.
pub struct XdpProgram {
    // Owns the loaded program and its link; dropping it detaches the program.
    ebpf: Mutex<Ebpf>,
    filter: Option<Mutex<FilterMaps>>,
    xsks: Mutex<XskMap<MapData>>,
    iface: Interface,
    mode: AttachedMode,
    fallback: Option<String>,
    multi_buffer: bool,
    id: u32,
}

impl fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpProgram")
            .field("iface", &self.iface)
            .field("mode", &self.mode)
            .field("multi_buffer", &self.multi_buffer)
            .finish_non_exhaustive()
    }
}

fn program_error(what: &str, e: impl fmt::Display) -> Error {
    let text = e.to_string();
    if text.contains("Operation not permitted")
        || text.contains("EPERM")
        || text.contains("permission")
    {
        Error::NotPermitted {
            what: "loading the XDP program",
        }
    } else {
        Error::Program(format!("{what}: {text}"))
    }
}

/// Explains a refused native attach. ERANGE is the kernel's "MTU too large for a program
/// without multi-buffer support" (veth, and drivers with page-sized buffers).
fn native_error(iface: &Interface, mtu: u32, multi_buffer: bool, reason: &str) -> Error {
    if reason.contains("os error 34") && !multi_buffer {
        return Error::NativeXdpUnsupported {
            iface: iface.name().to_string(),
            reason: format!(
                "its MTU {mtu} is too large for a single-buffer XDP program: enable multi-buffer \
                 (--frags) or lower the MTU; kernel said: {reason}"
            ),
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

/// The full error chain of an aya error, so messages keep the kernel's reason.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Rules the kernel filter holds at most (MAX_RULES in bpf/xdp_filter.c).
pub const MAX_RULES: usize = 64;

/// What the in-kernel filter does with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Action {
    /// Hand it to the kernel stack.
    Pass = 0,
    /// Drop it (DoS filtering).
    Drop = 1,
    /// Redirect it to the AF_XDP socket of its queue (the kernel stack if there is none).
    Redirect = 2,
    /// Transmit it out of the interface set with [`XdpProgram::set_forward_target`], without
    /// user space (the kernel stack if none is set).
    Forward = 3,
}

/// One filter rule; every field left `None` matches anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Destination prefix (address, length), IPv4 or IPv6.
    pub prefix: Option<(std::net::IpAddr, u8)>,
    /// IP protocol number (6 TCP, 17 UDP, ...).
    pub protocol: Option<u8>,
    /// Destination port range, inclusive (TCP and UDP).
    pub dst_ports: Option<(u16, u16)>,
    /// What to do on a match.
    pub action: Action,
}

impl Rule {
    fn repr(&self) -> Result<RuleRepr> {
        let mut r = RuleRepr {
            action: self.action as u8,
            protocol: self.protocol.unwrap_or(0),
            port_lo: 0,
            port_hi: u16::MAX,
            ..RuleRepr::default()
        };
        if let Some((lo, hi)) = self.dst_ports {
            if lo > hi {
                return Err(Error::InvalidConfig(format!(
                    "port range {lo}-{hi} is empty"
                )));
            }
            (r.port_lo, r.port_hi) = (lo, hi);
        }
        if let Some((addr, len)) = self.prefix {
            let (bytes, max): (Vec<u8>, u8) = match addr {
                std::net::IpAddr::V4(a) => (a.octets().to_vec(), 32),
                std::net::IpAddr::V6(a) => (a.octets().to_vec(), 128),
            };
            if len > max {
                return Err(Error::InvalidConfig(format!(
                    "prefix length /{len} is longer than /{max}"
                )));
            }
            r.family = if max == 32 { 4 } else { 6 };
            for (i, chunk) in bytes.chunks(4).enumerate() {
                let word_bits = (u32::from(len)).saturating_sub(i as u32 * 32).min(32);
                let mask = if word_bits == 0 {
                    0
                } else {
                    u32::MAX << (32 - word_bits)
                };
                let word = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                // The program compares words as loaded from the packet: network byte order.
                r.mask[i] = mask.to_be();
                r.addr[i] = (word & mask).to_be();
            }
        }
        Ok(r)
    }
}

/// Packets and bytes that matched a rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleCounter {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

struct FilterMaps {
    tx_port: aya::maps::DevMap<MapData>,
    rules: aya::maps::Array<MapData, RuleRepr>,
    config: aya::maps::Array<MapData, ConfigRepr>,
    counters: aya::maps::PerCpuArray<MapData, CounterRepr>,
    installed: usize,
    unclassifiable: Action,
}

impl FilterMaps {
    /// One counter, summed over CPUs.
    fn read(&self, index: u32) -> Result<RuleCounter> {
        let per_cpu = self
            .counters
            .get(&index, 0)
            .map_err(|e| Error::Program(format!("reading rule counters: {}", chain(&e))))?;
        Ok(per_cpu
            .iter()
            .fold(RuleCounter::default(), |acc, c| RuleCounter {
                packets: acc.packets + c.packets,
                bytes: acc.bytes + c.bytes,
            }))
    }
}

/// A loaded, attached object: the link lives as long as `ebpf`.
struct Attached {
    ebpf: Ebpf,
    mode: AttachedMode,
    fallback: Option<String>,
    /// The kernel's id of the attached program (0 if it could not be read).
    id: u32,
}

/// Loads program `prog_name` of `obj` and attaches it to `iface` in `mode`, after making sure
/// no other program is there (which is named in the error, never replaced).
fn attach_object(
    iface: &Interface,
    obj: &[u8],
    prog_name: &str,
    mode: AttachMode,
    multi_buffer: bool,
) -> Result<Attached> {
    let link = iface.link_info()?;
    if let Some(id) = link.xdp.any() {
        return Err(Error::ProgramAttached {
            iface: iface.name().to_string(),
            id,
            name: program_name(id),
            mode: link.xdp.mode_name(),
        });
    }
    let mut ebpf = Ebpf::load(obj).map_err(|e| program_error("loading", chain(&e)))?;
    let program: &mut Xdp = ebpf
        .program_mut(prog_name)
        .ok_or_else(|| Error::Program(format!("the embedded object has no program {prog_name}")))?
        .try_into()
        .map_err(|e| Error::Program(format!("{prog_name}: {e}")))?;
    program
        .load()
        .map_err(|e| program_error("verifying", chain(&e)))?;
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
    let (mode, fallback) = match mode {
        AttachMode::Skb => {
            attach(program, XdpMode::Skb).map_err(|e| {
                taken().unwrap_or_else(|| program_error("attaching in SKB mode", chain(&e)))
            })?;
            (AttachedMode::Skb, None)
        }
        AttachMode::Drv => {
            attach(program, XdpMode::Driver).map_err(|e| {
                taken().unwrap_or_else(|| native_error(iface, link.mtu, multi_buffer, &chain(&e)))
            })?;
            (AttachedMode::Drv, None)
        }
        AttachMode::Auto => match attach(program, XdpMode::Driver) {
            Ok(_) => (AttachedMode::Drv, None),
            Err(native) => {
                if let Some(e) = taken() {
                    return Err(e);
                }
                attach(program, XdpMode::Skb).map_err(|e| {
                    taken().unwrap_or_else(|| program_error("attaching in SKB mode", chain(&e)))
                })?;
                (
                    AttachedMode::Skb,
                    Some(format!(
                        "native XDP refused ({}), using SKB mode",
                        chain(&native)
                    )),
                )
            }
        },
    };
    // The link is ours, so the id the interface reports now is our program's.
    let id = iface
        .link_info()
        .ok()
        .and_then(|l| l.xdp.any())
        .unwrap_or(0);
    Ok(Attached {
        ebpf,
        mode,
        fallback,
        id,
    })
}

/// The kernel's ceiling for receive benchmarks: a program that counts packets per CPU and
/// drops them. Detached on drop, like every xskit program.
pub struct XdpDropCounter {
    counts: aya::maps::PerCpuArray<MapData, u64>,
    _ebpf: Ebpf,
    mode: AttachedMode,
}

impl fmt::Debug for XdpDropCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpDropCounter")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl XdpDropCounter {
    /// Attaches the counting drop program to `iface`; with `multi_buffer`, the `xdp.frags`
    /// variant, which native XDP needs on links with an MTU above a page.
    pub fn attach(iface: &Interface, mode: AttachMode, multi_buffer: bool) -> Result<Self> {
        let (obj, name) = if multi_buffer {
            (COUNT_DROP_FRAGS_OBJ, "xskit_count_drop_frags")
        } else {
            (COUNT_DROP_OBJ, "xskit_count_drop")
        };
        let mut attached = attach_object(iface, obj, name, mode, multi_buffer)?;
        let counts = attached
            .ebpf
            .take_map("drop_count")
            .ok_or_else(|| Error::Program("the embedded object has no drop_count".into()))?
            .try_into()
            .map_err(|e| Error::Program(format!("drop_count: {e}")))?;
        Ok(XdpDropCounter {
            counts,
            _ebpf: attached.ebpf,
            mode: attached.mode,
        })
    }

    /// Packets dropped so far, summed over CPUs.
    pub fn dropped(&self) -> Result<u64> {
        let per_cpu = self
            .counts
            .get(&0, 0)
            .map_err(|e| Error::Program(format!("reading drop_count: {}", chain(&e))))?;
        Ok(per_cpu.iter().sum())
    }

    /// The mode the program runs in.
    pub fn mode(&self) -> AttachedMode {
        self.mode
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

impl LiveFrames {
    /// Prepares the program that transmits out of `target` (in this thread's namespace).
    pub fn new(target: &Interface) -> Result<Self> {
        let index = target.index();
        let mut ebpf = aya::EbpfLoader::new()
            .override_global("target_ifindex", &index, true)
            .load(LIVE_REDIRECT_OBJ)
            .map_err(|e| program_error("loading", chain(&e)))?;
        let program: &mut Xdp = ebpf
            .program_mut("xskit_live_redirect")
            .ok_or_else(|| Error::Program("the embedded object has no xskit_live_redirect".into()))?
            .try_into()
            .map_err(|e| Error::Program(format!("xskit_live_redirect: {e}")))?;
        program
            .load()
            .map_err(|e| program_error("verifying", chain(&e)))?;
        Ok(LiveFrames {
            ebpf,
            target: target.clone(),
        })
    }

    /// [`LiveFrames::send`] with SIGINT and SIGTERM held until the kernel is done, so all
    /// `count` copies leave and the count is known; a stop signal takes effect when it
    /// returns. Keep `count` to what the device sends in a fraction of a second.
    pub fn send_whole(&mut self, frame: &[u8], count: u32) -> Result<bool> {
        crate::sys::with_stop_signals_held(|| self.send(frame, count))
    }

    /// Transmits `count` copies of `frame`; returns when the kernel is done: true, or false if
    /// a signal interrupted the run (the kernel does not say how many of the copies left).
    pub fn send(&mut self, frame: &[u8], count: u32) -> Result<bool> {
        let program: &mut Xdp = self
            .ebpf
            .program_mut("xskit_live_redirect")
            .ok_or_else(|| Error::Program("xskit_live_redirect is gone".into()))?
            .try_into()
            .map_err(|e| Error::Program(format!("xskit_live_redirect: {e}")))?;
        let fd = program
            .fd()
            .map_err(|e| Error::Program(format!("xskit_live_redirect: {e}")))?;
        let run = crate::sys::bpf::test_run_live(std::os::fd::AsFd::as_fd(fd), frame, count, 64);
        if run.as_ref().is_err_and(|e| e.errno() == Some(libc::EINTR)) {
            return Ok(false);
        }
        run.map(|_| true).map_err(|e| match e.errno() {
            Some(libc::EPERM | libc::EACCES) => Error::NotPermitted { what: "running the live-frames generator" },
            Some(libc::EINVAL) => Error::Program(format!(
                "the kernel refused live frames ({}): it needs Linux 5.18 or later and a frame of 14 to {} bytes",
                e.os_error,
                4096 - 256 - 320
            )),
            _ => Error::Syscall(e),
        })
    }

    /// The interface frames leave from.
    pub fn target(&self) -> &Interface {
        &self.target
    }
}

/// The name of the loaded program with id `id`, if it can be found.
fn program_name(id: u32) -> String {
    aya::programs::loaded_programs()
        .filter_map(|p| p.ok())
        .find(|p| p.id() == id)
        .and_then(|p| p.name_as_str().map(str::to_string))
        .unwrap_or_else(|| "?".to_string())
}

impl XdpProgram {
    /// Loads the redirect program and attaches it to `iface`.
    ///
    /// Refuses, naming the other program, if one is already attached. With `multi_buffer` the
    /// program is the `xdp.frags` variant, needed for sockets bound with multi-buffer.
    pub fn attach(iface: &Interface, mode: AttachMode, multi_buffer: bool) -> Result<Self> {
        let (obj, prog_name) = if multi_buffer {
            (REDIRECT_FRAGS_OBJ, "xskit_redirect_frags")
        } else {
            (REDIRECT_OBJ, "xskit_redirect")
        };
        let mut attached = attach_object(iface, obj, prog_name, mode, multi_buffer)?;
        let xsks: XskMap<MapData> = attached
            .ebpf
            .take_map("xsks_map")
            .ok_or_else(|| Error::Program("the embedded object has no xsks_map".into()))?
            .try_into()
            .map_err(|e| Error::Program(format!("xsks_map: {e}")))?;
        Ok(XdpProgram {
            ebpf: Mutex::new(attached.ebpf),
            filter: None,
            xsks: Mutex::new(xsks),
            iface: iface.clone(),
            mode: attached.mode,
            fallback: attached.fallback,
            multi_buffer,
            id: attached.id,
        })
    }

    /// Loads the filtering program (stage 0 in the kernel) and attaches it to `iface`. It starts
    /// with no rules and the default action [`Action::Redirect`], so it behaves like
    /// [`XdpProgram::attach`] until [`XdpProgram::set_rules`] is called.
    pub fn attach_filter(iface: &Interface, mode: AttachMode) -> Result<Self> {
        Self::attach_filter_with(iface, mode, false)
    }

    /// [`XdpProgram::attach_filter`], with `multi_buffer` the `xdp.frags` variant: for sockets
    /// bound with multi-buffer, links with an MTU above a page, and packets larger than a
    /// frame (GSO/GRO super-packets in SKB mode).
    pub fn attach_filter_with(
        iface: &Interface,
        mode: AttachMode,
        multi_buffer: bool,
    ) -> Result<Self> {
        let (obj, name) = if multi_buffer {
            (FILTER_FRAGS_OBJ, "xskit_filter_frags")
        } else {
            (FILTER_OBJ, "xskit_filter")
        };
        let mut attached = attach_object(iface, obj, name, mode, multi_buffer)?;
        fn take<T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>>(
            ebpf: &mut Ebpf,
            name: &str,
        ) -> Result<T> {
            ebpf.take_map(name)
                .ok_or_else(|| Error::Program(format!("the embedded filter has no {name}")))?
                .try_into()
                .map_err(|e| Error::Program(format!("{name}: {e}")))
        }
        let xsks: XskMap<MapData> = take(&mut attached.ebpf, "xsks_map")?;
        let mut maps = FilterMaps {
            tx_port: take(&mut attached.ebpf, "tx_port")?,
            rules: take(&mut attached.ebpf, "rules")?,
            config: take(&mut attached.ebpf, "config")?,
            counters: take(&mut attached.ebpf, "counters")?,
            installed: 0,
            unclassifiable: Action::Drop,
        };
        maps.config
            .set(
                0,
                ConfigRepr {
                    rule_count: 0,
                    default_action: Action::Redirect as u32,
                    unclassifiable_action: Action::Drop as u32,
                },
                0,
            )
            .map_err(|e| Error::Program(format!("writing the filter config: {}", chain(&e))))?;
        Ok(XdpProgram {
            ebpf: Mutex::new(attached.ebpf),
            filter: Some(Mutex::new(maps)),
            xsks: Mutex::new(xsks),
            iface: iface.clone(),
            mode: attached.mode,
            fallback: attached.fallback,
            multi_buffer,
            id: attached.id,
        })
    }

    /// Replaces the filter's rules (evaluated in order, first match wins) and its default
    /// action, while the program keeps running. During the update packets see no rule and
    /// take the new default.
    pub fn set_rules(&self, rules: &[Rule], default: Action) -> Result<()> {
        let filter = self.filter.as_ref().ok_or_else(|| {
            Error::InvalidConfig(
                "this program has no rules: attach it with XdpProgram::attach_filter".into(),
            )
        })?;
        if rules.len() > MAX_RULES {
            return Err(Error::InvalidConfig(format!(
                "{} rules given; the kernel filter holds at most {MAX_RULES}",
                rules.len()
            )));
        }
        let reprs = rules.iter().map(Rule::repr).collect::<Result<Vec<_>>>()?;
        let mut maps = filter.lock_unpoisoned();
        let map_err =
            |e: aya::maps::MapError| Error::Program(format!("updating the filter: {}", chain(&e)));
        let unclassifiable = maps.unclassifiable as u32;
        maps.config
            .set(
                0,
                ConfigRepr {
                    rule_count: 0,
                    default_action: default as u32,
                    unclassifiable_action: unclassifiable,
                },
                0,
            )
            .map_err(map_err)?;
        for (i, r) in reprs.iter().enumerate() {
            maps.rules.set(i as u32, *r, 0).map_err(map_err)?;
        }
        maps.config
            .set(
                0,
                ConfigRepr {
                    rule_count: reprs.len() as u32,
                    default_action: default as u32,
                    unclassifiable_action: unclassifiable,
                },
                0,
            )
            .map_err(map_err)?;
        maps.installed = reprs.len();
        Ok(())
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

    /// What the filter does with packets it cannot classify (runts, headers cut short or
    /// lying, too many VLAN tags; see [`crate::rules::PacketKey::parse`]). [`Action::Drop`]
    /// until this is called. Counted in [`XdpProgram::unclassifiable_counter`].
    pub fn set_unclassifiable(&self, action: Action) -> Result<()> {
        self.with_filter_mut(|maps| {
            let mut cfg = maps
                .config
                .get(&0, 0)
                .map_err(|e| Error::Program(format!("reading the filter config: {}", chain(&e))))?;
            cfg.unclassifiable_action = action as u32;
            maps.config
                .set(0, cfg, 0)
                .map_err(|e| Error::Program(format!("updating the filter: {}", chain(&e))))?;
            maps.unclassifiable = action;
            Ok(())
        })
    }

    /// Packets the filter could not classify, whatever it then did with them.
    pub fn unclassifiable_counter(&self) -> Result<RuleCounter> {
        self.with_filter(|maps| maps.read(MAX_RULES as u32 + 3))
    }

    /// Where [`Action::Forward`] sends packets: out of `target`, by XDP_REDIRECT through a
    /// devmap. On veth, the far end of `target`'s pair must be able to take XDP frames (an XDP
    /// program or GRO on it), or the kernel drops them.
    pub fn set_forward_target(&self, target: &Interface) -> Result<()> {
        self.with_filter_mut(|maps| {
            maps.tx_port
                .set(0, target.index(), None, 0)
                .map_err(|e| Error::Program(format!("setting the forward target: {}", chain(&e))))
        })
    }

    /// IPv6 packets with extension headers, which the filter sends to user space undecided
    /// (their protocol and ports lie behind a chain it does not walk).
    pub fn undecided_counter(&self) -> Result<RuleCounter> {
        self.with_filter(|maps| maps.read(MAX_RULES as u32 + 1))
    }

    /// Packets a `forward` rule would have sent on in XDP whose TCP or UDP checksum was partial:
    /// the filter sends them to user space, which finishes the checksum.
    pub fn partial_checksum_counter(&self) -> Result<RuleCounter> {
        self.with_filter(|maps| maps.read(MAX_RULES as u32 + 2))
    }

    /// Packets and bytes per rule, in rule order, then the default action's as the last entry.
    pub fn rule_counters(&self) -> Result<Vec<RuleCounter>> {
        self.with_filter(|maps| {
            let mut out = (0..maps.installed as u32)
                .map(|i| maps.read(i))
                .collect::<Result<Vec<_>>>()?;
            out.push(maps.read(MAX_RULES as u32)?);
            Ok(out)
        })
    }

    fn with_filter_mut<R>(&self, f: impl FnOnce(&mut FilterMaps) -> Result<R>) -> Result<R> {
        let filter = self.filter.as_ref().ok_or_else(|| {
            Error::InvalidConfig(
                "this program has no rules: attach it with XdpProgram::attach_filter".into(),
            )
        })?;
        f(&mut filter.lock_unpoisoned())
    }

    fn with_filter<R>(&self, f: impl FnOnce(&FilterMaps) -> Result<R>) -> Result<R> {
        self.with_filter_mut(|maps| f(maps))
    }

    /// Sends packets of the socket's queue to the socket.
    pub fn register(&self, socket: &Socket) -> Result<()> {
        if socket.interface().index() != self.iface.index() {
            return Err(Error::InvalidConfig(format!(
                "the socket is bound to {}, the program is on {}",
                socket.interface().name(),
                self.iface.name()
            )));
        }
        let mut map = self.xsks.lock_unpoisoned();
        map.set(
            socket.queue(),
            std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(socket)),
            0,
        )
        .map_err(|e| {
            Error::Program(format!(
                "registering queue {}: {}",
                socket.queue(),
                chain(&e)
            ))
        })
    }

    /// Stops steering queue `queue` to a socket; its packets go to the kernel stack again.
    pub fn unregister(&self, queue: u32) -> Result<()> {
        let mut map = self.xsks.lock_unpoisoned();
        map.unset(queue)
            .map_err(|e| Error::Program(format!("unregistering queue {queue}: {}", chain(&e))))
    }

    /// Runs the program once over `frame` without acting on the result (BPF_PROG_TEST_RUN) and
    /// returns its verdict: 1 XDP_DROP, 2 XDP_PASS (also a redirect to a queue with no
    /// socket), 4 XDP_REDIRECT. The filter's rule counters count the run, which is how a
    /// dry run shows which rule a packet hits.
    pub fn test_run(&self, frame: &[u8]) -> Result<u32> {
        let ebpf = self.ebpf.lock_unpoisoned();
        let (name, program) = ebpf
            .programs()
            .next()
            .ok_or_else(|| Error::Program("the loaded object has no program".into()))?;
        let fd = program
            .fd()
            .map_err(|e| Error::Program(format!("{name}: {e}")))?;
        Ok(crate::sys::bpf::test_run(
            std::os::fd::AsFd::as_fd(fd),
            frame,
        )?)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_become_network_order_prefixes() {
        let r = Rule {
            prefix: Some(("198.51.100.77".parse().unwrap(), 24)),
            protocol: Some(17),
            dst_ports: Some((1000, 2000)),
            action: Action::Drop,
        }
        .repr()
        .unwrap();
        assert_eq!(r.family, 4);
        assert_eq!(r.addr[0].to_ne_bytes(), [198, 51, 100, 0]);
        assert_eq!(r.mask[0].to_ne_bytes(), [255, 255, 255, 0]);
        assert_eq!(
            (r.port_lo, r.port_hi, r.protocol, r.action),
            (1000, 2000, 17, 1)
        );
        let v6 = Rule {
            prefix: Some(("2001:db8::1".parse().unwrap(), 40)),
            protocol: None,
            dst_ports: None,
            action: Action::Pass,
        }
        .repr()
        .unwrap();
        assert_eq!(
            (v6.family, v6.mask[1].to_ne_bytes(), v6.mask[2]),
            (6, [255, 0, 0, 0], 0)
        );
        let bad = Rule {
            prefix: Some(("198.51.100.0".parse().unwrap(), 33)),
            protocol: None,
            dst_ports: None,
            action: Action::Pass,
        };
        assert!(bad.repr().unwrap_err().to_string().contains("/33"));
        let empty = Rule {
            prefix: None,
            protocol: None,
            dst_ports: Some((9, 8)),
            action: Action::Pass,
        };
        assert!(empty.repr().is_err());
    }
}
