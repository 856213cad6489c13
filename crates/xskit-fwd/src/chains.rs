//! Multi-buffer packets in a worker. A packet larger than a frame arrives as a chain of frames
//! (every one but the last marked continued). The pipeline's stages decide on headers, which
//! are in the first frame, so only that frame travels through the pipeline; the rest of the
//! chain waits here, found again by the first frame's address when the packet leaves, is
//! dropped or goes to the kernel.

use std::collections::HashMap;

use xskit::Frame;

/// The kernel chains at most MAX_SKB_FRAGS + 1 (18) frames; a longer run of continued frames
/// is a broken ring, and its frames are dropped rather than held without end.
const MAX_CHAIN: usize = 64;

pub(crate) struct Chains {
    /// The rest of each packet whose first frame is in the pipeline, by that frame's address.
    tails: HashMap<u64, Vec<Frame>>,
    /// Per port: a packet whose last frame has not been received yet (a receive can stop in
    /// the middle of a chain).
    partial: Vec<Option<(Frame, Vec<Frame>)>>,
    /// Emptied tail vectors, reused.
    spare: Vec<Vec<Frame>>,
    /// Frames held in `tails` and `partial`.
    held: usize,
}

impl Chains {
    pub(crate) fn new(ports: usize) -> Self {
        let mut tails = HashMap::new();
        tails.reserve(2 * xskit_pipeline::MAX_VECTOR);
        Chains {
            tails,
            partial: (0..ports).map(|_| None).collect(),
            spare: Vec::new(),
            held: 0,
        }
    }

    fn vec(&mut self) -> Vec<Frame> {
        self.spare.pop().unwrap_or_else(|| Vec::with_capacity(20))
    }

    /// Gives an emptied tail vector back for reuse.
    pub(crate) fn recycle_vec(&mut self, v: Vec<Frame>) {
        debug_assert!(v.is_empty());
        self.spare.push(v);
    }

    /// Moves what port `port` received from `raw` to `heads`: single-frame packets and the
    /// first frames of complete chains (their rest is kept here). Frames of over-long chains go
    /// to `bad`. Returns how many packets went to `heads`, and the bytes of all of `raw`
    /// (counted in the same pass that looks for chains).
    pub(crate) fn sort_received(
        &mut self,
        port: usize,
        raw: &mut Vec<Frame>,
        heads: &mut Vec<Frame>,
        bad: &mut Vec<Frame>,
    ) -> (usize, usize) {
        let before = heads.len();
        let (bytes, chained) = raw.iter().fold((0, false), |(bytes, chained), f| {
            (bytes + f.len(), chained | f.is_continued())
        });
        if self.partial[port].is_none() && !chained {
            heads.append(raw);
            return (heads.len() - before, bytes);
        }
        for f in raw.drain(..) {
            match self.partial[port].take() {
                Some((head, mut tail)) => {
                    let last = !f.is_continued();
                    tail.push(f);
                    self.held += 1;
                    if last {
                        self.held -= 1; // the head leaves `partial` for the pipeline
                        self.tails.insert(head.addr(), tail);
                        heads.push(head);
                    } else if tail.len() >= MAX_CHAIN {
                        self.held -= tail.len() + 1;
                        bad.push(head);
                        bad.append(&mut tail);
                        self.spare.push(tail);
                    } else {
                        self.partial[port] = Some((head, tail));
                    }
                }
                None if f.is_continued() => {
                    let tail = self.vec();
                    self.held += 1;
                    self.partial[port] = Some((f, tail));
                }
                None => heads.push(f),
            }
        }
        (heads.len() - before, bytes)
    }

    /// True when port `port`'s last receive ended inside a packet: the next frames it
    /// receives are that packet's.
    pub(crate) fn mid_packet(&self, port: usize) -> bool {
        self.partial.get(port).is_some_and(Option::is_some)
    }

    /// Frames held here (not in the pipeline's vectors).
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// The rest of the packet whose first frame is `head`, if it has one. Called per packet:
    /// inlined, so that without chains it costs one test.
    #[inline]
    pub(crate) fn take_tail(&mut self, head: &Frame) -> Option<Vec<Frame>> {
        if self.tails.is_empty() {
            return None;
        }
        self.take_held_tail(head)
    }

