//! io_uring SEND_ZC with registered buffers: each send completes twice, first with its result
//! (flagged MORE), then with a notification (flagged NOTIF) once the kernel has let go of the
//! pages; with IORING_SEND_ZC_REPORT_USAGE the notification says whether it copied after all.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, types, IoUring};

use xskit_os::SyscallError;

use super::ZeroCopyStats;

type Result<T> = std::result::Result<T, SyscallError>;

const REPORT_USAGE: u16 = 1 << 3; // IORING_SEND_ZC_REPORT_USAGE
const USAGE_COPIED: i32 = i32::MIN; // IORING_NOTIF_USAGE_ZC_COPIED (bit 31 of res)

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    busy: bool,
    /// Bytes to send, and bytes the kernel has taken so far.
    len: u32,
    done: u32,
    /// Notifications still to come: one per SEND_ZC that reported MORE.
    notifs: u32,
    sent_at: Option<Instant>,
}

/// A socket sending from registered buffers with io_uring SEND_ZC.
///
/// Buffers are slots of one region registered with the ring: take a free slot, write into
/// it, send it, and it becomes free again only after both of its completions have arrived.
pub(crate) struct UringRing {
    ring: IoUring,
    fd: OwnedFd,
    region: Box<[u8]>,
    slot_size: usize,
    slots: Vec<Slot>,
    free: Vec<u16>,
    /// The slot whose send result has not arrived yet. Only one send is in flight at a time:
    /// io_uring may run concurrent sends on one socket out of order (a send that cannot finish
    /// inline is punted to a worker thread), which would reorder a TCP stream. Notifications,
    /// the long part, still overlap freely.
    sending: Option<usize>,
    /// Completions drained from the ring, reused from call to call.
    cqes: Vec<(u64, i32, u32)>,
    stats: ZeroCopyStats,
}

