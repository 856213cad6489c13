//! The raw single-producer/single-consumer ring shared with the kernel.
//!
//! The protocol follows libxdp's `xsk.h` and the kernel's `net/xdp/xsk_queue.h`: each side keeps
//! cached copies of both indices and touches the shared ones only when the cache cannot answer.
//! Indices are free-running `u32`s; a slot is `index & mask`, and every distance is computed with
//! wrapping arithmetic, so the rings keep working across the wrap at `u32::MAX`.
//!
//! Barrier pairing (the kernel's (A)-(D) table in `xsk_queue.h`):
//! - a producer writes entries, then stores `producer` with Release; the consumer loads
//!   `producer` with Acquire before it reads those entries;
//! - a consumer reads entries, then stores `consumer` with Release; the producer loads
//!   `consumer` with Acquire before it overwrites the slots released.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::SyscallError;
use xskit_os::Mmap;

/// Where the four parts of a ring sit inside its mapping.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingLayout {
    pub(crate) producer: usize,
    pub(crate) consumer: usize,
    pub(crate) flags: usize,
    pub(crate) desc: usize,
}

impl RingLayout {
    pub(crate) fn from_kernel(off: &libc::xdp_ring_offset) -> Self {
        RingLayout {
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            flags: off.flags as usize,
            desc: off.desc as usize,
        }
    }
}

/// One side (producer or consumer) of a ring of `T` entries.
///
/// `T` is `u64` for the fill and completion rings and `xdp_desc` for the rx and tx rings.
pub(crate) struct RawRing<T: Copy> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut T,
    mask: u32,
    size: u32,
    /// Producer side: the next index to reserve. Consumer side: the last producer index seen.
    cached_prod: u32,
    /// Producer side: the consumer index plus `size` (the first index that is not free).
    /// Consumer side: the next index to peek.
    cached_cons: u32,
    _map: Arc<Mmap>,
}

// SAFETY: a RawRing is one side of an SPSC ring; it is moved between threads as a whole and its
// `&mut self` methods make sure only one thread drives that side at a time. The mapping it
// points into is kept alive by `_map`.
unsafe impl<T: Copy + Send> Send for RawRing<T> {}

impl<T: Copy> std::fmt::Debug for RawRing<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawRing")
            .field("size", &self.size)
            .field("cached_prod", &self.cached_prod)
            .field("cached_cons", &self.cached_cons)
            .finish()
    }
}

