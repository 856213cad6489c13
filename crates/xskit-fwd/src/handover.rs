//! Handing a running forwarder to a successor on the same interfaces, with no packet lost:
//! what is handed over (the UMEM's memfd, each interface's bpf_link, each socket, and which
//! frames are free and what each socket holds in the kernel), how the workers pause for it,
//! and the checks a successor makes before it commits. The protocol around it is in
//! [`crate::control`].

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use xskit_os::sync::LockUnpoisoned;

use crate::config::ForwardConfig;
use crate::error::{Error, Result};

/// How long a forwarder waits for its successor's next step, and stays paused for one that
/// has not committed.
pub const HANDOVER_WAIT: Duration = Duration::from_secs(10);

/// How long a forwarder that has handed its descriptors over waits, forwarding on, for its
/// successor to load its programs and ask it to pause: long, since nothing waits meanwhile
/// and loading takes seconds on a fast machine, a minute under emulation.
pub const LOAD_WAIT: Duration = Duration::from_secs(180);

/// The forwarder handing over, as its successor drives it: the control protocol's
/// [`crate::control::HandoverClient`].
pub trait Predecessor: Send {
    /// Pauses its workers and says where its frames are.
    fn pause(&mut self) -> Result<PausedState>;
    /// Ends its run: this process has the rings from now on.
    fn commit(self: Box<Self>) -> Result<()>;
}

/// A takeover under way: what was handed over, and the predecessor to pause and commit once
/// everything that can be made ahead is made.
pub(crate) struct Takeover {
    pub(crate) inherited: Inherited,
    predecessor: Mutex<Option<Box<dyn Predecessor>>>,
    paused: OnceLock<PausedState>,
}

impl Takeover {
    pub(crate) fn new(inherited: Inherited, predecessor: Box<dyn Predecessor>) -> Self {
        Takeover {
            inherited,
            predecessor: Mutex::new(Some(predecessor)),
            paused: OnceLock::new(),
        }
    }

    /// Where the frames are: at the first call the predecessor pauses and commits.
    pub(crate) fn paused(&self) -> Result<&PausedState> {
        if let Some(p) = self.paused.get() {
            return Ok(p);
        }
        let Some(mut predecessor) = self.predecessor.lock_unpoisoned().take() else {
            return Err(Error::TakeOver {
                reason: "the predecessor's pause failed earlier".into(),
            });
        };
        let paused = predecessor.pause()?;
        if paused.held.len() != self.inherited.state.sockets.len() {
            return Err(Error::TakeOver {
                reason: format!(
                    "the forwarder handing over paused with {} sockets, where it named {}",
                    paused.held.len(),
                    self.inherited.state.sockets.len()
                ),
            });
        }
        predecessor.commit()?;
        Ok(self.paused.get_or_init(|| paused))
    }
}

/// The layout of the UMEM handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedUmem {
    /// Bytes per frame.
    pub frame_size: u32,
    /// Frames.
    pub frame_count: u32,
    /// Transmit metadata room in front of each frame's data.
    pub tx_metadata_len: u32,
}

/// One socket handed over: where it is bound and its rings' sizes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedSocket {
    /// Its interface.
    pub iface: String,
    /// Its queue.
    pub queue: u32,
    /// Its rings' sizes: fill, completion, rx, tx.
    pub rings: [u32; 4],
}

impl HandedState {
    /// The devices whose links come, in order.
    pub fn devices(&self) -> &[String] {
        if self.devices.is_empty() {
            &self.interfaces
        } else {
            &self.devices
        }
    }
}

/// What a forwarder tells its successor beside the descriptors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedState {
    /// The process handing over.
    pub pid: u32,
    /// Its interfaces, in its order (each interface's link descriptor comes in this order).
    pub interfaces: Vec<String>,
    /// The queues it served, 0 up.
    pub queues: u32,
    /// Whether its sockets are zero-copy.
    pub zero_copy: bool,
    /// The UMEM's layout.
    pub umem: HandedUmem,
    /// Its sockets (their descriptors come in this order, after the links).
    pub sockets: Vec<HandedSocket>,
    /// The generation of its rules when it handed over.
    pub rules_generation: u64,
    /// The devices its programs are attached to, in order (a bond's members in the bond's
    /// place): each one's link descriptor comes in this order. Its interfaces where empty.
    #[serde(default)]
    pub devices: Vec<String>,
    /// Its bonds, each as [`bond_shape`] says it: a successor runs the same.
    #[serde(default)]
    pub bonds: Vec<String>,
    /// The names of descriptors the application handed over beside the forwarder's (a
    /// metrics listener), which come last, in this order ([`Inherited::take_extra`]).
    #[serde(default)]
    pub extra: Vec<String>,
    /// What its filters carry to the successor's (their maps' descriptors come last, in
    /// this order); none from a forwarder that carries nothing.
    #[serde(default)]
    pub carried: Option<crate::carry::CarriedRules>,
}

