//! The four rings of an AF_XDP socket as owned, single-threaded handles.
//!
//! Each type is one side of a single-producer/single-consumer ring, so none is `Clone` and every
//! operation takes `&mut self`: the type system enforces the one-thread-per-side rule of
//! `af_xdp.rst`. Frames move in batches through caller-owned `Vec<Frame>`s; once their capacity
//! is reserved no call allocates, and no call makes a system call except the explicit wakeups.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::ring::RawRing;
use super::umem::{Frame, Umem};
use super::{xsk, SyscallError};

/// The fill ring: user space gives the kernel empty frames to receive into.
#[derive(Debug)]
pub struct FillRing {
    ring: RawRing<u64>,
    umem: Umem,
    fd: Arc<OwnedFd>,
    wakeups: u64,
}

/// The completion ring: the kernel gives back frames it has finished transmitting.
#[derive(Debug)]
pub struct CompletionRing {
    ring: RawRing<u64>,
    umem: Umem,
}

/// The rx ring: the kernel hands received packets to user space.
#[derive(Debug)]
pub struct RxRing {
    ring: RawRing<libc::xdp_desc>,
    umem: Umem,
    fd: Arc<OwnedFd>,
}

/// The tx ring: user space hands packets to the kernel to transmit.
#[derive(Debug)]
pub struct TxRing {
    ring: RawRing<libc::xdp_desc>,
    umem: Umem,
    fd: Arc<OwnedFd>,
    wakeups: u64,
}

/// What every ring has.
macro_rules! any_side {
    ($($ring:ident),*) => {$(
        impl $ring {
            /// The ring's size in entries.
            pub fn size(&self) -> u32 {
                self.ring.size()
            }
        }
    )*};
}

/// What the two rings user space produces into (fill, tx) have: free slots, entries the
/// kernel has not taken yet, and the need_wakeup protocol.
macro_rules! producer_side {
    ($($ring:ident),*) => {$(
        impl $ring {
            /// Free slots (refreshing the kernel's index if the cache shows fewer than
            /// `wanted`).
            pub fn free(&mut self, wanted: u32) -> u32 {
                self.ring.free(wanted)
            }

            /// Entries submitted and not yet taken by the kernel (as last seen).
            pub fn pending(&mut self) -> u32 {
                self.ring.outstanding()
            }

            /// Whether the kernel must be woken to take entries from this ring (need_wakeup
            /// mode; always true for tx in copy mode).
            pub fn needs_wakeup(&self) -> bool {
                self.ring.needs_wakeup()
            }

            /// Wakeup system calls made so far.
            pub fn wakeups(&self) -> u64 {
                self.wakeups
            }
        }
    )*};
}

/// What the two rings the kernel produces into (completion, rx) have.
macro_rules! consumer_side {
    ($($ring:ident),*) => {$(
        impl $ring {
            /// Entries waiting to be taken (refreshing the kernel's index when the cache is
            /// empty).
            pub fn available(&mut self) -> u32 {
                self.ring.available(u32::MAX)
            }
        }
    )*};
}

any_side!(FillRing, CompletionRing, RxRing, TxRing);
producer_side!(FillRing, TxRing);
consumer_side!(CompletionRing, RxRing);

fn clamp(max: usize, have: usize) -> u32 {
    max.min(have).min(u32::MAX as usize) as u32
}

impl FillRing {
    pub(crate) fn new(ring: RawRing<u64>, umem: Umem, fd: Arc<OwnedFd>) -> Self {
        FillRing {
            ring,
            umem,
            fd,
            wakeups: 0,
        }
    }

    /// Moves up to `max` frames from the end of `frames` into the ring, for the kernel to
    /// receive into; returns how many. Stops early at a frame of another UMEM.
    pub fn fill(&mut self, frames: &mut Vec<Frame>, max: usize) -> usize {
        let (idx, n) = self.ring.reserve(clamp(max, frames.len()));
        let mut done = 0;
        while done < n {
            let Some(frame) = frames.pop() else { break };
            if frame.tag() != self.umem_tag() {
                frames.push(frame);
                break;
            }
            self.ring
                .write(idx.wrapping_add(done), self.umem.chunk_base(frame.addr()));
            done += 1;
        }
        self.ring.unreserve(n - done);
        if done > 0 {
            self.ring.submit(done);
        }
        done as usize
    }

