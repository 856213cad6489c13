//! An in-memory device: a port whose far end is plain bytes, so a worker (a forwarder, a
//! bond) is tested without root, deterministically, frame for frame. Like a copy-mode AF_XDP
//! port it copies each packet into a frame from the pool on receive, and a transmitted
//! frame's bytes leave at once and its frame completes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use xskit::{Frame, MovedOn, Onward, Umem};
use xskit_os::sync::LockUnpoisoned;

use crate::error::Result;
use crate::pool::FramePool;
use crate::port::PipelinePort;

#[derive(Debug, Default)]
struct Queues {
    /// Packets for the port to receive.
    inbound: VecDeque<Vec<u8>>,
    /// Packets the port transmitted.
    outbound: VecDeque<Vec<u8>>,
    /// Inbound packets lost for want of free frames to receive them into.
    rx_dropped: u64,
}

/// The worker's side of an in-memory device.
#[derive(Debug)]
pub struct WirePort {
    queues: Arc<Mutex<Queues>>,
    /// Transmitted frames waiting for [`PipelinePort::complete`].
    done: Vec<Frame>,
    /// A packet gathered from its frames.
    gathered: Vec<u8>,
}

/// The far side of an in-memory device: what the wire carries, as bytes.
#[derive(Debug, Clone)]
pub struct WireEnd {
    queues: Arc<Mutex<Queues>>,
}

/// A device and its far end.
pub fn wire() -> (WirePort, WireEnd) {
    let queues = Arc::new(Mutex::new(Queues::default()));
    (
        WirePort {
            queues: Arc::clone(&queues),
            done: Vec::new(),
            gathered: Vec::new(),
        },
        WireEnd { queues },
    )
}

impl WireEnd {
    /// Puts a packet on the wire, towards the port.
    pub fn inject(&self, packet: &[u8]) {
        self.queues
            .lock_unpoisoned()
            .inbound
            .push_back(packet.to_vec());
    }

    /// Takes every packet the port has transmitted, oldest first.
    pub fn take(&self) -> Vec<Vec<u8>> {
        self.queues.lock_unpoisoned().outbound.drain(..).collect()
    }

    /// Packets waiting for the port to receive them.
    pub fn pending(&self) -> usize {
        self.queues.lock_unpoisoned().inbound.len()
    }

    /// Inbound packets the port could not take (no free frame).
    pub fn rx_dropped(&self) -> u64 {
        self.queues.lock_unpoisoned().rx_dropped
    }
}

impl PipelinePort for WirePort {
    fn receive(
        &mut self,
        umem: &Umem,
        pool: &mut FramePool,
        out: &mut Vec<Frame>,
        max: usize,
    ) -> Result<usize> {
        let mut q = self.queues.lock_unpoisoned();
        let mut got = 0;
        while got < max {
            let Some(packet) = q.inbound.front() else {
                break;
            };
            // A packet longer than a frame is received as a chain, as multi-buffer does.
            let start = out.len();
            let mut at = 0;
            let mut ok = true;
            while at < packet.len() || at == 0 {
                if pool.alloc(out, 1) == 0 {
                    ok = false;
                    break;
                }
                let frame = out.last_mut().expect("allocated one");
                umem.reset(frame);
                let n = umem.capacity(frame).min(packet.len() - at);
                umem.write(frame, &packet[at..at + n])?;
                at += n;
                frame.set_continued(at < packet.len());
                if n == 0 {
                    break;
                }
            }
            if !ok {
                let mut partial: Vec<Frame> = out.drain(start..).collect();
                pool.free(&mut partial);
                q.rx_dropped += 1;
                q.inbound.pop_front();
                break;
            }
            got += out.len() - start;
            q.inbound.pop_front();
        }
        Ok(got)
    }

    fn send(
        &mut self,
        umem: &Umem,
        frames: &mut Vec<Frame>,
        _pool: &mut FramePool,
    ) -> Result<usize> {
        let n = frames.len();
        let mut q = self.queues.lock_unpoisoned();
        for frame in frames.drain(..) {
            self.gathered.extend_from_slice(umem.data(&frame));
            if !frame.is_continued() {
                q.outbound.push_back(std::mem::take(&mut self.gathered));
            }
            self.done.push(frame);
        }
        Ok(n)
    }

