//! AF_XDP ports for the pipeline: sockets on several interfaces (or queues) sharing one UMEM
//! and one frame pool, so a frame received on one port is transmitted on another by moving
//! its descriptor, never its bytes.

use std::sync::Arc;

use super::pool::FramePool;
use crate::error::Result;
use crate::program::XdpProgram;
use crate::socket::{BindMode, Socket, SocketConfig};
use crate::sys::umem::{Frame, Umem};

/// Below this many free fill slots a refill is not worth a ring update.
const FILL_BATCH: u32 = 16;

/// One (interface, queue) of a pipeline, on a UMEM shared with the other ports.
#[derive(Debug)]
pub struct XskPort {
    socket: Socket,
    _program: Arc<XdpProgram>,
    fill_target: usize,
    /// Frames handed to the kernel and not yet back: fill + rx + tx + completion rings.
    in_kernel: usize,
    /// Completed frames on their way to the pool, reused from call to call.
    done: Vec<Frame>,
}

impl XskPort {
    /// Binds queue `queue` of the program's interface on `umem` and registers it with the
    /// program. The first port of a UMEM registers it; later ones share it (their own fill
    /// and completion rings, as the kernel requires for another device or queue).
    pub fn open(
        umem: &Umem,
        program: Arc<XdpProgram>,
        queue: u32,
        config: &SocketConfig,
    ) -> Result<Self> {
        let mut cfg = *config;
        cfg.bind_mode = BindMode::Copy;
        let socket = Socket::bind(umem, program.interface(), queue, &cfg)?;
        program.register(&socket)?;
        Ok(XskPort {
            fill_target: cfg.fill_size as usize / 2,
            socket,
            _program: program,
            in_kernel: 0,
            done: Vec::with_capacity(cfg.completion_size as usize),
        })
    }

    /// Keeps about half the fill ring stocked from `pool`.
    pub fn refill(&mut self, pool: &mut FramePool, scratch: &mut Vec<Frame>) -> Result<()> {
        let Some(fill) = self.socket.fill() else {
            return Ok(());
        };
        let want = self.fill_target.saturating_sub(fill.pending() as usize);
        if want >= FILL_BATCH as usize {
            pool.alloc(scratch, want);
            let n = fill.fill(scratch, usize::MAX);
            self.in_kernel += n;
            pool.free(scratch);
        }
        if fill.needs_wakeup() {
            fill.wakeup()?;
        }
        Ok(())
    }

    /// Moves up to `max` received frames into `out`; returns how many.
    pub fn receive(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let n = self.socket.rx().map_or(0, |rx| rx.receive(out, max));
        self.in_kernel -= n;
        n
    }

    /// Transmits `frames` (emptied: what the ring cannot take goes back to `pool`); reaps
    /// completions into `pool`. Returns how many were queued.
    pub fn send(&mut self, frames: &mut Vec<Frame>, pool: &mut FramePool) -> Result<usize> {
        self.complete(pool);
        let Some(tx) = self.socket.tx() else {
            pool.free(frames);
            return Ok(0);
        };
        let n = tx.send(frames, usize::MAX);
        self.in_kernel += n;
        tx.wakeup_if_needed()?;
        // Frames that did not fit are dropped back to the pool, as a full NIC queue drops.
        pool.free(frames);
        Ok(n)
    }

    /// Reaps transmitted frames into `pool`; returns how many.
    pub fn complete(&mut self, pool: &mut FramePool) -> usize {
        let n = match self.socket.completion() {
            Some(c) => c.complete(&mut self.done, usize::MAX),
            None => 0,
        };
        self.in_kernel -= n;
        pool.free(&mut self.done);
        n
    }

    /// Frames this port has handed to the kernel and not had back.
    pub fn in_kernel(&self) -> usize {
        self.in_kernel
    }

    /// The socket (statistics, rings).
    pub fn socket(&mut self) -> &mut Socket {
        &mut self.socket
    }
}
