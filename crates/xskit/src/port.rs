//! A port: one socket on one queue with its own UMEM, frame pool and (shared) XDP program.
//! The shortest way from an interface name to receiving and sending batches.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::interface::Interface;
use crate::mode::{AttachedMode, Mode, ModeInfo};
use crate::program::XdpProgram;
use crate::socket::{Socket, SocketConfig, Statistics};
use crate::sys::umem::{Frame, Umem, UmemConfig};

/// Settings of a port: start from `PortConfig::default()` and change what you need, with
/// the setters (`PortConfig::default().mode(Mode::Skb)`) or the fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortConfig {
    /// The mode, for both the program and the socket.
    pub mode: Mode,
    /// The UMEM layout.
    pub umem: UmemConfig,
    /// Ring sizes and socket options (the bind mode is set from `mode`).
    pub socket: SocketConfig,
    /// Transmit only: no XDP program is attached (the interface's traffic is left alone) and
    /// the socket has no rx ring.
    pub tx_only: bool,
}

/// One socket with its own UMEM and frame pool, and the XDP program that feeds it.
///
/// ```no_run
/// use xskit::{Port, PortConfig};
/// let mut port = Port::open("eth0", 0, &PortConfig::default())?;
/// let mut batch = Vec::with_capacity(64);
/// loop {
///     port.receive(&mut batch, 64)?;
///     port.recycle(&mut batch); // drop them: the frames go back to the fill ring
/// }
/// # Ok::<(), xskit::Error>(())
/// ```
#[derive(Debug)]
pub struct Port {
    socket: Socket,
    program: Option<Arc<XdpProgram>>,
    umem: Umem,
    pool: Vec<Frame>,
    mode: ModeInfo,
    tx_pending: usize,
    /// Frames completed since the port opened: the kernel's progress, for the stall watch.
    tx_completed: u64,
}

xskit_os::config_setters!(PortConfig {
    /// Sets the mode.
    mode: Mode,
    /// Sets the UMEM layout.
    umem: UmemConfig,
    /// Sets the ring sizes and socket options.
    socket: SocketConfig,
    /// Makes the port transmit-only.
    tx_only: bool,
});

impl PortConfig {
    /// Checks the UMEM layout and the ring sizes, before anything is attached or allocated.
    pub fn validate(&self) -> Result<()> {
        self.umem.validate()?;
        self.socket.validate()
    }
}

/// Below this many free fill slots a refill is not worth a ring update (VPP's threshold).
const FILL_THRESHOLD: u32 = 16;

impl Port {
    /// Opens queue `queue` of `iface`: attaches the program, creates the UMEM, binds the socket
    /// and gives the kernel frames to receive into.
    pub fn open(iface: &str, queue: u32, config: &PortConfig) -> Result<Port> {
        config.validate()?;
        if config.tx_only {
            return Port::open_tx_only(iface, queue, config);
        }
        Port::open_with(attach_for(iface, config)?, queue, config)
    }

    fn open_tx_only(iface: &str, queue: u32, config: &PortConfig) -> Result<Port> {
        let iface = Interface::by_name(iface)?;
        let mut socket_cfg = config.socket;
        socket_cfg.rx_size = 0;
        socket_cfg.mode = config.mode;
        Port::assemble(None, &iface, queue, config.umem, &socket_cfg)
    }

    /// Opens one port per queue in `queues`, all fed by one program.
    pub fn open_queues(iface: &str, queues: &[u32], config: &PortConfig) -> Result<Vec<Port>> {
        config.validate()?;
        let program = attach_for(iface, config)?;
        queues
            .iter()
            .map(|&q| Port::open_with(program.clone(), q, config))
            .collect()
    }

