//! One worker: both interfaces' sockets for one queue, a pipeline per input port, its own
//! frame pool, and exact frame accounting.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use xskit_wire::ethernet;
use xskit_wire::offload::L4Checksum;

use crate::error::{Error, Result};
use crate::pipeline::{FramePool, Outputs, Pipeline, PoolStats, RingOccupancy, XskPort};
use crate::sys::tap::TapFd;
use crate::sys::umem::{Frame, Umem};

/// Per-port counters of one worker.
#[derive(Debug, Default)]
pub(crate) struct PortCells {
    pub(crate) rx_packets: AtomicU64,
    pub(crate) rx_bytes: AtomicU64,
    pub(crate) tx_packets: AtomicU64,
    pub(crate) tx_bytes: AtomicU64,
    /// Frames the tx ring had no room for.
    pub(crate) tx_ring_full: AtomicU64,
    /// Frames handed to the kernel through the TAP device.
    pub(crate) to_kernel: AtomicU64,
    /// Frames for the kernel that were dropped (no TAP device, or its queue was full).
    pub(crate) to_kernel_dropped: AtomicU64,
    /// Frames the kernel sent through the TAP device out of this port.
    pub(crate) from_kernel: AtomicU64,
    /// Transmitted frames whose partial checksum the kernel or device was asked to finish.
    pub(crate) csum_offloaded: AtomicU64,
    /// Frames whose partial checksum xskit finished itself.
    pub(crate) csum_completed: AtomicU64,
}

/// The TAP device and what it has learnt: which port each MAC address is behind.
#[derive(Debug)]
pub(crate) struct TapPath {
    pub(crate) fd: TapFd,
    pub(crate) mac: [u8; 6],
    pub(crate) learnt: Mutex<HashMap<[u8; 6], u16>>,
}

impl TapPath {
    fn learn(&self, frame: &[u8], port: u16) {
        let Ok(eth) = ethernet::Frame::new_checked(frame) else {
            return;
        };
        let src = eth.src_addr();
        if src[0] & 1 == 0 {
            self.learnt
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(src, port);
        }
    }
}

/// What a worker leaves behind: its frames, by where they are.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WorkerEnd {
    /// Frames its ports' ledgers say the kernel holds.
    pub(crate) ledger_in_kernel: usize,
    /// What the rings' indices say they hold.
    pub(crate) rings: RingOccupancy,
}

pub(crate) struct Worker {
    pub(crate) index: usize,
    pub(crate) queue: u32,
    pub(crate) cpu: Option<usize>,
    pub(crate) umem: Umem,
    pub(crate) ports: Vec<XskPort>,
    pub(crate) pipelines: Vec<Pipeline>,
    pub(crate) pool: FramePool,
    pub(crate) vector: usize,
    pub(crate) check: bool,
    pub(crate) tap: Option<Arc<TapPath>>,
    pub(crate) port_cells: Arc<Vec<PortCells>>,
    pub(crate) pool_stats: Arc<Mutex<PoolStats>>,
    /// Frames on their way from the TAP device, reused from read to read.
    pub(crate) tap_frames: Vec<Frame>,
    /// Ask the kernel to finish partial checksums (transmit metadata) instead of summing them.
    pub(crate) csum_offload: bool,
}

/// Finishes the partial checksums among `frames` before they leave (see
/// [`xskit_wire::offload`]): through transmit metadata when `offload` is set, so the kernel
/// keeps the packet CHECKSUM_PARTIAL as the sender's own device would, else by summing the
/// bytes here. Returns (offloaded, completed here).
pub(crate) fn finish_checksums(umem: &Umem, frames: &mut [Frame], offload: bool) -> (u64, u64) {
    let (mut offloaded, mut completed) = (0, 0);
    for f in frames.iter_mut() {
        let data = umem.data(f);
        let Some(c) = L4Checksum::locate(data, data.len()) else {
            continue;
        };
        if !c.is_partial(data) {
            continue;
        }
        // Offsets within one frame fit in 16 bits (frames are at most a page).
        if offload && umem.request_tx_checksum(f, c.start as u16, c.offset as u16) {
            offloaded += 1;
        } else {
            c.complete(umem.data_mut(f));
            completed += 1;
        }
    }
    (offloaded, completed)
}

/// Empty polls before a worker naps, so an idle forwarder does not hold a CPU.
const SPIN_POLLS: u32 = 2000;
/// The longest wait in poll(2) before the stop flag is looked at again.
const WAIT_MS: i32 = 10;
/// Rounds between looks at the clock for publishing the pool counters.
const PUBLISH_ROUNDS: u32 = 1024;
/// TAP frames read per visit.
const TAP_BATCH: usize = 32;
/// Rounds between visits to the TAP device (a system call), so control traffic costs the
/// data path little.
const TAP_EVERY: u32 = 16;

