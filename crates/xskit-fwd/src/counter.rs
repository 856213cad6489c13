//! Counters the workers publish: each cell has one writer, its worker, and any number of
//! readers (the forwarder's reports).

use std::sync::atomic::{AtomicU64, Ordering};

/// Adds `n` to a counter that only the calling worker writes (other threads only read it):
/// a relaxed load and store, not a locked read-modify-write.
#[inline]
pub(crate) fn bump(cell: &AtomicU64, n: u64) {
    cell.store(
        cell.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}