    /// Opens a queue of the program's interface and registers it with the program.
    pub fn open_with(program: Arc<XdpProgram>, queue: u32, config: &PortConfig) -> Result<Port> {
        let mut socket_cfg = config.socket;
        // Auto over a generic program binds copy: zero-copy needs a native one.
        socket_cfg.mode = match (config.mode, program.mode()) {
            (Mode::Auto, AttachedMode::Skb) => Mode::Skb,
            (mode, _) => mode,
        };
        let iface = program.interface().clone();
        // Before binding: a zero-copy bind to such a queue is what harms the driver.
        program.rx_queues().check(iface.name(), queue)?;
        Port::assemble(Some(program), &iface, queue, config.umem, &socket_cfg)
    }

    fn assemble(
        program: Option<Arc<XdpProgram>>,
        iface: &Interface,
        queue: u32,
        umem_cfg: UmemConfig,
        socket_cfg: &SocketConfig,
    ) -> Result<Port> {
        let umem = Umem::new(umem_cfg)?;
        let mut socket = Socket::bind(&umem, iface, queue, socket_cfg)?;
        if let Some(p) = &program {
            p.register(&socket)?;
        }
        let mut pool = umem.take_frames().unwrap_or_default();
        if socket_cfg.rx_size > 0 {
            let fill = socket.fill().map_or(0, |f| f.size()) as usize;
            // Keep half the frames for transmit unless the fill ring wants fewer.
            let give = fill.min(pool.len() / 2).max(pool.len().min(1));
            if let Some(f) = socket.fill() {
                f.fill(&mut pool, give);
            }
        }
        let mut fallbacks: Vec<String> = program
            .as_ref()
            .and_then(|p| p.fallback_reason())
            .map(str::to_string)
            .into_iter()
            .collect();
        fallbacks.extend(socket.fallback_reason().map(str::to_string));
        let transmits = socket_cfg.tx_size > 0;
        let caveats = match iface.driver() {
            Some(d) if socket.is_zero_copy() && transmits => d.zero_copy_transmit_caveat(),
            _ => None,
        };
        let mode = ModeInfo {
            attach: program.as_ref().map(|p| p.mode()),
            zero_copy: socket.is_zero_copy(),
            fallbacks,
            caveats: caveats.map(str::to_string).into_iter().collect(),
        };
        Ok(Port {
            socket,
            program,
            umem,
            pool,
            mode,
            tx_pending: 0,
            tx_completed: 0,
        })
    }

    /// The mode obtained.
    pub fn mode(&self) -> &ModeInfo {
        &self.mode
    }
    /// The UMEM, for reading and writing frame data.
    pub fn umem(&self) -> &Umem {
        &self.umem
    }
    /// The socket, for direct ring access.
    pub fn socket(&mut self) -> &mut Socket {
        &mut self.socket
    }
    /// The program feeding this port (`None` for a transmit-only port).
    pub fn program(&self) -> Option<&Arc<XdpProgram>> {
        self.program.as_ref()
    }
    /// Free frames held by the port.
    pub fn pool_len(&self) -> usize {
        self.pool.len()
    }
    /// The socket's kernel statistics.
    pub fn statistics(&self) -> Result<Statistics> {
        self.socket.statistics()
    }

    /// Tops up the fill ring from the pool when at least a few slots are free.
    pub fn refill(&mut self) {
        let Some(fill) = self.socket.fill() else {
            return;
        };
        if !self.pool.is_empty() && fill.free(FILL_THRESHOLD) >= FILL_THRESHOLD {
            fill.fill(&mut self.pool, usize::MAX);
        }
    }

    /// Wakes the kernel's receive path if it asked (need_wakeup), as xdpsock does: only after
    /// a receive came back empty, so a busy port makes no system call.
    fn wake_fill_if_needed(&mut self) -> Result<()> {
        if let Some(fill) = self.socket.fill() {
            if fill.needs_wakeup() {
                fill.wakeup()?;
            }
        }
        Ok(())
    }

    /// Receives up to `max` frames into `out`, refilling the fill ring first; returns how many.
    pub fn receive(&mut self, out: &mut Vec<Frame>, max: usize) -> Result<usize> {
        self.refill();
        let n = self.socket.rx().map_or(0, |rx| rx.receive(out, max));
        if n == 0 {
            self.wake_fill_if_needed()?;
        }
        Ok(n)
    }

