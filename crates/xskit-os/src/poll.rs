//! Waiting on descriptors with poll(2): one, or any of several, with a timeout; a signal ends
//! the wait early and counts as nothing ready.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use crate::SyscallError;

/// A poll(2) timeout in milliseconds: -1 for none, a part millisecond rounded up so a short
/// wait never becomes a busy loop.
fn timeout_ms(timeout: Option<Duration>) -> libc::c_int {
    match timeout {
        None => -1,
        Some(t) => {
            let ms = t.as_nanos().div_ceil(1_000_000);
            libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
        }
    }
}

/// Waits up to `timeout` (`None`: forever) for `events` on the socket; returns the events seen.
fn poll_fd(
    fd: BorrowedFd<'_>,
    events: i16,
    timeout: Option<Duration>,
) -> Result<i16, SyscallError> {
    let timeout_ms = timeout_ms(timeout);
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: pfd is a valid array of one pollfd.
    let ret = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if ret < 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINTR) {
            return Ok(0);
        }
        return Err(SyscallError {
            call: "poll",
            os_error: err,
        });
    }
    Ok(if ret == 0 { 0 } else { pfd.revents })
}

/// Waits up to `timeout` until one of `fds` is readable; a signal ends the wait early.
/// `pfds` is scratch space, reused between calls.
fn poll_fds(
    fds: &[BorrowedFd<'_>],
    pfds: &mut Vec<libc::pollfd>,
    timeout: Option<Duration>,
) -> Result<bool, SyscallError> {
    let timeout_ms = timeout_ms(timeout);
    pfds.clear();
    pfds.extend(fds.iter().map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }));
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfds.
    let ret = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    if ret < 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINTR) {
            return Ok(false);
        }
        return Err(SyscallError {
            call: "poll",
            os_error: err,
        });
    }
    Ok(ret > 0)
}

/// Waits up to `timeout` (`None`: forever) for `events` (`libc::POLLIN`, ...) on `fd`;
/// returns the events seen, 0 on a timeout or a signal.
pub fn poll(
    fd: BorrowedFd<'_>,
    events: i16,
    timeout: Option<Duration>,
) -> Result<i16, SyscallError> {
    poll_fd(fd, events, timeout)
}

/// Scratch space for [`poll_readable`], reused between calls so waiting allocates nothing.
#[derive(Debug, Default)]
pub struct PollSet(Vec<libc::pollfd>);

/// Waits up to `timeout` (`None`: forever) until one of `fds` is readable; false on a timeout
/// or a signal.
pub fn poll_readable(
    fds: &[BorrowedFd<'_>],
    scratch: &mut PollSet,
    timeout: Option<Duration>,
) -> Result<bool, SyscallError> {
    poll_fds(fds, &mut scratch.0, timeout)
}