/// Where the frames are once the forwarder handing over has paused its workers: what only
/// the pause can tell.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PausedState {
    /// UMEM offsets of the frames no ring holds.
    pub free: Vec<u64>,
    /// Per socket, in [`HandedState::sockets`]' order: frames given to its fill ring and not
    /// yet received, and frames given to its tx ring and not yet completed.
    pub held: Vec<(usize, usize)>,
    /// What each rule counted in user space (the kernel's counts come with its maps).
    #[serde(default)]
    pub rules: Vec<crate::carry::CarriedUserCounts>,
    /// Per side, its bond's controller as it stopped (none for a plain interface).
    #[serde(default)]
    pub bonds: Vec<Option<HandedBond>>,
    /// CLOCK_MONOTONIC when the bonds were read, in ns: the successor's controllers go on
    /// from then.
    #[serde(default)]
    pub at_ns: u64,
}

pub use crate::bond_runtime::HandedBond;

/// A bond as the forwarder handing over and its successor must agree on it: its name, mode
/// and members.
pub fn bond_shape(bond: &crate::BondConfig) -> String {
    format!(
        "{} ({} over {})",
        bond.name,
        bond.mode.name(),
        bond.members.join(", ")
    )
}

/// A handover as the forwarder handing over gives it: its state and its descriptors (the
/// UMEM's memfd, each interface's link, each socket's).
#[derive(Debug)]
pub struct Handing {
    /// The state.
    pub state: HandedState,
    /// The descriptors, in the order [`HandedState`] says.
    pub fds: Vec<OwnedFd>,
}

/// A handover received, its descriptors sorted out: what a forwarder takes over with
/// ([`crate::Forwarder::take_over`]).
#[derive(Debug)]
pub struct Inherited {
    pub(crate) state: HandedState,
    pub(crate) umem: OwnedFd,
    pub(crate) links: Vec<OwnedFd>,
    pub(crate) sockets: Vec<OwnedFd>,
    /// Per filter, its maps' descriptors, as [`HandedState::carried`] says.
    pub(crate) maps: Vec<Vec<OwnedFd>>,
    /// The application's, by name ([`HandedState::extra`]).
    extra: Vec<(String, OwnedFd)>,
}

impl Inherited {
    /// Sorts `fds` out as `state` says they come; refused when their number is not that.
    pub fn new(state: HandedState, fds: Vec<OwnedFd>) -> Result<Self> {
        let carried = state.carried.as_ref();
        let maps = carried.map_or(0, crate::carry::CarriedRules::descriptors);
        let devices = state.devices().len();
        let want = 1 + devices + state.sockets.len() + maps + state.extra.len();
        if fds.len() != want || carried.is_some_and(|c| c.filters.len() != devices) {
            return Err(Error::TakeOver {
                reason: format!(
                    "the forwarder handed over {} descriptors where its state names {want}",
                    fds.len()
                ),
            });
        }
        let mut fds = fds.into_iter();
        let umem = fds.next().expect("counted above");
        let links = fds.by_ref().take(devices).collect();
        let sockets = fds.by_ref().take(state.sockets.len()).collect();
        let maps = carried
            .map(|c| &c.filters[..])
            .unwrap_or_default()
            .iter()
            .map(|f| fds.by_ref().take(f.descriptors()).collect())
            .collect();
        let extra = state.extra.iter().cloned().zip(fds).collect();
        Ok(Inherited {
            state,
            umem,
            links,
            sockets,
            maps,
            extra,
        })
    }

    /// The descriptor the application handed over as `name` beside the forwarder's (once).
    pub fn take_extra(&mut self, name: &str) -> Option<OwnedFd> {
        let at = self.extra.iter().position(|(n, _)| n == name)?;
        Some(self.extra.swap_remove(at).1)
    }

    /// What the forwarder handing over said.
    pub fn state(&self) -> &HandedState {
        &self.state
    }

