//! The library's error type. Every variant's message says what went wrong and what to do.

use crate::sys::SyscallError;

/// Errors from xskit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The process lacks a privilege the operation needs.
    #[error("{what}: permission denied: {advice}")]
    NotPermitted {
        /// What was being done.
        what: &'static str,
        /// Which capabilities the process lacks, and what to do
        /// ([`crate::privileges::advice_now`]).
        advice: String,
    },
    /// No interface of that name in this network namespace.
    #[error(
        "no interface named '{name}' in this network namespace: check the name with `ip link`, \
         or run the program inside the namespace that holds it (`ip netns exec NS ...`)"
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
    /// The queue is one the driver began to use when the XDP program was attached.
    #[error(
        "queue {queue} of {iface} is one the driver added for XDP: {iface} received on {own} \
         queues before the program was attached and on {total} after (virtio_net gives XDP a \
         transmit queue pair per CPU, and receives on those queues too); an AF_XDP socket there \
         does not transmit, and a zero-copy one has crashed the kernel: use a queue below {own}, \
         or {advice}"
    )]
    XdpQueue {
        /// The interface.
        iface: String,
        /// The queue asked for.
        queue: u32,
        /// Receive queues before the program was attached.
        own: u32,
        /// Receive queues with the program attached.
        total: u32,
        /// What to change ([`crate::RxQueues::advice`]).
        advice: String,
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
    /// Zero-copy multi-buffer on a device that takes one buffer per packet in zero-copy.
    #[error(
        "{iface} takes {segments} buffer(s) per packet in zero-copy (zc max segments), so \
         zero-copy cannot carry packets larger than one frame (multi-buffer): turn multi-buffer \
         off and keep packets within one frame (lower the MTU), or use mode `drv` (native, copy), which chains frames"
    )]
    ZeroCopyMultiBuffer {
        /// The interface.
        iface: String,
        /// Its zero-copy buffers per packet.
        segments: u32,
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
    /// Native XDP was refused because the MTU needs a multi-buffer program.
    #[error(
        "native (driver) XDP could not be attached to {iface}: its MTU {mtu} is too large for a \
         single-buffer XDP program. Use multi-buffer (the xdp.frags program and sockets), lower \
         the MTU, or use mode `skb`; kernel said: {reason}"
    )]
    MtuNeedsMultiBuffer {
        /// The interface.
        iface: String,
        /// Its MTU.
        mtu: u32,
        /// The kernel's answer.
        reason: String,
    },
    /// Another XDP program is attached to the interface.
    #[error(
        "{iface} already has an XDP program attached ({mode} mode): id {id}, name '{name}'. xskit \
         will not replace it silently. Detach it first: `ip link set dev {iface} xdp off` (or \
         `xdpgeneric off`) if it was attached with ip, `xdp-loader unload {iface} --all` if it is \
         libxdp's dispatcher (xdp_dispatcher), or stop the process that holds its bpf_link \
         (`bpftool link` shows it); then try again"
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
    /// The kernel refused the XDP program: loading the object, verifying the program or
    /// attaching it. The cause (aya's error, with the verifier's log) is the source.
    #[error("XDP program {program}: {step} failed")]
    ProgramRefused {
        /// The program's name in its object.
        program: String,
        /// What was being done: "loading", "verifying", "attaching in SKB mode".
        step: &'static str,
        /// The kernel's (or aya's) answer.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The object has no program of that name.
    #[error("the XDP object has no program named '{name}': check the function name in its source")]
    NoSuchProgram {
        /// The name asked for.
        name: String,
    },
    /// The loaded object has no map of that name, or it was already taken.
    #[error(
        "the XDP object has no map named '{name}' (or it was taken already): check the map's \
         name in its source"
    )]
    NoSuchMap {
        /// The name asked for.
        name: String,
    },
    /// A map could not be used as the type asked for, or updated.
    #[error("XDP map {name}: {step} failed")]
    Map {
        /// The map's name.
        name: String,
        /// What was being done.
        step: String,
        /// aya's answer.
        #[source]
        source: Box<aya::maps::MapError>,
    },
    /// A socket was registered with a program whose object has no `xsks_map`.
    #[error(
        "the XDP program on {iface} has no xsks_map, so it cannot redirect to sockets: use \
         xskit's redirect program or give your object an XSKMAP named xsks_map"
    )]
    NoSocketMap {
        /// The program's interface.
        iface: String,
    },
    /// A socket was registered with the program of another interface.
    #[error(
        "the socket is bound to {socket_iface} but the XDP program is on {program_iface}: \
         register it with the program of its own interface"
    )]
    InterfaceMismatch {
        /// The socket's interface.
        socket_iface: String,
        /// The program's interface.
        program_iface: String,
    },
    /// A frame was given more data than it can hold.
    #[error("{len} bytes do not fit in a frame with room for {capacity}: use larger frames or multi-buffer")]
    FrameOverflow {
        /// The length asked for.
        len: usize,
        /// The frame's room.
        capacity: usize,
    },
    /// [`crate::Port::resend`] was given a length no frame can be sent with.
    #[error(
        "frames are sent again with 1 to {room} bytes each (the frames' room), not {len}: pass \
         the length of the packet written in them"
    )]
    ResendLength {
        /// The length asked for.
        len: usize,
        /// The frames' room.
        room: usize,
    },
    /// A socket with neither an rx nor a tx ring was asked for.
    #[error("a socket needs an rx ring, a tx ring, or both: give one of them a size")]
    NoDataRing,
    /// A transmit was asked of a port or socket that has no tx ring.
    #[error("this socket has no tx ring: open it with a tx ring size to transmit")]
    NoTxRing,
    /// The copy-mode transmit budget is below what the kernel takes.
    #[error("a tx skb budget of {budget} is below the kernel's minimum of 32: use 32 or more")]
    TxSkbBudget {
        /// The budget given.
        budget: u32,
    },
    /// A UMEM with no frames was asked for.
    #[error("the UMEM needs at least one frame")]
    NoFrames,
    /// The transmit metadata room is not one the kernel takes.
    #[error("tx metadata length {len} must be a multiple of 8 and at most 256")]
    TxMetadataLen {
        /// The length given.
        len: u32,
    },
    /// A link could not be pinned, opened from its pin or unpinned.
    #[error(
        "{path}: {reason} (pins live on a BPF file system: mount -t bpf bpf /sys/fs/bpf, or \
         pin in a directory on one)"
    )]
    Pin {
        /// The pin's path.
        path: String,
        /// What the kernel or the file system said.
        reason: String,
    },
    /// A takeover found no program of the other process on the interface.
    #[error(
        "{iface} runs no XDP program through a bpf_link: there is nothing to take over (the \
         forwarder to take over from has stopped, or it was started without a link)"
    )]
    NothingToTakeOver {
        /// The interface.
        iface: String,
    },
    /// A UMEM handed over by another process is not what its layout says.
    #[error(
        "the UMEM handed over is {file} bytes, but its layout needs {bytes} on a shared \
         (memfd) mapping: the two processes disagree on the UMEM's layout"
    )]
    UmemHandedOver {
        /// Bytes the layout needs.
        bytes: u64,
        /// Bytes the memfd holds.
        file: u64,
    },
    /// The UMEM is larger than its descriptors can address.
    #[error("a UMEM of {bytes} bytes is too large to address (the limit is 2^48 bytes)")]
    UmemAddressSpace {
        /// The size asked for.
        bytes: u64,
    },
    /// A mode name that is not one of xskit's.
    #[error("unknown mode '{text}': use auto, skb, drv or zc")]
    UnknownMode {
        /// The text given.
        text: String,
    },
    /// A capture could not be set up or read.
    #[error("capture: {reason}")]
    Capture {
        /// What went wrong.
        reason: String,
    },
    /// The interface runs a program without xskit's capture hook: nothing to capture
    /// through, and no room for a capture program.
    #[error(
        "{iface} runs XDP program {name} (id {id}), which has no xskit capture hook: xskit \
         captures through the hook of its redirect and forwarder programs, or attaches a \
         capture program where none runs (the fentry/fexit hooks xdpdump puts around other \
         programs are refused by this kernel); capture on the interface that sends to it, or \
         stop {name}"
    )]
    CaptureForeignProgram {
        /// The interface.
        iface: String,
        /// The program's id.
        id: u32,
        /// Its name.
        name: String,
    },
    /// A system call failed in a way not covered above.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
}

impl Error {
    /// A refusal for want of privilege while `what`, saying which capabilities this process
    /// lacks.
    pub(crate) fn not_permitted(what: &'static str) -> Error {
        Error::NotPermitted {
            what,
            advice: crate::privileges::advice_now(),
        }
    }
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
