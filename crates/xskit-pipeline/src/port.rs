//! The port trait: what the pipeline's runtime needs of a port, whatever is behind it (an
//! AF_XDP socket, an in-memory link, a capture file, a bond of ports).

use std::os::fd::BorrowedFd;

use xskit::{Frame, MovedOn, Onward, Umem};

use crate::error::Result;
use crate::pool::FramePool;

/// Frames a port's kernel rings hold, read from the rings' indices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingOccupancy {
    /// In the fill ring.
    pub fill: usize,
    /// In the rx ring.
    pub rx: usize,
    /// In the tx ring or the completion ring.
    pub tx: usize,
}

/// A port of a pipeline. Frames are the UMEM's, taken from and given back to the caller's
/// [`FramePool`]; a port holds the frames it was given (receive buffers, transmits in flight)
/// until it gives them back, and says how many ([`PipelinePort::in_flight`]), so a worker can
/// account for every frame.
pub trait PipelinePort {
    /// Stocks receive buffers from `pool` (an AF_XDP fill ring); ports that do not receive
    /// into buffers given ahead do nothing.
    fn refill(&mut self, _umem: &Umem, _pool: &mut FramePool) -> Result<()> {
        Ok(())
    }

    /// False when the port knows it has received nothing since frames were last taken
    /// from it (an empty rx ring), so that a round may pass it by without asking
    /// [`PipelinePort::forward_to`] or [`PipelinePort::receive`]; true when it may have.
    fn may_have_received(&mut self) -> bool {
        true
    }

    /// Moves up to `max` received frames into `out` (frames of one multi-buffer packet
    /// marked continued, then its last); returns how many.
    fn receive(
        &mut self,
        umem: &Umem,
        pool: &mut FramePool,
        out: &mut Vec<Frame>,
        max: usize,
    ) -> Result<usize>;

    /// Queues `frames` (emptied) for transmission; what cannot be queued goes back to `pool`,
    /// as a full device queue drops. A multi-buffer packet is queued whole or not at all.
    /// Returns how many frames were queued.
    fn send(&mut self, umem: &Umem, frames: &mut Vec<Frame>, pool: &mut FramePool)
        -> Result<usize>;

    /// Gives transmitted frames back to `pool`; returns how many.
    fn complete(&mut self, _pool: &mut FramePool) -> usize {
        0
    }

    /// Moves `from`'s transmitted frames straight into this port's receive buffers, as many
    /// as they lack, not through the pool (a bare forwarding loop's recycling, for ports of
    /// one UMEM); returns how many. Ports that cannot leave them to
    /// [`PipelinePort::complete`].
    fn refill_from(&mut self, _from: &mut Self) -> usize
    where
        Self: Sized,
    {
        0
    }

    /// Moves received packets straight onto `to`'s transmit queue while `decide` sends them
    /// on, up to `max`, in order (a bare forwarding loop's move, for ports of one UMEM);
    /// returns how many, their bytes and their checksum requests ([`MovedOn`]). `decide`
    /// reads (and may change) each packet's bytes, told whether it continues in another
    /// frame. What it keeps, and everything after it, stays to be received
    /// ([`PipelinePort::receive`]). Call [`PipelinePort::kick`] on `to` after.
    /// Ports that cannot move nothing.
    fn forward_to(
        &mut self,
        _to: &mut Self,
        _umem: &Umem,
        _pool: &mut FramePool,
        _max: usize,
        _decide: impl FnMut(&mut [u8], bool, xskit::Front<'_>) -> Onward,
    ) -> Result<MovedOn>
    where
        Self: Sized,
    {
        Ok(MovedOn::default())
    }

    /// Asks the kernel to transmit what [`PipelinePort::forward_to`] queued, if it needs
    /// asking (as [`PipelinePort::send`] does after queueing).
    fn kick(&mut self) -> Result<()> {
        Ok(())
    }

    /// Takes frames (emptied) a stage has finished with: as receive buffers where the port
    /// uses them, else back to `pool`.
    fn recycle(&mut self, frames: &mut Vec<Frame>, pool: &mut FramePool) {
        pool.free(frames);
    }

    /// Frames this port holds: receive buffers not yet received, and transmits not yet
    /// completed.
    fn in_flight(&self) -> usize {
        0
    }

    /// Transmits not yet completed.
    fn tx_in_flight(&self) -> usize {
        0
    }

    /// What this port holds in the kernel: (receive buffers not yet received, transmits not
    /// yet completed), for a process that takes the port over.
    fn ledger(&self) -> (usize, usize) {
        let tx = self.tx_in_flight();
        (self.in_flight() - tx, tx)
    }

    /// [`PipelinePort::ledger`] of each socket under this port, in order: one for a port
    /// over one socket, one per member for a port over several (a bond).
    fn ledgers(&self) -> Vec<(usize, usize)> {
        vec![self.ledger()]
    }

    /// Pushes queued transmits out (a wakeup), for a worker draining before it stops.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    /// The wakeup system calls the port's sockets made since it opened ([`xskit::Wakeups`]).
    fn wakeups(&self) -> xskit::Wakeups {
        xskit::Wakeups::default()
    }

    /// What the port's kernel rings hold, to check [`PipelinePort::in_flight`] against;
    /// `None` for ports without kernel rings.
    fn ring_occupancy(&mut self) -> Option<RingOccupancy> {
        None
    }

    /// Marks the port as a bond's inactive member (active-backup), or not: a port that can
    /// refuses what arrives before it costs anything (xskit's redirect program drops it in
    /// the kernel, counted); others do nothing, and the bond drops it (counted) instead.
    fn set_inactive(&mut self, _inactive: bool) -> Result<()> {
        Ok(())
    }

    /// Adds the descriptors that turn readable when frames arrive to `fds`, to sleep in
    /// poll(2) on: one per socket (a bond has one per member); none for ports that are never
    /// waited on.
    fn readiness<'a>(&'a self, _fds: &mut Vec<BorrowedFd<'a>>) {}
}
