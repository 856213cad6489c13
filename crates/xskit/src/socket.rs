//! AF_XDP sockets: creation, ring set-up, binding to (interface, queue), modes and statistics.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::interface::{current_netns, Interface};
use crate::mode::Mode;
use crate::sys::ring::{RawRing, RingLayout};
use crate::sys::rings::{CompletionRing, FillRing, Forwarded, RxRing, TxRing};
use crate::sys::umem::Umem;
use crate::sys::xsk::{self, RingKind};
use crate::sys::{self, SyscallError};
use xskit_os::Mmap;

/// Busy-polling settings (SO_PREFER_BUSY_POLL, SO_BUSY_POLL, SO_BUSY_POLL_BUDGET).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BusyPoll {
    /// How long a system call may busy-poll the device (the kernel counts whole
    /// microseconds).
    pub timeout: Duration,
    /// Packets per busy-poll round.
    pub budget: u32,
}

impl BusyPoll {
    /// Busy-polls for up to `timeout` per system call, `budget` packets a round.
    pub fn new(timeout: Duration, budget: u32) -> Self {
        BusyPoll { timeout, budget }
    }
}

impl Default for BusyPoll {
    /// 20 µs, 64 packets: the values of the kernel's busy-poll documentation.
    fn default() -> Self {
        BusyPoll::new(Duration::from_micros(20), 64)
    }
}

/// Ring sizes and options of one socket: start from `SocketConfig::default()` and change
/// what you need (`SocketConfig::default().rx_size(0)` for a transmit-only socket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketConfig {
    /// Entries in the rx ring (0: a transmit-only socket).
    pub rx_size: u32,
    /// Entries in the tx ring (0: a receive-only socket).
    pub tx_size: u32,
    /// Entries in the fill ring.
    pub fill_size: u32,
    /// Entries in the completion ring.
    pub completion_size: u32,
    /// Copy or zero-copy: `ZeroCopy` binds zero-copy or fails, `Skb` and `Drv` copy, and
    /// `Auto` tries zero-copy before copy (see [`crate::mode`]).
    pub mode: Mode,
    /// Ask the kernel to set the need_wakeup flag instead of expecting a system call per batch.
    pub need_wakeup: bool,
    /// Multi-buffer (XDP_USE_SG): packets larger than a frame arrive and leave as frame chains.
    pub multi_buffer: bool,
    /// Busy polling, off by default.
    pub busy_poll: Option<BusyPoll>,
    /// Descriptors one transmit system call may send in copy mode (XDP_MAX_TX_SKB_BUDGET),
    /// clamped to the tx ring size; `None` keeps the kernel's 32. The default, 256, saves
    /// system calls; on veth copy-mode transmit it measured within the noise of 32 (+0.3%). On
    /// a kernel without the option (before 6.16) a budget is skipped, and
    /// [`Socket::tx_skb_budget`] says `None`.
    pub tx_skb_budget: Option<u32>,
}

/// The smallest ring xskit accepts: smaller rings cannot hold one refill batch, and a
/// receiver whose fill ring is never refilled forwards nothing.
pub const MIN_RING_SIZE: u32 = 32;
/// The largest ring xskit accepts (entries). The kernel allocates rings from its own memory
/// and accepts far larger ones; 65536 descriptors already queue seconds of traffic, and a
/// UMEM to back them takes 256 MiB of locked memory per ring at 4 KiB frames.
pub const MAX_RING_SIZE: u32 = 65536;

/// The default XDP_MAX_TX_SKB_BUDGET xskit asks for.
pub const DEFAULT_TX_SKB_BUDGET: u32 = 256;

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            rx_size: 2048,
            tx_size: 2048,
            fill_size: 2048,
            completion_size: 2048,
            mode: Mode::Auto,
            need_wakeup: true,
            multi_buffer: false,
            busy_poll: None,
            tx_skb_budget: Some(DEFAULT_TX_SKB_BUDGET),
        }
    }
}