    /// Waits up to `timeout` (`None`: until packets come) for packets, then receives like
    /// [`Port::receive`].
    pub fn poll_receive(
        &mut self,
        out: &mut Vec<Frame>,
        max: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.refill();
        let Some(rx) = self.socket.rx() else {
            return Ok(0);
        };
        if rx.available() == 0 {
            // poll() itself wakes the kernel's receive path, so no separate wakeup is needed.
            rx.poll(timeout)?;
        }
        Ok(rx.receive(out, max))
    }

    /// Gives frames back to the port's pool (for receive or transmit), emptying `frames`.
    pub fn recycle(&mut self, frames: &mut Vec<Frame>) {
        self.pool.append(frames);
    }

    /// Takes up to `n` empty frames for transmit from the pool into `out`, reaping completed
    /// transmits first; returns how many.
    pub fn alloc(&mut self, out: &mut Vec<Frame>, n: usize) -> usize {
        self.complete();
        let take = n.min(self.pool.len());
        for _ in 0..take {
            if let Some(mut f) = self.pool.pop() {
                self.umem.reset(&mut f);
                out.push(f);
            }
        }
        take
    }

    /// Reaps completed transmits into the pool; returns how many.
    pub fn complete(&mut self) -> usize {
        let n = self
            .socket
            .completion()
            .map_or(0, |c| c.complete(&mut self.pool, usize::MAX));
        self.tx_pending = self.tx_pending.saturating_sub(n);
        self.tx_completed += n as u64;
        n
    }

    /// Transmits frames from the front of `frames` (see [`crate::TxRing::send`]), waking the
    /// kernel if it asked; returns how many were queued.
    pub fn send(&mut self, frames: &mut Vec<Frame>) -> Result<usize> {
        self.complete();
        let Some(tx) = self.socket.tx() else {
            return Err(Error::NoTxRing);
        };
        let n = tx.send(frames, usize::MAX);
        self.tx_pending += n;
        tx.wakeup_if_stalled(self.tx_pending, self.tx_completed)?;
        Ok(n)
    }

    /// Receives and drops up to `max` packets in one pass: their frames go straight back to
    /// the fill ring, with no handle made (xdpsock's rxdrop); returns how many. For a port
    /// whose socket shares another's fill ring, use [`Port::receive`] and [`Port::recycle`].
    pub fn drop_received(&mut self, max: usize) -> Result<usize> {
        let n = self.socket.recycle_received(max);
        if n > 0 {
            return Ok(n);
        }
        let Some(fill) = self.socket.fill() else {
            return Ok(0);
        };
        let (pending, size) = (fill.pending(), fill.size());
        if pending == size {
            // A fill ring the pool has topped up has no room: received frames wait in the
            // pool. Only then: a receive here whenever the rx ring looked empty would race
            // the kernel and strand frames in the pool while the rx ring stays busy.
            let n = self
                .socket
                .rx()
                .map_or(0, |rx| rx.receive(&mut self.pool, max));
            if n > 0 {
                return Ok(n);
            }
        } else if pending < size / 2 {
            self.refill();
        }
        self.wake_fill_if_needed()?;
        Ok(0)
    }

    /// Tops up the fill ring from the pool only when it is less than half stocked. The batch
    /// verbs give frames straight back to the fill ring: topping up a stocked one would take
    /// the room they go back into, and send them through the pool instead.
    fn refill_if_low(&mut self) {
        if self.pool.is_empty() {
            return;
        }
        let low = self
            .socket
            .fill()
            .is_some_and(|f| f.pending() < f.size() / 2);
        if low {
            self.refill();
        }
    }