impl<T: Copy> RawRing<T> {
    /// Wraps a ring of `size` entries laid out in `map` as `layout` says.
    ///
    /// Fails if the layout does not fit in the mapping or `size` is not a power of two.
    pub(crate) fn new(
        map: Arc<Mmap>,
        layout: RingLayout,
        size: u32,
        producer_side: bool,
    ) -> Result<Self, SyscallError> {
        let entries_end = (size as usize)
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|bytes| bytes.checked_add(layout.desc));
        let fits = |off: usize| off.is_multiple_of(4) && off + 4 <= map.len();
        if !size.is_power_of_two()
            || !fits(layout.producer)
            || !fits(layout.consumer)
            || !fits(layout.flags)
            || !layout.desc.is_multiple_of(std::mem::align_of::<T>())
            || entries_end.is_none_or(|end| end > map.len())
        {
            return Err(SyscallError {
                call: "ring layout check",
                os_error: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        let base = map.as_ptr();
        // SAFETY: every offset was checked above to lie inside the mapping.
        let (producer, consumer, flags, entries) = unsafe {
            (
                base.add(layout.producer).cast::<AtomicU32>(),
                base.add(layout.consumer).cast::<AtomicU32>(),
                base.add(layout.flags).cast::<AtomicU32>(),
                base.add(layout.desc).cast::<T>(),
            )
        };
        let mut ring = RawRing {
            producer,
            consumer,
            flags,
            entries,
            mask: size - 1,
            size,
            cached_prod: 0,
            cached_cons: 0,
            _map: map,
        };
        let prod = ring.producer().load(Ordering::Relaxed);
        let cons = ring.consumer().load(Ordering::Relaxed);
        if producer_side {
            ring.cached_prod = prod;
            ring.cached_cons = cons.wrapping_add(size);
        } else {
            ring.cached_prod = prod;
            ring.cached_cons = cons;
        }
        Ok(ring)
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: the pointer is aligned, inside the mapping, and valid as long as `_map`.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    /// Whether the kernel asked to be woken up (`XDP_RING_NEED_WAKEUP`).
    pub(crate) fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `producer`. Relaxed: the flag is a hint that is re-checked by the
        // syscall it triggers, exactly as libxdp reads it.
        let flags = unsafe { &*self.flags }.load(Ordering::Relaxed);
        flags & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // ---- producer side ----

    /// How many entries may be reserved, refreshing the consumer index only when the cache shows
    /// fewer than `wanted`.
    pub(crate) fn free(&mut self, wanted: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= wanted {
            return free;
        }
        // Acquire pairs with the consumer's Release store of `consumer`: its reads of the slots
        // it released are done before we overwrite them.
        self.cached_cons = self
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(self.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Reserves up to `wanted` entries; returns the first index and how many were reserved.
    pub(crate) fn reserve(&mut self, wanted: u32) -> (u32, u32) {
        let n = self.free(wanted).min(wanted);
        let idx = self.cached_prod;
        self.cached_prod = self.cached_prod.wrapping_add(n);
        (idx, n)
    }

    /// Writes one reserved entry.
    pub(crate) fn write(&mut self, idx: u32, value: T) {
        // SAFETY: `idx & mask` < size, so the slot is inside the entry array. The slot belongs to
        // the producer between reserve and submit, so the kernel does not read it concurrently.
        unsafe { self.entries.add((idx & self.mask) as usize).write(value) }
    }

    /// Publishes `n` reserved entries to the consumer.
    pub(crate) fn submit(&mut self, n: u32) {
        let prod = self.producer().load(Ordering::Relaxed).wrapping_add(n);
        // Release pairs with the consumer's Acquire load of `producer`: the entries written
        // above are visible before the index that publishes them.
        self.producer().store(prod, Ordering::Release);
    }

    /// Gives back `n` reserved but unsubmitted entries.
    pub(crate) fn unreserve(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_sub(n);
    }

    /// Entries submitted and not yet consumed (as last seen).
    pub(crate) fn outstanding(&mut self) -> u32 {
        self.size - self.free(self.size)
    }

    /// The consumer index as last read (by [`RawRing::free`] or [`RawRing::outstanding`]).
    pub(crate) fn consumed(&self) -> u32 {
        self.cached_cons.wrapping_sub(self.size)
    }

    // ---- consumer side ----

    /// How many entries are ready, refreshing the producer index only when the cache is empty.
    pub(crate) fn available(&mut self, wanted: u32) -> u32 {
        let mut entries = self.cached_prod.wrapping_sub(self.cached_cons);
        if entries == 0 {
            // Acquire pairs with the producer's Release store of `producer`: the entries it
            // published are visible before we read them.
            self.cached_prod = self.producer().load(Ordering::Acquire);
            entries = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        entries.min(wanted)
    }

    /// Takes up to `wanted` ready entries; returns the first index and how many.
    pub(crate) fn peek(&mut self, wanted: u32) -> (u32, u32) {
        let n = self.available(wanted);
        let idx = self.cached_cons;
        self.cached_cons = self.cached_cons.wrapping_add(n);
        (idx, n)
    }

    /// Reads one peeked entry.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn read(&self, idx: u32) -> T {
        // SAFETY: `idx & mask` < size; the slot was published by the producer (Acquire above)
        // and is not reused until we release it.
        unsafe { self.entries.add((idx & self.mask) as usize).read() }
    }

    /// Returns `n` peeked entries' slots to the producer.
    pub(crate) fn release(&mut self, n: u32) {
        let cons = self.consumer().load(Ordering::Relaxed).wrapping_add(n);
        // Release pairs with the producer's Acquire load of `consumer`: our reads of these slots
        // are done before the producer may overwrite them.
        self.consumer().store(cons, Ordering::Release);
    }

    /// Undoes the peek of the last `n` entries, which stay ready.
    pub(crate) fn cancel(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_sub(n);
    }
}

impl<T: Copy> RawRing<T> {
    /// The slots `idx .. idx + n` as at most two runs of contiguous memory (the second where
    /// the ring wraps): each run's first slot and length.
    #[inline]
    fn runs(&self, idx: u32, n: u32) -> [(usize, usize); 2] {
        let first = (idx & self.mask) as usize;
        let head = (n as usize).min(self.size as usize - first);
        [(first, head), (0, n as usize - head)]
    }

    /// Hands `f` the `n` entries peeked at `idx`, run by run.
    #[inline]
    pub(crate) fn read_runs(&self, idx: u32, n: u32, mut f: impl FnMut(&[T])) {
        for (at, len) in self.runs(idx, n) {
            if len > 0 {
                // SAFETY: at + len <= size, so the run lies inside the entry array; the slots
                // were published to this consumer (peek) and are not reused until released.
                f(unsafe { std::slice::from_raw_parts(self.entries.add(at), len) });
            }
        }
    }

    /// Hands `f` the `n` slots reserved at `idx`, run by run; `f` returns how many of its run
    /// it filled, and a short count ends the walk. Returns how many were filled in all.
    #[inline]
    pub(crate) fn write_runs(
        &mut self,
        idx: u32,
        n: u32,
        mut f: impl FnMut(&mut [T]) -> usize,
    ) -> u32 {
        let mut done = 0;
        for (at, len) in self.runs(idx, n) {
            if len == 0 {
                continue;
            }
            // SAFETY: at + len <= size, so the run lies inside the entry array; the slots are
            // this producer's between reserve and submit, so the kernel does not read them.
            let run = unsafe { std::slice::from_raw_parts_mut(self.entries.add(at), len) };
            let filled = f(run).min(len);
            done += filled;
            if filled < len {
                break;
            }
        }
        done as u32
    }
}

/// Hands `f` the `n` entries peeked at `from` on `src` beside the `n` slots reserved at `to`
/// on `dst`, as matching runs of contiguous memory (at most three: each ring may wrap once),
/// so that a batch moves with one index and no masking per entry. `f` returns how many of
/// its run it took; a short count ends the walk. Returns how many were taken in all.
#[inline]
pub(crate) fn zip_runs<S: Copy, D: Copy>(
    src: &RawRing<S>,
    from: u32,
    dst: &mut RawRing<D>,
    to: u32,
    n: u32,
    mut f: impl FnMut(&[S], &mut [D]) -> usize,
) -> u32 {
    let mut done = 0u32;
    while done < n {
        let s = from.wrapping_add(done) & src.mask;
        let d = to.wrapping_add(done) & dst.mask;
        let run = (n - done).min(src.size - s).min(dst.size - d);
        // SAFETY: s + run <= src.size and d + run <= dst.size, so both runs lie inside their
        // entry arrays, which are in different mappings. The source slots were published to
        // this consumer (peek) and are not reused until released; the destination slots are
        // this producer's between reserve and submit, so the kernel touches neither meanwhile.
        let (from_run, to_run) = unsafe {
            (
                std::slice::from_raw_parts(src.entries.add(s as usize), run as usize),
                std::slice::from_raw_parts_mut(dst.entries.add(d as usize), run as usize),
            )
        };
        let took = f(from_run, to_run).min(run as usize) as u32;
        done += took;
        if took < run {
            break;
        }
    }
    done
}

/// A producer and a consumer over one anonymous mapping, with both indices starting at `start`:
/// rings without a kernel, for tests and benchmarks of the index protocol.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn memory_ring_pair<T: Copy>(
    size: u32,
    start: u32,
) -> Result<(RawRing<T>, RawRing<T>), SyscallError> {
    let layout = RingLayout {
        producer: 0,
        consumer: 64,
        flags: 128,
        desc: 192,
    };
    let bytes = layout.desc + size as usize * std::mem::size_of::<T>();
    let map = Arc::new(Mmap::anonymous(bytes, false)?);
    // SAFETY: both index words are inside the fresh mapping (checked by its size above) and
    // nobody else references it yet.
    unsafe {
        (*map.as_ptr().add(layout.producer).cast::<AtomicU32>()).store(start, Ordering::Relaxed);
        (*map.as_ptr().add(layout.consumer).cast::<AtomicU32>()).store(start, Ordering::Relaxed);
    }
    let producer = RawRing::new(map.clone(), layout, size, true)?;
    let consumer = RawRing::new(map, layout, size, false)?;
    Ok((producer, consumer))
}
