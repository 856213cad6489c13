//! The forwarder's errors: the layers' below, and its own, each saying what to do.

use xskit::os::SyscallError;

/// Errors from the forwarder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the AF_XDP layer (interfaces, programs, sockets, UMEM).
    #[error(transparent)]
    Xsk(#[from] xskit::Error),
    /// From the pipeline (vector sizes, ports).
    #[error(transparent)]
    Pipeline(#[from] xskit_pipeline::Error),
    /// A system call failed.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
    /// A forwarder setting that cannot work.
    #[error("invalid forwarder configuration: {0}")]
    InvalidConfig(String),
    /// The kernel filter's maps could not be read or written.
    #[error("the XDP filter: {what}: {reason}")]
    Filter {
        /// What was being done.
        what: &'static str,
        /// The kernel's reason.
        reason: String,
    },
    /// The TAP device for kernel-bound frames could not be made.
    #[error("TAP device {name}: {reason}")]
    Tap {
        /// The device name asked for.
        name: String,
        /// What went wrong, and what to do.
        reason: String,
    },
    /// A frame went missing or was counted twice (checked accounting): a bug in xskit or in a
    /// stage.
    #[error(
        "frame accounting broken: {0}. This is a bug in xskit or in a stage of yours: please \
         report it with the command line and the counters"
    )]
    FrameAccounting(String),
}

/// Results of forwarder operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