xskit_os::config_setters!(SocketConfig {
    /// Sets the rx ring's entries (0: transmit-only).
    rx_size: u32,
    /// Sets the tx ring's entries (0: receive-only).
    tx_size: u32,
    /// Sets the fill ring's entries.
    fill_size: u32,
    /// Sets the completion ring's entries.
    completion_size: u32,
    /// Sets copy or zero-copy.
    mode: Mode,
    /// Turns need_wakeup on or off.
    need_wakeup: bool,
    /// Turns multi-buffer on or off.
    multi_buffer: bool,
    /// Sets busy polling.
    busy_poll: Option<BusyPoll>,
    /// Sets the copy-mode transmit budget.
    tx_skb_budget: Option<u32>,
});

impl SocketConfig {
    /// Checks ring sizes: powers of two from [`MIN_RING_SIZE`] to [`MAX_RING_SIZE`], and at
    /// least one of rx and tx. Nothing is allocated before this passes.
    pub fn validate(&self) -> Result<()> {
        for (ring, size, optional) in [
            ("rx", self.rx_size, true),
            ("tx", self.tx_size, true),
            ("fill", self.fill_size, false),
            ("completion", self.completion_size, false),
        ] {
            let in_range =
                size.is_power_of_two() && (MIN_RING_SIZE..=MAX_RING_SIZE).contains(&size);
            if (size != 0 || !optional) && !in_range {
                return Err(Error::RingSize { ring, size });
            }
        }
        if self.rx_size == 0 && self.tx_size == 0 {
            return Err(Error::NoDataRing);
        }
        if let Some(b) = self.tx_skb_budget {
            if b < 32 {
                return Err(Error::TxSkbBudget { budget: b });
            }
        }
        Ok(())
    }
}

/// The six counters of XDP_STATISTICS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Statistics {
    /// Packets dropped for reasons other than invalid descriptors (e.g. too large for a frame).
    pub rx_dropped: u64,
    /// Invalid descriptors on the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors on the tx ring.
    pub tx_invalid_descs: u64,
    /// Packets dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when the kernel needed a frame.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the tx ring was empty when the kernel looked for work.
    pub tx_ring_empty_descs: u64,
}

/// Sums counters, e.g. over a device's queues.
impl std::ops::AddAssign for Statistics {
    fn add_assign(&mut self, s: Statistics) {
        self.rx_dropped += s.rx_dropped;
        self.rx_invalid_descs += s.rx_invalid_descs;
        self.tx_invalid_descs += s.tx_invalid_descs;
        self.rx_ring_full += s.rx_ring_full;
        self.rx_fill_ring_empty_descs += s.rx_fill_ring_empty_descs;
        self.tx_ring_empty_descs += s.tx_ring_empty_descs;
    }
}

impl Statistics {
    /// Names and values, in kernel order.
    pub fn fields(&self) -> [(&'static str, u64); 6] {
        [
            ("rx_dropped", self.rx_dropped),
            ("rx_invalid_descs", self.rx_invalid_descs),
            ("tx_invalid_descs", self.tx_invalid_descs),
            ("rx_ring_full", self.rx_ring_full),
            ("rx_fill_ring_empty_descs", self.rx_fill_ring_empty_descs),
            ("tx_ring_empty_descs", self.tx_ring_empty_descs),
        ]
    }
}

impl fmt::Display for Statistics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, value)) in self.fields().iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={value}")?;
        }
        Ok(())
    }
}

/// Wakeup system calls a socket made (or the sockets of a port, summed): each is a trip
/// into the kernel, the cost a loop that keeps its rings busy avoids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wakeups {
    /// Through the fill ring, the driver having asked for buffers (need_wakeup).
    pub fill: u64,
    /// Through the tx ring, asked for or not (the unasked ones also in `tx_stall`).
    pub tx: u64,
    /// Through the tx ring unasked, frames having waited with none taken or completed
    /// ([`TxRing::stall_wakeups`]).
    pub tx_stall: u64,
}

impl std::ops::AddAssign for Wakeups {
    fn add_assign(&mut self, other: Wakeups) {
        self.fill += other.fill;
        self.tx += other.tx;
        self.tx_stall += other.tx_stall;
    }
}

