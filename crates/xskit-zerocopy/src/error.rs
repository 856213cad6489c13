//! Errors of the zero-copy senders, with what to do about them.

use xskit::os::SyscallError;

/// Errors from the zero-copy senders.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel or the socket cannot do what was asked.
    #[error("{0}")]
    Unsupported(String),
    /// A setting or argument out of range.
    #[error("invalid zero-copy setting: {0}")]
    InvalidConfig(String),
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
