//! The library's error type. Every variant's message says what went wrong and what to do.

use crate::sys::SyscallError;

/// Errors from xskit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The process lacks a privilege the operation needs.
    #[error(
        "{what}: permission denied. AF_XDP and XDP need root, or CAP_NET_ADMIN, CAP_NET_RAW and \
         CAP_BPF (plus CAP_IPC_LOCK for a large UMEM): run as root, e.g. with sudo"
    )]
    NotPermitted {
        /// What was being done.
        what: &'static str,
    },
    /// No interface of that name in this network namespace.
    #[error(
        "no interface named '{name}' in this network namespace: check the name with `ip link`, \
         or run xskit inside the namespace that holds it (`ip netns exec NS xskit ...`)"
    )]
    NoSuchInterface {
        /// The name asked for.
        name: String,
    },
    /// The queue does not exist on the interface.
    #[error(
        "queue {queue} does not exist on {iface}, which has {queues} receive queue(s) (0..{queues}): \
         pick a queue below {queues}, or add queues (`ethtool -L {iface} combined N`; for veth, \
         create it with numrxqueues/numtxqueues)"
    )]
    QueueOutOfRange {
        /// The interface.
        iface: String,
        /// The queue asked for.
        queue: u32,
        /// How many receive queues it has.
        queues: u32,
    },
    /// Another AF_XDP socket (or UMEM) is already bound to the queue.
    #[error(
        "queue {queue} of {iface} is already in use by another AF_XDP socket: stop the other \
         program, pick another queue, or share its UMEM"
    )]
    QueueBusy {
        /// The interface.
        iface: String,
        /// The queue.
        queue: u32,
    },
    /// A ring size is not a power of two in the range xskit accepts
    /// ([`crate::MIN_RING_SIZE`] to [`crate::MAX_RING_SIZE`]).
    #[error(
        "the {ring} ring size {size} is not a power of two from {min} to {max}: use e.g. 512, \
         1024, 2048 or 4096",
        min = crate::socket::MIN_RING_SIZE,
        max = crate::socket::MAX_RING_SIZE
    )]
    RingSize {
        /// Which ring.
        ring: &'static str,
        /// The size given.
        size: u32,
    },
    /// The frame size is not one the kernel accepts.
    #[error("frame size {size} is not allowed: {reason}")]
    FrameSize {
        /// The size given.
        size: u32,
        /// Why, and what to use.
        reason: String,
    },
    /// The headroom leaves no room for a packet.
    #[error(
        "headroom {headroom} is too large for {frame_size}-byte frames (the kernel keeps 256 bytes \
         of its own): use at most {max}, or larger frames"
    )]
    Headroom {
        /// The headroom given.
        headroom: u32,
        /// The frame size.
        frame_size: u32,
        /// The largest headroom that fits.
        max: u32,
    },
    /// The UMEM could not be registered because it exceeds the locked-memory limit.
    #[error(
        "the kernel refused to pin the {bytes}-byte UMEM (ENOBUFS/ENOMEM): it is charged against \
         RLIMIT_MEMLOCK ({limit}) unless the process has CAP_IPC_LOCK. Run as root, raise the limit \
         (`ulimit -l`, or LimitMEMLOCK= for a service), or use fewer/smaller frames"
    )]
    UmemMemlock {
        /// The UMEM size.
        bytes: u64,
        /// The limit, as text.
        limit: String,
    },
    /// The UMEM would take more memory than the machine has available.
    #[error(
        "a UMEM of {} MiB is more than the {} MiB of memory available: use smaller rings or \
         fewer frames",
        bytes >> 20,
        available >> 20
    )]
    UmemTooLarge {
        /// Bytes the UMEM needs.
        bytes: u64,
        /// MemAvailable from /proc/meminfo.
        available: u64,
    },
    /// Huge pages were asked for but none could be mapped.
    #[error(
        "could not map {bytes} bytes of huge pages ({os_error}): reserve some with \
         `echo N > /proc/sys/vm/nr_hugepages`, or drop the huge-pages option"
    )]
    HugePages {
        /// How much was asked for.
        bytes: u64,
        /// The kernel's error.
        os_error: std::io::Error,
    },
    /// Zero-copy was demanded on a device that cannot do it.
    #[error(
        "zero-copy is not available on {iface} ({reason}): use mode `drv` (native, copy) or `auto` \
         (falls back by itself)"
    )]
    ZeroCopyUnsupported {
        /// The interface.
        iface: String,
        /// The kernel's answer.
        reason: String,
    },
    /// Native XDP was demanded on a device whose driver lacks it.
    #[error(
        "native (driver) XDP could not be attached to {iface} ({reason}): use mode `skb`, or `auto` \
         to fall back by itself"
    )]
    NativeXdpUnsupported {
        /// The interface.
        iface: String,
        /// The kernel's answer.
        reason: String,
    },
    /// Another XDP program is attached to the interface.
    #[error(
        "{iface} already has an XDP program attached ({mode} mode): id {id}, name '{name}'. xskit \
         will not replace it silently. Detach it first: `ip link set dev {iface} xdp off` (or \
         `xdpgeneric off`) if it was attached with ip, or stop the process that holds its bpf_link \
         (`bpftool link` shows it); then run xskit again"
    )]
    ProgramAttached {
        /// The interface.
        iface: String,
        /// The attached program's id.
        id: u32,
        /// Its name, as the kernel knows it.
        name: String,
        /// "native" or "generic".
        mode: &'static str,
    },
    /// Loading or attaching the XDP program failed.
    #[error("XDP program: {0}")]
    Program(String),
    /// A frame was given more data than it can hold.
    #[error("{len} bytes do not fit in a frame with room for {capacity}: use larger frames or multi-buffer")]
    FrameOverflow {
        /// The length asked for.
        len: usize,
        /// The frame's room.
        capacity: usize,
    },
    /// A capture file could not be read or written.
    #[error("capture file {path}: {reason}")]
    Pcap {
        /// The file.
        path: String,
        /// What went wrong, and what to do.
        reason: String,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A frame went missing or was counted twice (`--check`): a bug in xskit or in a stage.
    #[error(
        "frame accounting broken: {0}. This is a bug in xskit or in a stage of yours: please \
         report it with the command line and the counters"
    )]
    FrameAccounting(String),
    /// The TAP device for kernel-bound frames could not be made.
    #[error("TAP device {name}: {reason}")]
    Tap {
        /// The device name asked for.
        name: String,
        /// What went wrong, and what to do.
        reason: String,
    },
    /// A system call failed in a way not covered above.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
}

/// Results of xskit operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error's message followed by its sources' (as anyhow's `{:#}` prints them), for errors
/// of other crates (aya's, above all) whose reason is only in the chain.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_os_error_is_printed_once() {
        let e = Error::Syscall(SyscallError {
            call: "sendto(AF_XDP wakeup)",
            os_error: std::io::Error::from_raw_os_error(libc::ENXIO),
        });
        let text = error_chain(&e);
        assert_eq!(text.matches("os error 6").count(), 1, "{text}");
        assert!(text.starts_with("sendto(AF_XDP wakeup) failed: "), "{text}");
    }
}
