//! Errors of the zero-copy senders, with what to do about them.

use xskit_os::SyscallError;

/// Errors from the zero-copy senders.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The socket cannot send with MSG_ZEROCOPY.
    #[error(
        "this socket cannot do MSG_ZEROCOPY: it needs a TCP or UDP socket on Linux 4.14+ \
         (UDP: 5.0+)"
    )]
    SocketUnsupported {
        /// The kernel's answer to SO_ZEROCOPY.
        #[source]
        source: std::io::Error,
    },
    /// io_uring is missing or switched off.
    #[error(
        "{call}: io_uring is not available (kernel too old, or disabled by the sysctl \
         kernel.io_uring_disabled)"
    )]
    UringUnavailable {
        /// The call that failed.
        call: &'static str,
    },
    /// The kernel could not pin the io_uring's registered buffers.
    #[error(
        "{call}: the kernel could not pin the registered buffers (ENOMEM): they count against \
         RLIMIT_MEMLOCK; use fewer or smaller slots, or raise the limit"
    )]
    PinnedBuffers {
        /// The call that failed.
        call: &'static str,
    },
    /// An io_uring sender was asked for with no slots, or slots of no size.
    #[error("the io_uring sender needs at least one slot, of 1 byte to 4 GiB ({slots} slots of {slot_size} bytes asked for)")]
    Slots {
        /// Slots asked for.
        slots: u16,
        /// Bytes per slot asked for.
        slot_size: usize,
    },
    /// A slot was sent that was not taken, or was sent already.
    #[error("slot {slot} is not taken, or already sent: send only slots from take_slot, once")]
    SlotNotTaken {
        /// The slot.
        slot: u16,
    },
    /// MSG_ZEROCOPY sends keep failing because the socket's option memory is full.
    #[error(
        "MSG_ZEROCOPY sends keep failing with ENOBUFS: the socket's option memory (sysctl \
         net.core.optmem_max) is full of unreleased sends; raise it or send fewer, larger \
         buffers{memlock_hint}"
    )]
    OptionMemoryFull {
        /// Advice about RLIMIT_MEMLOCK when not running as root (empty as root).
        memlock_hint: String,
    },
    /// The process lacks a privilege the operation needs.
    #[error("{what}: permission denied: run as root, or raise RLIMIT_MEMLOCK")]
    NotPermitted {
        /// What was being done.
        what: &'static str,
    },
    /// A system call failed in a way not covered above.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
}

/// Results of zero-copy operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
