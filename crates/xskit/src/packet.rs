//! Multi-buffer packets in a run of frames. With multi-buffer (XDP_USE_SG) a packet larger
//! than a frame arrives, and leaves, as consecutive frames, every one but the last marked
//! continued (`XDP_PKT_CONTD`). [`packets`] reads a run of frames packet by packet, so no
//! caller walks [`Frame::is_continued`] by hand.

use crate::sys::umem::{Frame, Umem};

/// The packets in `frames`, each the slice of its frames (one frame unless multi-buffer).
/// A chain still unfinished at the end (a receive may stop in the middle of one) is not
/// yielded: [`Packets::remainder`] gives it once the iterator is done.
///
/// ```
/// # use xskit::{packets, Frame};
/// # fn count(frames: &[Frame]) -> usize {
/// packets(frames).count()
/// # }
/// ```
pub fn packets(frames: &[Frame]) -> Packets<'_> {
    Packets { rest: frames }
}

/// How many of `frames`, from the front, make whole packets: a transmit that stops there
/// never sends half a chain.
pub fn whole_packets_len(frames: &[Frame]) -> usize {
    frames.len() - frames.iter().rev().take_while(|f| f.is_continued()).count()
}

/// Iterator over the packets of a run of frames; see [`packets`].
#[derive(Clone, Debug)]
pub struct Packets<'a> {
    rest: &'a [Frame],
}

impl<'a> Packets<'a> {
    /// The frames not yet yielded: after the last packet, the unfinished chain at the end
    /// (empty when the run ends on a whole packet).
    pub fn remainder(&self) -> &'a [Frame] {
        self.rest
    }
}

impl<'a> Iterator for Packets<'a> {
    type Item = &'a [Frame];

    #[inline]
    fn next(&mut self) -> Option<&'a [Frame]> {
        let end = self.rest.iter().position(|f| !f.is_continued())?;
        let (packet, rest) = self.rest.split_at(end + 1);
        self.rest = rest;
        Some(packet)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.rest.len()))
    }

    /// Every packet ends in the one frame of it that is not continued, so counting those
    /// counts the whole packets, without splitting the run (the data path counts per vector).
    #[inline]
    fn count(self) -> usize {
        self.rest.iter().filter(|f| !f.is_continued()).count()
    }
}

impl Umem {
    /// Appends the bytes of the frames of `chain` (a packet, or part of one) to `out`.
    pub fn gather(&self, chain: &[Frame], out: &mut Vec<u8>) {
        for f in chain {
            out.extend_from_slice(self.data(f));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UmemConfig;

    fn chain_of(umem: &Umem, lens: &[(usize, bool)]) -> Vec<Frame> {
        let mut frames = umem.take_frames().unwrap();
        frames.truncate(lens.len());
        for (f, &(len, continued)) in frames.iter_mut().zip(lens) {
            umem.set_len(f, len).unwrap();
            f.set_continued(continued);
        }
        frames
    }

    #[test]
    fn packets_end_where_a_frame_is_not_continued() {
        let umem = Umem::new(UmemConfig::default().frame_count(8)).unwrap();
        let frames = chain_of(
            &umem,
            &[(10, false), (20, true), (30, true), (40, false), (50, true)],
        );
        let mut it = packets(&frames);
        let sizes: Vec<usize> = it.by_ref().map(<[Frame]>::len).collect();
        assert_eq!(sizes, [1, 3]);
        assert_eq!(
            packets(&frames).count(),
            2,
            "the unfinished chain is not counted"
        );
        assert_eq!(it.remainder().len(), 1, "the unfinished chain");
        assert_eq!(whole_packets_len(&frames), 4);
        let mut bytes = Vec::new();
        umem.gather(&frames[1..4], &mut bytes);
        assert_eq!(bytes.len(), 90);
        assert_eq!(packets(&[]).count(), 0);
    }
}