    fn take_held_tail(&mut self, head: &Frame) -> Option<Vec<Frame>> {
        let tail = self.tails.remove(&head.addr())?;
        self.held -= tail.len();
        Some(tail)
    }

    /// Appends the rest of every packet in `heads` to `out` (to drop them whole).
    pub(crate) fn release_tails(&mut self, heads: &[Frame], out: &mut Vec<Frame>) {
        if self.tails.is_empty() {
            return;
        }
        for h in heads {
            if let Some(mut tail) = self.take_tail(h) {
                out.append(&mut tail);
                self.spare.push(tail);
            }
        }
    }

    /// Moves every frame held here to `out` (at stop).
    pub(crate) fn drain(&mut self, out: &mut Vec<Frame>) {
        for (_, mut tail) in self.tails.drain() {
            out.append(&mut tail);
        }
        for p in self.partial.iter_mut() {
            if let Some((head, mut tail)) = p.take() {
                out.push(head);
                out.append(&mut tail);
            }
        }
        self.held = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xskit::{Umem, UmemConfig};

    fn frames(n: u32) -> Vec<Frame> {
        let umem = Umem::new(UmemConfig::default().frame_count(n)).unwrap();
        umem.take_frames().unwrap()
    }

    #[test]
    fn the_bytes_received_are_every_frames_chained_or_not() {
        let umem = Umem::new(UmemConfig::default().frame_count(4)).unwrap();
        let mut raw = umem.take_frames().unwrap();
        for (i, f) in raw.iter_mut().enumerate() {
            umem.set_len(f, 60 + i).unwrap();
        }
        let mut chains = Chains::new(1);
        let (mut heads, mut bad) = (Vec::new(), Vec::new());
        let mut single: Vec<Frame> = raw.drain(..2).collect();
        assert_eq!(
            chains.sort_received(0, &mut single, &mut heads, &mut bad),
            (2, 121)
        );
        let mut chain = raw;
        chain[0].set_continued(true);
        assert_eq!(
            chains.sort_received(0, &mut chain, &mut heads, &mut bad),
            (1, 125)
        );
    }

    #[test]
    fn chains_split_across_receives_are_joined() {
        let mut fs = frames(6);
        // Packet A: frames 0,1,2; packet B: frame 3; packet C: 4,5.
        for i in [0, 1, 4] {
            fs[i].set_continued(true);
        }
        let addrs: Vec<u64> = fs.iter().map(Frame::addr).collect();
        let mut chains = Chains::new(1);
        let (mut heads, mut bad) = (Vec::new(), Vec::new());
        let mut raw: Vec<Frame> = fs.drain(..2).collect();
        assert_eq!(chains.sort_received(0, &mut raw, &mut heads, &mut bad).0, 0);
        assert_eq!(chains.held(), 2);
        let mut raw: Vec<Frame> = std::mem::take(&mut fs);
        assert_eq!(chains.sort_received(0, &mut raw, &mut heads, &mut bad).0, 3);
        assert_eq!(
            heads.iter().map(Frame::addr).collect::<Vec<_>>(),
            vec![addrs[0], addrs[3], addrs[4]]
        );
        assert_eq!(chains.held(), 3);
        let tail = chains.take_tail(&heads[0]).unwrap();
        assert_eq!(
            tail.iter().map(Frame::addr).collect::<Vec<_>>(),
            vec![addrs[1], addrs[2]]
        );
        assert!(chains.take_tail(&heads[1]).is_none());
        let mut out = Vec::new();
        chains.release_tails(&heads, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(chains.held(), 0);
        assert!(bad.is_empty());
    }

    #[test]
    fn an_endless_chain_is_dropped_not_held() {
        let mut fs = frames(MAX_CHAIN as u32 + 4);
        for f in fs.iter_mut() {
            f.set_continued(true);
        }
        let mut chains = Chains::new(1);
        let (mut heads, mut bad) = (Vec::new(), Vec::new());
        chains.sort_received(0, &mut fs, &mut heads, &mut bad);
        assert!(heads.is_empty());
        assert_eq!(bad.len() + chains.held(), MAX_CHAIN + 4);
        assert_eq!(bad.len(), MAX_CHAIN + 1);
        let mut out = Vec::new();
        chains.drain(&mut out);
        assert_eq!(out.len(), 3);
    }
}
