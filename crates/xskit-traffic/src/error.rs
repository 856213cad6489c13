//! Errors of the traffic crate.

/// Errors from probes, generators and baselines.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the AF_XDP layer.
    #[error(transparent)]
    Xsk(#[from] xskit::Error),
    /// A system call failed.
    #[error(transparent)]
    Syscall(#[from] xskit::SyscallError),
    /// A packet template or option that cannot be built.
    #[error("invalid traffic: {0}")]
    InvalidConfig(String),
    /// A BPF program of this crate could not be loaded, run or read.
    #[error("{what}: {reason}")]
    Bpf {
        /// What was being done.
        what: &'static str,
        /// The kernel's or loader's reason, and what to do.
        reason: String,
    },
    /// The process lacks a privilege the operation needs.
    #[error("{what}: permission denied: run as root (CAP_BPF and CAP_NET_ADMIN)")]
    NotPermitted {
        /// What was being done.
        what: &'static str,
    },
}

/// Results of traffic operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
