//! Plain system calls: clocks, CPU placement, limits, interfaces, signal masks.

use std::io;

use crate::SyscallError;

/// Turns a C-style return value (negative on error) into a `Result`, capturing errno.
pub fn cvt(ret: libc::c_int, call: &'static str) -> Result<libc::c_int, SyscallError> {
    if ret < 0 {
        Err(SyscallError::last(call))
    } else {
        Ok(ret)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A type whose every byte is initialized whenever a value of it exists (integers, arrays of
/// them, and C structs without padding): what the kernel reads of a socket option is then
/// defined. Implemented here only, for the option types xskit passes.
pub trait SockOptValue: sealed::Sealed + Copy {}

macro_rules! sock_opt_values {
    ($($t:ty),*) => {
        $(impl sealed::Sealed for $t {} impl SockOptValue for $t {})*
    };
}

sock_opt_values!(
    libc::c_int,
    u32,
    [u32; 7],
    libc::xdp_umem_reg,
    libc::packet_mreq
);

// The structs have no padding: their sizes are the sums of their fields'.
const _: () = assert!(std::mem::size_of::<libc::xdp_umem_reg>() == 8 + 8 + 4 * 4);
const _: () = assert!(std::mem::size_of::<libc::packet_mreq>() == 4 + 2 + 2 + 8);

/// Sets a socket option from a plain value (see [`SockOptValue`]).
pub fn setsockopt<T: SockOptValue>(
    fd: std::os::fd::BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    call: &'static str,
) -> Result<(), SyscallError> {
    use std::os::fd::AsRawFd;
    // SAFETY: value points to a live T of the size passed, every byte of it initialized
    // (SockOptValue).
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    cvt(ret, call).map(drop)
}

/// The index of the interface called `name` in the calling thread's network namespace.
pub fn if_nametoindex(name: &str) -> Option<u32> {
    let c_name = std::ffi::CString::new(name).ok()?;
    // SAFETY: c_name is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    (index != 0).then_some(index)
}

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The soft RLIMIT_MEMLOCK of this process, in bytes (`None` when unlimited).
pub fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid, writable rlimit struct.
    let ret = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if ret != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(lim.rlim_cur)
    }
}

/// Raises the soft RLIMIT_NOFILE of this process to its hard limit (a process may always do
/// so), and returns the soft limit now in force.
pub fn raise_open_files_limit() -> Result<u64, SyscallError> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid, writable rlimit struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(SyscallError::last("getrlimit(RLIMIT_NOFILE)"));
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: raised is a valid rlimit struct, read by the kernel only.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(SyscallError::last("setrlimit(RLIMIT_NOFILE)"));
        }
        lim = raised;
    }
    Ok(lim.rlim_cur)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; the clocks used here always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every namespace on the machine, so a send
/// timestamp taken in one namespace can be compared with a receive time in another.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_MONOTONIC_COARSE in nanoseconds: the clock an XDP program reads with
/// `bpf_ktime_get_coarse_ns`, cheaper and up to a tick behind CLOCK_MONOTONIC.
pub fn monotonic_coarse_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// CPU time (user + system) consumed by all threads of this process, in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// membarrier(2)'s command that waits for an RCU grace period (`MEMBARRIER_CMD_GLOBAL`).
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;

/// How long [`wait_for_readers`] waits where the kernel refuses the grace period: many times
/// what an XDP program's run takes.
const READERS_FALLBACK: std::time::Duration = std::time::Duration::from_millis(100);

/// Returns once every reader that began before the call is done: every XDP program run (a
/// BPF program runs inside an RCU read-side section) has ended, so that what it may still
/// have been reading can be rewritten. The kernel waits for an RCU grace period
/// (membarrier's `MEMBARRIER_CMD_GLOBAL` is synchronize_rcu()); on a kernel that refuses it
/// (CPUs in nohz_full), a fixed `READERS_FALLBACK` (100 ms) instead. Takes milliseconds.
pub fn wait_for_readers() {
    // SAFETY: membarrier takes no pointers; this command with no flags only waits.
    let ret = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if ret != 0 {
        std::thread::sleep(READERS_FALLBACK);
    }
}

/// Pins the calling thread to CPU `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), SyscallError> {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(SyscallError {
            call: "sched_setaffinity",
            os_error: io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    // SAFETY: `cpu` < CPU_SETSIZE was checked, so the bit is inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a live cpu_set_t of the size passed; 0 means this thread.
    let ret = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    cvt(ret, "sched_setaffinity").map(drop)
}

/// The CPUs this machine has online (`_SC_NPROCESSORS_ONLN`), whatever this process may use.
pub fn online_cpus() -> usize {
    // SAFETY: sysconf reads a system value and has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// The CPUs this thread may run on (its affinity mask: taskset, cgroups).
pub fn allowed_cpus() -> Result<Vec<usize>, SyscallError> {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed; 0 means this thread.
    let ret =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    cvt(ret, "sched_getaffinity")?;
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: every index is below CPU_SETSIZE, inside `set`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// An `ifreq` naming interface `name`, for the interface ioctls; EINVAL for a name the kernel
/// would refuse (empty, too long, with '/', space or NUL).
pub fn ifreq_named(name: &str, call: &'static str) -> Result<libc::ifreq, SyscallError> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ', '\0']) {
        return Err(SyscallError {
            call,
            os_error: io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(req)
}

/// A datagram socket to issue interface ioctls on (SIOCGIFFLAGS, SIOCETHTOOL, ...).
pub fn ioctl_socket() -> Result<std::os::fd::OwnedFd, SyscallError> {
    // SAFETY: plain socket(2).
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    let raw = cvt(raw, "socket(AF_INET)")?;
    // SAFETY: `raw` was just created and is owned by nothing else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) })
}

/// Runs `f` with SIGINT and SIGTERM held (blocked) on this thread; a signal that arrives
/// meanwhile is delivered when `f` returns. For system calls that a signal would cut short
/// without saying how much they did.
pub fn with_stop_signals_held<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: sigemptyset/sigaddset initialise a local sigset_t; pthread_sigmask changes only
    // this thread's mask, and the old mask is restored below.
    let old = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    };
    let r = f();
    // SAFETY: restores the mask saved above on the same thread.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    r
}