/// An AF_XDP socket bound to one queue of one interface.
///
/// Its rings are reached with [`Socket::rx`], [`Socket::tx`], [`Socket::fill`] and
/// [`Socket::completion`], or taken apart with [`Socket::into_parts`] to drive receive and
/// transmit from different threads. A socket that shares another's (interface, queue) has no
/// fill or completion ring: the first socket's serve both.
#[derive(Debug)]
pub struct Socket {
    fd: Arc<OwnedFd>,
    umem: Umem,
    iface: Interface,
    queue: u32,
    zero_copy: bool,
    fallback: Option<String>,
    tx_skb_budget: Option<u32>,
    rx: Option<RxRing>,
    tx: Option<TxRing>,
    fill: Option<FillRing>,
    completion: Option<CompletionRing>,
}

/// The rings of a socket taken apart, plus a handle for statistics and polling.
#[derive(Debug)]
pub struct SocketParts {
    /// The rx ring, if the socket has one.
    pub rx: Option<RxRing>,
    /// The tx ring, if the socket has one.
    pub tx: Option<TxRing>,
    /// The fill ring, unless another socket on the same queue owns it.
    pub fill: Option<FillRing>,
    /// The completion ring, unless another socket on the same queue owns it.
    pub completion: Option<CompletionRing>,
    /// What remains of the socket: its descriptor and identity.
    pub handle: SocketHandle,
}

/// A socket's descriptor and identity, without its rings.
#[derive(Debug, Clone)]
pub struct SocketHandle {
    fd: Arc<OwnedFd>,
    queue: u32,
}

impl SocketHandle {
    /// The socket's XDP_STATISTICS counters.
    pub fn statistics(&self) -> Result<Statistics> {
        statistics(self.fd.as_fd())
    }
    /// The queue the socket is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }
}

