//! The four rings of an AF_XDP socket as owned, single-threaded handles.
//!
//! Each type is one side of a single-producer/single-consumer ring, so none is `Clone` and every
//! operation takes `&mut self`: the type system enforces the one-thread-per-side rule of
//! `af_xdp.rst`. Frames move in batches through caller-owned `Vec<Frame>`s; once their capacity
//! is reserved no call allocates, and no call makes a system call except the explicit wakeups.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::ring::{zip_runs, RawRing};
use super::umem::{write_checksum_request, Frame, Umem, XDP_TX_METADATA};
use super::{xsk, SyscallError};
use crate::stall::StallWatch;

/// What [`RxRing::forward_into`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// Frames moved onto the tx ring.
    pub sent: usize,
    /// Whether it stopped at a frame the kernel would not transmit, which is still first on
    /// the rx ring.
    pub refused: bool,
}

/// What [`RxRing::forward_while`] moved: counted where the descriptors move, so that its
/// caller need not count each packet again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MovedOn {
    /// Frames moved onto the tx ring.
    pub sent: usize,
    /// Their bytes.
    pub bytes: u64,
    /// How many of them ask the kernel to finish a checksum.
    pub checksum_requests: usize,
}

/// The most XDP metadata a program can put in front of a packet (the kernel's limit for
/// `bpf_xdp_adjust_meta`): what [`RxRing::forward_while`] shows of a frame's front.
pub const RX_METADATA_MAX: usize = 32;

/// The bytes in front of a received frame in its chunk, up to [`RX_METADATA_MAX`]: where an
/// XDP program's metadata for the packet is, if it wrote any (the rest is whatever the chunk
/// held before). A slice only when asked, so a caller that never looks pays nothing.
#[derive(Clone, Copy)]
pub struct Front<'a> {
    /// The first of the bytes, and how many.
    start: *const u8,
    len: usize,
    frame: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> Front<'a> {
    /// Nothing in front: a frame no XDP program saw.
    pub const NONE: Front<'static> = Front {
        start: std::ptr::NonNull::dangling().as_ptr(),
        len: 0,
        frame: std::marker::PhantomData,
    };

    /// The bytes.
    #[inline(always)]
    pub fn bytes(self) -> &'a [u8] {
        // SAFETY: `len` bytes from `start` lie in the UMEM, in the chunk of the frame that
        // forward_while's `decide` holds while this lives, apart from the frame's own bytes,
        // and nothing writes them meanwhile (NONE: no bytes at a dangling, aligned pointer).
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }
}

