//! AF_XDP ports for the pipeline: sockets on several interfaces (or queues) sharing one UMEM
//! and one frame pool, so a frame received on one port is transmitted on another by moving
//! its descriptor, never its bytes.

use std::sync::Arc;

use super::pool::FramePool;
use super::port::{PipelinePort, RingOccupancy};
use crate::error::Result;
use xskit::{Frame, Mode, MovedOn, Onward, Socket, SocketConfig, Umem, XdpProgram};

/// Below this many free fill slots a refill is not worth a ring update.
const FILL_BATCH: u32 = 16;

/// One (interface, queue) of a pipeline, on a UMEM shared with the other ports.
#[derive(Debug)]
pub struct XskPort {
    socket: Socket,
    program: Arc<XdpProgram>,
    fill_target: usize,
    /// Frames given to the fill ring and not yet received (fill ring, rx ring, or in between).
    in_fill_rx: usize,
    /// Frames given to the tx ring and not yet reaped from the completion ring.
    in_tx: usize,
    /// Frames completed since the port opened: the kernel's progress, for the stall watch.
    completed: u64,
    /// Frames on their way from the pool to the fill ring, reused from call to call.
    scratch: Vec<Frame>,
    /// Completed frames on their way to the pool, reused from call to call.
    done: Vec<Frame>,
}

impl XskPort {
    /// Binds queue `queue` of the program's interface on `umem` and registers it with the
    /// program. The first port of a UMEM registers it; later ones share it (their own fill
    /// and completion rings, as the kernel requires for another device or queue) in its mode:
    /// with `config.mode` `ZeroCopy` every port is zero-copy (since Linux 5.10 across devices
    /// too), anything else copies in the program's mode.
    pub fn open(
        umem: &Umem,
        program: Arc<XdpProgram>,
        queue: u32,
        config: &SocketConfig,
    ) -> Result<Self> {
        // Zero-copy stays zero-copy (the sockets sharing the UMEM inherit it from the first);
        // anything else copies in the program's mode.
        let cfg = if config.mode == Mode::ZeroCopy {
            *config
        } else {
            config.mode(Mode::from(program.mode()))
        };
        // Before binding: a zero-copy bind to such a queue is what harms the driver.
        program
            .rx_queues()
            .check(program.interface().name(), queue)?;
        let socket = Socket::bind(umem, program.interface(), queue, &cfg)?;
        program.register(&socket)?;
        Ok(XskPort {
            fill_target: cfg.fill_size as usize,
            socket,
            program,
            in_fill_rx: 0,
            in_tx: 0,
            completed: 0,
            scratch: Vec::with_capacity(cfg.fill_size as usize),
            done: Vec::with_capacity(cfg.completion_size as usize),
        })
    }

    /// A socket another process handed over ([`Socket::adopt`]), registered with `program`
    /// (which [`XdpProgram::take_over`] put on that process's link). `ledger` is what that
    /// process's port held in the kernel ([`PipelinePort::ledger`]): receive buffers given
    /// to the fill ring and not yet received, and transmits not yet completed.
    pub fn adopt(
        socket: Socket,
        program: Arc<XdpProgram>,
        ledger: (usize, usize),
        config: &SocketConfig,
    ) -> Result<Self> {
        program
            .rx_queues()
            .check(program.interface().name(), socket.queue())?;
        program.register(&socket)?;
        Ok(XskPort {
            fill_target: config.fill_size as usize,
            socket,
            program,
            in_fill_rx: ledger.0,
            in_tx: ledger.1,
            completed: 0,
            scratch: Vec::with_capacity(config.fill_size as usize),
            done: Vec::with_capacity(config.completion_size as usize),
        })
    }

    /// The socket (statistics, rings).
    pub fn socket(&mut self) -> &mut Socket {
        &mut self.socket
    }
}

impl std::os::fd::AsFd for XskPort {
    /// The socket's descriptor, to wait for packets with poll(2).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl PipelinePort for XskPort {
    fn set_inactive(&mut self, inactive: bool) -> Result<()> {
        self.program.refuse_all(inactive)?;
        Ok(())
    }

    /// Keeps the fill ring stocked from `pool` (topped up once it is FILL_BATCH short): an
    /// empty fill ring drops packets in the kernel while the worker naps.
    fn refill(&mut self, _umem: &Umem, pool: &mut FramePool) -> Result<()> {
        let Some(fill) = self.socket.fill() else {
            return Ok(());
        };
        let want = self.fill_target.saturating_sub(fill.pending() as usize);
        if want >= FILL_BATCH as usize {
            pool.alloc(&mut self.scratch, want);
            let n = fill.fill(&mut self.scratch, usize::MAX);
            self.in_fill_rx += n;
            pool.free(&mut self.scratch);
        }
        if fill.needs_wakeup() {
            fill.wakeup()?;
        }
        Ok(())
    }

    /// Tops the fill ring up (once it is FILL_BATCH short) from `from`'s completion ring,
    /// descriptor to descriptor; the kernel refuses nothing here, and a socket of another
    /// UMEM gives nothing.
    fn refill_from(&mut self, from: &mut Self) -> usize {
        let (Some(fill), Some(done)) = (self.socket.fill(), from.socket.completion()) else {
            return 0;
        };
        let want = self.fill_target.saturating_sub(fill.pending() as usize);
        if want < FILL_BATCH as usize {
            return 0;
        }
        let n = done.recycle_into(fill, want);
        self.in_fill_rx += n;
        from.in_tx -= n;
        from.completed += n as u64;
        n
    }