impl AsFd for SocketHandle {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn statistics(fd: BorrowedFd<'_>) -> Result<Statistics> {
    let s = xsk::statistics(fd)?;
    Ok(Statistics {
        rx_dropped: s.rx_dropped,
        rx_invalid_descs: s.rx_invalid_descs,
        tx_invalid_descs: s.tx_invalid_descs,
        rx_ring_full: s.rx_ring_full,
        rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
        tx_ring_empty_descs: s.tx_ring_empty_descs,
    })
}

fn map_ring<T: Copy>(
    fd: BorrowedFd<'_>,
    kind: RingKind,
    size: u32,
    offsets: &libc::xdp_mmap_offsets,
    producer_side: bool,
) -> Result<RawRing<T>> {
    let off = kind.offsets(offsets);
    let len = off.desc as usize + size as usize * kind.entry_size();
    let map = Arc::new(Mmap::shared(fd, len, kind.pgoff())?);
    Ok(RawRing::new(
        map,
        RingLayout::from_kernel(&off),
        size,
        producer_side,
    )?)
}

fn permission(e: SyscallError, what: &'static str) -> Error {
    match e.errno() {
        Some(libc::EPERM | libc::EACCES) => Error::not_permitted(what),
        _ => Error::Syscall(e),
    }
}

/// The queues the device uses now, not what it allocated: binding beyond them fails with a
/// bare EINVAL.
fn check_queue(iface: &Interface, queue: u32, config: &SocketConfig) -> Result<()> {
    let (rx_queues, tx_queues) = iface.active_queues()?;
    let queues = if config.rx_size > 0 {
        rx_queues
    } else {
        tx_queues
    };
    if queue >= queues {
        return Err(Error::QueueOutOfRange {
            iface: iface.name().to_string(),
            queue,
            queues,
        });
    }
    Ok(())
}

/// A live socket already holding a UMEM's registration, which a new socket shares.
struct Sharing {
    with: Option<Arc<OwnedFd>>,
    /// The sharer is on the same (interface, queue), so its fill and completion rings serve
    /// the new socket too.
    same_queue: bool,
}

impl Sharing {
    fn find(umem: &Umem, netns: u64, iface: &Interface, queue: u32) -> Sharing {
        let mut reg = umem.registration();
        reg.bound.retain(|(_, _, _, w)| w.strong_count() > 0);
        let same = reg
            .bound
            .iter()
            .find(|(ns, ifx, q, _)| *ns == netns && *ifx == iface.index() && *q == queue)
            .and_then(|(_, _, _, w)| w.upgrade());
        match same {
            Some(fd) => Sharing {
                with: Some(fd),
                same_queue: true,
            },
            None => Sharing {
                with: reg.bound.iter().find_map(|(_, _, _, w)| w.upgrade()),
                same_queue: false,
            },
        }
    }
}

/// Registers the UMEM with its first socket, explaining a refusal to pin it.
fn register_first(fd: BorrowedFd<'_>, umem: &Umem) -> Result<()> {
    register_umem(fd, umem).map_err(|e| match e.errno() {
        Some(libc::ENOBUFS | libc::ENOMEM) => Error::UmemMemlock {
            bytes: umem.config().len(),
            limit: match sys::memlock_limit() {
                Some(l) if sys::geteuid() != 0 => format!("{l} bytes"),
                Some(l) => format!(
                    "{l} bytes; root normally has CAP_IPC_LOCK and is not charged, so the UMEM \
                     may simply be too large for the kernel to pin"
                ),
                None => "unlimited".into(),
            },
        },
        _ => permission(e, "registering the UMEM"),
    })
}

fn set_ring_sizes(fd: BorrowedFd<'_>, config: &SocketConfig, own_fill: bool) -> Result<()> {
    if own_fill {
        xsk::set_ring_size(fd, RingKind::Fill, config.fill_size)?;
        xsk::set_ring_size(fd, RingKind::Completion, config.completion_size)?;
    }
    if config.rx_size > 0 {
        xsk::set_ring_size(fd, RingKind::Rx, config.rx_size)?;
    }
    if config.tx_size > 0 {
        xsk::set_ring_size(fd, RingKind::Tx, config.tx_size)?;
    }
    Ok(())
}

/// A socket's four rings, mapped; each is `None` when the socket has no such ring.
struct Rings {
    rx: Option<RxRing>,
    tx: Option<TxRing>,
    fill: Option<FillRing>,
    completion: Option<CompletionRing>,
}

impl Rings {
    fn map(fd: &Arc<OwnedFd>, umem: &Umem, config: &SocketConfig, own_fill: bool) -> Result<Rings> {
        let offsets = xsk::mmap_offsets(fd.as_fd())?;
        fn ring<T: Copy>(
            fd: &Arc<OwnedFd>,
            offsets: &libc::xdp_mmap_offsets,
            kind: RingKind,
            size: u32,
            producer_side: bool,
        ) -> Result<Option<RawRing<T>>> {
            if size == 0 {
                return Ok(None);
            }
            map_ring(fd.as_fd(), kind, size, offsets, producer_side).map(Some)
        }
        let (fill_size, completion_size) = if own_fill {
            (config.fill_size, config.completion_size)
        } else {
            (0, 0)
        };
        Ok(Rings {
            fill: ring(fd, &offsets, RingKind::Fill, fill_size, true)?
                .map(|r| FillRing::new(r, umem.clone(), fd.clone())),
            completion: ring(fd, &offsets, RingKind::Completion, completion_size, false)?
                .map(|r| CompletionRing::new(r, umem.clone())),
            rx: ring(fd, &offsets, RingKind::Rx, config.rx_size, false)?
                .map(|r| RxRing::new(r, umem.clone(), fd.clone())),
            tx: ring(fd, &offsets, RingKind::Tx, config.tx_size, true)?
                .map(|r| TxRing::new(r, umem.clone(), fd.clone())),
        })
    }
}

/// The (interface, queue) a socket binds to.
struct BindTarget<'a> {
    iface: &'a Interface,
    queue: u32,
}

