//! Rings over plain memory with a fake kernel on the other side, so that the ring protocol and
//! the typed ring API can be tested and benchmarked without a socket.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::ring::{memory_ring_pair, RawRing};
use super::rings::{CompletionRing, FillRing, RxRing, TxRing};
use super::umem::Umem;
use super::SyscallError;

type Result<T> = std::result::Result<T, SyscallError>;

/// The kernel's end of a memory ring: it consumes what user space produces and produces what
/// user space consumes.
#[derive(Debug)]
pub struct FakeKernel<T: Copy> {
    ring: RawRing<T>,
}

impl<T: Copy> FakeKernel<T> {
    /// Consumes up to `max` entries, calling `f` on each; returns how many.
    pub fn consume(&mut self, max: u32, mut f: impl FnMut(T)) -> u32 {
        let (idx, n) = self.ring.peek(max);
        for i in 0..n {
            f(self.ring.read(idx.wrapping_add(i)));
        }
        self.ring.release(n);
        n
    }

    /// Produces `items` (as many as fit); returns how many.
    pub fn produce(&mut self, items: &[T]) -> u32 {
        let (idx, n) = self.ring.reserve(items.len().min(u32::MAX as usize) as u32);
        for (i, item) in items.iter().take(n as usize).enumerate() {
            self.ring.write(idx.wrapping_add(i as u32), *item);
        }
        self.ring.submit(n);
        n
    }
}

fn null_fd() -> Result<Arc<OwnedFd>> {
    let file = std::fs::File::open("/dev/null").map_err(|source| SyscallError {
        call: "open(/dev/null)",
        os_error: source,
    })?;
    Ok(Arc::new(OwnedFd::from(file)))
}

/// A tx ring of `size` entries on `umem` and the fake kernel that takes its descriptors.
pub fn tx_ring(umem: &Umem, size: u32) -> Result<(TxRing, FakeKernel<libc::xdp_desc>)> {
    let (user, kernel) = memory_ring_pair(size, 0)?;
    Ok((
        TxRing::new(user, umem.clone(), null_fd()?),
        FakeKernel { ring: kernel },
    ))
}

/// A completion ring and the fake kernel that fills it.
pub fn completion_ring(umem: &Umem, size: u32) -> Result<(CompletionRing, FakeKernel<u64>)> {
    let (kernel, user) = memory_ring_pair(size, 0)?;
    Ok((
        CompletionRing::new(user, umem.clone()),
        FakeKernel { ring: kernel },
    ))
}

/// An rx ring and the fake kernel that fills it.
pub fn rx_ring(umem: &Umem, size: u32) -> Result<(RxRing, FakeKernel<libc::xdp_desc>)> {
    let (kernel, user) = memory_ring_pair(size, 0)?;
    Ok((
        RxRing::new(user, umem.clone(), null_fd()?),
        FakeKernel { ring: kernel },
    ))
}

/// A fill ring and the fake kernel that takes its frames.
pub fn fill_ring(umem: &Umem, size: u32) -> Result<(FillRing, FakeKernel<u64>)> {
    let (user, kernel) = memory_ring_pair(size, 0)?;
    Ok((
        FillRing::new(user, umem.clone(), null_fd()?),
        FakeKernel { ring: kernel },
    ))
}

/// The raw ring protocol over memory, with the xsk.h verbs, for measuring them alone.
#[derive(Debug)]
pub struct RawPair {
    producer: RawRing<u64>,
    consumer: RawRing<u64>,
}

impl RawPair {
    /// A ring of `size` entries whose indices start at `start` (near `u32::MAX` to cross the wrap).
    pub fn new(size: u32, start: u32) -> Result<Self> {
        let (producer, consumer) = memory_ring_pair(size, start)?;
        Ok(RawPair { producer, consumer })
    }

    /// Producer: reserve `n` slots, write `value + i` into each, submit; returns how many.
    pub fn reserve_submit(&mut self, n: u32, value: u64) -> u32 {
        let (idx, got) = self.producer.reserve(n);
        for i in 0..got {
            self.producer
                .write(idx.wrapping_add(i), value + u64::from(i));
        }
        self.producer.submit(got);
        got
    }

    /// Consumer: peek up to `n` entries, sum them, release; returns (count, sum).
    pub fn peek_release(&mut self, n: u32) -> (u32, u64) {
        let (idx, got) = self.consumer.peek(n);
        let mut sum = 0u64;
        for i in 0..got {
            sum = sum.wrapping_add(self.consumer.read(idx.wrapping_add(i)));
        }
        self.consumer.release(got);
        (got, sum)
    }
}
