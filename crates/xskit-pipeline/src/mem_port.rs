//! Ports in memory: a connected pair whose transmits arrive as the other's receives, on one
//! shared UMEM, so pipelines and rules are tested without root, and forwarding moves frame
//! handles, never bytes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use xskit::Frame;
use xskit_os::sync::LockUnpoisoned;

type Queue = Arc<Mutex<VecDeque<Frame>>>;

/// One end of an in-memory link.
#[derive(Debug)]
pub struct MemPort {
    inbox: Queue,
    peer: Queue,
    capacity: usize,
    dropped: u64,
}

/// Two connected ports; each queue holds at most `capacity` frames (a full queue drops, as a
/// full rx ring would).
pub fn mem_port_pair(capacity: usize) -> (MemPort, MemPort) {
    let a: Queue = Arc::new(Mutex::new(VecDeque::with_capacity(capacity)));
    let b: Queue = Arc::new(Mutex::new(VecDeque::with_capacity(capacity)));
    (
        MemPort {
            inbox: a.clone(),
            peer: b.clone(),
            capacity,
            dropped: 0,
        },
        MemPort {
            inbox: b,
            peer: a,
            capacity,
            dropped: 0,
        },
    )
}

impl MemPort {
    /// Moves up to `max` received frames into `out`; returns how many.
    pub fn receive(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let mut q = self.inbox.lock_unpoisoned();
        let n = q.len().min(max);
        out.extend(q.drain(..n));
        n
    }

    /// Sends every frame of `frames` to the peer. Frames that do not fit are moved to
    /// `overflow` (to be recycled), counted as dropped; returns how many were sent.
    pub fn send(&mut self, frames: &mut Vec<Frame>, overflow: &mut Vec<Frame>) -> usize {
        let mut q = self.peer.lock_unpoisoned();
        let room = self.capacity.saturating_sub(q.len()).min(frames.len());
        q.extend(frames.drain(..room));
        self.dropped += frames.len() as u64;
        overflow.append(frames);
        room
    }

    /// Frames waiting in this port's receive queue.
    pub fn pending(&self) -> usize {
        self.inbox.lock_unpoisoned().len()
    }

    /// Frames dropped because the peer's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl crate::PipelinePort for MemPort {
    fn receive(
        &mut self,
        _umem: &xskit::Umem,
        _pool: &mut crate::FramePool,
        out: &mut Vec<Frame>,
        max: usize,
    ) -> crate::Result<usize> {
        Ok(MemPort::receive(self, out, max))
    }

    fn send(
        &mut self,
        _umem: &xskit::Umem,
        frames: &mut Vec<Frame>,
        pool: &mut crate::FramePool,
    ) -> crate::Result<usize> {
        let mut overflow = Vec::new();
        let n = MemPort::send(self, frames, &mut overflow);
        pool.free(&mut overflow);
        Ok(n)
    }
}
