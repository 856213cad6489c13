//! A bond as a pipeline port: member ports (AF_XDP sockets on the members' queues, sharing
//! one UMEM, or any other [`PipelinePort`]) behind one port. Receive merges the members;
//! transmit picks each packet's member by the bond's mode, scatters the whole vector into
//! one batch per member and hands each member its batch in one call (one wakeup per member,
//! not per packet). Frames are never lost from the ledger: what no member can take goes back
//! to the pool and is counted.

use std::os::fd::BorrowedFd;

use xskit::{packets, Frame, Umem};
use xskit_pipeline::{FramePool, PipelinePort, Result, RingOccupancy};

use crate::members::Members;
use crate::{xmit_hash, Error, XmitHashPolicy};

/// How a bond spreads what it transmits, named as in Linux's bonding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BondMode {
    /// `balance-rr`: members in turn, `packets_per_slave` packets each (0: one at random in
    /// Linux; here, as 1).
    BalanceRr {
        /// Packets sent on a member before the next one's turn.
        packets_per_slave: u32,
    },
    /// `active-backup`: everything on the active member; frames arriving on the others are
    /// dropped and counted, as Linux does.
    ActiveBackup,
    /// `balance-xor`: the member `xmit_hash(policy, packet) % usable members`.
    BalanceXor {
        /// The transmit hash policy.
        policy: XmitHashPolicy,
    },
    /// `broadcast`: a copy on every usable member.
    Broadcast,
    /// `802.3ad`: as balance-xor over the members LACP lets distribute (a control plane,
    /// [`crate::lacp`], decides which with the partner; [`BondPort::set_distributing`]).
    Lacp {
        /// The transmit hash policy.
        policy: XmitHashPolicy,
    },
}

impl BondMode {
    /// The mode's name in Linux.
    pub fn name(self) -> &'static str {
        match self {
            BondMode::BalanceRr { .. } => "balance-rr",
            BondMode::ActiveBackup => "active-backup",
            BondMode::BalanceXor { .. } => "balance-xor",
            BondMode::Broadcast => "broadcast",
            BondMode::Lacp { .. } => "802.3ad",
        }
    }
}

/// Counters of one member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberStats {
    /// Packets received on the member and passed up.
    pub rx_packets: u64,
    /// Packets handed to the member to transmit.
    pub tx_packets: u64,
    /// Packets the member could not queue (its transmit ring was full).
    pub tx_dropped: u64,
    /// Packets that arrived on the member while it was inactive (active-backup), dropped.
    pub rx_inactive: u64,
}

/// Counters of the bond.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BondStats {
    /// Per member, in member order.
    pub members: Vec<MemberStats>,
    /// Packets dropped because no member was usable.
    pub tx_no_member: u64,
    /// Broadcast copies not made for want of free frames.
    pub tx_no_frame: u64,
    /// Broadcast copies made: packets copied into fresh frames, one per member after the
    /// first (the only copies a bond makes).
    pub copies: u64,
}

struct Member<P> {
    port: P,
    stats: MemberStats,
    /// This member's share of the vector being sent.
    batch: Vec<Frame>,
    /// Where each packet of `batch` ends.
    boundaries: Vec<usize>,
    /// Broadcast copies in `batch` (a member gets copies or originals, never both).
    copies: usize,
}

/// A bond of member ports behind one [`PipelinePort`].
pub struct BondPort<P: PipelinePort> {
    members: Vec<Member<P>>,
    mode: BondMode,
    /// Which members may carry traffic, and the active one.
    state: Members,
    /// balance-rr's packet counter.
    rr: u64,
    /// Where the next receive starts, so no member is always served last.
    rx_next: usize,
    tx_no_member: u64,
    tx_no_frame: u64,
    copies_made: u64,
    /// Broadcast copies on their way to a member's batch.
    scratch: Vec<Frame>,
    /// Each packet's member (`None`: dropped) and frame count, for the vector being sent.
    marks: Vec<(Option<usize>, usize)>,
    /// Frames of packets no member takes.
    dropped: Vec<Frame>,
}

