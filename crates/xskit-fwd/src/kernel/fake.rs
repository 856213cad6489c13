//! A kernel of in-memory interfaces for the tests: the facts the test gives, filters that
//! record what they are told, in-memory devices for sockets, links and a vanishing
//! interface the test controls, and bonds whose members' carrier changes the test queues.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::ops::Range;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use xskit::netlink::{xdp_act, DeviceFeatures};
use xskit::{AttachedMode, Mode, RxQueues, SocketConfig, Umem};
use xskit_bond::lacp::SlowFrames;
use xskit_bond::{LinkSpeed, MemberChange};
use xskit_pipeline::{wire, WireEnd, WirePort};

use super::{Kernel, KernelRules, LinkNow, RunningFilter};
use crate::abi::Slot;
use crate::bond_runtime::BondIo;
use crate::bonded::{BondConfig, SocketPort};
use crate::error::{Error, Result};
use crate::filter::{BlockedSource, PoliceCount, RuleCounter};
use crate::filter_plan::{FilterControl, FilterSettings};
use crate::plan::{LinkFacts, LinkOffer};
use crate::sets::{Element, PrefixSet};
use crate::worker::host_path::HostLink;
use crate::worker::TapPath;

impl SocketPort for WirePort {
    fn socket_handle(&mut self) -> Option<xskit::SocketHandle> {
        None
    }
}

/// What the test changes under a running forwarder and reads back: each interface's link,
/// an interface that vanished, what each filter was told.
#[derive(Debug, Default)]
pub(crate) struct Devices {
    /// Per interface: up, with carrier.
    pub(crate) up: Vec<bool>,
    /// The interface that vanished, if one did.
    pub(crate) gone: Option<usize>,
    /// Per interface: the settings it was last given.
    pub(crate) settings: Vec<Option<FilterSettings>>,
    /// Per interface and queue: the far end of its socket's device.
    pub(crate) ends: HashMap<(usize, u32), WireEnd>,
    /// Per bond (by its first member): member carrier changes for its controller.
    pub(crate) member_changes: HashMap<usize, VecDeque<Vec<MemberChange>>>,
}

/// A filter that records what it was told.
pub(crate) struct Recorded {
    pub(crate) index: usize,
    name: String,
    calls: Rc<RefCell<Vec<String>>>,
    devices: Rc<RefCell<Devices>>,
}

impl FilterControl for Recorded {
    fn apply(&self, settings: &FilterSettings) -> Result<()> {
        self.devices.borrow_mut().settings[self.index] = Some(settings.clone());
        Ok(())
    }
}

impl RunningFilter for Recorded {
    fn name(&self) -> &str {
        &self.name
    }
    fn ifindex(&self) -> u32 {
        10 + self.index as u32
    }
    fn mode(&self) -> AttachedMode {
        AttachedMode::Drv
    }
    fn lost(&self) -> Option<String> {
        (self.devices.borrow().gone == Some(self.index))
            .then(|| format!("{} was deleted or moved", self.name))
    }
    fn link(&self) -> Result<LinkNow> {
        Ok(LinkNow {
            up: self.devices.borrow().up[self.index],
            tx_packets: 0,
        })
    }
    fn set_arp_targets(&self, targets: &[Ipv4Addr]) -> Result<()> {
        self.calls
            .borrow_mut()
            .push(format!("{} arp targets {targets:?}", self.name));
        Ok(())
    }
    fn arp_alive(&self) -> Result<u64> {
        Ok(0)
    }
    fn rule_counters(&self) -> Result<Vec<RuleCounter>> {
        Ok(Vec::new())
    }
    fn police_counts(&self) -> Result<Vec<PoliceCount>> {
        Ok(Vec::new())
    }
    fn blocked_sources(&self, _now_ns: u64) -> Result<Vec<BlockedSource>> {
        Ok(Vec::new())
    }
    /// No kernel counts here: each tracked set's elements at zero.
    fn element_counts(&self, sets: &[Arc<PrefixSet>]) -> Result<Vec<Vec<(Element, u64)>>> {
        Ok(sets
            .iter()
            .map(|s| s.elements().iter().map(|e| (*e, 0)).collect())
            .collect())
    }
    /// No program runs here: user space decides every packet, and polices too.
    fn polices(&self) -> bool {
        false
    }
    fn slot_counter(&self, _slot: Slot) -> Result<RuleCounter> {
        Ok(RuleCounter::default())
    }
    fn link_fd(&self) -> Result<std::os::fd::OwnedFd> {
        Err(Error::TakeOver {
            reason: "an in-memory filter has no link".into(),
        })
    }