    /// Each packet that fits one frame is received into one from `pool` and, sent on,
    /// transmitted by `to` at once; a longer one (a chain), one `decide` keeps, or want of a
    /// free frame stops the move, the packet left for [`PipelinePort::receive`] (whatever
    /// `decide` changed in its bytes is not kept, unlike on a ring).
    fn forward_to(
        &mut self,
        to: &mut Self,
        umem: &Umem,
        pool: &mut FramePool,
        max: usize,
        mut decide: impl FnMut(&mut [u8], bool, xskit::Front<'_>) -> Onward,
    ) -> Result<MovedOn> {
        let mut q = self.queues.lock_unpoisoned();
        let mut one = Vec::with_capacity(1);
        let mut moved = MovedOn::default();
        while moved.sent < max && pool.alloc(&mut one, 1) == 1 {
            let mut frame = one.pop().expect("allocated one");
            umem.reset(&mut frame);
            let fits = q
                .inbound
                .front()
                .filter(|p| p.len() <= umem.capacity(&frame))
                .map(|p| umem.write(&mut frame, p));
            let onward = match fits {
                // No XDP program ran: nothing in front of the packet.
                Some(Ok(())) => decide(umem.data_mut(&mut frame), false, xskit::Front::NONE),
                _ => Onward::Keep,
            };
            let asked = match onward {
                Onward::Keep => false,
                Onward::Send => true,
                Onward::SendFinishingChecksum { start, offset } => {
                    umem.request_tx_checksum(&mut frame, start, offset)
                }
            };
            if !asked {
                one.push(frame);
                pool.free(&mut one);
                break;
            }
            q.inbound.pop_front();
            moved.bytes += frame.len() as u64;
            moved.checksum_requests += usize::from(!matches!(onward, Onward::Send));
            one.push(frame);
            to.send(umem, &mut one, pool)?;
            moved.sent += 1;
        }
        Ok(moved)
    }

    fn complete(&mut self, pool: &mut FramePool) -> usize {
        let n = self.done.len();
        pool.free(&mut self.done);
        n
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    fn tx_in_flight(&self) -> usize {
        self.done.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::SharedFrames;
    use xskit::UmemConfig;

    #[test]
    fn packets_cross_as_bytes_and_frames_come_back() {
        let umem = Umem::new(UmemConfig::default().frame_count(8).frame_size(2048)).unwrap();
        let shared = SharedFrames::new(umem.take_frames().unwrap());
        let mut pool = shared.pool(8);
        let (mut port, end) = wire();
        end.inject(&[1; 60]);
        end.inject(&[2; 3000]);
        let mut frames = Vec::new();
        assert_eq!(port.receive(&umem, &mut pool, &mut frames, 64).unwrap(), 3);
        assert!(frames[1].is_continued() && !frames[2].is_continued());
        assert_eq!(umem.data(&frames[0]), &[1; 60]);
        assert_eq!(port.send(&umem, &mut frames, &mut pool).unwrap(), 3);
        assert_eq!(end.take(), vec![vec![1; 60], vec![2; 3000]]);
        assert_eq!(port.in_flight(), 3);
        assert_eq!(port.complete(&mut pool), 3);
        assert_eq!(pool.held(), pool.cached());
    }

    #[test]
    fn a_packet_without_frames_is_dropped_and_counted() {
        let umem = Umem::new(UmemConfig::default().frame_count(1)).unwrap();
        let shared = SharedFrames::new(umem.take_frames().unwrap());
        let mut pool = shared.pool(1);
        let (mut port, end) = wire();
        end.inject(&[0; 5000]);
        let mut frames = Vec::new();
        assert_eq!(port.receive(&umem, &mut pool, &mut frames, 64).unwrap(), 0);
        assert_eq!((end.rx_dropped(), end.pending()), (1, 0));
    }
}