    fn umem_tag(&self) -> u64 {
        self.umem.frame_at(0, 0, 0).tag()
    }

    /// Wakes the kernel's receive path (a non-blocking `recvfrom`), counting the call.
    pub fn wakeup(&mut self) -> Result<(), SyscallError> {
        self.wakeups += 1;
        xsk::kick_rx(self.fd.as_fd())?;
        Ok(())
    }
}

impl CompletionRing {
    pub(crate) fn new(ring: RawRing<u64>, umem: Umem) -> Self {
        CompletionRing { ring, umem }
    }

    /// Moves up to `max` transmitted frames into `out` (empty, at the address they were sent
    /// from); returns how many.
    pub fn complete(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let (idx, n) = self.ring.peek(clamp(max, usize::MAX));
        out.reserve(n as usize);
        for i in 0..n {
            let addr = self.ring.read(idx.wrapping_add(i));
            out.push(self.umem.frame_from_kernel(addr, 0, 0));
        }
        if n > 0 {
            self.ring.release(n);
        }
        n as usize
    }
}

impl RxRing {
    pub(crate) fn new(ring: RawRing<libc::xdp_desc>, umem: Umem, fd: Arc<OwnedFd>) -> Self {
        RxRing { ring, umem, fd }
    }

    /// Moves up to `max` received packets (frames) into `out`; returns how many. A packet that
    /// spans several frames (multi-buffer) arrives as consecutive frames, all but the last with
    /// [`Frame::is_continued`]; [`crate::packets`] reads them packet by packet. `max` can
    /// stop the receive in the middle of a chain.
    pub fn receive(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let (idx, n) = self.ring.peek(clamp(max, usize::MAX));
        out.reserve(n as usize);
        for i in 0..n {
            let d = self.ring.read(idx.wrapping_add(i));
            out.push(self.umem.frame_from_kernel(d.addr, d.len, d.options));
        }
        if n > 0 {
            self.ring.release(n);
        }
        n as usize
    }

    /// Waits up to `timeout` (`None`: until they come) for packets; true if some are ready.
    pub fn poll(&mut self, timeout: Option<std::time::Duration>) -> Result<bool, SyscallError> {
        let ev = xskit_os::poll(self.fd.as_fd(), libc::POLLIN, timeout)?;
        Ok(ev & libc::POLLIN != 0)
    }
}

impl TxRing {
    pub(crate) fn new(ring: RawRing<libc::xdp_desc>, umem: Umem, fd: Arc<OwnedFd>) -> Self {
        TxRing {
            ring,
            umem,
            fd,
            wakeups: 0,
        }
    }

    /// Moves up to `max` frames from the front of `frames` into the ring, in order; returns how
    /// many. Stops early at a frame the kernel would reject (empty, longer than its room, or of
    /// another UMEM), which stays at the front of `frames`. Call [`TxRing::wakeup_if_needed`]
    /// after a batch.
    pub fn send(&mut self, frames: &mut Vec<Frame>, max: usize) -> usize {
        let (idx, n) = self.ring.reserve(clamp(max, frames.len()));
        let mut done = 0;
        while done < n {
            let frame = &frames[done as usize];
            if !self.umem.valid_tx(frame) {
                break;
            }
            self.ring.write(idx.wrapping_add(done), frame.desc());
            done += 1;
        }
        self.ring.unreserve(n - done);
        if done > 0 {
            self.ring.submit(done);
            frames.drain(..done as usize);
        }
        done as usize
    }