    /// Received frames straight onto `to`'s tx ring, descriptor to descriptor; the ledgers
    /// move with them.
    fn forward_to(
        &mut self,
        to: &mut Self,
        _umem: &Umem,
        _pool: &mut FramePool,
        max: usize,
        decide: impl FnMut(&mut [u8], bool, xskit::Front<'_>) -> Onward,
    ) -> Result<MovedOn> {
        let (Some(rx), Some(tx)) = (self.socket.rx(), to.socket.tx()) else {
            return Ok(MovedOn::default());
        };
        let moved = rx.forward_while(tx, max, decide);
        self.in_fill_rx -= moved.sent;
        to.in_tx += moved.sent;
        Ok(moved)
    }

    fn kick(&mut self) -> Result<()> {
        if let Some(tx) = self.socket.tx() {
            tx.wakeup_if_stalled(self.in_tx, self.completed)?;
        }
        Ok(())
    }

    /// Reads the kernel's rx producer index only when the frames seen before are taken.
    fn may_have_received(&mut self) -> bool {
        self.socket.rx().is_some_and(|rx| rx.available() > 0)
    }

    /// Moves up to `max` received frames into `out`; returns how many.
    fn receive(
        &mut self,
        _umem: &Umem,
        _pool: &mut FramePool,
        out: &mut Vec<Frame>,
        max: usize,
    ) -> Result<usize> {
        let n = self.socket.rx().map_or(0, |rx| rx.receive(out, max));
        self.in_fill_rx -= n;
        Ok(n)
    }

    /// Gives `frames` (emptied) straight back to the fill ring, the way a dropped packet's
    /// buffer is reused at once; what the ring cannot take goes to `pool`.
    fn recycle(&mut self, frames: &mut Vec<Frame>, pool: &mut FramePool) {
        if let Some(fill) = self.socket.fill() {
            self.in_fill_rx += fill.fill(frames, usize::MAX);
        }
        pool.free(frames);
    }

    /// Transmits `frames` (emptied: what the ring cannot take goes back to `pool`); reaps
    /// completions into `pool`. Returns how many were queued. A multi-buffer packet (frames
    /// marked continued, then its last) is queued whole or not at all: the kernel would
    /// otherwise join the part that fitted to the next packet.
    fn send(
        &mut self,
        _umem: &Umem,
        frames: &mut Vec<Frame>,
        pool: &mut FramePool,
    ) -> Result<usize> {
        self.complete(pool);
        let Some(tx) = self.socket.tx() else {
            pool.free(frames);
            return Ok(0);
        };
        let room = (tx.free(frames.len().min(u32::MAX as usize) as u32) as usize).min(frames.len());
        let fit = xskit::whole_packets_len(&frames[..room]);
        let n = tx.send(frames, fit);
        self.in_tx += n;
        // Frames that did not fit are dropped back to the pool, as a full NIC queue drops
        // (before the wakeup, so a failed one leaves no frame outside the pool's count).
        pool.free(frames);
        tx.wakeup_if_stalled(self.in_tx, self.completed)?;
        Ok(n)
    }

    /// Reaps transmitted frames into `pool`; returns how many.
    fn complete(&mut self, pool: &mut FramePool) -> usize {
        let n = match self.socket.completion() {
            Some(c) => c.complete(&mut self.done, usize::MAX),
            None => 0,
        };
        self.in_tx -= n;
        self.completed += n as u64;
        pool.free(&mut self.done);
        n
    }

    /// Frames this port has handed to the kernel and not had back.
    fn in_flight(&self) -> usize {
        self.in_fill_rx + self.in_tx
    }

    /// Frames transmitted and not yet reaped.
    fn tx_in_flight(&self) -> usize {
        self.in_tx
    }

    /// What the kernel's ring indices say this port's rings hold, to check the ledger of
    /// [`PipelinePort::in_flight`] against: frames in the fill ring, in the rx ring, and in the tx
    /// and completion rings together.
    fn ring_occupancy(&mut self) -> Option<RingOccupancy> {
        let fill = self.socket.fill().map_or(0, |f| f.pending()) as usize;
        let rx = self.socket.rx().map_or(0, |r| r.available()) as usize;
        let tx_ring = self.socket.tx().map_or(0, |t| t.pending()) as usize;
        let completion = self.socket.completion().map_or(0, |c| c.available()) as usize;
        Some(RingOccupancy {
            fill,
            rx,
            tx: tx_ring + completion,
        })
    }

    fn flush(&mut self) -> Result<()> {
        if let Some(tx) = self.socket.tx() {
            tx.wakeup()?;
        }
        Ok(())
    }

    fn wakeups(&self) -> xskit::Wakeups {
        self.socket.wakeups()
    }

    fn readiness<'a>(&'a self, fds: &mut Vec<std::os::fd::BorrowedFd<'a>>) {
        fds.push(std::os::fd::AsFd::as_fd(&self.socket));
    }
}