impl<P: PipelinePort> std::fmt::Debug for BondPort<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BondPort")
            .field("mode", &self.mode)
            .field("members", &self.members.len())
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<P: PipelinePort> BondPort<P> {
    /// A bond of `members` (1 to [`crate::MAX_MEMBERS`]), all up; active-backup starts on
    /// the first, and the others refuse what they receive where their port can
    /// ([`PipelinePort::set_inactive`]).
    pub fn new(members: Vec<P>, mode: BondMode) -> Result<Self, Error> {
        let state = Members::new(members.len())?;
        let mut bond = BondPort {
            members: members
                .into_iter()
                .map(|port| Member {
                    port,
                    stats: MemberStats::default(),
                    batch: Vec::new(),
                    boundaries: Vec::new(),
                    copies: 0,
                })
                .collect(),
            mode,
            state,
            rr: 0,
            rx_next: 0,
            tx_no_member: 0,
            tx_no_frame: 0,
            copies_made: 0,
            scratch: Vec::new(),
            marks: Vec::new(),
            dropped: Vec::new(),
        };
        bond.mark_inactive()?;
        Ok(bond)
    }

    /// Tells each member whether it is inactive (active-backup: all but the active one), so
    /// that a member port that can refuses in the kernel what the bond would drop.
    fn mark_inactive(&mut self) -> Result<(), Error> {
        let active_backup = self.mode == BondMode::ActiveBackup;
        let active = self.state.active();
        for (i, m) in self.members.iter_mut().enumerate() {
            m.port.set_inactive(active_backup && active != Some(i))?;
        }
        Ok(())
    }

    /// Sets a member's carrier (from link monitoring). An active-backup bond whose active
    /// member goes down fails over to the first usable one.
    pub fn set_up(&mut self, index: usize, up: bool) -> Result<(), Error> {
        self.state.set_up(index, up)?;
        self.mark_inactive()
    }

    /// Lets a member carry traffic or not (the control plane's "distributing", LACP's).
    pub fn set_distributing(&mut self, index: usize, distributing: bool) -> Result<(), Error> {
        self.state.set_distributing(index, distributing)?;
        self.mark_inactive()
    }

    /// Makes `index` the active member (active-backup), if it is usable.
    pub fn set_active(&mut self, index: usize) -> Result<(), Error> {
        self.state.set_active(index)?;
        self.mark_inactive()
    }

    /// The active member (active-backup), if any is usable.
    pub fn active(&self) -> Option<usize> {
        self.state.active()
    }

    /// The members that may transmit now.
    pub fn usable(&self) -> &[usize] {
        self.state.usable()
    }

    /// The bond's mode.
    pub fn mode(&self) -> BondMode {
        self.mode
    }

    /// The member ports, in order.
    pub fn member(&mut self, index: usize) -> Option<&mut P> {
        self.members.get_mut(index).map(|m| &mut m.port)
    }

    /// The bond's counters.
    pub fn stats(&self) -> BondStats {
        BondStats {
            members: self.members.iter().map(|m| m.stats).collect(),
            tx_no_member: self.tx_no_member,
            tx_no_frame: self.tx_no_frame,
            copies: self.copies_made,
        }
    }

    /// The member for one packet (`first` is its first frame).
    fn pick(&mut self, umem: &Umem, first: &Frame) -> Option<usize> {
        let usable = self.state.usable();
        if usable.is_empty() {
            return None;
        }
        let n = usable.len();
        match self.mode {
            BondMode::ActiveBackup => self.state.active(),
            BondMode::BalanceXor { policy } | BondMode::Lacp { policy } => {
                let hash = xmit_hash(policy, umem.data(first));
                Some(usable[hash as usize % n])
            }
            BondMode::BalanceRr { packets_per_slave } => {
                let per = u64::from(packets_per_slave.max(1));
                let i = (self.rr / per) as usize % n;
                self.rr = self.rr.wrapping_add(1);
                Some(usable[i])
            }
            // Broadcast copies in send(); the original goes to the first usable member.
            BondMode::Broadcast => Some(usable[0]),
        }
    }

    /// Copies `chain` into frames from `pool`, onto the end of `out`; false (nothing added)
    /// when the pool runs dry.
    fn copy_chain(
        umem: &Umem,
        chain: &[Frame],
        pool: &mut FramePool,
        out: &mut Vec<Frame>,
    ) -> bool {
        let start = out.len();
        if pool.alloc(out, chain.len()) < chain.len() {
            let mut partial: Vec<Frame> = out.drain(start..).collect();
            pool.free(&mut partial);
            return false;
        }
        for (copy, original) in out[start..].iter_mut().zip(chain) {
            umem.reset(copy);
            // The copy is a frame of the same UMEM and size: the write fits.
            if umem.write(copy, umem.data(original)).is_err() {
                let mut partial: Vec<Frame> = out.drain(start..).collect();
                pool.free(&mut partial);
                return false;
            }
            copy.set_continued(original.is_continued());
        }
        true
    }
}

impl<P: PipelinePort> PipelinePort for BondPort<P> {
    fn refill(&mut self, umem: &Umem, pool: &mut FramePool) -> Result<()> {
        for m in &mut self.members {
            m.port.refill(umem, pool)?;
        }
        Ok(())
    }