    /// Submits raw descriptors as they are, with no checks; returns how many fit.
    ///
    /// This exists to test how the kernel treats malformed descriptors. In copy mode the
    /// kernel stops transmitting at an invalid descriptor and drops just that one when it
    /// returns, so valid descriptors queued behind it wait for the next wakeup: keep calling
    /// [`TxRing::wakeup`] until [`TxRing::pending`] is zero.
    ///
    /// # Safety
    /// Every descriptor the kernel accepts comes back through the completion ring as a new
    /// [`Frame`] handle. The caller must make sure no live `Frame` refers to a chunk that an
    /// accepted descriptor names (the safe way: pass only descriptors the kernel rejects, such
    /// as addresses outside the UMEM).
    pub unsafe fn send_raw(&mut self, descs: &[libc::xdp_desc]) -> usize {
        let (idx, n) = self.ring.reserve(clamp(descs.len(), usize::MAX));
        for (i, d) in descs.iter().take(n as usize).enumerate() {
            self.ring.write(
                idx.wrapping_add(i as u32),
                libc::xdp_desc {
                    addr: d.addr,
                    len: d.len,
                    options: d.options,
                },
            );
        }
        if n > 0 {
            self.ring.submit(n);
        }
        n as usize
    }

    /// Kicks transmission with a non-blocking `sendto`, counting the call.
    pub fn wakeup(&mut self) -> Result<(), SyscallError> {
        self.wakeups += 1;
        xsk::kick_tx(self.fd.as_fd())?;
        Ok(())
    }

    /// Kicks transmission only if the kernel asked for it; returns whether a call was made.
    pub fn wakeup_if_needed(&mut self) -> Result<bool, SyscallError> {
        if self.needs_wakeup() {
            self.wakeup()?;
            return Ok(true);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::super::ring::memory_ring_pair;

    /// Producer and consumer agree across the u32 wrap, in batches that straddle it.
    #[test]
    fn indices_wrap_at_u32_max() {
        for start in [0u32, u32::MAX - 5, u32::MAX, u32::MAX - 63] {
            let (mut prod, mut cons) = memory_ring_pair::<u64>(8, start).unwrap();
            let mut next_in = 0u64;
            let mut next_out = 0u64;
            for round in 0..40u32 {
                let want = 1 + round % 8;
                let (idx, n) = prod.reserve(want);
                for i in 0..n {
                    prod.write(idx.wrapping_add(i), next_in);
                    next_in += 1;
                }
                prod.submit(n);
                let (idx, m) = cons.peek(u32::MAX);
                for i in 0..m {
                    assert_eq!(cons.read(idx.wrapping_add(i)), next_out, "start {start}");
                    next_out += 1;
                }
                cons.release(m);
            }
            assert_eq!(next_in, next_out);
            assert!(next_in > 100);
        }
    }

    #[test]
    fn producer_never_overruns_consumer() {
        let (mut prod, mut cons) = memory_ring_pair::<u64>(4, u32::MAX - 1).unwrap();
        let (_, n) = prod.reserve(10);
        assert_eq!(n, 4, "only size entries fit");
        prod.submit(n);
        assert_eq!(prod.reserve(1).1, 0, "full ring reserves nothing");
        let (_, m) = cons.peek(3);
        assert_eq!(m, 3);
        assert_eq!(
            prod.reserve(1).1,
            0,
            "peeked but not released is still occupied"
        );
        cons.release(m);
        assert_eq!(prod.reserve(5).1, 3, "released slots become free");
    }

    #[test]
    fn cancel_returns_entries_to_the_ring() {
        let (mut prod, mut cons) = memory_ring_pair::<u64>(8, u32::MAX).unwrap();
        let (idx, n) = prod.reserve(3);
        for i in 0..n {
            prod.write(idx.wrapping_add(i), u64::from(i) + 10);
        }
        prod.submit(n);
        let (_, m) = cons.peek(2);
        cons.cancel(m);
        let (idx, m) = cons.peek(8);
        assert_eq!(m, 3);
        assert_eq!(cons.read(idx), 10);
        cons.release(m);
        assert_eq!(cons.peek(8).1, 0);
    }

    #[test]
    fn unreserve_gives_slots_back() {
        let (mut prod, _cons) = memory_ring_pair::<u64>(8, 7).unwrap();
        let (_, n) = prod.reserve(8);
        prod.unreserve(n);
        assert_eq!(prod.reserve(8).1, 8);
    }
}
