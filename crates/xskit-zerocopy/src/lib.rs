#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

mod error;
#[allow(unsafe_code)]
mod sys;
mod uring;

pub use error::{Error, Result};
pub use sys::ZeroCopyStats;
pub use uring::UringZeroCopySender;

use sys::msg_zerocopy::{self as sys_zc, Completion};
use xskit_os::SyscallError;

/// Settings of a zero-copy sender: `ZeroCopyConfig::default()` and the setters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZeroCopyConfig {
    /// Use MSG_ZEROCOPY at all.
    pub zerocopy: bool,
    /// Buffers smaller than this are copied: pinning pages and the notification cost more than
    /// copying a few KB.
    pub threshold: usize,
}

impl Default for ZeroCopyConfig {
    fn default() -> Self {
        ZeroCopyConfig {
            zerocopy: true,
            threshold: 10 * 1024,
        }
    }
}

xskit_os::config_setters!(ZeroCopyConfig {
    /// Turns MSG_ZEROCOPY on or off.
    zerocopy: bool,
    /// Sets the size below which buffers are copied.
    threshold: usize,
});

struct InFlight {
    first: u32,
    count: u32,
    done: u32,
    sent_at: Instant,
    buf: Vec<u8>,
}

/// A socket whose sends use MSG_ZEROCOPY, holding each buffer until the kernel releases it.
pub struct ZeroCopySender {
    fd: OwnedFd,
    config: ZeroCopyConfig,
    use_zerocopy: bool,
    next_id: u32,
    inflight: VecDeque<InFlight>,
    released: Vec<Vec<u8>>,
    completions: Vec<Completion>,
    stats: ZeroCopyStats,
}

