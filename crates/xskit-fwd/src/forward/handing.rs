//! The supervisor's side of a handover: the workers paused, what a successor takes over
//! with gathered, and the pause ended one way or the other.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use super::Forwarding;
use crate::carry::{CarriedRules, CarriedUserCounts};
use crate::counts::{FrameReport, Report};
use crate::error::{Error, Result};
use crate::handover::{HandedSocket, HandedState, HandedUmem, Handing, PausedState};
use crate::kernel::{Kernel, RealKernel, RunningFilter};

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
        if self.pass_to_tap {
            return refuse("this forwarder runs a TAP device, which is not handed over");
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
        let mut state = self.handed_state();
        state.carried = self.carried(&mut fds)?;
        Ok(Handing { state, fds })
    }

    /// What the filters carry to the successor's, their maps' descriptors added to `fds`;
    /// `None` when a filter has nothing to carry.
    fn carried(&self, fds: &mut Vec<OwnedFd>) -> Result<Option<CarriedRules>> {
        let mut filters = Vec::with_capacity(self.filters.len());
        let mut maps = Vec::new();
        for filter in &self.filters {
            let Some((carried, descriptors)) = filter.carried()? else {
                return Ok(None);
            };
            filters.push(carried);
            maps.extend(descriptors);
        }
        fds.extend(maps);
        let names = self.rules.rules().iter().map(|r| r.name.clone());
        Ok(Some(CarriedRules {
            slots: names.zip(self.slots.in_force().iter().copied()).collect(),
            filters,
        }))
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
            rules: self.user_rule_counts(),
            bonds: self
                .bonds
                .iter()
                .map(|b| b.as_ref().map(|(_, runtime)| runtime.handed()))
                .collect(),
            at_ns: xskit_os::monotonic_ns(),
        })
    }

    /// What each rule counted in user space, summed over the workers: for a successor, once
    /// they paused.
    fn user_rule_counts(&self) -> Vec<CarriedUserCounts> {
        let mut sums: Vec<CarriedUserCounts> = Vec::new();
        for (w, worker) in self.cells.iter().enumerate() {
            for (i, (rule, cells)) in worker.rules.by_id().enumerate() {
                let c = cells.load();
                let counts = [c.packets, c.bytes, c.over_rate];
                match sums.get_mut(i) {
                    Some(sum) if w > 0 => {
                        sum.counts.iter_mut().zip(counts).for_each(|(s, c)| *s += c);
                    }
                    _ => sums.push(CarriedUserCounts {
                        rule: rule.clone(),
                        counts,
                    }),
                }
            }
        }
        sums.retain(|s| s.counts != [0; 3]);
        sums
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
        let devices: Vec<String> = self.filters.iter().map(|f| f.name().to_string()).collect();
        let mut sockets = Vec::new();
        for cell in &self.cells {
            for (socket, name) in cell.sockets.iter().zip(&devices) {
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
            devices,
            extra: Vec::new(),
            bonds: self
                .bonds
                .iter()
                .flatten()
                .map(|(config, _)| crate::handover::bond_shape(config))
                .collect(),
            carried: None,
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

impl Forwarding<RealKernel> {
    /// Carries the state of the forwarder taken over from into the filters, by rule name
    /// ([`crate::carry`]): before they go on their links. Where it cannot, says why in the
    /// warnings; the forwarder runs either way.
    pub(crate) fn carry_over(&mut self) -> Result<()> {
        let Some(takeover) = self._kernel.takeover.as_mut() else {
            return Ok(());
        };
        let paused = takeover.paused()?.clone();
        let inherited = &mut takeover.inherited;
        let pid = inherited.state.pid;
        let carried = inherited.state.carried.clone();
        let maps = std::mem::take(&mut inherited.maps);
        self.carry_bonds(&paused)?;
        let same = carried.as_ref().is_some_and(|c| {
            c.filters
                .iter()
                .zip(&self.filters)
                .all(|(c, f)| c.program == f.program_id())
        });
        let Some(carried) = carried.filter(|_| same) else {
            self.warnings.push(format!(
                "forwarder {pid} runs another filter program (another release of xskit): the \
                 rules' counters, rate-limit buckets and blocked sources start again here; its \
                 summary has what it counted"
            ));
            return Ok(());
        };
        let names = self.rules.rules().iter().map(|r| r.name.clone());
        let now: Vec<(String, u16)> = names.zip(self.slots.in_force().iter().copied()).collect();
        let moves = crate::carry::slot_moves(&carried.slots, &now);
        for ((filter, from), fds) in self.filters.iter().zip(&carried.filters).zip(maps) {
            filter.carry(from, fds, &moves)?;
        }
        self.carry_user_counts(&paused.rules);
        self.carried_rules = Some(moves.len());
        Ok(())
    }

    /// Each bond's controller goes on from where the predecessor's stopped (its LACP
    /// machines, ARP monitor, active member), and the filters are set as it says.
    fn carry_bonds(&mut self, paused: &PausedState) -> Result<()> {
        let ago = Duration::from_nanos(xskit_os::monotonic_ns().saturating_sub(paused.at_ns));
        let mut any = false;
        for (bond, handed) in self.bonds.iter_mut().zip(&paused.bonds) {
            if let (Some((_, runtime)), Some(handed)) = (bond, handed) {
                runtime.carry_on(handed.clone(), ago)?;
                any = true;
            }
        }
        if any {
            self.program_filters()?;
            self.publish_bond_macs();
        }
        Ok(())
    }

    /// Adds what the rules of the same identity counted in user space to the first worker's
    /// counters, before any worker runs.
    fn carry_user_counts(&self, user: &[CarriedUserCounts]) {
        let Some(first) = self.cells.first() else {
            return;
        };
        let by_id: std::collections::HashMap<_, _> = first.rules.by_id().collect();
        for carried in user {
            let Some(cells) = by_id.get(&carried.rule) else {
                continue;
            };
            let [packets, bytes, over_rate] = carried.counts;
            crate::counter::bump(&cells.packets, packets);
            crate::counter::bump(&cells.bytes, bytes);
            crate::counter::bump(&cells.over_rate, over_rate);
        }
    }
}
