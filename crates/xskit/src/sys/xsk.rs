//! AF_XDP socket system calls: creation, options, ring set-up, bind, wakeups and statistics.

use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::{cvt, setsockopt, SyscallError};

/// `XDP_MAX_TX_SKB_BUDGET` from `if_xdp.h` (Linux 6.16), not yet in the libc crate.
pub(crate) const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;
const SO_BUSY_POLL: libc::c_int = 46;
const SO_PREFER_BUSY_POLL: libc::c_int = 69;
const SO_BUSY_POLL_BUDGET: libc::c_int = 70;

/// A new AF_XDP socket.
pub(crate) fn socket() -> Result<OwnedFd, SyscallError> {
    // SAFETY: socket() takes no pointers.
    let fd = cvt(
        unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) },
        "socket(AF_XDP)",
    )?;
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads a socket option into a zeroed `T`; returns it and the length the kernel wrote.
fn getsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    call: &'static str,
) -> Result<(T, usize), SyscallError> {
    let mut value = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: value is writable for len bytes and len is a valid in/out pointer.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_mut_ptr().cast(),
            &mut len,
        )
    };
    cvt(ret, call)?;
    // SAFETY: T is plain old data (the kernel's uapi structs), zero-initialised above, so every
    // byte pattern the kernel wrote, or left zero, is a valid T.
    Ok((unsafe { value.assume_init() }, len as usize))
}

/// Registers `len` bytes at `addr` as the socket's UMEM.
pub(crate) fn register_umem(
    fd: BorrowedFd<'_>,
    addr: *mut u8,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
) -> Result<(), SyscallError> {
    let reg = libc::xdp_umem_reg {
        addr: addr as u64,
        len,
        chunk_size,
        headroom,
        flags,
        tx_metadata_len,
    };
    setsockopt(
        fd,
        libc::SOL_XDP,
        libc::XDP_UMEM_REG,
        &reg,
        "setsockopt(XDP_UMEM_REG)",
    )
}

/// Which of the four rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RingKind {
    Fill,
    Completion,
    Rx,
    Tx,
}

impl RingKind {
    fn sockopt(self) -> (libc::c_int, &'static str) {
        match self {
            RingKind::Fill => (libc::XDP_UMEM_FILL_RING, "setsockopt(XDP_UMEM_FILL_RING)"),
            RingKind::Completion => (
                libc::XDP_UMEM_COMPLETION_RING,
                "setsockopt(XDP_UMEM_COMPLETION_RING)",
            ),
            RingKind::Rx => (libc::XDP_RX_RING, "setsockopt(XDP_RX_RING)"),
            RingKind::Tx => (libc::XDP_TX_RING, "setsockopt(XDP_TX_RING)"),
        }
    }

    /// The mmap page offset of this ring.
    pub(crate) fn pgoff(self) -> u64 {
        match self {
            RingKind::Fill => libc::XDP_UMEM_PGOFF_FILL_RING,
            RingKind::Completion => libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            RingKind::Rx => libc::XDP_PGOFF_RX_RING as u64,
            RingKind::Tx => libc::XDP_PGOFF_TX_RING as u64,
        }
    }

    /// The size of one entry.
    pub(crate) fn entry_size(self) -> usize {
        match self {
            RingKind::Fill | RingKind::Completion => size_of::<u64>(),
            RingKind::Rx | RingKind::Tx => size_of::<libc::xdp_desc>(),
        }
    }

    /// This ring's offsets in the kernel's answer to XDP_MMAP_OFFSETS.
    pub(crate) fn offsets(self, off: &libc::xdp_mmap_offsets) -> libc::xdp_ring_offset {
        let o = match self {
            RingKind::Fill => &off.fr,
            RingKind::Completion => &off.cr,
            RingKind::Rx => &off.rx,
            RingKind::Tx => &off.tx,
        };
        libc::xdp_ring_offset {
            producer: o.producer,
            consumer: o.consumer,
            desc: o.desc,
            flags: o.flags,
        }
    }
}

/// Asks the kernel to create `kind` with `size` entries.
pub(crate) fn set_ring_size(
    fd: BorrowedFd<'_>,
    kind: RingKind,
    size: u32,
) -> Result<(), SyscallError> {
    let (name, call) = kind.sockopt();
    setsockopt(fd, libc::SOL_XDP, name, &size, call)
}

/// Where the kernel put each ring's indices and entries.
pub(crate) fn mmap_offsets(fd: BorrowedFd<'_>) -> Result<libc::xdp_mmap_offsets, SyscallError> {
    let (off, len) = getsockopt::<libc::xdp_mmap_offsets>(
        fd,
        libc::SOL_XDP,
        libc::XDP_MMAP_OFFSETS,
        "getsockopt(XDP_MMAP_OFFSETS)",
    )?;
    if len != size_of::<libc::xdp_mmap_offsets>() {
        // Kernels before 5.4 answer without the flags offsets, which xskit needs for need_wakeup.
        return Err(SyscallError {
            call: "getsockopt(XDP_MMAP_OFFSETS): kernel older than 5.4",
            os_error: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        });
    }
    Ok(off)
}

