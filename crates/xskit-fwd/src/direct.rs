//! The direct path: between two single ports of one UMEM, a received packet that the rules
//! forward as it is goes from one port's rx ring straight to the other's tx ring, its
//! descriptor moved once, as a bare forwarding loop moves it. The first packet that needs
//! anything more (a chain of frames, a drop, the host, a rate limit, a checksum the kernel
//! cannot finish, a size past the MTU) and every one after it in that vector take the
//! pipeline, so the order holds; both paths count alike.

use xskit::Onward;
use xskit_pipeline::{Next, StageContext};

use crate::abi::TellNote;
use crate::bonded::SidePort;
use crate::counter::bump;
use crate::error::Result;
use crate::rules::{ChecksumState, PacketKey, Verdict};
use crate::stages::{Forwarding, Rules};
use crate::told::Told;
use crate::worker::Worker;

/// What the direct path may do with a port's packets, fixed for one vector.
#[derive(Clone, Copy)]
pub(crate) struct DirectRoute {
    forward_to: Forwarding,
    /// The largest frame the output port sends as it is: its MTU and an Ethernet header.
    max_frame: usize,
    /// The kernel finishes partial checksums (the UMEM has transmit-metadata room).
    finish_checksums: bool,
    /// The tag the input port's filter tells its decisions under (0: none).
    told_tag: u64,
    /// How a forwarded packet goes on by the filter's note on it, worked out once a vector
    /// ([`DirectRoute::by_checksum`]): `None` for a note that says nothing.
    by_note: [Option<Onward>; TellNote::ALL.len()],
}

impl Rules {
    /// Takes up changed rules and says how `input_port`'s forwarded packets go out of
    /// `output_port`, for one direct move: `None` when the rules send them elsewhere, or
    /// the rules stage must see them all (reflecting, which edits every packet).
    pub(crate) fn begin_direct(
        &mut self,
        (input_port, output_port): (u16, u16),
        max_frame: usize,
        finish_checksums: bool,
    ) -> Option<DirectRoute> {
        self.take_up_changes_if_any();
        let forward_to = self.forwarding(input_port);
        // Never reflecting (whose next is Back): a packet goes on as it is, or to the host.
        (forward_to.next() == Next::Tx(output_port)).then(|| DirectRoute {
            forward_to,
            max_frame,
            finish_checksums,
            told_tag: self
                .told_tags
                .get(usize::from(input_port))
                .copied()
                .unwrap_or(0),
            by_note: std::array::from_fn(|i| {
                let checksum = ChecksumState::told(TellNote::ALL[i])?;
                Some(DirectRoute::by_checksum(finish_checksums, checksum))
            }),
        })
    }

    /// The direct path's decision on one packet (`continued`: it has more frames; `front`:
    /// the bytes in front of it), the rule (or default) that decided it, and whether the
    /// filter told that rule: sent on when the pipeline would send it on as it is, kept for
    /// the pipeline otherwise. A packet whose rule the filter told ([`crate::told`]) is not
    /// classified again. Counts nothing: the caller counts what it sends.
    #[inline(always)]
    pub(crate) fn onward(
        &self,
        data: &mut [u8],
        continued: bool,
        front: &[u8],
        to: &DirectRoute,
    ) -> (Onward, usize, bool) {
        if continued || data.len() > to.max_frame {
            return (Onward::Keep, 0, false);
        }
        let told = crate::told::rule(front, to.told_tag);
        if let Some(t) = told {
            if let Some(onward) = to.by_note[t.note as usize] {
                return (self.onward_as_told(data, t.rule, onward, to), t.rule, true);
            }
        }
        self.onward_read(data, told, to)
    }

    /// [`Rules::onward`] for a packet the filter told the rule of, and whose headers its
    /// note says (`onward`, as the note's checksum sends it): what the pipeline would find
    /// it is, since the filter's plain path compared every key of the same rules and read
    /// the headers as [`PacketKey`] reads them.
    #[inline(always)]
    fn onward_as_told(&self, data: &[u8], i: usize, onward: Onward, to: &DirectRoute) -> Onward {
        if self.rules.verdict_at(i) != Some(Verdict::Forward) {
            return Onward::Keep;
        }
        to.unless_the_hosts(data, onward)
    }

