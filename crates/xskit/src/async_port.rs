//! A [`Port`] in tokio (feature `tokio`): a task waits in tokio's reactor for packets instead
//! of spinning or blocking a thread in `poll()`.

use std::os::fd::{AsFd, OwnedFd};

use tokio::io::unix::AsyncFd;

use crate::sys::SyscallError;
use crate::{Frame, Port, Result};

/// A port whose socket is registered with tokio's reactor. Made inside a tokio runtime.
#[derive(Debug)]
pub struct AsyncPort {
    port: Port,
    readiness: AsyncFd<OwnedFd>,
}

impl AsyncPort {
    /// Registers `port`'s socket with the current tokio runtime (it panics outside one, as
    /// tokio's own types do).
    pub fn new(port: Port) -> Result<AsyncPort> {
        let fd = port
            .as_fd()
            .try_clone_to_owned()
            .map_err(|os_error| SyscallError {
                call: "dup(AF_XDP socket)",
                os_error,
            })?;
        let readiness = crate::sys::reactor::register_readable(fd)?;
        Ok(AsyncPort { port, readiness })
    }

    /// The port, for what needs no waiting: `alloc`, `recycle`, `umem`, `statistics`...
    pub fn port(&mut self) -> &mut Port {
        &mut self.port
    }

    /// The port back, unregistered.
    pub fn into_inner(self) -> Port {
        self.port
    }

    /// Waits for packets and moves up to `max` frames of them into `out`; returns how many
    /// (at least one).
    pub async fn receive(&mut self, out: &mut Vec<Frame>, max: usize) -> Result<usize> {
        loop {
            let mut ready = self
                .readiness
                .readable()
                .await
                .map_err(|os_error| SyscallError {
                    call: "epoll_wait(tokio reactor)",
                    os_error,
                })?;
            let n = self.port.receive(out, max)?;
            if n > 0 {
                return Ok(n);
            }
            // Readiness is an edge: cleared only once the ring is seen empty, or a packet
            // that came meanwhile would wait for the next one.
            ready.clear_ready();
        }
    }

    /// Puts every frame of `frames` on the transmit ring, letting other tasks run while the
    /// ring is full (completions free it).
    pub async fn send(&mut self, frames: &mut Vec<Frame>) -> Result<()> {
        loop {
            self.port.send(frames)?;
            self.port.complete();
            if frames.is_empty() {
                return Ok(());
            }
            tokio::task::yield_now().await;
        }
    }
}