    /// Refuses a successor whose `config` cannot carry on what the forwarder handing over
    /// runs: other interfaces, other queues, a mode its sockets are not in, bonds or a
    /// TAP device (whose state is not handed over).
    pub fn check(&self, config: &ForwardConfig) -> Result<()> {
        let s = &self.state;
        let refuse = |reason: String| Err(Error::TakeOver { reason });
        if config.interfaces != s.interfaces {
            return refuse(format!(
                "it runs on {}, this forwarder was given {}: give the same interfaces in the \
                 same order",
                s.interfaces.join(" "),
                config.interfaces.join(" ")
            ));
        }
        if config.queues.is_some_and(|q| q != s.queues) {
            return refuse(format!(
                "it serves {} queues, this forwarder was asked for {}: leave out --queues or \
                 give the same",
                s.queues,
                config.queues.unwrap_or(0)
            ));
        }
        let mode_fits = match config.mode {
            xskit::Mode::Auto => true,
            xskit::Mode::ZeroCopy => s.zero_copy,
            xskit::Mode::Skb | xskit::Mode::Drv => !s.zero_copy,
        };
        if !mode_fits {
            let runs = if s.zero_copy {
                "zero-copy"
            } else {
                "copy mode"
            };
            return refuse(format!(
                "its sockets are in {runs}, this forwarder was asked for -m {:?}: a socket \
                 keeps its mode, so use -m auto or the mode it runs",
                config.mode
            ));
        }
        let bonds: Vec<String> = config.bonds.iter().map(bond_shape).collect();
        if bonds != s.bonds {
            let list = |b: &[String]| match b {
                [] => "no bond".to_string(),
                b => b.join("; "),
            };
            return refuse(format!(
                "it runs {}, this forwarder was given {}: give the same bonds (their other \
                 settings may change)",
                list(&s.bonds),
                list(&bonds)
            ));
        }
        if config.tap.is_some() {
            return refuse(
                "a TAP device is not handed over: restart a forwarder with --tap instead".into(),
            );
        }
        Ok(())
    }
}

/// How the workers pause for a handover: the supervisor asks, each worker stops between
/// two rounds with every frame it holds in the shared pool or in the kernel and says what
/// each of its ports holds in the kernel, then waits to be handed over (it returns without
/// touching a ring again) or to resume.
#[derive(Debug, Default)]
pub(crate) struct HandoverPause {
    asked: AtomicBool,
    handed: AtomicBool,
    /// Per worker, once it has paused: each port's holdings.
    held: Mutex<Vec<Option<Vec<PortHeld>>>>,
}

/// What a port holds in the kernel: (receive buffers, transmits), as
/// [`xskit_pipeline::PipelinePort::ledger`] says.
pub(crate) type PortHeld = (usize, usize);

/// What a paused worker is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterPause {
    Resume,
    HandedOver,
}

impl HandoverPause {
    /// Asks the `workers` workers to pause.
    pub(crate) fn ask(&self, workers: usize) {
        *self.held.lock_unpoisoned() = vec![None; workers];
        self.asked.store(true, Ordering::Release);
    }