    /// [`Rules::onward`] for a packet read here: its rule told without a note, or not told.
    /// Out of line, so that the told path's loop keeps its registers.
    #[inline(never)]
    fn onward_read(
        &self,
        data: &mut [u8],
        told: Option<Told>,
        to: &DirectRoute,
    ) -> (Onward, usize, bool) {
        if let Some(t) = told {
            if self.rules.verdict_at(t.rule) != Some(Verdict::Forward) {
                return (Onward::Keep, t.rule, true);
            }
            return (Self::onward_read_forwarded(data, to), t.rule, true);
        }
        let (key, checksum) = PacketKey::parse_noting_checksum(data, false);
        let (i, verdict) = self.rules.decide(&key);
        // A rate limit polices (and the host's MAC goes to the host): the pipeline's.
        if verdict != Verdict::Forward {
            return (Onward::Keep, i, false);
        }
        (to.onward(data, checksum), i, false)
    }

    /// [`Rules::onward`] without rules, the default forwarding: only whether a packet can
    /// be classified matters (an unclassifiable one is kept), and every packet sent on is
    /// the default's; the filter's note, when it told one, says so without reading the
    /// packet. Also whether the filter told.
    #[inline(always)]
    pub(crate) fn onward_by_default(
        data: &mut [u8],
        continued: bool,
        front: &[u8],
        to: &DirectRoute,
    ) -> (Onward, bool) {
        if continued || data.len() > to.max_frame {
            return (Onward::Keep, false);
        }
        let told = crate::told::rule(front, to.told_tag);
        if let Some(onward) = told.and_then(|t| to.by_note[t.note as usize]) {
            return (to.unless_the_hosts(data, onward), true);
        }
        (Self::onward_read_forwarded(data, to), told.is_some())
    }

    /// How a packet whose verdict is forward goes on, read here: [`Rules::onward_by_default`]
    /// without a note, and [`Rules::onward_read`] for a rule told without one. Out of line,
    /// as [`Rules::onward_read`].
    #[inline(never)]
    fn onward_read_forwarded(data: &mut [u8], to: &DirectRoute) -> Onward {
        match PacketKey::classifiable_noting_checksum(data, false) {
            (true, checksum) => to.onward(data, checksum),
            (false, _) => Onward::Keep,
        }
    }

    /// Adds what the direct move counted to the shared cells.
    pub(crate) fn end_direct(&mut self, input_port: u16) {
        self.flush_counts(&StageContext::new(input_port, 0));
    }
}

impl DirectRoute {
    /// How a packet the rules forward goes on: as it is, or with its partial checksum
    /// (`checksum`) left to the kernel; kept when it goes to the host, or its checksum needs
    /// what only the pipeline does.
    #[inline(always)]
    fn onward(&self, data: &[u8], checksum: ChecksumState) -> Onward {
        self.unless_the_hosts(data, Self::by_checksum(self.finish_checksums, checksum))
    }

    /// `onward`, unless the packet goes to the host: what Forwarding::route decides, the
    /// direct path not reflecting (the host's frames, and any too short to say, are the
    /// pipeline's).
    #[inline(always)]
    fn unless_the_hosts(&self, data: &[u8], onward: Onward) -> Onward {
        match data.first_chunk() {
            Some(h) if !self.forward_to.is_the_hosts(h) => onward,
            _ => Onward::Keep,
        }
    }

    /// How a forwarded packet not the host's goes on by its checksum: kept for the pipeline
    /// when the kernel cannot finish it (`finish_checksums` false) or this read cannot tell.
    #[inline(always)]
    fn by_checksum(finish_checksums: bool, checksum: ChecksumState) -> Onward {
        match checksum {
            ChecksumState::Settled => Onward::Send,
            ChecksumState::Partial { start, offset } if finish_checksums => {
                Onward::SendFinishingChecksum {
                    start: start as u16,
                    offset: offset as u16,
                }
            }
            _ => Onward::Keep,
        }
    }
}

/// What one direct move counts beside what the move itself counts ([`xskit::MovedOn`]):
/// the packets sent by the rule the filter told, the packets of the last run decided by one
/// rule, counted to it when the run ends, and whether it kept a packet for the pipeline.
#[derive(Default)]
struct Moved {
    told: u64,
    run: (usize, u64, u64),
    kept: bool,
}

/// What one direct move did: how many packets it moved, and whether it stopped at one it
/// keeps for the pipeline. A move that stopped short without keeping one found its rx ring
/// empty, or the output's tx ring full: the pipeline has nothing to take then that the next
/// move would not (what arrived since, which the next move sends as cheaply), and packets
/// left in a full ring wait there rather than in the pipeline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirectMove {
    pub(crate) moved: usize,
    pub(crate) kept: bool,
}

impl DirectMove {
    /// How many of a `vector` the pipeline receives after this move: the rest of the
    /// vector when the move kept a packet for it, none otherwise.
    pub(crate) fn left_to_pipeline(self, vector: usize) -> usize {
        if self.kept {
            vector.saturating_sub(self.moved)
        } else {
            0
        }
    }
}

