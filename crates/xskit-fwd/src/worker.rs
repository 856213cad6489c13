//! One worker: a port per interface for one queue, one pipeline, its own frame pool, and
//! exact frame accounting. Generic over the pipeline's port trait, so the same logic runs on
//! AF_XDP sockets and, in tests, on in-memory devices with virtual time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use xskit_wire::ethernet;
use xskit_wire::gso::TcpSegmenter;
use xskit_wire::offload::{L4Checksum, Sum};

use crate::bonded::SidePort;
use crate::chains::Chains;
use crate::counter::{bump, PortCells};

use std::os::fd::BorrowedFd;

use xskit::{Frame, Umem};
use xskit_os::sync::LockUnpoisoned;
use xskit_pipeline::{FramePool, Outputs, Pipeline, PoolStats, RingOccupancy, StageContext};

use crate::error::{Error, Result};
use crate::stages::tx_note;

pub(crate) mod host_path;
pub(crate) use host_path::TapPath;

/// Where a worker's time comes from: read once per busy round, never per packet.
pub(crate) trait Clock {
    /// Nanoseconds on this clock.
    fn now_ns(&self) -> u64;
}

/// CLOCK_MONOTONIC.
pub(crate) struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        xskit_os::monotonic_ns()
    }
}

/// Where a worker's frames were when it last published.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FramesSeen {
    /// In its pool's cache.
    pub(crate) cached: usize,
    /// What its ports' ledgers say the kernel holds.
    pub(crate) in_kernel: usize,
    /// What the rings' indices say they hold.
    pub(crate) rings: RingOccupancy,
}

/// What a worker leaves behind: its frames, by where they are, and why it stopped early.
#[derive(Debug, Default)]
pub(crate) struct WorkerEnd {
    /// Frames its ports' ledgers say the kernel holds.
    pub(crate) ledger_in_kernel: usize,
    /// What the rings' indices say they hold.
    pub(crate) rings: RingOccupancy,
    /// The error that stopped it before it was asked to stop (a device gone, a failed
    /// system call); its frames are still accounted for.
    pub(crate) error: Option<Error>,
}

pub(crate) struct Worker<P> {
    pub(crate) index: usize,
    pub(crate) queue: u32,
    pub(crate) cpu: Option<usize>,
    pub(crate) umem: Umem,
    pub(crate) ports: Vec<P>,
    pub(crate) pipeline: Pipeline,
    pub(crate) pool: FramePool,
    pub(crate) vector: usize,
    pub(crate) check: bool,
    pub(crate) tap: Option<Arc<TapPath>>,
    pub(crate) port_cells: Arc<Vec<PortCells>>,
    pub(crate) pool_stats: Arc<Mutex<PoolStats>>,
    pub(crate) frames_seen: Arc<Mutex<FramesSeen>>,
    /// Frames on their way from the TAP device, reused from read to read.
    pub(crate) tap_frames: Vec<Frame>,
    /// Ask the kernel to finish partial checksums (transmit metadata) instead of summing them.
    pub(crate) csum_offload: bool,
    /// Each port's MTU: the largest IP packet it may send.
    pub(crate) mtus: Vec<usize>,
    /// Multi-buffer packets: the frames after each packet's first.
    pub(crate) chains: Chains,
    /// Packets on their way into the pipeline, as received (chains unsorted).
    pub(crate) raw: Vec<Frame>,
    /// A transmit vector with chains expanded, reused.
    pub(crate) txq: Vec<Frame>,
    /// A packet gathered from its frames, and one segment, for segmentation.
    pub(crate) gathered: Vec<u8>,
    pub(crate) segment: Vec<u8>,
    /// The vector on its way into the pipeline, and what the pipeline made of it.
    pub(crate) input: Vec<Frame>,
    pub(crate) out: Outputs,
    /// Rounds so far, and every how many rounds the host link is read.
    pub(crate) rounds: u32,
    pub(crate) host_every: u32,
    /// The rules in force: when one limits a rate, the clock is read, once per busy round.
    pub(crate) live: Arc<crate::live_rules::LiveRules>,
    /// Where a handover to a successor asks it to pause.
    pub(crate) pause: Arc<crate::handover::HandoverPause>,
    /// The rules again, for the direct path ([`crate::direct`]), where the worker has one:
    /// two ports, nothing but the rules stage in the pipeline, no host link.
    pub(crate) direct: Option<crate::stages::Rules>,
}