impl std::fmt::Debug for ZeroCopySender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeroCopySender")
            .field("zerocopy", &self.use_zerocopy)
            .field("inflight", &self.inflight.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Without CAP_IPC_LOCK, pinned pages also count against RLIMIT_MEMLOCK, which fails the same
/// way; say so when that may be the cause.
fn memlock_hint() -> String {
    if xskit_os::effective_uid() == 0 {
        return String::new();
    }
    match xskit_os::memlock_limit() {
        Some(limit) => format!(
            ". Not running as root, the pinned pages are also charged to RLIMIT_MEMLOCK ({limit} bytes): \
             raise it (ulimit -l) or grant CAP_IPC_LOCK"
        ),
        None => String::new(),
    }
}

/// True if `id` lies in the wrapping range `lo..=hi`.
fn in_range(id: u32, lo: u32, hi: u32) -> bool {
    id.wrapping_sub(lo) <= hi.wrapping_sub(lo)
}

impl ZeroCopySender {
    /// Takes over a connected TCP or UDP socket (IPv4 or IPv6) and turns SO_ZEROCOPY on.
    pub fn new(socket: impl Into<OwnedFd>, config: ZeroCopyConfig) -> Result<Self> {
        let fd: OwnedFd = socket.into();
        if config.zerocopy {
            sys_zc::enable(fd.as_fd()).map_err(|e| match e.errno() {
                Some(libc::EOPNOTSUPP | libc::ENOPROTOOPT) => {
                    Error::SocketUnsupported { source: e.os_error }
                }
                _ => Error::Syscall(e),
            })?;
        }
        Ok(ZeroCopySender {
            fd,
            config,
            use_zerocopy: config.zerocopy,
            next_id: 0,
            inflight: VecDeque::new(),
            released: Vec::new(),
            completions: Vec::with_capacity(64),
            stats: ZeroCopyStats::default(),
        })
    }

    /// True while sends still use MSG_ZEROCOPY.
    pub fn is_zerocopy(&self) -> bool {
        self.use_zerocopy
    }

    /// What the sender did so far.
    pub fn stats(&self) -> &ZeroCopyStats {
        &self.stats
    }

    /// Buffers sent and not yet released.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Sends all of `buf` (one datagram for UDP). The buffer comes back through
    /// [`ZeroCopySender::reap`] once the kernel no longer needs it: at once when it was copied.
    pub fn send(&mut self, buf: Vec<u8>) -> Result<()> {
        let zerocopy = self.use_zerocopy && buf.len() >= self.config.threshold;
        let first = self.next_id;
        let (mut sent, mut calls, mut waits) = (0usize, 0u32, 0u32);
        while sent < buf.len() || buf.is_empty() && calls == 0 {
            match sys_zc::send(self.fd.as_fd(), &buf[sent..], zerocopy) {
                Ok(n) => {
                    sent += n;
                    calls += 1;
                    if zerocopy {
                        self.next_id = self.next_id.wrapping_add(1);
                    }
                    if buf.is_empty() {
                        break;
                    }
                }
                Err(e) if e.errno() == Some(libc::EINTR) => {}
                Err(e) if e.errno() == Some(libc::ENOBUFS) && zerocopy => {
                    // Each pinned send is charged to the socket's option memory; when it is
                    // used up, completions must free some before the next send fits.
                    self.stats.backpressure_waits += 1;
                    waits += 1;
                    if waits > 200 {
                        return Err(Error::OptionMemoryFull {
                            memlock_hint: memlock_hint(),
                        });
                    }
                    self.wait_for_completions(Duration::from_millis(10))?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.stats.buffers += 1;
        self.stats.bytes += buf.len() as u64;
        if zerocopy {
            self.stats.zerocopy_calls += u64::from(calls);
            self.inflight.push_back(InFlight {
                first,
                count: calls,
                done: 0,
                sent_at: Instant::now(),
                buf,
            });
        } else {
            self.stats.copy_calls += u64::from(calls);
            self.released.push(buf);
        }
        Ok(())
    }

    fn wait_for_completions(&mut self, timeout: Duration) -> Result<()> {
        xskit_os::poll(self.fd.as_fd(), 0, Some(timeout))?;
        self.process()
    }

    /// Reads the error queue and settles the buffers it releases.
    fn process(&mut self) -> Result<()> {
        self.completions.clear();
        sys_zc::read_completions(self.fd.as_fd(), &mut self.completions).map_err(Error::from)?;
        let now = Instant::now();
        // Index loop: the vector keeps its capacity from call to call.
        for i in 0..self.completions.len() {
            let c = self.completions[i];
            let n = u64::from(c.hi.wrapping_sub(c.lo)) + 1;
            if c.copied {
                self.stats.copied_completions += n;
                if self.use_zerocopy {
                    self.use_zerocopy = false;
                    self.stats.disabled = Some(
                        "the kernel copied the data anyway (SO_EE_CODE_ZEROCOPY_COPIED, e.g. delivery to a \
                         local socket), so zero-copy was switched off for this socket"
                            .into(),
                    );
                }
            } else {
                self.stats.zerocopy_completions += n;
            }
            let mut matched = 0u64;
            for rec in self.inflight.iter_mut() {
                for k in 0..rec.count {
                    if in_range(rec.first.wrapping_add(k), c.lo, c.hi) {
                        rec.done += 1;
                        matched += 1;
                    }
                }
                if rec.done > rec.count {
                    self.stats.duplicate_completions += u64::from(rec.done - rec.count);
                    rec.done = rec.count;
                }
            }
            self.stats.duplicate_completions += n.saturating_sub(matched);
        }
        while let Some(pos) = self.inflight.iter().position(|r| r.done == r.count) {
            if let Some(rec) = self.inflight.remove(pos) {
                let ns = now.duration_since(rec.sent_at).as_nanos() as u64;
                self.stats.notify_latency_sum_ns += ns;
                self.stats.notify_latency_max_ns = self.stats.notify_latency_max_ns.max(ns);
                self.released.push(rec.buf);
            }
        }
        Ok(())
    }

    /// Moves every buffer the kernel has released (and every copied one) into `out`; returns
    /// how many.
    pub fn reap(&mut self, out: &mut Vec<Vec<u8>>) -> Result<usize> {
        if !self.inflight.is_empty() {
            self.process()?;
        }
        let n = self.released.len();
        out.append(&mut self.released);
        Ok(n)
    }

    /// Corks or uncorks a UDP socket: while corked, sends build one datagram, sent on uncork.
    pub fn set_cork(&mut self, on: bool) -> Result<()> {
        Ok(sys_zc::set_udp_cork(self.fd.as_fd(), on)?)
    }

    /// Waits up to `timeout` for every buffer to be released, moving them into `out`.
    pub fn flush(&mut self, timeout: Duration, out: &mut Vec<Vec<u8>>) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.inflight.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Syscall(SyscallError {
                    call: "waiting for MSG_ZEROCOPY completions",
                    os_error: std::io::Error::from(std::io::ErrorKind::TimedOut),
                }));
            }
            self.wait_for_completions(left.min(Duration::from_millis(100)))?;
        }
        self.reap(out).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::in_range;

    #[test]
    fn ranges_wrap_at_u32_max() {
        assert!(in_range(5, 3, 7));
        assert!(!in_range(8, 3, 7));
        assert!(in_range(u32::MAX, u32::MAX - 1, 1));
        assert!(in_range(0, u32::MAX - 1, 1));
        assert!(in_range(1, u32::MAX - 1, 1));
        assert!(!in_range(2, u32::MAX - 1, 1));
        assert!(!in_range(u32::MAX - 2, u32::MAX - 1, 1));
    }
}