/// Binds the socket to (ifindex, queue) with `flags`; `shared_umem_fd` for XDP_SHARED_UMEM.
pub(crate) fn bind(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared_umem_fd: Option<BorrowedFd<'_>>,
) -> Result<(), SyscallError> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: shared_umem_fd.map_or(0, |f| f.as_raw_fd() as u32),
    };
    // SAFETY: addr is a valid sockaddr_xdp of the size passed.
    let ret = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_xdp).cast(),
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    cvt(ret, "bind(AF_XDP)").map(drop)
}

/// [`bind`], retried for up to half a second while the kernel answers EBUSY: a socket that
/// was bound to the queue a moment ago (say, by a process that just exited) is released
/// asynchronously, and binding in that window fails though nothing holds the queue.
pub(crate) fn bind_retrying(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared_umem_fd: Option<BorrowedFd<'_>>,
) -> Result<(), SyscallError> {
    let mut tries = 0;
    loop {
        match bind(fd, ifindex, queue, flags, shared_umem_fd) {
            Err(e) if e.errno() == Some(libc::EBUSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// The six XDP_STATISTICS counters.
pub(crate) fn statistics(fd: BorrowedFd<'_>) -> Result<libc::xdp_statistics, SyscallError> {
    getsockopt(
        fd,
        libc::SOL_XDP,
        libc::XDP_STATISTICS,
        "getsockopt(XDP_STATISTICS)",
    )
    .map(|(s, _)| s)
}

/// Whether the bound socket runs in zero-copy mode (XDP_OPTIONS_ZEROCOPY).
pub(crate) fn is_zero_copy(fd: BorrowedFd<'_>) -> Result<bool, SyscallError> {
    let (opts, _) = getsockopt::<libc::xdp_options>(
        fd,
        libc::SOL_XDP,
        libc::XDP_OPTIONS,
        "getsockopt(XDP_OPTIONS)",
    )?;
    Ok(opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
}

/// Sets the per-sendto descriptor budget of copy-mode transmit.
pub(crate) fn set_max_tx_skb_budget(fd: BorrowedFd<'_>, budget: u32) -> Result<(), SyscallError> {
    setsockopt(
        fd,
        libc::SOL_XDP,
        XDP_MAX_TX_SKB_BUDGET,
        &budget,
        "setsockopt(XDP_MAX_TX_SKB_BUDGET)",
    )
}

/// Turns on busy polling: SO_PREFER_BUSY_POLL, SO_BUSY_POLL (µs) and SO_BUSY_POLL_BUDGET.
pub(crate) fn set_busy_poll(
    fd: BorrowedFd<'_>,
    timeout_us: u32,
    budget: u32,
) -> Result<(), SyscallError> {
    let one: libc::c_int = 1;
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        SO_PREFER_BUSY_POLL,
        &one,
        "setsockopt(SO_PREFER_BUSY_POLL)",
    )?;
    let timeout = timeout_us as libc::c_int;
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        SO_BUSY_POLL,
        &timeout,
        "setsockopt(SO_BUSY_POLL)",
    )?;
    let budget = budget as libc::c_int;
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        SO_BUSY_POLL_BUDGET,
        &budget,
        "setsockopt(SO_BUSY_POLL_BUDGET)",
    )
}

/// A wakeup call's result: the errors that only mean "busy, try again" are not errors here.
fn wakeup_result(ret: isize, call: &'static str) -> Result<(), SyscallError> {
    if ret >= 0 {
        return Ok(());
    }
    let err = SyscallError::last(call);
    match err.errno() {
        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN) => Ok(()),
        _ => Err(err),
    }
}

/// Kicks the kernel to transmit (or, with busy polling, to run the driver): a zero-length
/// `sendto` with MSG_DONTWAIT.
pub(crate) fn kick_tx(fd: BorrowedFd<'_>) -> Result<(), SyscallError> {
    // SAFETY: a zero-length send with null buffer and address reads no memory.
    let ret = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    wakeup_result(ret, "sendto(AF_XDP wakeup)")
}

/// Wakes the kernel to refill from the fill ring: a zero-length non-blocking `recvfrom`.
pub(crate) fn kick_rx(fd: BorrowedFd<'_>) -> Result<(), SyscallError> {
    // SAFETY: a zero-length receive with null buffer and address writes no memory.
    let ret = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    wakeup_result(ret, "recvfrom(AF_XDP wakeup)")
}