impl Worker {
    /// Forwards until `stop`, then drains (once `drain` is set) and reports where the frames are.
    pub(crate) fn run(mut self, stop: &AtomicBool, drain: &AtomicBool) -> Result<WorkerEnd> {
        if let Some(cpu) = self.cpu {
            crate::sys::pin_current_thread(cpu).map_err(Error::Syscall)?;
        }
        let nports = self.ports.len();
        let mut input = Vec::with_capacity(self.vector);
        let mut out = Outputs::new(nports);
        let mut scratch = Vec::with_capacity(self.vector);
        let mut idle = 0u32;
        let mut last_publish = Instant::now();
        let mut round = 0u32;
        let mut pfds = Vec::with_capacity(nports + 1);
        while !stop.load(Ordering::Relaxed) {
            round = round.wrapping_add(1);
            for port in self.ports.iter_mut() {
                port.refill(&mut self.pool, &mut scratch)?;
            }
            let mut got = 0;
            for p in 0..nports {
                let n = self.ports[p].receive(&mut input, self.vector);
                if n == 0 {
                    continue;
                }
                got += n;
                let cells = &self.port_cells[p];
                cells.rx_packets.fetch_add(n as u64, Ordering::Relaxed);
                let bytes: usize = input.iter().map(Frame::len).sum();
                cells.rx_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                if let Some(tap) = &self.tap {
                    // Broadcast and multicast (ARP requests, neighbour discovery) are also
                    // the forwarding host's business: its kernel gets a copy.
                    for f in &input {
                        let data = self.umem.data(f);
                        if data.first().is_some_and(|b| b & 1 == 1) {
                            tap.learn(data, p as u16);
                            let _ = tap.fd.write(data);
                        }
                    }
                }
                self.pipelines[p].process_from(&self.umem, p as u16, &mut input, &mut out);
                // Drops go straight back to the fill ring they came from.
                self.ports[p].recycle(&mut out.drop, &mut self.pool);
                self.hand_to_kernel(p, &mut out.kernel)?;
                if self.check {
                    self.check_accounting(&input, &out)?;
                }
            }
            // Idle rounds count too, and a readable TAP device ends the wait in poll(2), so
            // the host's frames wait at most TAP_EVERY short rounds.
            if self.index == 0 && self.tap.is_some() && round.is_multiple_of(TAP_EVERY) {
                self.send_kernel_frames(&mut out)?;
            }
            // One transmit (and wakeup) per port per round.
            for p in 0..nports {
                let n = out.tx[p].len();
                if n == 0 {
                    continue;
                }
                let bytes: usize = out.tx[p].iter().map(Frame::len).sum();
                let (offloaded, completed) =
                    finish_checksums(&self.umem, &mut out.tx[p], self.csum_offload);
                let sent = self.ports[p].send(&mut out.tx[p], &mut self.pool)?;
                let cells = &self.port_cells[p];
                cells.tx_packets.fetch_add(sent as u64, Ordering::Relaxed);
                cells.tx_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                cells
                    .tx_ring_full
                    .fetch_add((n - sent) as u64, Ordering::Relaxed);
                if offloaded + completed > 0 {
                    cells.csum_offloaded.fetch_add(offloaded, Ordering::Relaxed);
                    cells.csum_completed.fetch_add(completed, Ordering::Relaxed);
                }
            }
            for port in self.ports.iter_mut() {
                port.complete(&mut self.pool);
            }
            if self.check {
                self.check_accounting(&input, &out)?;
            }
            if got == 0 {
                idle += 1;
                if idle > SPIN_POLLS && self.ports.iter().all(|p| p.tx_in_flight() == 0) {
                    self.wait_for_packets(&mut pfds)?;
                }
            } else {
                idle = 0;
            }
            // Reading the clock every round costs more than a round's ring work in a VM: look
            // at it once every PUBLISH_ROUNDS rounds.
            if round.is_multiple_of(PUBLISH_ROUNDS)
                && last_publish.elapsed() > Duration::from_millis(100)
            {
                *self
                    .pool_stats
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = self.pool.stats();
                last_publish = Instant::now();
            }
        }
        // The programs no longer redirect to us once `drain` is set: take what is in the rx
        // rings and wait for the transmits to complete.
        while !drain.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let mut busy = false;
            for port in self.ports.iter_mut() {
                while port.receive(&mut input, usize::MAX) > 0 {
                    self.pool.free(&mut input);
                }
                port.complete(&mut self.pool);
                if port.tx_in_flight() > 0 {
                    busy = true;
                    let _ = port.socket().tx().map(|t| t.wakeup());
                }
            }
            if !busy || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut end = WorkerEnd::default();
        for port in self.ports.iter_mut() {
            end.ledger_in_kernel += port.in_kernel();
            let r = port.ring_occupancy();
            end.rings.fill += r.fill;
            end.rings.rx += r.rx;
            end.rings.tx += r.tx;
        }
        *self
            .pool_stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = self.pool.stats();
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
    /// WAIT_MS, so the stop flag is still seen. Spinning would hold a CPU while idle; napping
    /// for a fixed time would let a burst overflow the rx ring before the nap ends.
    fn wait_for_packets(&self, pfds: &mut Vec<libc::pollfd>) -> Result<()> {
        use std::os::fd::AsFd;
        let mut fds: Vec<std::os::fd::BorrowedFd<'_>> =
            self.ports.iter().map(|p| p.as_fd()).collect();
        if let (0, Some(tap)) = (self.index, &self.tap) {
            fds.push(tap.fd.as_fd());
        }
        crate::sys::xsk::poll_readable(&fds, pfds, WAIT_MS).map_err(Error::Syscall)?;
        Ok(())
    }

    /// Every frame this worker took from the shared ring is in its cache, a ring, or a vector.
    fn check_accounting(&self, input: &[Frame], out: &Outputs) -> Result<()> {
        let in_kernel: usize = self.ports.iter().map(XskPort::in_kernel).sum();
        let here = self.pool.cached() + in_kernel + input.len() + out.len();
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

    fn hand_to_kernel(&mut self, port: usize, frames: &mut Vec<Frame>) -> Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let cells = &self.port_cells[port];
        match &self.tap {
            Some(tap) => {
                let (_, completed) = finish_checksums(&self.umem, frames, false);
                cells.csum_completed.fetch_add(completed, Ordering::Relaxed);
                for f in frames.iter() {
                    let data = self.umem.data(f);
                    tap.learn(data, port as u16);
                    if tap.fd.write(data).map_err(Error::Syscall)? {
                        cells.to_kernel.fetch_add(1, Ordering::Relaxed);
                    } else {
                        cells.to_kernel_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            None => {
                cells
                    .to_kernel_dropped
                    .fetch_add(frames.len() as u64, Ordering::Relaxed);
            }
        }
        self.ports[port].recycle(frames, &mut self.pool);
        Ok(())
    }

    /// Frames the kernel sent through the TAP device go out of the port their destination was
    /// learnt on, or every port when it is unknown or a group address.
    fn send_kernel_frames(&mut self, out: &mut Outputs) -> Result<()> {
        let Some(tap) = self.tap.clone() else {
            return Ok(());
        };
        let nports = self.ports.len();
        for _ in 0..TAP_BATCH {
            if self.pool.alloc(&mut self.tap_frames, 1) == 0 {
                return Ok(());
            }
            let Some(mut f) = self.tap_frames.pop() else {
                return Ok(());
            };
            let len = match tap.fd.read(self.umem.buffer_mut(&mut f)) {
                Ok(Some(len)) if len >= 14 => len,
                Ok(_) => {
                    self.pool.free_one(f);
                    return Ok(());
                }
                Err(e) => {
                    self.pool.free_one(f);
                    return Err(Error::Syscall(e));
                }
            };
            self.umem.set_len(&mut f, len)?;
            let data = self.umem.data(&f);
            // At least 14 bytes were read: the view cannot fail.
            let dst = ethernet::Frame::new_checked(data).map_or([0xff; 6], |e| e.dst_addr());
            let port = if dst[0] & 1 == 0 {
                tap.learnt
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&dst)
                    .copied()
            } else {
                None
            };
            match port {
                Some(p) if usize::from(p) < nports => {
                    self.port_cells[usize::from(p)]
                        .from_kernel
                        .fetch_add(1, Ordering::Relaxed);
                    out.tx[usize::from(p)].push(f);
                }
                _ => {
                    // Flood: a copy for every port after the first.
                    for p in 1..nports {
                        self.pool.alloc(&mut self.tap_frames, 1);
                        if let Some(mut c) = self.tap_frames.pop() {
                            self.umem.write(&mut c, self.umem.data(&f))?;
                            self.port_cells[p]
                                .from_kernel
                                .fetch_add(1, Ordering::Relaxed);
                            out.tx[p].push(c);
                        }
                    }
                    self.port_cells[0]
                        .from_kernel
                        .fetch_add(1, Ordering::Relaxed);
                    out.tx[0].push(f);
                }
            }
        }
        Ok(())
    }
}