impl std::fmt::Debug for UringRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringRing")
            .field("slots", &self.slots.len())
            .field("free", &self.free.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn uring_error(call: &'static str, os_error: std::io::Error) -> SyscallError {
    SyscallError { call, os_error }
}

impl UringRing {
    /// Takes a connected TCP or UDP socket and registers `slots` buffers of `slot_size` bytes.
    pub(crate) fn new(socket: impl Into<OwnedFd>, slots: u16, slot_size: usize) -> Result<Self> {
        if slots == 0 || slot_size == 0 || slot_size > u32::MAX as usize {
            return Err(SyscallError::from_errno(
                "io_uring register_buffers",
                libc::EINVAL,
            ));
        }
        let ring = IoUring::new(u32::from(slots).next_power_of_two().max(8) * 2)
            .map_err(|e| uring_error("io_uring_setup", e))?;
        let mut region = vec![0u8; usize::from(slots) * slot_size].into_boxed_slice();
        let iovecs: Vec<libc::iovec> = region
            .chunks_mut(slot_size)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: c.len(),
            })
            .collect();
        // SAFETY: every iovec points into `region`, which is owned by the sender, never
        // reallocated, and outlives the ring (the ring is dropped first, unregistering them).
        unsafe { ring.submitter().register_buffers(&iovecs) }
            .map_err(|e| uring_error("io_uring register_buffers", e))?;
        Ok(UringRing {
            ring,
            fd: socket.into(),
            region,
            slot_size,
            slots: vec![Slot::default(); usize::from(slots)],
            free: (0..slots).rev().collect(),
            sending: None,
            cqes: Vec::with_capacity(64),
            stats: ZeroCopyStats::default(),
        })
    }

    /// What the sender did so far (`zerocopy_calls` counts SEND_ZC operations).
    pub(crate) fn stats(&self) -> &ZeroCopyStats {
        &self.stats
    }

    /// Bytes per slot.
    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// A free slot to write into, if any.
    pub(crate) fn take_slot(&mut self) -> Option<u16> {
        let idx = self.free.pop()?;
        self.slots[usize::from(idx)] = Slot {
            busy: true,
            ..Slot::default()
        };
        Some(idx)
    }

    /// True for a slot taken and not yet sent.
    pub(crate) fn is_unsent(&self, idx: u16) -> bool {
        self.slots
            .get(usize::from(idx))
            .is_some_and(|s| s.busy && s.sent_at.is_none())
    }

    /// The bytes of a slot taken with [`UringRing::take_slot`] and not yet sent.
    pub(crate) fn slot_mut(&mut self, idx: u16) -> &mut [u8] {
        let i = usize::from(idx);
        if self
            .slots
            .get(i)
            .is_some_and(|s| s.busy && s.sent_at.is_none())
        {
            &mut self.region[i * self.slot_size..(i + 1) * self.slot_size]
        } else {
            &mut []
        }
    }

    /// Sends the first `len` bytes of slot `idx`, after the previous send has finished, so
    /// sends keep their order. A short send (a full TCP buffer) is continued by another
    /// SEND_ZC from where it stopped.
    pub(crate) fn send(&mut self, idx: u16, len: usize) -> Result<()> {
        while self.sending.is_some() {
            self.ring
                .submit_and_wait(1)
                .map_err(|e| uring_error("io_uring_enter", e))?;
            self.process()?;
        }
        let i = usize::from(idx);
        let slot = self
            .slots
            .get_mut(i)
            .filter(|s| s.busy && s.sent_at.is_none());
        let Some(slot) = slot else {
            return Err(SyscallError::from_errno("io_uring SEND_ZC", libc::EBADSLT));
        };
        slot.len = len.min(self.slot_size) as u32;
        slot.sent_at = Some(Instant::now());
        self.stats.buffers += 1;
        self.stats.bytes += u64::from(slot.len);
        self.submit_rest(i)?;
        // Finish this send (all of its bytes) before the next may start.
        while self.sending.is_some() {
            self.ring
                .submit_and_wait(1)
                .map_err(|e| uring_error("io_uring_enter", e))?;
            self.process()?;
        }
        Ok(())
    }

    /// Submits a SEND_ZC for the bytes of slot `i` not yet sent.
    fn submit_rest(&mut self, i: usize) -> Result<()> {
        let slot = self.slots[i];
        let start = i * self.slot_size + slot.done as usize;
        let ptr = self.region[start..].as_ptr();
        let sqe = opcode::SendZc::new(types::Fd(self.fd.as_raw_fd()), ptr, slot.len - slot.done)
            .buf_index(Some(i as u16))
            .flags(libc::MSG_NOSIGNAL)
            .zc_flags(REPORT_USAGE)
            .build()
            .user_data(i as u64);
        loop {
            // SAFETY: the bytes lie in the registered region, which stays valid and unwritten
            // (slot_mut refuses a sent slot) until the slot's last notification frees it.
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                break;
            }
            self.ring
                .submit()
                .map_err(|e| uring_error("io_uring_enter", e))?;
        }
        self.ring
            .submit()
            .map_err(|e| uring_error("io_uring_enter", e))?;
        self.sending = Some(i);
        self.stats.zerocopy_calls += 1;
        Ok(())
    }

    fn process(&mut self) -> Result<()> {
        let mut first_error = None;
        let mut resubmit = None;
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.clear();
        cqes.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for &(user_data, res, flags) in &cqes {
            let idx = user_data as usize;
            let Some(slot) = self
                .slots
                .get_mut(idx)
                .filter(|s| s.busy && s.sent_at.is_some())
            else {
                self.stats.duplicate_completions += 1;
                continue;
            };
            if cqueue::notif(flags) {
                if slot.notifs == 0 {
                    self.stats.duplicate_completions += 1;
                } else {
                    slot.notifs -= 1;
                }
                if res & USAGE_COPIED != 0 {
                    self.stats.copied_completions += 1;
                } else {
                    self.stats.zerocopy_completions += 1;
                }
            } else {
                // The send's own result; MORE means a notification for it will follow.
                if cqueue::more(flags) {
                    slot.notifs += 1;
                }
                if res < 0 {
                    first_error.get_or_insert(std::io::Error::from_raw_os_error(-res));
                    slot.done = slot.len; // give up on the rest
                } else {
                    slot.done = (slot.done + res as u32).min(slot.len);
                }
                if slot.done < slot.len {
                    resubmit = Some(idx);
                } else if self.sending == Some(idx) {
                    self.sending = None;
                }
            }
            if slot.done == slot.len && slot.notifs == 0 && self.sending != Some(idx) {
                if let Some(t) = slot.sent_at {
                    let ns = t.elapsed().as_nanos() as u64;
                    self.stats.notify_latency_sum_ns += ns;
                    self.stats.notify_latency_max_ns = self.stats.notify_latency_max_ns.max(ns);
                }
                *slot = Slot::default();
                self.free.push(idx as u16);
            }
        }
        self.cqes = cqes;
        if let Some(idx) = resubmit {
            self.submit_rest(idx)?;
        }
        match first_error {
            Some(e) => Err(SyscallError {
                call: "io_uring SEND_ZC",
                os_error: e,
            }),
            None => Ok(()),
        }
    }

    /// Settles every completion that has arrived; returns the number of free slots.
    pub(crate) fn reap(&mut self) -> Result<usize> {
        self.process()?;
        Ok(self.free.len())
    }

    /// Waits for at least one completion, then settles them.
    pub(crate) fn wait(&mut self) -> Result<usize> {
        if self.free.len() < self.slots.len() {
            self.ring
                .submit_and_wait(1)
                .map_err(|e| uring_error("io_uring_enter", e))?;
        }
        self.reap()
    }

    /// Waits up to `timeout` until every slot is free.
    pub(crate) fn flush(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while self.free.len() < self.slots.len() {
            if Instant::now() > deadline {
                return Err(SyscallError {
                    call: "waiting for SEND_ZC notifications",
                    os_error: std::io::Error::from(std::io::ErrorKind::TimedOut),
                });
            }
            let ts = types::Timespec::new().nsec(10_000_000);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
                Err(e) => return Err(uring_error("io_uring_enter", e)),
            }
            self.process()?;
        }
        Ok(())
    }
}