impl BindTarget<'_> {
    fn flags(config: &SocketConfig) -> u16 {
        let mut flags = 0u16;
        if config.need_wakeup {
            flags |= libc::XDP_USE_NEED_WAKEUP;
        }
        if config.multi_buffer {
            flags |= libc::XDP_USE_SG;
        }
        flags
    }

    fn error(&self, e: SyscallError) -> Error {
        match e.errno() {
            Some(libc::EBUSY) => Error::QueueBusy {
                iface: self.iface.name().to_string(),
                queue: self.queue,
            },
            Some(libc::EPERM | libc::EACCES) => Error::not_permitted("binding an AF_XDP socket"),
            _ => Error::Syscall(e),
        }
    }

    fn try_bind(
        &self,
        fd: BorrowedFd<'_>,
        flags: u16,
        shared: Option<BorrowedFd<'_>>,
    ) -> Result<(), SyscallError> {
        xsk::bind_retrying(fd, self.iface.index(), self.queue, flags, shared)
    }

    /// Binds a socket that shares another's UMEM. It inherits copy mode, need_wakeup and
    /// multi-buffer from the socket that registered the UMEM; the kernel rejects any of those
    /// flags beside XDP_SHARED_UMEM.
    fn bind_shared(&self, fd: BorrowedFd<'_>, first: BorrowedFd<'_>) -> Result<Option<String>> {
        self.try_bind(fd, libc::XDP_SHARED_UMEM, Some(first))
            .map_err(|e| self.error(e))?;
        Ok(None)
    }

    /// Binds in the socket's mode; returns why it fell back to copy, when `Auto` did.
    fn bind(&self, fd: BorrowedFd<'_>, config: &SocketConfig) -> Result<Option<String>> {
        let flags = Self::flags(config);
        let copy = |this: &Self| {
            this.try_bind(fd, flags | libc::XDP_COPY, None)
                .map_err(|e| this.error(e))
        };
        match config.mode {
            Mode::Skb | Mode::Drv => copy(self).map(|()| None),
            Mode::ZeroCopy => self
                .try_bind(fd, flags | libc::XDP_ZEROCOPY, None)
                .map(|()| None)
                .map_err(|e| match e.errno() {
                    Some(libc::EBUSY | libc::EPERM | libc::EACCES) => self.error(e),
                    _ => zero_copy_refusal(self.iface, config.multi_buffer, &e),
                }),
            Mode::Auto => match self.try_bind(fd, flags | libc::XDP_ZEROCOPY, None) {
                Ok(()) => Ok(None),
                Err(e) if matches!(e.errno(), Some(libc::EBUSY | libc::EPERM | libc::EACCES)) => {
                    Err(self.error(e))
                }
                Err(e) => {
                    copy(self)?;
                    Ok(Some(format!(
                        "{}, using copy mode",
                        zero_copy_refusal(self.iface, config.multi_buffer, &e)
                    )))
                }
            },
        }
    }
}

/// Why the kernel refused a zero-copy bind, in the device's own terms: it does not offer
/// zero-copy (its XDP features say so), or not with multi-buffer (one segment per packet).
fn zero_copy_refusal(iface: &Interface, multi_buffer: bool, kernel: &SyscallError) -> Error {
    let name = iface.name().to_string();
    match iface.features() {
        Ok(f) if !f.zero_copy() => Error::ZeroCopyUnsupported {
            iface: name,
            reason: format!(
                "its driver does not offer it; xdp-features: {}",
                f.xdp_feature_names().join(" ")
            ),
        },
        Ok(f) if multi_buffer && f.zc_max_segs <= 1 => Error::ZeroCopyMultiBuffer {
            iface: name,
            segments: f.zc_max_segs,
        },
        _ => Error::ZeroCopyUnsupported {
            iface: name,
            reason: kernel.to_string(),
        },
    }
}