    fn carried(&self) -> Result<Option<(crate::carry::CarriedFilter, Vec<std::os::fd::OwnedFd>)>> {
        Ok(None)
    }

    fn stop_redirecting(&self, queues: u32) {
        self.calls
            .borrow_mut()
            .push(format!("{} stops redirecting {queues} queue(s)", self.name));
    }
    fn set_sets(&self, sets: &[Arc<crate::sets::PrefixSet>]) -> Result<()> {
        self.calls
            .borrow_mut()
            .push(format!("{} writes {} sets", self.name, sets.len()));
        Ok(())
    }
    fn reset_slots(&self, slots: &[u16]) -> Result<()> {
        self.calls
            .borrow_mut()
            .push(format!("{} clears slots {slots:?}", self.name));
        Ok(())
    }
}

/// A kernel of interfaces given by the test: their facts, the mode auto lands in, their
/// features; it records every call.
pub(crate) struct Fake {
    pub(crate) links: Vec<LinkFacts>,
    pub(crate) auto_lands_in: AttachedMode,
    pub(crate) features: DeviceFeatures,
    /// An interface's queue already held by another socket.
    pub(crate) busy: Option<(&'static str, u32)>,
    pub(crate) calls: Rc<RefCell<Vec<String>>>,
    pub(crate) devices: Rc<RefCell<Devices>>,
    /// The host behind the TAP device, when the test gives one (else one that takes every
    /// frame and sends none).
    pub(crate) host: RefCell<Option<Box<dyn HostLink>>>,
}

impl Fake {
    /// Interfaces of these names and MTUs, every link up.
    pub(crate) fn new(names: &[(&str, u32)]) -> Fake {
        let devices = Devices {
            up: vec![true; names.len()],
            settings: vec![None; names.len()],
            ..Devices::default()
        };
        Fake {
            links: names
                .iter()
                .enumerate()
                .map(|(i, (name, mtu))| LinkFacts {
                    name: name.to_string(),
                    mtu: *mtu,
                    mac: Some([2, 0, 0, 0, 0, i as u8]),
                    ifindex: 10 + i as u32,
                    veth_peer: None,
                })
                .collect(),
            auto_lands_in: AttachedMode::Drv,
            features: DeviceFeatures {
                xdp_features: xdp_act::BASIC | xdp_act::REDIRECT,
                ..DeviceFeatures::default()
            },
            busy: None,
            calls: Rc::default(),
            devices: Rc::new(RefCell::new(devices)),
            host: RefCell::new(None),
        }
    }

    pub(crate) fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.links.iter().position(|l| l.name == name)
    }
}

impl Kernel for Fake {
    type Filter = Recorded;
    type Port = WirePort;
    type BondIo = FakeBondIo;

    fn links(&mut self, names: &[String]) -> Result<Vec<LinkFacts>> {
        self.calls
            .borrow_mut()
            .push(format!("links {}", names.join(",")));
        names
            .iter()
            .map(|n| {
                self.index_of(n)
                    .map(|i| self.links[i].clone())
                    .ok_or_else(|| xskit::Error::NoSuchInterface { name: n.clone() }.into())
            })
            .collect()
    }

    fn attach(
        &mut self,
        mode: Mode,
        multi_buffer: bool,
        _sets: crate::filter::SetRoom,
    ) -> Result<Vec<Recorded>> {
        self.calls
            .borrow_mut()
            .push(format!("attach {mode:?} multi-buffer {multi_buffer}"));
        let n = self
            .calls
            .borrow()
            .iter()
            .filter(|c| c.starts_with("links"))
            .count();
        assert_eq!(n, 1, "links are looked up once, before attaching");
        Ok(self
            .links
            .iter()
            .enumerate()
            .map(|(index, link)| Recorded {
                index,
                name: link.name.clone(),
                calls: Rc::clone(&self.calls),
                devices: Rc::clone(&self.devices),
            })
            .collect())
    }