/// What [`RxRing::forward_while`]'s caller makes of a received frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Onward {
    /// Leave it (and every frame after it) on the rx ring, for [`RxRing::receive`].
    Keep,
    /// Transmit it as it is.
    Send,
    /// Transmit it, asking the kernel to finish its TCP or UDP checksum
    /// ([`Umem::request_tx_checksum`]'s `start` and `offset`).
    SendFinishingChecksum {
        /// Where the TCP or UDP header starts in the frame.
        start: u16,
        /// Where the checksum field is in that header.
        offset: u16,
    },
}

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
    stall: StallWatch,
    stall_wakeups: u64,
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
        let chunks = self.umem.chunks();
        let mut from_end = frames.iter().rev();
        let done = self.ring.write_runs(idx, n, |slots| {
            for (i, slot) in slots.iter_mut().enumerate() {
                match from_end.next() {
                    Some(f) if chunks.owns(f) => *slot = chunks.chunk_of(f.addr()),
                    _ => return i,
                }
            }
            slots.len()
        });
        frames.truncate(frames.len() - done as usize);
        self.ring.unreserve(n - done);
        if done > 0 {
            self.ring.submit(done);
        }
        done as usize
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
        if n == 0 {
            return 0;
        }
        out.reserve(n as usize);
        let chunks = self.umem.chunks();
        self.ring.read_runs(idx, n, |run| {
            out.extend(run.iter().map(|&addr| chunks.frame(addr, 0, 0)));
        });
        self.ring.release(n);
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
        if n == 0 {
            return 0;
        }
        out.reserve(n as usize);
        let chunks = self.umem.chunks();
        self.ring.read_runs(idx, n, |run| {
            out.extend(run.iter().map(|d| chunks.frame(d.addr, d.len, d.options)));
        });
        self.ring.release(n);
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
            stall: StallWatch::default(),
            stall_wakeups: 0,
        }
    }

    /// Moves up to `max` frames from the front of `frames` into the ring, in order; returns how
    /// many. Stops early at a frame the kernel would reject (empty, longer than its room, or of
    /// another UMEM), which stays at the front of `frames`. Call [`TxRing::wakeup_if_needed`]
    /// after a batch.
    pub fn send(&mut self, frames: &mut Vec<Frame>, max: usize) -> usize {
        let (idx, n) = self.ring.reserve(clamp(max, frames.len()));
        let chunks = self.umem.chunks();
        let mut from_front = frames.iter();
        let done = self.ring.write_runs(idx, n, |slots| {
            for (i, slot) in slots.iter_mut().enumerate() {
                match from_front.next() {
                    Some(f) if chunks.sendable(f) => *slot = f.desc(),
                    _ => return i,
                }
            }
            slots.len()
        });
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

    /// Kicks transmission if the kernel asked for it, or if entries have waited on the ring
    /// for [`crate::TX_STALL_AFTER`] with none taken (a driver may clear the flag and then stop
    /// without taking them: see [`TxRing::stall_wakeups`]); returns whether a call was made.
    /// Call it after each batch, and now and then while entries wait and nothing is sent. A
    /// caller that counts its completions should call [`TxRing::wakeup_if_stalled`] instead.
    pub fn wakeup_if_needed(&mut self) -> Result<bool, SyscallError> {
        if self.needs_wakeup() {
            self.wakeup()?;
            return Ok(true);
        }
        let waiting = self.ring.outstanding() as usize;
        let progress = (self.ring.consumed(), 0);
        self.wakeup_without_progress(waiting, progress)
    }

    /// As [`TxRing::wakeup_if_needed`], for a caller with `in_flight` frames sent and not yet
    /// completed, and `completed` frames completed since it began: also kicks when the kernel
    /// took frames from the ring but has completed none for [`crate::TX_STALL_AFTER`] (a
    /// driver that stopped between the two, its device never told to send them).
    pub fn wakeup_if_stalled(
        &mut self,
        in_flight: usize,
        completed: u64,
    ) -> Result<bool, SyscallError> {
        if self.needs_wakeup() {
            self.wakeup()?;
            return Ok(true);
        }
        self.ring.outstanding();
        let progress = (self.ring.consumed(), completed);
        self.wakeup_without_progress(in_flight, progress)
    }

    /// Kicks when `waiting` frames have seen no `progress` for a stall's time, counting it.
    fn wakeup_without_progress(
        &mut self,
        waiting: usize,
        progress: crate::stall::Progress,
    ) -> Result<bool, SyscallError> {
        if self
            .stall
            .stalled(waiting, progress, std::time::Instant::now)
        {
            self.stall_wakeups += 1;
            self.wakeup()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Wakeups [`TxRing::wakeup_if_needed`] and [`TxRing::wakeup_if_stalled`] made without the
    /// kernel asking, because frames had waited with no progress (also counted in
    /// [`TxRing::wakeups`]). Any but zero means the driver left frames untaken or uncompleted
    /// while saying it needed no wakeup.
    pub fn stall_wakeups(&self) -> u64 {
        self.stall_wakeups
    }
}

// Batch verbs: descriptors move from one ring to another in one pass, with no handle made
// for any of them. A descriptor the kernel hands back belongs to no handle, so moving it on
// at once keeps every chunk with exactly one owner; the checks are made once per batch (the
// rings share a UMEM, the destination has room) where they can be, and per descriptor only
// where the kernel's value must be held inside the UMEM.

/// The move under [`RxRing::forward_while`]: `each` writes the transmit descriptor of each
/// received one into its slot, or returns false to stop there (that frame and the rest stay
/// on the rx ring). [`RxRing::forward_into`] keeps its own loop: the bench's l2fwd through
/// this one cost it 2 instructions a packet more (`bench/callgrind.sh`, 44-45 against 42-43).
#[inline(always)]
fn forward_each(
    rx: &mut RawRing<libc::xdp_desc>,
    tx: &mut RawRing<libc::xdp_desc>,
    max: usize,
    mut each: impl FnMut(&libc::xdp_desc, &mut libc::xdp_desc) -> bool,
) -> Forwarded {
    let room = tx.free(clamp(max, usize::MAX));
    let (from, n) = rx.peek(clamp(max, room as usize));
    if n == 0 {
        return Forwarded::default();
    }
    let (to, _) = tx.reserve(n);
    let done = zip_runs(rx, from, tx, to, n, |from, to| {
        for (i, (slot, d)) in to.iter_mut().zip(from).enumerate() {
            if !each(d, slot) {
                return i;
            }
        }
        from.len()
    });
    rx.cancel(n - done);
    tx.unreserve(n - done);
    if done > 0 {
        tx.submit(done);
        rx.release(done);
    }
    Forwarded {
        sent: done as usize,
        refused: done < n,
    }
}

/// Moves up to `max` entries of a ring the kernel produces (on `umem`) to `fill`, as the
/// starts of the chunks `addr_of` says they are in; returns how many.
#[inline]
fn to_fill<T: Copy>(
    ring: &mut RawRing<T>,
    umem: &Umem,
    fill: &mut FillRing,
    max: usize,
    addr_of: impl Fn(T) -> u64,
) -> usize {
    if !umem.same(&fill.umem) {
        return 0;
    }
    let room = fill.ring.free(clamp(max, usize::MAX));
    let (from, n) = ring.peek(clamp(max, room as usize));
    if n == 0 {
        return 0;
    }
    let (to, _) = fill.ring.reserve(n);
    let chunks = umem.chunks();
    zip_runs(ring, from, &mut fill.ring, to, n, |from, to| {
        for (slot, &entry) in to.iter_mut().zip(from) {
            *slot = chunks.chunk(addr_of(entry));
        }
        from.len()
    });
    fill.ring.submit(n);
    ring.release(n);
    n as usize
}

impl RxRing {
    /// Gives up to `max` received frames straight back to `fill` for the kernel to receive
    /// into again (receive and drop in one pass, as xdpsock's rxdrop does); returns how many.
    /// Takes nothing if `fill` is another UMEM's.
    pub fn recycle_into(&mut self, fill: &mut FillRing, max: usize) -> usize {
        to_fill(&mut self.ring, &self.umem, fill, max, |d| d.addr)
    }

    /// Moves up to `max` received frames straight onto `tx` to be sent back out, after `edit`
    /// has seen (and may have changed) each frame's bytes; returns how many. A frame of a
    /// packet that spans several frames is passed on as it is, so the chain stays whole in
    /// order. Stops early at a frame the kernel would not transmit (no length, or a
    /// transmit-metadata room larger than the receive headroom), which stays first on the rx
    /// ring: [`Forwarded::refused`] says so.
    pub fn forward_into(
        &mut self,
        tx: &mut TxRing,
        max: usize,
        edit: impl FnMut(&mut [u8]),
    ) -> Forwarded {
        if !self.umem.same(&tx.umem) {
            return Forwarded::default();
        }
        self.forward_checked(tx, max, edit)
    }

    fn forward_checked(
        &mut self,
        tx: &mut TxRing,
        max: usize,
        mut edit: impl FnMut(&mut [u8]),
    ) -> Forwarded {
        let room = tx.ring.free(clamp(max, usize::MAX));
        let (from, n) = self.ring.peek(clamp(max, room as usize));
        if n == 0 {
            return Forwarded::default();
        }
        let (to, _) = tx.ring.reserve(n);
        let chunks = self.umem.chunks();
        let umem = &self.umem;
        let done = zip_runs(&self.ring, from, &mut tx.ring, to, n, |from, to| {
            for (i, (slot, d)) in to.iter_mut().zip(from).enumerate() {
                let Some((addr, len)) = chunks.tx_span(d.addr, d.len) else {
                    return i;
                };
                // SAFETY: tx_span keeps addr + len inside the frame's chunk, inside the UMEM;
                // the kernel handed this chunk back and no handle to it exists until it is
                // handed on below, after the slice is gone.
                edit(unsafe { umem.bytes_mut(addr, len as usize) });
                *slot = libc::xdp_desc {
                    addr,
                    len,
                    options: d.options,
                };
            }
            from.len()
        });
        self.ring.cancel(n - done);
        tx.ring.unreserve(n - done);
        if done > 0 {
            tx.ring.submit(done);
            self.ring.release(done);
        }
        Forwarded {
            sent: done as usize,
            refused: done < n,
        }
    }

    /// Moves received frames straight onto `tx` while `decide` sends them on, up to `max`,
    /// in order; returns how many. `decide` reads (and may change) each frame's bytes, and
    /// is told whether the packet continues in the next frame and given the bytes in front
    /// of the frame in its chunk ([`Front`]). The frame it keeps, and every one after it,
    /// stays on the rx ring for [`RxRing::receive`], as does a frame the kernel
    /// would not transmit (empty, or inside the transmit-metadata room), which `decide` never
    /// sees; a length past the chunk's end is cut there, as [`RxRing::forward_into`] cuts
    /// it. [`Onward::SendFinishingChecksum`] on a UMEM without room for the request
    /// ([`Umem::request_tx_checksum`]) keeps the frame too. Takes nothing if `tx` is another
    /// UMEM's.
    pub fn forward_while(
        &mut self,
        tx: &mut TxRing,
        max: usize,
        mut decide: impl FnMut(&mut [u8], bool, Front<'_>) -> Onward,
    ) -> MovedOn {
        if !self.umem.same(&tx.umem) {
            return MovedOn::default();
        }
        let chunks = self.umem.chunks();
        let umem = &self.umem;
        let finishable = chunks.holds_tx_metadata();
        // Read once: a write through the mapping could alias the handle's fields for all the
        // compiler knows, and each request would load them again.
        let mapping = umem.as_ptr();
        // For the bounds check Umem::bytes_mut makes in debug builds, read once as well.
        let umem_len = umem.config().len();
        let (mut bytes_sent, mut checksum_requests) = (0, 0);
        let sent = forward_each(&mut self.ring, &mut tx.ring, max, |d, slot| {
            let Some((addr, len, offset)) = chunks.tx_span_in_chunk(d.addr, d.len) else {
                return false;
            };
            debug_assert!(addr + u64::from(len) <= umem_len);
            // SAFETY: tx_span keeps addr + len inside the frame's chunk, inside the UMEM; the
            // kernel handed this chunk back and no handle to it exists while the slice lives
            // (the descriptor moves on, or stays on the rx ring, after it is gone). From
            // `mapping`, as Umem::bytes_mut makes it, without loading the handle again.
            let bytes =
                unsafe { std::slice::from_raw_parts_mut(mapping.add(addr as usize), len as usize) };
            // The `offset` bytes before the frame are its chunk's: in the UMEM, not the
            // frame's own; their pointer is the mapping's, not the frame's slice's.
            let front_len = (offset as usize).min(RX_METADATA_MAX);
            let front = Front {
                start: mapping.wrapping_add(addr as usize - front_len),
                len: front_len,
                frame: std::marker::PhantomData,
            };
            let mut options = d.options;
            match decide(bytes, options & libc::XDP_PKT_CONTD != 0, front) {
                Onward::Keep => return false,
                Onward::Send => {}
                Onward::SendFinishingChecksum { start, offset } => {
                    if !finishable {
                        return false;
                    }
                    // SAFETY: the room holds the request (`finishable`), and tx_span put
                    // addr inside the UMEM, at least that room into its chunk; no handle
                    // reaches the chunk and `bytes` is gone.
                    unsafe {
                        let to = mapping.add(chunks.tx_metadata_at(addr));
                        write_checksum_request(to, start, offset);
                    }
                    options |= XDP_TX_METADATA;
                    checksum_requests += 1;
                }
            }
            *slot = libc::xdp_desc { addr, len, options };
            bytes_sent += u64::from(len);
            true
        });
        MovedOn {
            sent: sent.sent,
            bytes: bytes_sent,
            checksum_requests,
        }
    }

    /// Drops the first received frame into `out` (a frame [`RxRing::forward_into`] refused);
    /// returns whether there was one.
    pub fn take_one(&mut self, out: &mut Vec<Frame>) -> bool {
        self.receive(out, 1) == 1
    }
}

impl CompletionRing {
    /// Gives up to `max` transmitted frames straight to `fill` for the kernel to receive into;
    /// returns how many. Takes nothing if `fill` is another UMEM's.
    pub fn recycle_into(&mut self, fill: &mut FillRing, max: usize) -> usize {
        to_fill(&mut self.ring, &self.umem, fill, max, |addr| addr)
    }

    /// Sends up to `max` transmitted frames again, straight from this ring onto `tx`, each
    /// with the `len` bytes it holds from the start of its room (a traffic generator's frames,
    /// written once); returns how many. Takes nothing if `tx` is another UMEM's or `len` is 0
    /// or does not fit a frame's room.
    pub fn resend_into(&mut self, tx: &mut TxRing, max: usize, len: usize) -> usize {
        let fits = len > 0 && len <= self.umem.room();
        if !self.umem.same(&tx.umem) || !fits {
            return 0;
        }
        let room = tx.ring.free(clamp(max, usize::MAX));
        let (from, n) = self.ring.peek(clamp(max, room as usize));
        if n == 0 {
            return 0;
        }
        let (to, _) = tx.ring.reserve(n);
        let chunks = self.umem.chunks();
        zip_runs(&self.ring, from, &mut tx.ring, to, n, |from, to| {
            for (slot, &addr) in to.iter_mut().zip(from) {
                *slot = libc::xdp_desc {
                    // Every frame starts at its room, whatever offset it was sent from.
                    addr: chunks.room_start(addr),
                    len: len as u32,
                    options: 0,
                };
            }
            from.len()
        });
        tx.ring.submit(n);
        self.ring.release(n);
        n as usize
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

    /// The consumer index a producer reports (for the stall watch) is the kernel's, across
    /// the u32 wrap.
    #[test]
    fn a_producer_reads_where_the_consumer_stands() {
        let start = u32::MAX - 1;
        let (mut prod, mut cons) = memory_ring_pair::<u64>(8, start).unwrap();
        let (_, n) = prod.reserve(5);
        prod.submit(n);
        assert_eq!((prod.outstanding(), prod.consumed()), (5, start));
        let (_, m) = cons.peek(3);
        cons.release(m);
        assert_eq!(prod.outstanding(), 2);
        assert_eq!(prod.consumed(), start.wrapping_add(3));
    }

    /// A fake kernel's tx ring of 8 with `n` 64-byte frames sent on it, and its UMEM.
    fn tx_ring_sending(
        n: usize,
    ) -> (
        super::TxRing,
        super::super::testing::FakeKernel<libc::xdp_desc>,
        crate::Umem,
    ) {
        let umem = crate::Umem::new(crate::UmemConfig::default().frame_count(16)).unwrap();
        let mut frames = umem.take_frames().unwrap();
        for f in frames.iter_mut() {
            umem.set_len(f, 64).unwrap();
        }
        let (mut tx, kernel) = super::super::testing::tx_ring(&umem, 8).unwrap();
        assert_eq!(tx.send(&mut frames, n), n);
        (tx, kernel, umem)
    }

    /// A tx ring whose kernel side takes nothing, never asking for a wakeup, is woken once
    /// entries have waited TX_STALL_AFTER (the wakeup itself fails on the fake's descriptor,
    /// /dev/null, after it was counted); one the kernel took everything from is not.
    #[test]
    fn a_tx_ring_the_kernel_leaves_untaken_is_woken_and_counted() {
        let (mut tx, mut kernel, _umem) = tx_ring_sending(2);
        let started = std::time::Instant::now();
        while let Ok(false) = tx.wakeup_if_needed() {
            assert!(started.elapsed() < std::time::Duration::from_secs(60));
        }
        assert!(started.elapsed() >= crate::TX_STALL_AFTER);
        assert_eq!((tx.stall_wakeups(), tx.wakeups()), (1, 1));
        assert_eq!(kernel.consume(8, |_| {}), 2);
        let taken = std::time::Instant::now();
        while taken.elapsed() < 2 * crate::TX_STALL_AFTER {
            assert_eq!(tx.wakeup_if_needed().ok(), Some(false), "nothing waits");
        }
        assert_eq!(tx.stall_wakeups(), 1);
    }

    /// A caller counting completions has its ring woken when the kernel took the frames but
    /// completed none for TX_STALL_AFTER, and not while completions come.
    #[test]
    fn frames_taken_and_never_completed_are_woken_for() {
        let (mut tx, mut kernel, _umem) = tx_ring_sending(3);
        assert_eq!(kernel.consume(8, |_| {}), 3, "taken, not completed");
        assert_eq!(tx.wakeup_if_needed().ok(), Some(false), "the ring is empty");
        let started = std::time::Instant::now();
        while let Ok(false) = tx.wakeup_if_stalled(3, 0) {
            assert!(started.elapsed() < std::time::Duration::from_secs(60));
        }
        assert!(started.elapsed() >= crate::TX_STALL_AFTER);
        assert_eq!(tx.stall_wakeups(), 1);
        // Completions coming: progress, no wakeup.
        let moving = std::time::Instant::now();
        let mut completed = 0;
        while moving.elapsed() < 3 * crate::TX_STALL_AFTER {
            completed += 1;
            assert_eq!(tx.wakeup_if_stalled(3, completed).ok(), Some(false));
            std::thread::sleep(crate::TX_STALL_AFTER / 4);
        }
        assert_eq!(tx.stall_wakeups(), 1);
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

    /// The batch verbs, on rings whose other end is a fake kernel.
    mod batch {
        use crate::sys::testing::{completion_ring, fill_ring, rx_ring, tx_ring};
        use crate::sys::umem::{Umem, UmemConfig, TX_METADATA_LEN, XDP_TX_METADATA};
        use crate::{Front, Onward, RX_METADATA_MAX};

        const FS: u64 = 4096;

        fn umem(frames: u32, meta: u32) -> Umem {
            let config = UmemConfig::default()
                .frame_count(frames)
                .tx_metadata_len(meta);
            Umem::new(config).unwrap()
        }

        fn desc(addr: u64, len: u32, options: u32) -> libc::xdp_desc {
            libc::xdp_desc { addr, len, options }
        }

        fn taken<T: Copy>(k: &mut crate::sys::testing::FakeKernel<T>) -> Vec<T> {
            let mut out = Vec::new();
            k.consume(u32::MAX, |v| out.push(v));
            out
        }

        #[test]
        fn received_frames_go_back_to_the_fill_ring_as_chunk_starts_inside_the_umem() {
            // Eight frames: a power of two, so an address past the UMEM is masked into it;
            // six: it is clamped to the last chunk.
            for (frames, far_chunk) in [(8, 0), (6, 5 * FS)] {
                let u = umem(frames, 0);
                let (mut rx, mut kernel_rx) = rx_ring(&u, 8).unwrap();
                let (mut fill, mut kernel_fill) = fill_ring(&u, 8).unwrap();
                let far = (1 << 40) + 17;
                kernel_rx.produce(&[desc(256, 60, 0), desc(3 * FS + 300, 60, 0), desc(far, 9, 0)]);
                assert_eq!(rx.recycle_into(&mut fill, 16), 3);
                assert_eq!(taken(&mut kernel_fill), [0, 3 * FS, far_chunk]);
                assert_eq!(rx.available(), 0);
            }
        }

        /// Batches that wrap either ring move whole and in order.
        #[test]
        fn batches_move_whole_across_either_rings_wrap() {
            let u = umem(8, 0);
            let (mut rx, mut kernel_rx) = rx_ring(&u, 4).unwrap();
            let (mut fill, mut kernel_fill) = fill_ring(&u, 8).unwrap();
            let mut moved = Vec::new();
            for round in 0..5u64 {
                let descs: Vec<_> = (0..3)
                    .map(|i| desc(((round * 3 + i) % 8) * FS, 1, 0))
                    .collect();
                kernel_rx.produce(&descs);
                assert_eq!(rx.recycle_into(&mut fill, 16), 3);
                moved.extend(taken(&mut kernel_fill));
            }
            let expected: Vec<u64> = (0..15).map(|i| (i % 8) * FS).collect();
            assert_eq!(moved, expected);
        }

        #[test]
        fn recycling_takes_no_more_than_the_fill_ring_has_room_for_and_no_other_umems() {
            let u = umem(8, 0);
            let (mut rx, mut kernel_rx) = rx_ring(&u, 8).unwrap();
            let (mut fill, mut kernel_fill) = fill_ring(&u, 4).unwrap();
            let mut spare = vec![u.frame_at(6 * FS, 0, 0), u.frame_at(7 * FS, 0, 0)];
            fill.fill(&mut spare, 2);
            kernel_rx.produce(&[desc(0, 1, 0), desc(FS, 1, 0), desc(2 * FS, 1, 0)]);
            assert_eq!(rx.recycle_into(&mut fill, 16), 2, "room for two");
            assert_eq!(rx.available(), 1, "the third waits on the rx ring");
            assert_eq!(taken(&mut kernel_fill), [7 * FS, 6 * FS, 0, FS]);
            let other = umem(8, 0);
            let (mut other_fill, _k) = fill_ring(&other, 8).unwrap();
            assert_eq!(rx.recycle_into(&mut other_fill, 16), 0);
            assert_eq!(rx.recycle_into(&mut fill, 16), 1);
        }

        #[test]
        fn forwarded_frames_are_edited_in_place_and_sent_with_their_length_and_options() {
            let u = umem(8, 0);
            let (mut rx, mut kernel_rx) = rx_ring(&u, 8).unwrap();
            let (mut tx, mut kernel_tx) = tx_ring(&u, 8).unwrap();
            kernel_rx.produce(&[desc(256, 4, 0), desc(FS + 4000, 500, 1)]);
            let mut seen = Vec::new();
            let n = rx.forward_into(&mut tx, 16, |bytes| {
                seen.push(bytes.len());
                bytes[0] = 0xee;
            });
            assert_eq!((n.sent, n.refused), (2, false));
            assert_eq!(seen, [4, 96], "the second clamped to its chunk's end");
            let sent: Vec<_> = taken(&mut kernel_tx)
                .iter()
                .map(|d| (d.addr, d.len, d.options))
                .collect();
            assert_eq!(sent, [(256, 4, 0), (FS + 4000, 96, 1)]);
            let mut f = u.frame_at(256, 4, 0);
            assert_eq!(u.data_mut(&mut f)[0], 0xee);
        }

        #[test]
        fn a_frame_the_kernel_would_not_send_stops_the_batch_and_stays_on_the_rx_ring() {
            let u = umem(8, 64);
            let (mut rx, mut kernel_rx) = rx_ring(&u, 8).unwrap();
            let (mut tx, mut kernel_tx) = tx_ring(&u, 8).unwrap();
            // The second has no room for the transmit metadata in front of it.
            kernel_rx.produce(&[desc(256, 10, 0), desc(FS + 8, 10, 0), desc(2 * FS, 0, 0)]);
            let n = rx.forward_into(&mut tx, 16, |_| {});
            assert_eq!((n.sent, n.refused), (1, true));
            assert_eq!(rx.available(), 2);
            assert_eq!(taken(&mut kernel_tx).len(), 1);
            assert_eq!(tx.pending(), 0, "nothing reserved is left behind");
        }

        #[test]
        fn frames_are_forwarded_while_decided_so_and_the_rest_stay_to_be_received_in_order() {
            let u = umem(8, 0);
            let (mut rx, mut kernel_rx) = rx_ring(&u, 8).unwrap();
            let (mut tx, mut kernel_tx) = tx_ring(&u, 8).unwrap();
            let contd = libc::XDP_PKT_CONTD;
            kernel_rx.produce(&[
                desc(256, 4, 0),
                desc(FS + 256, 5, 0),
                desc(2 * FS + 256, 6, contd),
                desc(3 * FS + 256, 7, 0),
            ]);
            let mut seen = Vec::new();
            let n = rx.forward_while(&mut tx, 16, |bytes, continued, _| {
                seen.push((bytes.len(), continued));
                bytes[0] = 0xee;
                if continued {
                    Onward::Keep
                } else {
                    Onward::Send
                }
            });
            assert_eq!((n.sent, n.bytes, n.checksum_requests), (2, 9, 0));
            assert_eq!(
                seen,
                [(4, false), (5, false), (6, true)],
                "none seen past the kept"
            );
            assert_eq!(tx.pending(), 2, "nothing reserved is left behind");
            let sent: Vec<_> = taken(&mut kernel_tx)
                .iter()
                .map(|d| (d.addr, d.len, d.options))
                .collect();
            assert_eq!(sent, [(256, 4, 0), (FS + 256, 5, 0)]);
            let mut rest = Vec::new();
            assert_eq!(rx.receive(&mut rest, 16), 2);
            assert_eq!(
                rest.iter().map(|f| (f.addr(), f.len())).collect::<Vec<_>>(),
                [(2 * FS + 256, 6), (3 * FS + 256, 7)]
            );
            assert!(rest[0].is_continued());
            assert_eq!(
                u.data(&rest[0])[0],
                0xee,
                "the kept frame's bytes as decide left them"
            );
        }

        #[test]
        fn decide_is_shown_the_bytes_in_front_of_each_frame_in_its_chunk() {
            let u = umem(8, 0);
            let (mut rx, mut kernel_rx) = rx_ring(&u, 8).unwrap();
            let (mut tx, _kernel_tx) = tx_ring(&u, 8).unwrap();
            // The first frame is the 32 bytes in front of the second (as an XDP program's
            // metadata is), the third starts 4 bytes into its chunk.
            kernel_rx.produce(&[desc(224, 32, 0), desc(256, 60, 0), desc(FS + 4, 60, 0)]);
            let mut fronts = Vec::new();
            let n = rx.forward_while(&mut tx, 16, |bytes, _, front| {
                fronts.push(front.bytes().to_vec());
                if bytes.len() == 32 {
                    for (i, b) in bytes.iter_mut().enumerate() {
                        *b = i as u8;
                    }
                }
                Onward::Send
            });
            assert_eq!(n.sent, 3);
            assert_eq!(
                fronts[0].len(),
                RX_METADATA_MAX,
                "at most the metadata's most"
            );
            assert_eq!(fronts[1], (0..32).collect::<Vec<u8>>());
            assert_eq!(fronts[2].len(), 4, "never before the chunk");
        }

        #[test]
        fn a_forwarded_frame_asks_the_kernel_to_finish_its_checksum_where_there_is_room() {
            let u = umem(8, TX_METADATA_LEN);
            let (mut rx, mut kernel_rx) = rx_ring(&u, 8).unwrap();
            let (mut tx, mut kernel_tx) = tx_ring(&u, 8).unwrap();
            kernel_rx.produce(&[
                desc(256, 60, 0),
                desc(FS + 256, 60, 0),
                desc(2 * FS + 8, 60, 0),
            ]);
            let mut asked = [
                Onward::SendFinishingChecksum {
                    start: 34,
                    offset: 6,
                },
                Onward::Send,
            ]
            .into_iter();
            let n = rx.forward_while(&mut tx, 16, |_, _, _| asked.next().unwrap_or(Onward::Send));
            assert_eq!(
                (n.sent, n.bytes, n.checksum_requests),
                (2, 120, 1),
                "the third leaves no room for the metadata: not sent, not seen"
            );
            let sent = taken(&mut kernel_tx);
            assert_eq!(sent[0].options, XDP_TX_METADATA);
            assert_eq!(sent[1].options, 0);
            let meta = u.frame_at(256 - u64::from(TX_METADATA_LEN), TX_METADATA_LEN, 0);
            let meta = u.data(&meta);
            assert_eq!(
                meta[..8],
                u64::from(libc::XDP_TXMD_FLAGS_CHECKSUM).to_ne_bytes()
            );
            assert_eq!(meta[8..10], 34u16.to_ne_bytes());
            assert_eq!(meta[10..12], 6u16.to_ne_bytes());
            assert_eq!(rx.available(), 1);

            // Without room for the request the frame is kept.
            let plain = umem(8, 0);
            let (mut rx, mut kernel_rx) = rx_ring(&plain, 8).unwrap();
            let (mut tx, _kernel_tx) = tx_ring(&plain, 8).unwrap();
            kernel_rx.produce(&[desc(256, 60, 0)]);
            let finish = |_: &mut [u8], _, _: Front<'_>| Onward::SendFinishingChecksum {
                start: 34,
                offset: 6,
            };
            assert_eq!(rx.forward_while(&mut tx, 16, finish).sent, 0);
            assert_eq!(rx.available(), 1);
            let other = umem(8, 0);
            let (mut other_tx, _k) = tx_ring(&other, 8).unwrap();
            assert_eq!(
                rx.forward_while(&mut other_tx, 16, |_, _, _| Onward::Send)
                    .sent,
                0
            );
        }

        #[test]
        fn forwarding_takes_no_more_than_the_tx_ring_has_room_for() {
            let u = umem(8, 0);
            let (mut rx, mut kernel_rx) = rx_ring(&u, 8).unwrap();
            let (mut tx, _kernel_tx) = tx_ring(&u, 2).unwrap();
            kernel_rx.produce(&[desc(0, 1, 0), desc(FS, 1, 0), desc(2 * FS, 1, 0)]);
            assert_eq!(rx.forward_into(&mut tx, 16, |_| {}).sent, 2);
            assert_eq!(rx.available(), 1);
            let full = rx.forward_into(&mut tx, 16, |_| {});
            assert_eq!((full.sent, full.refused), (0, false), "the tx ring is full");
        }

        #[test]
        fn completed_frames_go_to_the_fill_ring_or_out_again_from_their_room() {
            let u = umem(8, 64);
            let (mut cq, mut kernel_cq) = completion_ring(&u, 8).unwrap();
            let (mut fill, mut kernel_fill) = fill_ring(&u, 8).unwrap();
            kernel_cq.produce(&[FS + 64, 2 * FS + 64]);
            assert_eq!(cq.recycle_into(&mut fill, 16), 2);
            assert_eq!(taken(&mut kernel_fill), [FS, 2 * FS]);

            let (mut tx, mut kernel_tx) = tx_ring(&u, 8).unwrap();
            kernel_cq.produce(&[FS + 64, 5 * FS + 100]);
            assert_eq!(cq.resend_into(&mut tx, 16, 0), 0, "no length");
            assert_eq!(cq.resend_into(&mut tx, 16, 4033), 0, "past the room");
            assert_eq!(cq.resend_into(&mut tx, 16, 60), 2);
            let sent: Vec<_> = taken(&mut kernel_tx)
                .iter()
                .map(|d| (d.addr, d.len, d.options))
                .collect();
            assert_eq!(sent, [(FS + 64, 60, 0), (5 * FS + 64, 60, 0)]);
        }
    }
}