/// Sets XDP_MAX_TX_SKB_BUDGET, which the kernel takes from 32 to the tx ring size; returns
/// the budget in force.
fn set_tx_skb_budget(fd: BorrowedFd<'_>, config: &SocketConfig) -> Result<Option<u32>> {
    let (Some(budget), true) = (config.tx_skb_budget, config.tx_size >= 32) else {
        return Ok(None);
    };
    let budget = budget.min(config.tx_size);
    match xsk::set_max_tx_skb_budget(fd, budget) {
        Ok(()) => Ok(Some(budget)),
        // Documented on SocketConfig::tx_skb_budget: older kernels lack the option.
        Err(e) if e.errno() == Some(libc::ENOPROTOOPT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl Socket {
    /// Creates a socket on `umem` and binds it to `queue` of `iface`.
    ///
    /// The first socket of a UMEM registers it with the kernel; later ones share it
    /// (XDP_SHARED_UMEM). A later socket on another (interface, queue) gets fill and completion
    /// rings of its own; one on the same (interface, queue) uses the first one's.
    pub fn bind(
        umem: &Umem,
        iface: &Interface,
        queue: u32,
        config: &SocketConfig,
    ) -> Result<Socket> {
        config.validate()?;
        check_queue(iface, queue, config)?;
        let fd = xsk::socket().map_err(|e| permission(e, "creating an AF_XDP socket"))?;
        let netns = current_netns();
        let sharing = Sharing::find(umem, netns, iface, queue);
        if sharing.with.is_none() {
            register_first(fd.as_fd(), umem)?;
        }
        let own_fill = !sharing.same_queue;
        set_ring_sizes(fd.as_fd(), config, own_fill)?;
        let fd = Arc::new(fd);
        let rings = Rings::map(&fd, umem, config, own_fill)?;
        let target = BindTarget { iface, queue };
        let fallback = match &sharing.with {
            Some(first) => target.bind_shared(fd.as_fd(), first.as_fd())?,
            None => target.bind(fd.as_fd(), config)?,
        };
        let tx_skb_budget = set_tx_skb_budget(fd.as_fd(), config)?;
        if let Some(bp) = config.busy_poll {
            // SO_BUSY_POLL takes a C int of microseconds.
            let timeout_us = bp.timeout.as_micros().min(i32::MAX as u128) as u32;
            xsk::set_busy_poll(fd.as_fd(), timeout_us, bp.budget)?;
        }
        let mut socket = Socket::bound(fd, umem, (iface, queue), rings)?;
        socket.fallback = fallback;
        socket.tx_skb_budget = tx_skb_budget;
        Ok(socket)
    }

    /// The socket `fd`, bound to `queue` of `iface` with `rings` mapped, noted in the UMEM's
    /// registration for sockets that share it later.
    fn bound(
        fd: Arc<OwnedFd>,
        umem: &Umem,
        (iface, queue): (&Interface, u32),
        rings: Rings,
    ) -> Result<Socket> {
        let zero_copy = xsk::is_zero_copy(fd.as_fd())?;
        umem.registration().bound.push((
            current_netns(),
            iface.index(),
            queue,
            Arc::downgrade(&fd),
        ));
        Ok(Socket {
            fd,
            umem: umem.clone(),
            iface: iface.clone(),
            queue,
            zero_copy,
            fallback: None,
            tx_skb_budget: None,
            rx: rings.rx,
            tx: rings.tx,
            fill: rings.fill,
            completion: rings.completion,
        })
    }

    /// A socket another process bound to `queue` of `iface` and handed over (its
    /// descriptor `fd`, SCM_RIGHTS), on the UMEM it handed over with it ([`Umem::adopt`]).
    /// `config` must give the ring sizes that process set: the kernel maps the rings as they
    /// are, their entries and indices included, so this process carries on where it stopped.
    /// The socket must be the first on its (interface, queue): it brings its own fill and
    /// completion rings.
    pub fn adopt(
        fd: OwnedFd,
        umem: &Umem,
        iface: &Interface,
        queue: u32,
        config: &SocketConfig,
    ) -> Result<Socket> {
        config.validate()?;
        let fd = Arc::new(fd);
        let rings = Rings::map(&fd, umem, config, true)?;
        Socket::bound(fd, umem, (iface, queue), rings)
    }

    /// Binds one socket per (interface, queue) on one shared UMEM, in one call. Each
    /// (interface, queue) gets its own fill and completion rings; a repeated pair shares them.
    pub fn bind_shared(
        umem: &Umem,
        targets: &[(Interface, u32)],
        config: &SocketConfig,
    ) -> Result<Vec<Socket>> {
        targets
            .iter()
            .map(|(iface, queue)| Socket::bind(umem, iface, *queue, config))
            .collect()
    }

    /// The interface the socket is bound to.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }
    /// The queue the socket is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }
    /// The UMEM the socket uses.
    pub fn umem(&self) -> &Umem {
        &self.umem
    }
    /// True if the kernel runs this socket in zero-copy mode (XDP_OPTIONS).
    pub fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }
    /// Why the socket is not in the mode first tried, if it fell back.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }
    /// The XDP_MAX_TX_SKB_BUDGET in force, if one was set.
    pub fn tx_skb_budget(&self) -> Option<u32> {
        self.tx_skb_budget
    }
    /// The rx ring, if any.
    pub fn rx(&mut self) -> Option<&mut RxRing> {
        self.rx.as_mut()
    }
    /// The tx ring, if any.
    pub fn tx(&mut self) -> Option<&mut TxRing> {
        self.tx.as_mut()
    }
    /// Wakeups the tx ring made because the kernel left frames on it without asking to be
    /// woken ([`TxRing::stall_wakeups`]); 0 without a tx ring.
    pub fn tx_stall_wakeups(&self) -> u64 {
        self.tx.as_ref().map_or(0, TxRing::stall_wakeups)
    }
    /// The wakeup system calls made through this socket's fill and tx rings so far.
    pub fn wakeups(&self) -> Wakeups {
        Wakeups {
            fill: self.fill.as_ref().map_or(0, FillRing::wakeups),
            tx: self.tx.as_ref().map_or(0, TxRing::wakeups),
            tx_stall: self.tx_stall_wakeups(),
        }
    }
    /// The fill ring, unless another socket on the same queue owns it.
    pub fn fill(&mut self) -> Option<&mut FillRing> {
        self.fill.as_mut()
    }
    /// The completion ring, unless another socket on the same queue owns it.
    pub fn completion(&mut self) -> Option<&mut CompletionRing> {
        self.completion.as_mut()
    }
    /// Gives up to `max` received frames straight back to the fill ring (receive and drop in
    /// one pass, [`RxRing::recycle_into`]); returns how many. 0 without an rx or fill ring.
    pub fn recycle_received(&mut self, max: usize) -> usize {
        match (self.rx.as_mut(), self.fill.as_mut()) {
            (Some(rx), Some(fill)) => rx.recycle_into(fill, max),
            _ => 0,
        }
    }
    /// Moves up to `max` received frames straight onto the tx ring after `edit` has seen
    /// each ([`RxRing::forward_into`]). Nothing without an rx or tx ring.
    pub fn forward_received(&mut self, max: usize, edit: impl FnMut(&mut [u8])) -> Forwarded {
        match (self.rx.as_mut(), self.tx.as_mut()) {
            (Some(rx), Some(tx)) => rx.forward_into(tx, max, edit),
            _ => Forwarded::default(),
        }
    }
    /// Gives up to `max` transmitted frames straight to the fill ring
    /// ([`CompletionRing::recycle_into`]); returns how many. 0 without both rings.
    pub fn recycle_completed(&mut self, max: usize) -> usize {
        match (self.completion.as_mut(), self.fill.as_mut()) {
            (Some(c), Some(fill)) => c.recycle_into(fill, max),
            _ => 0,
        }
    }
    /// Sends up to `max` transmitted frames again with `len` bytes each
    /// ([`CompletionRing::resend_into`]); returns how many. 0 without both rings.
    pub fn resend_completed(&mut self, max: usize, len: usize) -> usize {
        match (self.completion.as_mut(), self.tx.as_mut()) {
            (Some(c), Some(tx)) => c.resend_into(tx, max, len),
            _ => 0,
        }
    }
    /// The XDP_STATISTICS counters.
    pub fn statistics(&self) -> Result<Statistics> {
        statistics(self.fd.as_fd())
    }
    /// Waits up to `timeout` (`None`: for as long as it takes) for received packets or
    /// transmit room. Returns (readable, writable).
    pub fn poll(&self, rx: bool, tx: bool, timeout: Option<Duration>) -> Result<(bool, bool)> {
        let mut events = 0;
        if rx {
            events |= libc::POLLIN;
        }
        if tx {
            events |= libc::POLLOUT;
        }
        let ev = xskit_os::poll(self.fd.as_fd(), events, timeout)?;
        Ok((ev & libc::POLLIN != 0, ev & libc::POLLOUT != 0))
    }
    /// A handle for reading statistics from another thread.
    pub fn handle(&self) -> SocketHandle {
        SocketHandle {
            fd: self.fd.clone(),
            queue: self.queue,
        }
    }
    /// Takes the socket apart into its rings and a handle.
    pub fn into_parts(self) -> SocketParts {
        SocketParts {
            rx: self.rx,
            tx: self.tx,
            fill: self.fill,
            completion: self.completion,
            handle: SocketHandle {
                fd: self.fd,
                queue: self.queue,
            },
        }
    }
}

/// Whether this kernel takes transmit metadata (`tx_metadata_len` in XDP_UMEM_REG, Linux
/// 6.8 and later, with the `XDP_UMEM_TX_METADATA_LEN` flag from 6.11): registers a two-frame
/// UMEM with metadata room on an unbound socket, which needs no interface.
pub fn kernel_supports_tx_metadata() -> bool {
    let config = crate::UmemConfig::default()
        .frame_count(2)
        .tx_metadata_len(crate::sys::umem::TX_METADATA_LEN);
    let Ok(umem) = Umem::new(config) else {
        return false;
    };
    let Ok(fd) = xsk::socket() else {
        return false;
    };
    register_umem(fd.as_fd(), &umem).is_ok()
}

/// Registers `umem` with the socket `fd` (XDP_UMEM_REG), with the flags its layout needs.
fn register_umem(fd: BorrowedFd<'_>, umem: &Umem) -> std::result::Result<(), SyscallError> {
    let cfg = umem.config();
    let mut flags = 0;
    if cfg.unaligned {
        flags |= libc::XDP_UMEM_UNALIGNED_CHUNK_FLAG;
    }
    if cfg.tx_metadata_len > 0 {
        flags |= libc::XDP_UMEM_TX_METADATA_LEN;
    }
    xsk::register_umem(
        fd,
        umem.as_ptr(),
        cfg.len(),
        cfg.frame_size,
        cfg.headroom,
        flags,
        cfg.tx_metadata_len,
    )
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_must_be_powers_of_two() {
        let cfg = SocketConfig {
            rx_size: 1000,
            ..Default::default()
        };
        let msg = cfg.validate().unwrap_err().to_string();
        assert!(
            msg.contains("rx ring size 1000 is not a power of two from 32 to 65536"),
            "{msg}"
        );
        for size in [1, 2, 8, 16, 131_072, 1 << 30] {
            let cfg = SocketConfig {
                fill_size: size,
                ..Default::default()
            };
            assert!(cfg.validate().is_err(), "{size}");
        }
        let cfg = SocketConfig {
            fill_size: 0,
            ..Default::default()
        };
        assert!(cfg.validate().is_err(), "the fill ring is never optional");
        let cfg = SocketConfig {
            rx_size: 0,
            ..Default::default()
        };
        assert!(cfg.validate().is_ok(), "a transmit-only socket");
        let cfg = SocketConfig {
            rx_size: 0,
            tx_size: 0,
            ..Default::default()
        };
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn tx_budget_range_is_checked() {
        let cfg = SocketConfig {
            tx_skb_budget: Some(16),
            ..Default::default()
        };
        assert!(cfg.validate().is_err());
        let cfg = SocketConfig {
            tx_skb_budget: Some(64),
            ..Default::default()
        };
        assert!(cfg.validate().is_ok());
    }
}
