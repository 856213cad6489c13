//! Locks that survive a panic elsewhere.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `lock()` that takes the data even if another thread panicked while holding the lock: every
/// lock in xskit guards counters or bookkeeping that stays consistent at each release, and a
/// forwarder should report and clean up after a panic rather than panic again.
pub trait LockUnpoisoned<T> {
    /// Locks, ignoring poisoning.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T> LockUnpoisoned<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
