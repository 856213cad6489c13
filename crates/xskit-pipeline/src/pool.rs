//! A frame pool in the spirit of the kernel's page_pool: a per-worker cache served without
//! locks, refilled from and spilled to a shared ring in bulk, with counters for each path.

use std::sync::{Arc, Mutex};

use xskit::Frame;
use xskit_os::sync::LockUnpoisoned;

/// How a pool's frames came and went (the page_pool counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Frames handed out from the local cache.
    pub alloc_fast: u64,
    /// Frames handed out after a bulk refill from the shared ring.
    pub alloc_slow: u64,
    /// Allocation requests that found no frame at all.
    pub alloc_empty: u64,
    /// Frames recycled into the local cache.
    pub recycled_cache: u64,
    /// Frames recycled into the shared ring (the cache was full).
    pub recycled_ring: u64,
    /// Frames the shared ring could not take (must stay 0: it is sized for every frame).
    pub recycled_full: u64,
}

impl std::ops::AddAssign for PoolStats {
    /// Sums counters, e.g. over workers.
    fn add_assign(&mut self, s: PoolStats) {
        self.alloc_fast += s.alloc_fast;
        self.alloc_slow += s.alloc_slow;
        self.alloc_empty += s.alloc_empty;
        self.recycled_cache += s.recycled_cache;
        self.recycled_ring += s.recycled_ring;
        self.recycled_full += s.recycled_full;
    }
}

/// The frames no worker holds, shared by every worker's [`FramePool`].
#[derive(Clone, Debug)]
pub struct SharedFrames {
    ring: Arc<Mutex<Vec<Frame>>>,
    capacity: usize,
}

impl SharedFrames {
    /// A shared ring holding `frames` (all of a UMEM's frames, usually).
    pub fn new(frames: Vec<Frame>) -> Self {
        let capacity = frames.len();
        SharedFrames {
            ring: Arc::new(Mutex::new(frames)),
            capacity,
        }
    }

    /// A shared ring holding `frames` and room for `capacity` (a UMEM's every frame): the
    /// frames a process handed over had free, the rest still in the kernel's rings.
    pub fn with_capacity(frames: Vec<Frame>, capacity: usize) -> Self {
        SharedFrames {
            capacity: capacity.max(frames.len()),
            ring: Arc::new(Mutex::new(frames)),
        }
    }

    /// The UMEM offsets of the frames in the shared ring now (which a process hands over
    /// with its UMEM as free).
    pub fn addresses(&self) -> Vec<u64> {
        self.ring
            .lock_unpoisoned()
            .iter()
            .map(Frame::addr)
            .collect()
    }

    /// Frames in the shared ring now.
    pub fn len(&self) -> usize {
        self.ring.lock_unpoisoned().len()
    }

    /// True when the shared ring is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A worker-local pool drawing from this ring, caching up to `cache` frames.
    pub fn pool(&self, cache: usize) -> FramePool {
        FramePool {
            cache: Vec::with_capacity(cache),
            cache_max: cache,
            shared: self.clone(),
            stats: PoolStats::default(),
            held: 0,
        }
    }
}

/// A worker's frames: allocations and frees in bulk, lock-free while the cache lasts.
#[derive(Debug)]
pub struct FramePool {
    cache: Vec<Frame>,
    cache_max: usize,
    shared: SharedFrames,
    stats: PoolStats,
    /// Frames taken from the shared ring and not given back: the cache plus every frame this
    /// worker has out (in rings, in vectors).
    held: usize,
}

impl FramePool {
    /// Frames this pool has taken from the shared ring and not given back. A worker checks its
    /// accounting by comparing this with the cache plus what its ports and vectors hold.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Moves up to `n` frames into `out`; returns how many.
    pub fn alloc(&mut self, out: &mut Vec<Frame>, n: usize) -> usize {
        let mut got = 0;
        while got < n {
            if self.cache.is_empty() {
                let mut ring = self.shared.ring.lock_unpoisoned();
                let take = ring.len().min(self.cache_max.max(n - got));
                let at = ring.len() - take;
                self.cache.extend(ring.drain(at..));
                drop(ring);
                self.held += take;
                if self.cache.is_empty() {
                    self.stats.alloc_empty += 1;
                    break;
                }
                let k = (n - got).min(self.cache.len());
                self.stats.alloc_slow += k as u64;
                out.extend(self.cache.drain(self.cache.len() - k..));
                got += k;
                continue;
            }
            let k = (n - got).min(self.cache.len());
            self.stats.alloc_fast += k as u64;
            out.extend(self.cache.drain(self.cache.len() - k..));
            got += k;
        }
        got
    }