    fn receive(
        &mut self,
        umem: &Umem,
        pool: &mut FramePool,
        out: &mut Vec<Frame>,
        max: usize,
    ) -> Result<usize> {
        let n = self.members.len();
        let mut got = 0;
        let active_backup = self.mode == BondMode::ActiveBackup;
        for k in 0..n {
            if got >= max {
                break;
            }
            let i = (self.rx_next + k) % n;
            let start = out.len();
            let taken = self.members[i].port.receive(umem, pool, out, max - got)?;
            let arrived = packets(&out[start..]).count() as u64;
            if active_backup && self.state.active() != Some(i) {
                self.members[i].stats.rx_inactive += arrived;
                self.scratch.extend(out.drain(start..));
                let mut dropped = std::mem::take(&mut self.scratch);
                self.members[i].port.recycle(&mut dropped, pool);
                self.scratch = dropped;
                continue;
            }
            self.members[i].stats.rx_packets += arrived;
            got += taken;
        }
        self.rx_next = (self.rx_next + 1) % n;
        Ok(got)
    }

    fn send(
        &mut self,
        umem: &Umem,
        frames: &mut Vec<Frame>,
        pool: &mut FramePool,
    ) -> Result<usize> {
        // First decide each packet's member (the frames are only read), making broadcast
        // copies as we go; then move the frames into the members' batches in one pass.
        self.marks.clear();
        let mut copies = std::mem::take(&mut self.scratch);
        let mut chains = packets(frames);
        for chain in chains.by_ref() {
            let member = self.pick(umem, &chain[0]);
            if let Some(m) = member {
                self.members[m].stats.tx_packets += 1;
                if self.mode == BondMode::Broadcast {
                    for k in 1..self.state.usable().len() {
                        let other = self.state.usable()[k];
                        copies.clear();
                        if Self::copy_chain(umem, chain, pool, &mut copies) {
                            let member = &mut self.members[other];
                            member.boundaries.push(member.batch.len() + copies.len());
                            member.copies += copies.len();
                            member.batch.append(&mut copies);
                            member.stats.tx_packets += 1;
                            self.copies_made += 1;
                        } else {
                            self.tx_no_frame += 1;
                        }
                    }
                }
            } else {
                self.tx_no_member += 1;
            }
            self.marks.push((member, chain.len()));
        }
        // A chain cut short (its last frame still continued) is not a packet: dropped.
        let cut = chains.remainder().len();
        if cut > 0 {
            self.marks.push((None, cut));
        }
        self.scratch = copies;
        let mut drain = frames.drain(..);
        for &(member, len) in &self.marks {
            match member {
                Some(m) => {
                    let member = &mut self.members[m];
                    member.batch.extend(drain.by_ref().take(len));
                    member.boundaries.push(member.batch.len());
                }
                None => self.dropped.extend(drain.by_ref().take(len)),
            }
        }
        drop(drain);
        pool.free(&mut self.dropped);
        let mut queued = 0;
        for m in &mut self.members {
            if m.batch.is_empty() {
                continue;
            }
            let sent = m.port.send(umem, &mut m.batch, pool)?;
            // A port queues whole packets from the front and gives back the rest.
            let unsent = m.boundaries.iter().filter(|&&end| end > sent).count();
            m.stats.tx_dropped += unsent as u64;
            // Copies are the bond's own: the caller counts only its frames.
            queued += sent.saturating_sub(m.copies);
            m.copies = 0;
            m.boundaries.clear();
            pool.free(&mut m.batch);
        }
        Ok(queued)
    }

    fn complete(&mut self, pool: &mut FramePool) -> usize {
        self.members.iter_mut().map(|m| m.port.complete(pool)).sum()
    }

    fn recycle(&mut self, frames: &mut Vec<Frame>, pool: &mut FramePool) {
        pool.free(frames);
    }

    fn in_flight(&self) -> usize {
        self.members.iter().map(|m| m.port.in_flight()).sum()
    }

    fn tx_in_flight(&self) -> usize {
        self.members.iter().map(|m| m.port.tx_in_flight()).sum()
    }

    fn ledgers(&self) -> Vec<(usize, usize)> {
        self.members.iter().flat_map(|m| m.port.ledgers()).collect()
    }

    fn flush(&mut self) -> Result<()> {
        for m in &mut self.members {
            m.port.flush()?;
        }
        Ok(())
    }

    fn wakeups(&self) -> xskit::Wakeups {
        let mut sum = xskit::Wakeups::default();
        for m in &self.members {
            sum += m.port.wakeups();
        }
        sum
    }

    fn ring_occupancy(&mut self) -> Option<RingOccupancy> {
        let mut total = RingOccupancy::default();
        let mut any = false;
        for m in &mut self.members {
            if let Some(o) = m.port.ring_occupancy() {
                any = true;
                total.fill += o.fill;
                total.rx += o.rx;
                total.tx += o.tx;
            }
        }
        any.then_some(total)
    }

    fn readiness<'a>(&'a self, fds: &mut Vec<BorrowedFd<'a>>) {
        for m in &self.members {
            m.port.readiness(fds);
        }
    }
}
