//! io_uring SEND_ZC from registered buffers: the checked API over the ring in the system
//! layer, with its errors turned into advice.

use std::os::fd::OwnedFd;
use std::time::Duration;

use xskit_os::SyscallError;

use crate::error::{Error, Result};
use crate::sys::uring_zc::UringRing;
use crate::ZeroCopyStats;

/// A socket sending from registered buffers with io_uring SEND_ZC.
///
/// Buffers are slots of one region registered with the ring: take a free slot, write into
/// it, send it, and it becomes free again only after both of its completions have arrived
/// (the send's result, then the notification that the kernel let go of the pages).
#[derive(Debug)]
pub struct UringZeroCopySender {
    ring: UringRing,
}

fn uring_error(e: SyscallError) -> Error {
    let call = e.call;
    match e.errno() {
        Some(libc::ENOSYS) => Error::UringUnavailable { call },
        Some(libc::EPERM) => Error::NotPermitted {
            what: "setting up io_uring",
        },
        Some(libc::ENOMEM) => Error::PinnedBuffers { call },
        _ => Error::Syscall(e),
    }
}

impl UringZeroCopySender {
    /// Takes a connected TCP or UDP socket and registers `slots` buffers of `slot_size` bytes.
    pub fn new(socket: impl Into<OwnedFd>, slots: u16, slot_size: usize) -> Result<Self> {
        if slots == 0 || slot_size == 0 || slot_size > u32::MAX as usize {
            return Err(Error::Slots { slots, slot_size });
        }
        Ok(UringZeroCopySender {
            ring: UringRing::new(socket, slots, slot_size).map_err(uring_error)?,
        })
    }

    /// What the sender did so far (`zerocopy_calls` counts SEND_ZC operations).
    pub fn stats(&self) -> &ZeroCopyStats {
        self.ring.stats()
    }

    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.ring.slot_size()
    }

    /// A free slot to write into, if any.
    pub fn take_slot(&mut self) -> Option<u16> {
        self.ring.take_slot()
    }

    /// The bytes of a slot taken with [`UringZeroCopySender::take_slot`] and not yet sent
    /// (empty for any other slot).
    pub fn slot_mut(&mut self, idx: u16) -> &mut [u8] {
        self.ring.slot_mut(idx)
    }

    /// Sends the first `len` bytes of slot `idx`, after the previous send has finished, so
    /// sends keep their order. A short send (a full TCP buffer) is continued by another
    /// SEND_ZC from where it stopped.
    pub fn send(&mut self, idx: u16, len: usize) -> Result<()> {
        if !self.ring.is_unsent(idx) {
            return Err(Error::SlotNotTaken { slot: idx });
        }
        self.ring.send(idx, len).map_err(uring_error)
    }

    /// Settles every completion that has arrived; returns the number of free slots.
    pub fn reap(&mut self) -> Result<usize> {
        self.ring.reap().map_err(uring_error)
    }

    /// Waits for at least one completion, then settles them.
    pub fn wait(&mut self) -> Result<usize> {
        self.ring.wait().map_err(uring_error)
    }

    /// Waits up to `timeout` until every slot is free.
    pub fn flush(&mut self, timeout: Duration) -> Result<()> {
        self.ring.flush(timeout).map_err(uring_error)
    }
}