    /// Sends up to `max` received packets straight back out of the interface they came in
    /// on, after `edit` has seen (and may have changed) each frame's bytes, as xdpsock's
    /// l2fwd does: received frames go onto the tx ring and transmitted frames back to the
    /// fill ring, with no handle made for any; returns how many were sent. A frame the
    /// kernel would not transmit is dropped into the port's pool.
    pub fn reflect(&mut self, max: usize, edit: impl FnMut(&mut [u8])) -> Result<usize> {
        let done = self.socket.recycle_completed(usize::MAX);
        self.tx_pending = self.tx_pending.saturating_sub(done);
        self.tx_completed += done as u64;
        // What a full fill ring had no room for waits in the pool.
        if self.socket.fill().is_some_and(|f| f.free(1) == 0) {
            self.complete();
        }
        self.refill_if_low();
        let forwarded = self.socket.forward_received(max, edit);
        let n = forwarded.sent;
        self.tx_pending += n;
        if forwarded.refused {
            // A frame the kernel would not transmit must not hold up the ones behind it.
            self.socket.rx().map(|rx| rx.take_one(&mut self.pool));
        }
        let Some(tx) = self.socket.tx() else {
            return Err(Error::NoTxRing);
        };
        if self.tx_pending > 0 {
            tx.wakeup_if_stalled(self.tx_pending, self.tx_completed)?;
        }
        if n == 0 {
            self.wake_fill_if_needed()?;
        }
        Ok(n)
    }

    /// Sends up to `max` transmitted frames again as soon as the kernel hands them back,
    /// straight from the completion ring to the tx ring, each with `len` bytes (a traffic
    /// generator's frames, written once and put on the tx ring first, e.g. with
    /// [`crate::TxRing::send`]); returns how many. A `len` of 0 or more than a frame holds
    /// is refused. Keep at most the completion ring's size of frames circulating: the kernel sends
    /// only what it has room to complete, and a tx ring full of frames it cannot send leaves
    /// this no room to take completions into. [`Port::send`], [`Port::alloc`] and
    /// [`Port::complete`] reap completions into the port's pool instead: those frames are not
    /// sent again.
    pub fn resend(&mut self, max: usize, len: usize) -> Result<usize> {
        let room = self.umem.room();
        if len == 0 || len > room {
            return Err(Error::ResendLength { len, room });
        }
        let n = self.socket.resend_completed(max, len);
        let Some(tx) = self.socket.tx() else {
            return Err(Error::NoTxRing);
        };
        if n > 0 || tx.pending() > 0 {
            tx.wakeup_if_needed()?;
        }
        Ok(n)
    }

    /// Frames sent and not yet completed.
    pub fn tx_in_flight(&self) -> usize {
        self.tx_pending
    }

    /// Waits for the kernel to send what is on the transmit ring, reaping the completions,
    /// and gives up once `idle` passes with none (a link that is down keeps its frames);
    /// returns the frames still in flight then. It kicks the kernel while it waits whether
    /// or not the ring asks for it: need_wakeup is a hint a driver keeps, and a driver that
    /// stopped sending without asking would otherwise keep the frames for ever.
    pub fn finish_sending(&mut self, idle: Duration) -> Result<usize> {
        let mut progressed = std::time::Instant::now();
        while self.tx_pending > 0 {
            if self.complete() > 0 {
                progressed = std::time::Instant::now();
                continue;
            }
            if progressed.elapsed() >= idle {
                break;
            }
            if let Some(tx) = self.socket.tx() {
                tx.wakeup()?;
            }
            std::thread::sleep(FINISH_KICK_EVERY);
        }
        Ok(self.tx_pending)
    }
}

/// How often [`Port::finish_sending`] kicks a transmit ring whose frames are not completing.
const FINISH_KICK_EVERY: Duration = Duration::from_micros(200);

/// Attaches the program a port of `config` needs to `iface`.
fn attach_for(iface: &str, config: &PortConfig) -> Result<Arc<XdpProgram>> {
    let iface = Interface::by_name(iface)?;
    Ok(Arc::new(XdpProgram::attach(
        &iface,
        config.mode,
        config.socket.multi_buffer,
    )?))
}

/// The socket's descriptor, for an event loop (epoll, mio, tokio's `AsyncFd`): readable when
/// the receive ring has packets.
impl std::os::fd::AsFd for Port {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.socket.as_fd()
    }
}
