//! The pipeline's errors: the AF_XDP layer's, and the pipeline's own.

/// Errors from the pipeline.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the AF_XDP layer (sockets, programs, UMEM).
    #[error(transparent)]
    Xsk(#[from] xskit::Error),
    /// A system call failed.
    #[error(transparent)]
    Syscall(#[from] xskit::SyscallError),
    /// A vector size outside 1 to [`crate::MAX_VECTOR`].
    #[error("vector size {size} must be 1 to {max}", max = crate::MAX_VECTOR)]
    VectorSize {
        /// The size given.
        size: usize,
    },
    /// A capture file could not be read or written.
    #[error("capture file {path}: {reason}")]
    Pcap {
        /// The file.
        path: String,
        /// What went wrong, and what to do.
        reason: String,
    },
}

/// Results of pipeline operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