impl Moved {
    /// Adds a packet of `len` bytes that rule `i` sent on.
    #[inline(always)]
    fn add(&mut self, rules: &mut Rules, i: usize, len: usize, told: bool) {
        if i != self.run.0 {
            self.end_run(rules);
            self.run.0 = i;
        }
        self.run.1 += 1;
        self.run.2 += len as u64;
        self.told += u64::from(told);
    }

    /// Counts the run so far to its rule.
    fn end_run(&mut self, rules: &mut Rules) {
        let (i, packets, bytes) = self.run;
        if packets > 0 {
            rules.count(i, packets, bytes);
        }
        self.run = (i, 0, 0);
    }
}

impl<P: SidePort> Worker<P> {
    /// Port `p`'s packets that go out of the other port as they are, moved there directly
    /// while they do (see the module's comment), after which the port to kick is the other.
    /// Nothing moved, and the pipeline's turn, when the worker has no direct path, or port
    /// `p` is in the middle of a chain of frames (its rest must join the pipeline's part).
    #[inline(always)]
    pub(crate) fn forward_directly(&mut self, p: usize) -> Result<DirectMove> {
        const NONE: DirectMove = DirectMove {
            moved: 0,
            kept: true,
        };
        let q = p ^ 1;
        let (Some(rules), Some(&mtu)) = (self.direct.as_mut(), self.mtus.get(q)) else {
            return Ok(NONE);
        };
        if self.chains.mid_packet(p) {
            return Ok(NONE);
        }
        let ports = (p as u16, q as u16);
        let Some(route) = rules.begin_direct(ports, mtu + 14, self.csum_offload) else {
            return Ok(NONE);
        };
        let Ok([from, to]) = self.ports.get_disjoint_mut([p, q]) else {
            return Ok(NONE);
        };
        let mut moved = Moved::default();
        let (umem, pool, vector) = (&self.umem, &mut self.pool, self.vector);
        let moved_on = if rules.forwards_without_rules() {
            // One run, the default's: no rule to tell apart per packet, and the move counts
            // the packets and their bytes.
            let moved_on = from.forward_to(to, umem, pool, vector, |data, contd, front| {
                let (onward, told) = Rules::onward_by_default(data, contd, front.bytes(), &route);
                if matches!(onward, Onward::Keep) {
                    moved.kept = true;
                } else {
                    moved.told += u64::from(told);
                }
                onward
            });
            if let Ok(m) = &moved_on {
                moved.run = (rules.rules.rules().len(), m.sent as u64, m.bytes);
            }
            moved_on
        } else {
            from.forward_to(to, umem, pool, vector, |data, contd, front| {
                let (onward, i, told) = rules.onward(data, contd, front.bytes(), &route);
                if !matches!(onward, Onward::Keep) {
                    moved.add(rules, i, data.len(), told);
                } else {
                    moved.kept = true;
                }
                onward
            })
        };
        moved.end_run(rules);
        rules.end_direct(p as u16);
        let moved_on = moved_on?;
        let n = moved_on.sent;
        if n > 0 {
            let (rx, tx) = (&self.port_cells[p], &self.port_cells[q]);
            bump(&rx.rx_packets, n as u64);
            bump(&rx.rx_bytes, moved_on.bytes);
            bump(&tx.tx_packets, n as u64);
            bump(&tx.tx_bytes, moved_on.bytes);
            bump(&tx.tx_direct, n as u64);
            if moved_on.checksum_requests > 0 {
                bump(&tx.checksums_offloaded, moved_on.checksum_requests as u64);
            }
            if moved.told > 0 {
                bump(&rx.rx_told, moved.told);
            }
        }
        Ok(DirectMove {
            moved: n,
            // Nothing moved: a descriptor the move refused before asking (one beyond its
            // frame, a checksum request without room), or the first of an empty ring's, is
            // the pipeline's to take.
            kept: moved.kept || n == 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::DirectMove;

    #[test]
    fn the_pipeline_takes_the_vectors_rest_only_after_a_packet_kept_for_it() {
        let kept = |moved| DirectMove { moved, kept: true };
        let short = |moved| DirectMove { moved, kept: false };
        assert_eq!(kept(10).left_to_pipeline(64), 54);
        assert_eq!(kept(0).left_to_pipeline(64), 64);
        assert_eq!(kept(64).left_to_pipeline(64), 0);
        // Stopped short with nothing kept (an emptied rx ring, a full tx ring): what
        // arrives next is the next move's.
        assert_eq!(short(10).left_to_pipeline(64), 0);
        assert_eq!(short(64).left_to_pipeline(64), 0);
    }
}