/// What preparing one transmit vector did.
#[derive(Debug, Default)]
struct TxPrepared {
    offloaded: u64,
    completed: u64,
    segmented: u64,
    segments: u64,
    oversize: u64,
    no_frames: u64,
}

/// The IP packet length of an Ethernet frame of `total` bytes (VLAN tags skipped), or what
/// follows the Ethernet header for anything that is not IP.
fn l3_len(first: &[u8], total: usize) -> usize {
    let Ok(eth) = ethernet::Frame::new_checked(first) else {
        return total;
    };
    let Ok(un) = eth.untagged() else {
        return total;
    };
    let l3 = first.len() - un.payload.len();
    let claimed = match un.ethertype {
        xskit_wire::EtherType::Ipv4 if un.payload.len() >= 4 => {
            usize::from(u16::from_be_bytes([un.payload[2], un.payload[3]]))
        }
        xskit_wire::EtherType::Ipv6 if un.payload.len() >= 6 => {
            40 + usize::from(u16::from_be_bytes([un.payload[4], un.payload[5]]))
        }
        _ => total.saturating_sub(l3),
    };
    claimed.min(total.saturating_sub(l3))
}

/// The bytes of `heads`, and how many of them have a partial checksum, when every packet
/// can go out without a second read of its headers: one frame within `mtu` plus an Ethernet
/// header, noted by the rules stage as settled, or as partial at a known place when the
/// kernel finishes checksums (`offload`).
#[inline(always)]
fn noted_for_send(heads: &[Frame], mtu: usize, offload: bool) -> Option<(usize, usize)> {
    heads.iter().try_fold((0, 0), |(bytes, partial), h| {
        if h.is_continued() || h.len() > mtu + 14 {
            return None;
        }
        match h.note() {
            tx_note::SETTLED => Some((bytes + h.len(), partial)),
            n if offload && tx_note::partial_at(n).is_some() => {
                Some((bytes + h.len(), partial + 1))
            }
            _ => None,
        }
    })
}

/// Empty polls before a worker naps, so an idle forwarder does not hold a CPU.
const SPIN_POLLS: u32 = 2000;
/// The longest wait in poll(2) before the stop flag is looked at again.
const WAIT: Duration = Duration::from_millis(10);
/// The longest wait in poll(2) while transmits are in flight, whose completions do not wake
/// poll(2) for reading.
const SENDING_WAIT: Duration = Duration::from_millis(1);
/// Rounds between looks at the clock for publishing the pool counters.
const PUBLISH_ROUNDS: u32 = 1024;
/// Rounds between visits to the TAP device (a system call), so control traffic costs the
/// data path little.
pub(crate) const HOST_EVERY: u32 = 16;

impl<P: SidePort> Worker<P> {
    /// Forwards until `stop` (or an error), then drains (once `drain` is set) and reports where
    /// the frames are. `failed` is set when this worker stops on an error, so the others stop
    /// too.
    // Called once per thread; kept a function of its own so that bench/callgrind.sh can count
    // the instructions inside it.
    #[inline(never)]
    pub(crate) fn run(
        mut self,
        stop: &AtomicBool,
        drain: &AtomicBool,
        failed: &AtomicBool,
    ) -> Result<WorkerEnd> {
        let error = match self.forward(stop) {
            Ok(false) => None,
            // The rings are the successor's: nothing to drain or count here.
            Ok(true) => return Ok(WorkerEnd::default()),
            Err(e) => {
                failed.store(true, Ordering::Relaxed);
                Some(e)
            }
        };
        self.release_held();
        let mut end = self.drain(drain)?;
        end.error = error;
        Ok(end)
    }