    fn offers(&self, filters: &[Recorded]) -> Vec<LinkOffer> {
        let multi = self
            .calls
            .borrow()
            .last()
            .is_some_and(|c| c.ends_with("true"));
        filters
            .iter()
            .map(|f| LinkOffer {
                name: f.name.clone(),
                attached: if multi {
                    AttachedMode::Skb
                } else {
                    self.auto_lands_in
                },
                features: Some(self.features),
                rx_queues: RxQueues {
                    own: 1,
                    total: 1,
                    max_combined: Some(1),
                },
                fallback: (self.auto_lands_in == AttachedMode::Skb)
                    .then(|| "native XDP refused".to_string()),
                zero_copy_caveat: None,
            })
            .collect()
    }

    fn install(&self, filter: &Recorded, rules: &KernelRules) -> Result<()> {
        filter.calls.borrow_mut().push(format!(
            "install {} rules in {}, default {:?}",
            rules.rules.len(),
            filter.name,
            rules.default
        ));
        Ok(())
    }

    fn open_port(
        &self,
        filter: &Recorded,
        queue: u32,
        _umem: &Umem,
        _config: &SocketConfig,
    ) -> Result<WirePort> {
        let name = &filter.name;
        self.calls
            .borrow_mut()
            .push(format!("open {name} queue {queue}"));
        if self.busy == Some((name.as_str(), queue)) {
            let iface = name.clone();
            return Err(xskit::Error::QueueBusy { iface, queue }.into());
        }
        let (port, end) = wire();
        self.devices
            .borrow_mut()
            .ends
            .insert((filter.index, queue), end);
        Ok(port)
    }

    fn open_bond(&self, config: &BondConfig, members: Range<usize>) -> Result<FakeBondIo> {
        self.calls
            .borrow_mut()
            .push(format!("open bond {}", config.name));
        Ok(FakeBondIo {
            first: members.start,
            macs: members
                .clone()
                .map(|i| self.links[i].mac.unwrap_or_default())
                .collect(),
            devices: Rc::clone(&self.devices),
            start: Instant::now(),
        })
    }

    fn hold_promiscuous(&mut self) -> Result<Vec<String>> {
        Ok(self.links.iter().map(|l| l.name.clone()).collect())
    }

    fn open_tap(&self, name: &str) -> Result<Arc<TapPath>> {
        self.calls.borrow_mut().push(format!("open tap {name}"));
        Ok(Arc::new(TapPath {
            link: self.host.take().unwrap_or_else(|| Box::new(NoHost)),
            mac: [2, 0, 0, 0, 0, 0x99],
            learnt: Mutex::new(HashMap::new()),
        }))
    }
}

/// A host that takes every frame and sends none.
#[derive(Debug)]
struct NoHost;

impl HostLink for NoHost {
    fn write(&self, _frame: &[u8]) -> std::result::Result<bool, xskit_os::SyscallError> {
        Ok(true)
    }
    fn read(&self, _buf: &mut [u8]) -> std::result::Result<Option<usize>, xskit_os::SyscallError> {
        Ok(None)
    }
    fn readiness(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

/// A bond's members as its controller sees them: every carrier up at first, then the
/// changes the test queues in [`Devices::member_changes`]; no ARP, no LACP partner.
pub(crate) struct FakeBondIo {
    first: usize,
    macs: Vec<[u8; 6]>,
    devices: Rc<RefCell<Devices>>,
    start: Instant,
}

impl SlowFrames for FakeBondIo {
    fn recv(&mut self, _member: usize, _buf: &mut [u8]) -> Option<usize> {
        None
    }
    fn send(&mut self, _member: usize, _frame: &[u8]) -> bool {
        true
    }
}

impl BondIo for FakeBondIo {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }
    fn carrier(&self) -> Vec<bool> {
        vec![true; self.macs.len()]
    }
    fn link_changes(&mut self, timeout: Duration) -> Result<Vec<MemberChange>> {
        let mut devices = self.devices.borrow_mut();
        let queued = devices.member_changes.entry(self.first).or_default();
        match queued.pop_front() {
            Some(changes) => Ok(changes),
            None => {
                drop(devices);
                // The real one waits on its netlink socket for as long.
                std::thread::sleep(timeout);
                Ok(Vec::new())
            }
        }
    }
    fn link_speed(&self, _member: usize) -> LinkSpeed {
        Some((10_000, true))
    }
    fn member_macs(&self) -> Vec<[u8; 6]> {
        self.macs.clone()
    }
    fn send_arp_probes(&mut self) {}
    fn announce(&mut self, _member: usize, _mac: [u8; 6], _ip: Ipv4Addr, _count: u32) -> bool {
        true
    }
}
