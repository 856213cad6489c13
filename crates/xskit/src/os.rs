//! Safe operating-system helpers that every layer above the system layer shares: clocks, CPU
//! placement, waiting on descriptors, privileges and signal masks. The `unsafe` behind them
//! stays in the system layer; errors are system errors, which callers turn into advice.

use std::os::fd::BorrowedFd;
use std::time::Duration;

pub use crate::sys::mmap::Mmap;
pub use crate::sys::SyscallError;

/// Sets socket option `name` at `level` on `fd` from a plain value (`call` names it in errors).
pub fn setsockopt<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    call: &'static str,
) -> Result<(), SyscallError> {
    crate::sys::setsockopt(fd, level, name, value, call)
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every namespace on the machine, so a send
/// timestamp taken in one namespace can be compared with a receive time in another.
pub fn monotonic_ns() -> u64 {
    crate::sys::monotonic_ns()
}

/// CPU time (user + system) of this whole process, in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    crate::sys::process_cpu_ns()
}

/// Pins the calling thread to CPU `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), SyscallError> {
    crate::sys::pin_current_thread(cpu)
}

/// The CPUs this machine has online, whatever this process may use.
pub fn online_cpus() -> usize {
    crate::sys::online_cpus()
}

/// The CPUs this thread may run on (its affinity mask: taskset, cgroups).
pub fn allowed_cpus() -> Result<Vec<usize>, SyscallError> {
    crate::sys::allowed_cpus()
}

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    crate::sys::geteuid()
}

/// The soft RLIMIT_MEMLOCK of this process, in bytes (`None` when unlimited).
pub fn memlock_limit() -> Option<u64> {
    crate::sys::memlock_limit()
}

/// Waits up to `timeout` (`None`: forever) for `events` (`libc::POLLIN`, ...) on `fd`;
/// returns the events seen, 0 on a timeout or a signal.
pub fn poll(
    fd: BorrowedFd<'_>,
    events: i16,
    timeout: Option<Duration>,
) -> Result<i16, SyscallError> {
    crate::sys::xsk::poll(fd, events, timeout)
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
    crate::sys::xsk::poll_readable(fds, &mut scratch.0, timeout)
}

/// Runs `f` with SIGINT and SIGTERM held on this thread; a signal that arrives meanwhile is
/// delivered when `f` returns. For system calls that a signal would cut short without saying
/// how much they did.
pub fn with_stop_signals_held<R>(f: impl FnOnce() -> R) -> R {
    crate::sys::with_stop_signals_held(f)
}

/// An `ifreq` naming interface `name`, for interface ioctls; EINVAL (as `call`'s error) for a
/// name the kernel would refuse.
pub fn ifreq_named(name: &str, call: &'static str) -> Result<libc::ifreq, SyscallError> {
    crate::sys::ifreq_named(name, call)
}

/// A datagram socket to issue interface ioctls on.
pub fn ioctl_socket() -> Result<std::os::fd::OwnedFd, SyscallError> {
    crate::sys::ioctl_socket()
}