    /// Forwards until `stop`; true when it stopped because a successor took the rings over.
    fn forward(&mut self, stop: &AtomicBool) -> Result<bool> {
        if let Some(cpu) = self.cpu {
            xskit_os::pin_current_thread(cpu).map_err(Error::Syscall)?;
        }
        let clock = MonotonicClock;
        let mut idle = 0u32;
        let mut last_publish = Instant::now();
        let mut pfds = xskit_os::PollSet::default();
        while !stop.load(Ordering::Relaxed) {
            if self.pause.asked() && self.pause_for_handover(stop) {
                return Ok(true);
            }
            let got = self.round(&clock)?;
            if got == 0 {
                idle += 1;
                if idle > SPIN_POLLS {
                    // Transmits in flight are reaped within a short wait; a link that is
                    // down holds them, and spinning for them would hold a CPU.
                    let sending = self.ports.iter().any(|p| p.tx_in_flight() > 0);
                    self.wait_for_packets(&mut pfds, if sending { SENDING_WAIT } else { WAIT })?;
                }
            } else {
                idle = 0;
            }
            // Reading the clock every round costs more than a round's ring work in a VM: look
            // at it once every PUBLISH_ROUNDS rounds.
            if self.rounds.is_multiple_of(PUBLISH_ROUNDS)
                && last_publish.elapsed() > Duration::from_millis(100)
            {
                self.publish();
                last_publish = Instant::now();
            }
        }
        Ok(false)
    }