    /// Takes every frame of `frames` back; the cache first, the shared ring for the rest.
    pub fn free(&mut self, frames: &mut Vec<Frame>) {
        // Called every round for each port's completions, mostly with none.
        if frames.is_empty() {
            return;
        }
        // A frame comes out of the pool as the kernel would hand it over: without a note.
        for f in frames.iter_mut() {
            f.set_note(0);
        }
        let room = self
            .cache_max
            .saturating_sub(self.cache.len())
            .min(frames.len());
        self.stats.recycled_cache += room as u64;
        self.cache.extend(frames.drain(..room));
        if frames.is_empty() {
            return;
        }
        let mut ring = self.shared.ring.lock_unpoisoned();
        let space = self
            .shared
            .capacity
            .saturating_sub(ring.len())
            .min(frames.len());
        self.stats.recycled_ring += space as u64;
        self.held -= space;
        ring.extend(frames.drain(..space));
        // Only possible with frames from elsewhere; counted, and the frames are dropped, which
        // loses them but never duplicates one.
        self.stats.recycled_full += frames.len() as u64;
        frames.clear();
    }

    /// Takes one frame back (the cache if it has room, else the shared ring).
    pub fn free_one(&mut self, mut frame: Frame) {
        frame.set_note(0);
        if self.cache.len() < self.cache_max {
            self.stats.recycled_cache += 1;
            self.cache.push(frame);
            return;
        }
        let mut ring = self.shared.ring.lock_unpoisoned();
        if ring.len() < self.shared.capacity {
            self.stats.recycled_ring += 1;
            self.held -= 1;
            ring.push(frame);
        } else {
            self.stats.recycled_full += 1;
        }
    }

    /// Gives every cached frame back to the shared ring (a worker pausing, so that the
    /// shared ring shows every free frame).
    pub fn spill(&mut self) {
        let mut ring = self.shared.ring.lock_unpoisoned();
        self.held -= self.cache.len();
        ring.append(&mut self.cache);
    }

    /// Counts `n` more frames as this pool's, out in its ports' kernel rings: the frames a
    /// port taken over from another process holds there.
    pub fn hold_in_kernel(&mut self, n: usize) {
        self.held += n;
    }

    /// Frames in this worker's cache.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// The counters.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }
}

impl Drop for FramePool {
    /// A worker that goes away gives its cached frames back to the shared ring, so none is lost.
    fn drop(&mut self) {
        let mut cache = std::mem::take(&mut self.cache);
        let mut ring = self.shared.ring.lock_unpoisoned();
        ring.append(&mut cache);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xskit::{Umem, UmemConfig};

    fn shared(n: u32) -> SharedFrames {
        let umem = Umem::new(UmemConfig::default().frame_count(n)).unwrap();
        SharedFrames::new(umem.take_frames().unwrap())
    }

    #[test]
    fn fast_slow_and_empty_paths_are_counted() {
        let shared = shared(100);
        let mut pool = shared.pool(32);
        let mut out = Vec::new();
        assert_eq!(pool.alloc(&mut out, 10), 10);
        let s = pool.stats();
        assert_eq!(
            (s.alloc_slow, s.alloc_fast),
            (10, 0),
            "the first take refills the cache"
        );
        assert_eq!(pool.alloc(&mut out, 10), 10);
        assert_eq!(pool.stats().alloc_fast, 10, "then the cache serves");
        assert_eq!(pool.alloc(&mut out, 1000), 80);
        assert!(pool.stats().alloc_empty >= 1);
        assert_eq!(shared.len() + pool.cached() + out.len(), 100);
        assert_eq!(pool.held(), pool.cached() + out.len());
        pool.free(&mut out);
        assert_eq!(pool.held(), pool.cached());
    }

    #[test]
    fn a_dropped_pool_returns_its_cache() {
        let shared = shared(50);
        let mut pool = shared.pool(32);
        let mut out = Vec::new();
        pool.alloc(&mut out, 10);
        pool.free(&mut out);
        assert!(pool.cached() > 0);
        drop(pool);
        assert_eq!(shared.len(), 50);
    }

    #[test]
    fn frees_fill_the_cache_then_the_ring() {
        let shared = shared(100);
        let mut pool = shared.pool(16);
        let mut out = Vec::new();
        pool.alloc(&mut out, 100);
        pool.free(&mut out);
        let s = pool.stats();
        assert_eq!(
            (s.recycled_cache, s.recycled_ring, s.recycled_full),
            (16, 84, 0)
        );
        assert_eq!(shared.len() + pool.cached(), 100);
    }
}
