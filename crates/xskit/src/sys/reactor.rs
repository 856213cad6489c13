//! Registering an AF_XDP socket with tokio's reactor (feature `tokio`).

use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::SyscallError;

/// Registers `fd` with the current tokio runtime for readability.
pub(crate) fn register_readable(fd: OwnedFd) -> Result<AsyncFd<OwnedFd>, SyscallError> {
    // SAFETY: the AsyncFd takes ownership of `fd`, so the descriptor stays open, and names the
    // same socket, for the AsyncFd's whole life; nothing else closes it.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| SyscallError {
        call: "epoll_ctl(tokio reactor)",
        os_error: e.into(),
    })
}
