//! The supervisor's side of a handover: the workers paused, what a successor takes over
//! with gathered, and the pause ended one way or the other.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use super::Forwarding;
use crate::counts::{FrameReport, Report};
use crate::error::{Error, Result};
use crate::handover::{HandedSocket, HandedState, HandedUmem, Handing, PausedState};
use crate::kernel::{Kernel, RunningFilter};

/// How long the workers get to pause.
const PAUSE_WAIT: Duration = Duration::from_secs(2);

fn refuse<T>(reason: impl Into<String>) -> Result<T> {
    Err(Error::TakeOver {
        reason: reason.into(),
    })
}

impl<K: Kernel> Forwarding<K> {
    /// What a successor takes over with: the descriptors, and the state that does not change
    /// while the workers run. The successor loads its programs with them, then asks for
    /// [`Forwarding::pause_for_successor`].
    pub(crate) fn handing(&mut self) -> Result<Handing> {
        if self.handed_to.is_some() {
            return refuse("handed over already");
        }
        if self.bonds.iter().any(Option::is_some) || self.pass_to_tap {
            return refuse(
                "this forwarder runs a bond or a TAP device, whose state is not handed over",
            );
        }
        let mut fds = vec![self.umem_fd()?];
        for filter in &self.filters {
            fds.push(filter.link_fd()?);
        }
        for cell in &self.cells {
            for socket in &cell.sockets {
                fds.push(dup(socket)?);
            }
        }
        Ok(Handing {
            state: self.handed_state(),
            fds,
        })
    }

    /// Pauses the workers between two rounds (packets wait in the rings) and says where
    /// every frame is.
    pub(crate) fn pause_for_successor(&mut self) -> Result<PausedState> {
        if self.paused_since.is_some() || self.handed_to.is_some() {
            return refuse("a handover is under way already");
        }
        self.pause.ask(self.cells.len());
        self.paused_since = Some(Instant::now());
        let deadline = Instant::now() + PAUSE_WAIT;
        let held = loop {
            if let Some(held) = self.pause.all_paused() {
                break held;
            }
            if Instant::now() > deadline {
                self.resume_workers();
                return refuse("the workers did not pause in time; they go on");
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        Ok(PausedState {
            free: self.shared.addresses(),
            held: held.concat(),
        })
    }

    fn umem_fd(&self) -> Result<OwnedFd> {
        match self.umem.file() {
            Some(fd) => dup(&fd),
            None => refuse("the UMEM is not shareable"),
        }
    }

    /// What the successor is told first.
    fn handed_state(&self) -> HandedState {
        let c = &self.socket_config;
        let mut sockets = Vec::new();
        for cell in &self.cells {
            for (socket, name) in cell.sockets.iter().zip(&self.names) {
                sockets.push(HandedSocket {
                    iface: name.clone(),
                    queue: socket.queue(),
                    rings: [c.fill_size, c.completion_size, c.rx_size, c.tx_size],
                });
            }
        }
        let u = self.umem.config();
        HandedState {
            pid: std::process::id(),
            interfaces: self.names.clone(),
            queues: self.queues,
            zero_copy: self.zero_copy,
            umem: HandedUmem {
                frame_size: u.frame_size,
                frame_count: u.frame_count,
                tx_metadata_len: u.tx_metadata_len,
            },
            sockets,
            rules_generation: self.generation.number,
        }
    }

    /// Ends the pause: handed to `successor`, or resumed.
    pub(crate) fn end_handover(&mut self, successor: Option<u32>) -> Result<()> {
        if self.paused_since.is_none() {
            return refuse(
                "no handover is under way (it waited too long and the forwarder went on)",
            );
        }
        match successor {
            Some(pid) => {
                self.pause.hand_over();
                self.handed_to = Some(pid);
            }
            None => self.resume_workers(),
        }
        Ok(())
    }

    /// A pause nobody ended within [`crate::handover::HANDOVER_WAIT`] ends: the workers go on.
    pub(crate) fn resume_if_abandoned(&mut self) {
        let waited = self.paused_since.map(|t| t.elapsed());
        if self.handed_to.is_none() && waited > Some(crate::handover::HANDOVER_WAIT) {
            self.resume_workers();
        }
    }

    fn resume_workers(&mut self) {
        self.pause.resume();
        self.paused_since = None;
    }

    /// The report of a forwarder that handed over to `pid`: its counters until then, its
    /// frames where they were at the handover.
    pub(crate) fn handed_report(
        &mut self,
        seconds: f64,
        workers: usize,
        pid: u32,
    ) -> Result<Report> {
        self.summary = true;
        let counters = self.counters()?;
        let pool = self.shared.len() as u64;
        Ok(Report {
            duration_s: seconds,
            workers,
            zero_copy: self.zero_copy,
            counters,
            frames: FrameReport {
                total: self.total as u64,
                pool,
                kernel_held: self.total as u64 - pool,
                ..FrameReport::default()
            },
            fault: None,
            handed_to: Some(pid),
        })
    }
}

fn dup(fd: &impl std::os::fd::AsFd) -> Result<OwnedFd> {
    fd.as_fd()
        .try_clone_to_owned()
        .map_err(|e| Error::TakeOver {
            reason: format!("duplicating a descriptor to hand over: {e}"),
        })
}