    /// Whether a pause is asked: a worker looks once a round.
    #[inline]
    pub(crate) fn asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }

    /// Worker `index` has paused, its ports holding `ports` in the kernel.
    pub(crate) fn paused(&self, index: usize, ports: Vec<PortHeld>) {
        if let Some(slot) = self.held.lock_unpoisoned().get_mut(index) {
            *slot = Some(ports);
        }
    }

    /// Every worker's ports' holdings once all have paused, in worker order.
    pub(crate) fn all_paused(&self) -> Option<Vec<Vec<PortHeld>>> {
        self.held.lock_unpoisoned().iter().cloned().collect()
    }

    /// What a paused worker does next, once the supervisor has decided (`None` while it
    /// has not).
    pub(crate) fn decided(&self) -> Option<AfterPause> {
        if self.handed.load(Ordering::Acquire) {
            Some(AfterPause::HandedOver)
        } else if !self.asked.load(Ordering::Acquire) {
            Some(AfterPause::Resume)
        } else {
            None
        }
    }

    /// The workers resume.
    pub(crate) fn resume(&self) {
        self.asked.store(false, Ordering::Release);
    }

    /// The workers end without touching a ring again: the successor has them.
    pub(crate) fn hand_over(&self) {
        self.handed.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> HandedState {
        HandedState {
            pid: 1,
            interfaces: vec!["a".into(), "b".into()],
            queues: 1,
            zero_copy: false,
            umem: HandedUmem {
                frame_size: 4096,
                frame_count: 64,
                tx_metadata_len: 0,
            },
            sockets: Vec::new(),
            rules_generation: 1,
            devices: Vec::new(),
            bonds: Vec::new(),
            extra: Vec::new(),
            carried: None,
        }
    }

    fn fds(n: usize) -> Vec<OwnedFd> {
        (0..n)
            .map(|_| xskit_os::fdpass::memfd(c"t", 8, false).unwrap())
            .collect()
    }

    fn config(interfaces: &[&str]) -> ForwardConfig {
        ForwardConfig::new(interfaces.iter().copied())
    }

    #[test]
    fn descriptors_are_counted_against_the_state() {
        assert!(Inherited::new(state(), fds(2)).is_err());
        let i = Inherited::new(state(), fds(3)).unwrap();
        assert_eq!((i.links.len(), i.sockets.len()), (2, 0));
        let mut with_extra = state();
        with_extra.extra = vec!["metrics".into()];
        assert!(Inherited::new(with_extra.clone(), fds(3)).is_err());
        let mut i = Inherited::new(with_extra, fds(4)).unwrap();
        assert!(i.take_extra("other").is_none());
        assert!(i.take_extra("metrics").is_some());
        assert!(i.take_extra("metrics").is_none(), "once");
        let filter = |sources| crate::carry::CarriedFilter {
            program: 1,
            counters: Vec::new(),
            police: Vec::new(),
            sources,
            blocked: false,
        };
        let mut carrying = state();
        carrying.carried = Some(crate::carry::CarriedRules {
            slots: Vec::new(),
            filters: vec![filter(true), filter(false)],
        });
        assert!(Inherited::new(carrying.clone(), fds(3 + 6)).is_err());
        let i = Inherited::new(carrying.clone(), fds(3 + 7)).unwrap();
        assert_eq!(
            i.maps.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![4, 3],
            "each filter's maps, in order"
        );
        carrying.carried.as_mut().unwrap().filters.pop();
        assert!(
            Inherited::new(carrying, fds(3 + 4)).is_err(),
            "a filter per interface"
        );
    }

    #[test]
    fn a_successor_that_cannot_carry_on_is_refused_before_it_commits() {
        let i = Inherited::new(state(), fds(3)).unwrap();
        assert!(i.check(&config(&["a", "b"])).is_ok());
        let e = i.check(&config(&["b", "a"])).unwrap_err().to_string();
        assert!(e.contains("same interfaces in the same order"), "{e}");
        let mut c = config(&["a", "b"]);
        c.queues = Some(2);
        assert!(i.check(&c).unwrap_err().to_string().contains("--queues"));
        c.queues = None;
        c.mode = xskit::Mode::ZeroCopy;
        assert!(i
            .check(&c)
            .unwrap_err()
            .to_string()
            .contains("keeps its mode"));
        c.mode = xskit::Mode::Auto;
        c.tap = Some("t0".into());
        assert!(i
            .check(&c)
            .unwrap_err()
            .to_string()
            .contains("not handed over"));
    }

    #[test]
    fn a_successor_runs_the_same_bonds() {
        let bond = crate::BondConfig::new("b0", ["a", "b"], xskit_bond::BondMode::ActiveBackup);
        let mut s = state();
        s.interfaces = vec!["b0".into()];
        s.devices = vec!["a".into(), "b".into()];
        s.bonds = vec![bond_shape(&bond)];
        let i = Inherited::new(s, fds(3)).unwrap();
        assert_eq!(i.links.len(), 2, "a link per member");
        let mut c = config(&["b0"]);
        c.bonds = vec![bond.clone()];
        assert!(i.check(&c).is_ok());
        c.bonds = vec![crate::BondConfig::new(
            "b0",
            ["a"],
            xskit_bond::BondMode::ActiveBackup,
        )];
        let e = i.check(&c).unwrap_err().to_string();
        assert!(
            e.contains("b0 (active-backup over a, b)") && e.contains("same bonds"),
            "{e}"
        );
        c.bonds.clear();
        assert!(i.check(&c).unwrap_err().to_string().contains("no bond"));
    }

    #[test]
    fn workers_pause_then_resume_or_are_handed_over() {
        let p = HandoverPause::default();
        assert!(!p.asked());
        p.ask(2);
        assert!(p.asked() && p.decided().is_none());
        p.paused(0, vec![(10, 2)]);
        assert!(p.all_paused().is_none(), "one of two");
        p.paused(1, vec![(5, 0)]);
        assert_eq!(p.all_paused().unwrap(), vec![vec![(10, 2)], vec![(5, 0)]]);
        p.resume();
        assert_eq!(p.decided(), Some(AfterPause::Resume));
        p.ask(2);
        p.hand_over();
        assert_eq!(p.decided(), Some(AfterPause::HandedOver));
    }
}