    /// Pauses between two rounds for a handover: every frame this worker holds goes to the
    /// shared pool or stays where the kernel has it, and it says what each port holds there;
    /// then it waits for the supervisor's decision (or a stop). True when handed over: the
    /// rings are the successor's and this worker must not touch them again.
    fn pause_for_handover(&mut self, stop: &AtomicBool) -> bool {
        self.release_held();
        self.chains.drain(&mut self.raw);
        self.pool.free(&mut self.raw);
        self.pool.spill();
        let held = self.ports.iter().flat_map(P::ledgers).collect();
        self.pause.paused(self.index, held);
        loop {
            match self.pause.decided() {
                Some(crate::handover::AfterPause::HandedOver) => return true,
                Some(crate::handover::AfterPause::Resume) => return false,
                None if stop.load(Ordering::Relaxed) => return false,
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// Stocks every port's fill ring before the worker runs: the program steers packets to a
    /// socket as soon as it is registered, and those that find no frame are lost.
    pub(crate) fn prime(&mut self) -> Result<()> {
        for port in self.ports.iter_mut() {
            port.refill(&self.umem, &mut self.pool)?;
        }
        Ok(())
    }

    /// Where this worker's frames are: its cache, its ports' ledgers and their rings.
    fn frames_seen(&mut self) -> FramesSeen {
        let mut seen = FramesSeen {
            cached: self.pool.cached(),
            ..FramesSeen::default()
        };
        for port in self.ports.iter_mut() {
            let held = port.in_flight();
            seen.in_kernel += held;
            // A port without kernel rings holds its frames itself: they count as in flight.
            let r = port.ring_occupancy().unwrap_or(RingOccupancy {
                tx: held,
                ..RingOccupancy::default()
            });
            seen.rings.fill += r.fill;
            seen.rings.rx += r.rx;
            seen.rings.tx += r.tx;
        }
        seen
    }

    /// Makes the pool's counters, and where its frames are, visible to the forwarder's reader.
    pub(crate) fn publish(&mut self) {
        *self.pool_stats.lock_unpoisoned() = self.pool.stats();
        let seen = self.frames_seen();
        *self.frames_seen.lock_unpoisoned() = seen;
        for (port, cells) in self.ports.iter().zip(self.port_cells.iter()) {
            port.publish_members();
            let kicks = port.wakeups();
            cells.fill_wakeups.store(kicks.fill, Ordering::Relaxed);
            cells.tx_wakeups.store(kicks.tx, Ordering::Relaxed);
            cells
                .tx_stall_wakeups
                .store(kicks.tx_stall, Ordering::Relaxed);
        }
    }

    /// One round: refill, then per port receive a vector and run it through the pipeline,
    /// hand the kernel its frames, read the host link now and then, transmit once per port,
    /// and reap completions. Returns the frames received.
    pub(crate) fn round(&mut self, clock: &impl Clock) -> Result<usize> {
        self.rounds = self.rounds.wrapping_add(1);
        let nports = self.ports.len();
        for port in self.ports.iter_mut() {
            port.sync_members();
            port.refill(&self.umem, &mut self.pool)?;
        }
        let mut now_ns = None;
        let (mut got, mut direct) = (0, [false; 2]);
        for p in 0..nports {
            // An empty rx ring has nothing for either path (a chain's rest arrives there
            // too): an idle port costs the round one look at its ring.
            if !self.ports[p].may_have_received() {
                continue;
            }
            // What the direct path keeps of the vector takes the pipeline.
            let direct_move = self.forward_directly(p)?;
            direct[(p ^ 1) & 1] |= direct_move.moved > 0;
            got += direct_move.moved;
            let rest = direct_move.left_to_pipeline(self.vector);
            if rest > 0 {
                got += self.receive_vector(p, rest, clock, &mut now_ns)?;
            }
        }
        // Idle rounds count too, and a readable host link ends the wait in poll(2), so the
        // host's frames wait at most `host_every` short rounds.
        if self.index == 0 && self.tap.is_some() && self.rounds.is_multiple_of(self.host_every) {
            self.send_kernel_frames()?;
        }
        // One transmit (and wakeup) per port per round.
        for p in 0..nports {
            if !self.out.tx[p].is_empty() {
                self.transmit(p)?;
            } else if direct.get(p) == Some(&true) {
                self.ports[p].kick()?;
            }
        }
        self.refill_from_completions();
        for port in self.ports.iter_mut() {
            port.complete(&mut self.pool);
        }
        if self.check {
            self.check_accounting()?;
        }
        Ok(got)
    }

    /// Transmitted frames go straight to the receive buffers of the ports that lack them, as
    /// in a bare forwarding loop; the rest go to the pool.
    fn refill_from_completions(&mut self) {
        let n = self.ports.len();
        for to in 0..n {
            for from in 0..n {
                // Err for `to == from`: a port's own completions go through the pool.
                if let Ok([to, from]) = self.ports.get_disjoint_mut([to, from]) {
                    if from.tx_in_flight() > 0 {
                        to.refill_from(from);
                    }
                }
            }
        }
    }

    /// Port `p`'s vector (up to `max` frames): received, counted, run through the pipeline,
    /// its drops recycled and the kernel's frames handed over. The clock is read once per
    /// round, when a rule needs it. Returns the frames received.
    // Inlined into the round, the per-vector hot path: bench/callgrind.sh counts it.
    #[inline(always)]
    fn receive_vector(
        &mut self,
        p: usize,
        max: usize,
        clock: &impl Clock,
        now_ns: &mut Option<u64>,
    ) -> Result<usize> {
        let frames = self.ports[p].receive(&self.umem, &mut self.pool, &mut self.raw, max)?;
        if frames == 0 {
            return Ok(0);
        }
        let (n, bytes) =
            self.chains
                .sort_received(p, &mut self.raw, &mut self.input, &mut self.out.drop);
        let cells = &self.port_cells[p];
        bump(&cells.rx_packets, n as u64);
        bump(&cells.rx_bytes, bytes as u64);
        self.copy_group_frames_to_host(p);
        let now = if self.live.needs_clock() {
            *now_ns.get_or_insert_with(|| clock.now_ns())
        } else {
            0
        };
        self.pipeline.process(
            &self.umem,
            StageContext::new(p as u16, now),
            &mut self.input,
            &mut self.out,
        );
        // Drops go straight back to the fill ring they came from, whole.
        self.chains.release_tails(&self.out.drop, &mut self.raw);
        self.out.drop.append(&mut self.raw);
        self.ports[p].recycle(&mut self.out.drop, &mut self.pool);
        let mut kernel = std::mem::take(&mut self.out.kernel);
        let handed = self.hand_to_kernel(p, &mut kernel);
        self.out.kernel = kernel;
        handed?;
        if self.check {
            self.check_accounting()?;
        }
        Ok(frames)
    }

    /// Port `p`'s one transmit of the round: its frames prepared (checksums, segments),
    /// sent, and counted.
    #[inline(always)]
    fn transmit(&mut self, p: usize) -> Result<()> {
        let mut heads = std::mem::take(&mut self.out.tx[p]);
        let as_they_are = noted_for_send(&heads, self.mtus[p], self.csum_offload);
        let (mut txq, prepared, bytes, packets) = match as_they_are {
            // The usual vector: every packet one frame within the MTU, its checksum settled or
            // partial where the rules stage noted it. It is sent as it is (a note never
            // reaches a descriptor), the partial ones' finishing asked of the kernel.
            Some((bytes, partial)) => {
                let mut prepared = TxPrepared::default();
                if partial > 0 {
                    self.finish_noted(&mut heads, &mut prepared);
                }
                let n = heads.len();
                (heads, prepared, bytes, n)
            }
            None => {
                let mut txq = std::mem::take(&mut self.txq);
                let prepared = self.prepare_tx(p, &mut heads, &mut txq);
                self.out.tx[p] = heads;
                let bytes = txq.iter().map(Frame::len).sum();
                let packets = xskit::packets(&txq).count();
                (txq, prepared, bytes, packets)
            }
        };
        let n = txq.len();
        let sent = self.ports[p].send(&self.umem, &mut txq, &mut self.pool);
        if as_they_are.is_some() {
            self.out.tx[p] = txq;
        } else {
            self.txq = txq;
        }
        let sent = sent?;
        let cells = &self.port_cells[p];
        let sent_packets = if sent == n {
            packets
        } else {
            packets - (n - sent).min(packets)
        };
        bump(&cells.tx_packets, sent_packets as u64);
        bump(&cells.tx_bytes, bytes as u64);
        bump(&cells.tx_ring_full, (n - sent) as u64);
        if prepared.offloaded + prepared.completed > 0 {
            bump(&cells.checksums_offloaded, prepared.offloaded);
            bump(&cells.checksums_completed, prepared.completed);
        }
        if prepared.segmented + prepared.oversize + prepared.no_frames > 0 {
            bump(&cells.segmented, prepared.segmented);
            bump(&cells.segments, prepared.segments);
            bump(&cells.copies, prepared.segments);
            bump(&cells.oversize_dropped, prepared.oversize);
            bump(&cells.no_frames_dropped, prepared.no_frames);
        }
        Ok(())
    }

    /// Asks the kernel to finish the checksum of each frame of `heads` the rules stage noted
    /// as partial at a known place; where the UMEM has no metadata room, finishes it here.
    fn finish_noted(&mut self, heads: &mut [Frame], done: &mut TxPrepared) {
        for head in heads.iter_mut() {
            let Some((start, offset)) = tx_note::partial_at(head.note()) else {
                continue;
            };
            if self.offload_checksum(head, (start, offset), done) {
                continue;
            }
            if let Some(c) = L4Checksum::locate(self.umem.data(head), head.len()) {
                c.complete(self.umem.data_mut(head));
                done.completed += 1;
            }
        }
    }

    /// Asks the kernel to finish `head`'s partial checksum at `(start, offset)` (its L4
    /// header's start in the frame, the field's offset in it), counting it in `done`; false
    /// when the UMEM has no metadata room for the request.
    fn offload_checksum(
        &self,
        head: &mut Frame,
        (start, offset): (usize, usize),
        done: &mut TxPrepared,
    ) -> bool {
        let asked = self
            .umem
            .request_tx_checksum(head, start as u16, offset as u16);
        done.offloaded += u64::from(asked);
        asked
    }

    /// What the pipeline still holds goes back to the pool (an error can leave a round half
    /// done).
    fn release_held(&mut self) {
        for v in self.out.tx.iter_mut() {
            self.chains.release_tails(v, &mut self.raw);
            self.pool.free(v);
        }
        self.chains.release_tails(&self.out.drop, &mut self.raw);
        self.chains.release_tails(&self.out.kernel, &mut self.raw);
        self.pool.free(&mut self.out.drop);
        self.pool.free(&mut self.out.kernel);
        self.pool.free(&mut self.raw);
        self.pool.free(&mut self.input);
        self.pool.free(&mut self.txq);
    }

    /// Once the programs no longer redirect here (`drain`): takes what is in the rx rings,
    /// waits for the transmits to complete, and reports where every frame is.
    fn drain(&mut self, drain: &AtomicBool) -> Result<WorkerEnd> {
        let mut input = Vec::with_capacity(self.vector);
        while !drain.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let mut busy = false;
            for port in self.ports.iter_mut() {
                while port
                    .receive(&self.umem, &mut self.pool, &mut input, usize::MAX)
                    .unwrap_or(0)
                    > 0
                {
                    self.pool.free(&mut input);
                }
                port.complete(&mut self.pool);
                if port.tx_in_flight() > 0 {
                    busy = true;
                    let _ = port.flush();
                }
            }
            if !busy || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.chains.drain(&mut input);
        self.pool.free(&mut input);
        let seen = self.frames_seen();
        let end = WorkerEnd {
            ledger_in_kernel: seen.in_kernel,
            rings: seen.rings,
            ..WorkerEnd::default()
        };
        self.publish();
        if self.pool.held() != self.pool.cached() + end.ledger_in_kernel {
            return Err(Error::FrameAccounting(format!(
                "worker {} (queue {}) at stop: holds {} frames, but {} are cached and {} in the kernel",
                self.index,
                self.queue,
                self.pool.held(),
                self.pool.cached(),
                end.ledger_in_kernel
            )));
        }
        Ok(end)
    }

    /// Sleeps in poll(2) until a socket (or the TAP device) has something, or for at most
    /// `wait`, so the stop flag is still seen. Spinning would hold a CPU while idle; napping
    /// for a fixed time would let a burst overflow the rx ring before the nap ends.
    fn wait_for_packets(&self, pfds: &mut xskit_os::PollSet, wait: Duration) -> Result<()> {
        let mut fds: Vec<BorrowedFd<'_>> = Vec::with_capacity(self.ports.len() + 1);
        for p in &self.ports {
            p.readiness(&mut fds);
        }
        if let (0, Some(tap)) = (self.index, &self.tap) {
            fds.extend(tap.link.readiness());
        }
        if fds.is_empty() {
            std::thread::sleep(wait);
            return Ok(());
        }
        xskit_os::poll_readable(&fds, pfds, Some(wait)).map_err(Error::Syscall)?;
        Ok(())
    }

    /// Every frame this worker took from the shared ring is in its cache, a ring, or a vector.
    pub(crate) fn check_accounting(&self) -> Result<()> {
        let (input, out) = (&self.input, &self.out);
        let in_kernel: usize = self.ports.iter().map(P::in_flight).sum();
        let here = self.pool.cached() + in_kernel + input.len() + out.len() + self.chains.held();
        if here != self.pool.held() {
            return Err(Error::FrameAccounting(format!(
                "worker {} (queue {}): holds {} frames, but counts {here} (cache {}, kernel {in_kernel}, vectors {})",
                self.index,
                self.queue,
                self.pool.held(),
                self.pool.cached(),
                input.len() + out.len()
            )));
        }
        Ok(())
    }

    /// Turns the packets the pipeline sent to port `p` into the descriptors to transmit, in
    /// `txq`: each packet's chain put back together, partial checksums finished (through
    /// transmit metadata when `csum_offload` is set, else summed here), and packets larger than
    /// the port's MTU cut into segments (TCP) or dropped and counted (anything else).
    fn prepare_tx(&mut self, p: usize, heads: &mut Vec<Frame>, txq: &mut Vec<Frame>) -> TxPrepared {
        let mut done = TxPrepared::default();
        let mtu = self.mtus[p];
        for mut head in heads.drain(..) {
            // The rules stage noted what each packet's checksum needs: a settled single frame
            // within the MTU goes as it is, a noted partial one has its finishing asked of
            // the kernel without a second read of its headers.
            let note = head.note();
            head.set_note(tx_note::LOOK);
            let settled = note == tx_note::SETTLED;
            let single = !head.is_continued() && head.len() <= mtu + 14;
            if settled && single {
                txq.push(head);
                continue;
            }
            if let (Some(at), true, true) = (tx_note::partial_at(note), single, self.csum_offload) {
                if self.offload_checksum(&mut head, at, &mut done) {
                    txq.push(head);
                    continue;
                }
            }
            let tail = self.chains.take_tail(&head);
            let total = head.len() + tail.as_ref().map_or(0, |t| t.iter().map(Frame::len).sum());
            // A frame no longer than the MTU plus an Ethernet header cannot carry an IP packet
            // over the MTU: only longer ones are parsed for their length.
            if total > mtu + 14 && l3_len(self.umem.data(&head), total) > mtu {
                self.segment(&mut done, mtu, head, tail, txq);
                continue;
            }
            let first = self.umem.data(&head);
            let found = if settled {
                None
            } else {
                L4Checksum::locate(first, total)
            };
            if let Some(c) = found {
                if c.is_partial(first)
                    && !(self.csum_offload
                        && self.offload_checksum(&mut head, (c.start, c.offset), &mut done))
                {
                    match &tail {
                        None => c.complete(self.umem.data_mut(&mut head)),
                        Some(tail) => {
                            let mut sum = Sum::default();
                            sum.add(&first[c.start.min(first.len())..]);
                            for t in tail {
                                sum.add(self.umem.data(t));
                            }
                            c.store(self.umem.data_mut(&mut head), sum.value());
                        }
                    }
                    done.completed += 1;
                }
            }
            match tail {
                None => {
                    head.set_continued(false);
                    txq.push(head);
                }
                Some(mut tail) => {
                    head.set_continued(true);
                    txq.push(head);
                    let last = tail.len() - 1;
                    for (i, mut f) in tail.drain(..).enumerate() {
                        f.set_continued(i != last);
                        txq.push(f);
                    }
                    self.chains.recycle_vec(tail);
                }
            }
        }
        done
    }

    /// Cuts a packet larger than `mtu` into segments built in fresh frames, or drops it.
    fn segment(
        &mut self,
        done: &mut TxPrepared,
        mtu: usize,
        head: Frame,
        tail: Option<Vec<Frame>>,
        txq: &mut Vec<Frame>,
    ) {
        self.gathered.clear();
        self.gathered.extend_from_slice(self.umem.data(&head));
        self.pool.free_one(head);
        if let Some(mut tail) = tail {
            for t in &tail {
                self.gathered.extend_from_slice(self.umem.data(t));
            }
            self.pool.free(&mut tail);
            self.chains.recycle_vec(tail);
        }
        let Some(plan) = TcpSegmenter::new(&self.gathered, mtu) else {
            done.oversize += 1;
            return;
        };
        done.segmented += 1;
        self.segment.resize(plan.max_segment_len(), 0);
        for k in 0..plan.count() {
            let len = plan.write(&self.gathered, k, &mut self.segment);
            let seg = &mut self.segment[..len];
            // The segmenter leaves the checksum partial, as the kernel's GSO does for a device
            // that offloads it.
            let csum = L4Checksum::locate(seg, len);
            if !self.csum_offload {
                if let Some(c) = csum {
                    c.complete(seg);
                }
            }
            let first = txq.len();
            if !self.scatter(len, txq) {
                done.no_frames += 1;
                continue;
            }
            done.segments += 1;
            if let (true, Some(c)) = (self.csum_offload, csum) {
                if !self
                    .umem
                    .request_tx_checksum(&mut txq[first], c.start as u16, c.offset as u16)
                {
                    // No metadata room: finish it here, in the frames just written.
                    let mut sum = Sum::default();
                    sum.add(&self.segment[c.start..len]);
                    c.store(self.umem.data_mut(&mut txq[first]), sum.value());
                }
            }
        }
    }

    /// Copies `self.segment[..len]` into as many fresh frames as it needs, chained, onto `txq`.
    /// False (nothing added) when the pool has too few frames.
    fn scatter(&mut self, len: usize, txq: &mut Vec<Frame>) -> bool {
        let start = txq.len();
        let mut at = 0;
        while at < len {
            if self.pool.alloc(&mut self.tap_frames, 1) == 0 {
                let mut partial: Vec<Frame> = txq.drain(start..).collect();
                self.pool.free(&mut partial);
                return false;
            }
            let Some(mut f) = self.tap_frames.pop() else {
                return false;
            };
            self.umem.reset(&mut f);
            let room = self.umem.capacity(&f);
            let n = room.min(len - at);
            let buf = self.umem.buffer_mut(&mut f);
            buf[..n].copy_from_slice(&self.segment[at..at + n]);
            // n <= capacity, so this cannot fail.
            let _ = self.umem.set_len(&mut f, n);
            at += n;
            f.set_continued(at < len);
            txq.push(f);
        }
        true
    }
}
