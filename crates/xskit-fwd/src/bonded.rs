//! A bond as one side of the forwarder: AF_XDP sockets on every member's queue behind one
//! [`BondPort`] per worker, and one controller (the forwarder's own thread) that watches
//! the members' links and tells every worker which members are up and which is active.
//!
//! The controller decides the active member and publishes it with the carrier states, so
//! every worker's bond agrees whatever rounds it skipped; a worker applies a change at the
//! start of its next round (one atomic load per round when nothing changed).

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use xskit::{Frame, Interface, Umem};
use xskit_bond::lacp::{LacpConfig, LacpControl};
use xskit_bond::{
    ArpConfig, ArpMonitor, ArpProber, BondMode, BondPort, BondStats, LinkMonitor, LinkSpeed,
    PrimaryReselect,
};
use xskit_os::sync::LockUnpoisoned;
use xskit_pipeline::{FramePool, PipelinePort, RingOccupancy, XskPort};
use xskit_wire::lacp::{state, PortInfo};

use crate::bond_decisions::BondDecisions;
use crate::error::{Error, Result};

/// A bond of interfaces, used as one side of the forwarder under its own name.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BondConfig {
    /// The bond's name, given among the forwarder's interfaces where the bond is meant.
    pub name: String,
    /// Its members (1 to 8 interfaces).
    pub members: Vec<String>,
    /// How it spreads what it transmits.
    pub mode: BondMode,
    /// active-backup: the member preferred as the active one (bonding's `primary`).
    pub primary: Option<String>,
    /// When the primary takes over again from an active member that is up.
    pub primary_reselect: PrimaryReselect,
    /// active-backup: which MAC address the bond's own traffic (`respond`) uses.
    pub fail_over_mac: FailOverMac,
    /// active-backup: gratuitous ARPs sent from the new active member after a failover, for
    /// the forwarder's own address (`respond`), so the switch learns the bond's new port
    /// (bonding's `num_grat_arp`; 0: none).
    pub num_grat_arp: u32,
    /// How long a member's carrier must be up before it is used again.
    pub updelay: Duration,
    /// How long a member's carrier must be down before it stops being used.
    pub downdelay: Duration,
    /// ARP monitoring, on top of the carrier: a member whose targets stop answering is out.
    pub arp: Option<ArpConfig>,
    /// 802.3ad's settings (mode [`BondMode::Lacp`]).
    pub lacp: LacpConfig,
}

impl BondConfig {
    /// A bond `name` of `members` in `mode`, no primary, no delays.
    pub fn new<S: Into<String>>(
        name: impl Into<String>,
        members: impl IntoIterator<Item = S>,
        mode: BondMode,
    ) -> Self {
        BondConfig {
            name: name.into(),
            members: members.into_iter().map(Into::into).collect(),
            mode,
            primary: None,
            primary_reselect: PrimaryReselect::Always,
            num_grat_arp: 1,
            fail_over_mac: FailOverMac::None,
            updelay: Duration::ZERO,
            downdelay: Duration::ZERO,
            arp: None,
            lacp: LacpConfig::default(),
        }
    }
}

xskit_os::config_setters!(BondConfig {
    /// Sets the primary member (active-backup).
    primary: Option<String>,
    /// Sets when the primary takes over again.
    primary_reselect: PrimaryReselect,
    /// Sets the gratuitous ARPs sent after a failover.
    num_grat_arp: u32,
    /// Sets which MAC address the bond's own traffic uses.
    fail_over_mac: FailOverMac,
    /// Sets the up delay.
    updelay: Duration,
    /// Sets the down delay.
    downdelay: Duration,
    /// Sets ARP monitoring.
    arp: Option<ArpConfig>,
    /// Sets 802.3ad's settings.
    lacp: LacpConfig,
});

/// Which MAC address an active-backup bond's own traffic (the forwarder's `respond`
/// address) uses, named as bonding's `fail_over_mac`. The forwarder never changes the
/// members' addresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailOverMac {
    /// The bond's MAC is its first member's, whichever member is active; after a failover
    /// the switch learns it on the new port (gratuitous ARPs).
    #[default]
    None,
    /// The bond's MAC is the active member's own: a failover changes it, and the
    /// gratuitous ARPs tell the neighbours the new one.
    Active,
}

/// One member's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemberCount {
    /// The member interface.
    pub interface: String,
    /// Its carrier as the bond uses it (after updelay/downdelay).
    pub up: bool,
    /// Whether it is the active member (active-backup).
    pub active: bool,
    /// Packets received on it and passed on.
    pub rx_packets: u64,
    /// Packets the bond gave it to transmit.
    pub tx_packets: u64,
    /// Of those, packets its tx ring had no room for (dropped).
    pub tx_dropped: u64,
    /// Packets that arrived on it while it was not the active member, dropped.
    pub rx_inactive: u64,
    /// Packets its device transmitted since the forwarder started.
    pub device_tx_packets: u64,
    /// The kernel's drops on its sockets (rx ring full, invalid descriptors).
    pub socket_rx_dropped: u64,
    /// ARP monitoring: its carrier (the member is up when this and `arp_up` are).
    pub carrier: bool,
    /// ARP monitoring: whether its targets answer.
    pub arp_up: bool,
    /// ARP monitoring: ARP packets from the targets received on it.
    pub arp_alive: u64,
    /// 802.3ad: the member's LACP state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lacp: Option<MemberLacp>,
}

/// One end of a member's link as LACP sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LacpEnd {
    /// The system: its priority and MAC address, as `PRIO,MAC`.
    pub system: String,
    /// The aggregation key.
    pub key: u16,
    /// The port: its priority and number, as `PRIO,NUMBER`.
    pub port: String,
    /// The state bits.
    pub state: u8,
    /// The state bits set, by name (activity, short_timeout, aggregation, synchronization,
    /// collecting, distributing, defaulted, expired).
    pub flags: Vec<&'static str>,
}

impl LacpEnd {
    fn of(info: &PortInfo) -> Self {
        const NAMES: [(u8, &str); 8] = [
            (state::ACTIVITY, "activity"),
            (state::TIMEOUT, "short_timeout"),
            (state::AGGREGATION, "aggregation"),
            (state::SYNCHRONIZATION, "synchronization"),
            (state::COLLECTING, "collecting"),
            (state::DISTRIBUTING, "distributing"),
            (state::DEFAULTED, "defaulted"),
            (state::EXPIRED, "expired"),
        ];
        let m = info.system;
        LacpEnd {
            system: format!(
                "{},{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                info.system_priority, m[0], m[1], m[2], m[3], m[4], m[5]
            ),
            key: info.key,
            port: format!("{},{}", info.port_priority, info.port),
            state: info.state,
            flags: NAMES
                .iter()
                .filter(|(bit, _)| info.state & bit != 0)
                .map(|&(_, name)| name)
                .collect(),
        }
    }
}

/// A member's 802.3ad state and counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemberLacp {
    /// This end.
    pub actor: LacpEnd,
    /// The partner, as last heard (or the defaults).
    pub partner: LacpEnd,
    /// The receive machine's state.
    pub rx_state: &'static str,
    /// The mux machine's state (COLLECTING_DISTRIBUTING: the member carries traffic).
    pub mux_state: &'static str,
    /// SELECTED, STANDBY (another aggregator is active) or UNSELECTED.
    pub selected: &'static str,
    /// The aggregator it is selected for.
    pub aggregator: Option<usize>,
    /// LACPDUs received.
    pub pdus_in: u64,
    /// LACPDUs sent.
    pub pdus_out: u64,
    /// Slow protocol frames refused as malformed.
    pub bad_pdus: u64,
    /// Marker requests answered.
    pub markers: u64,
    /// Slow-protocol frames the XDP filter passed to the control path.
    pub slow_frames: u64,
    /// Changes of the machines' states or the state bits.
    pub state_changes: u64,
}

/// A bond's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BondCount {
    /// balance-rr, active-backup, balance-xor or broadcast.
    pub mode: &'static str,
    /// The transmit hash policy (balance-xor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xmit_hash_policy: Option<&'static str>,
    /// The active member (active-backup).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// Times the active member changed (active-backup).
    pub failovers: u64,
    /// Carrier changes the bond acted on.
    pub link_changes: u64,
    /// 802.3ad: the active aggregator, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregator: Option<usize>,
    /// 802.3ad: LACP frames that could not be sent.
    pub lacp_send_errors: u64,
    /// Packets dropped because no member was up.
    pub tx_no_member: u64,
    /// Broadcast copies not made for want of free frames.
    pub tx_no_frame: u64,
    /// Per member, in member order.
    pub members: Vec<MemberCount>,
}

/// Which members are up and which is active, as the controller last published them.
#[derive(Debug)]
pub(crate) struct BondControl {
    generation: AtomicU64,
    state: Mutex<(Vec<bool>, Option<usize>)>,
}

impl BondControl {
    fn new(members: usize) -> Self {
        BondControl {
            generation: AtomicU64::new(0),
            state: Mutex::new((vec![true; members], Some(0))),
        }
    }

    fn publish(&self, up: &[bool], active: Option<usize>) {
        *self.state.lock_unpoisoned() = (up.to_vec(), active);
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// A worker's bond: the port, where its changes come from, and where its counters go.
pub(crate) struct BondedPort {
    port: BondPort<XskPort>,
    control: Arc<BondControl>,
    seen: u64,
    stats: Arc<Mutex<BondStats>>,
}

/// What a worker serves on one side: an interface, or a bond of them.
// A worker holds two of these: the plain port stays inline, off a pointer on the data path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Side {
    One(XskPort),
    Bond(Box<BondedPort>),
}

impl Side {
    /// A bond over `members`' sockets (one per member, in member order), following
    /// `runtime`'s member changes; and where its counters are published.
    pub(crate) fn bond(
        members: Vec<XskPort>,
        config: &BondConfig,
        runtime: &BondRuntime,
    ) -> Result<(Self, Arc<Mutex<BondStats>>)> {
        let port = BondPort::new(members, config.mode).map_err(Error::Bond)?;
        let stats = Arc::new(Mutex::new(BondStats::default()));
        let mut bonded = BondedPort {
            port,
            control: Arc::clone(&runtime.control),
            seen: u64::MAX,
            stats: Arc::clone(&stats),
        };
        bonded.sync();
        Ok((Side::Bond(Box::new(bonded)), stats))
    }

    /// The member ports' sockets, in member order.
    pub(crate) fn sockets(&mut self) -> Vec<xskit::SocketHandle> {
        match self {
            Side::One(p) => vec![p.socket().handle()],
            Side::Bond(b) => {
                let mut out = Vec::new();
                let mut i = 0;
                while let Some(p) = b.port.member(i) {
                    out.push(p.socket().handle());
                    i += 1;
                }
                out
            }
        }
    }
}

impl BondedPort {
    fn sync(&mut self) {
        let generation = self.control.generation.load(Ordering::Acquire);
        if generation == self.seen {
            return;
        }
        self.seen = generation;
        let (up, active) = self.control.state.lock_unpoisoned().clone();
        for (i, &u) in up.iter().enumerate() {
            // Indices come from the bond's own member list: they exist.
            let _ = self.port.set_up(i, u);
        }
        if let Some(a) = active {
            let _ = self.port.set_active(a);
        }
    }
}

/// What the forwarder's workers need of a side beyond the pipeline's port: member changes
/// and member counters. In-memory test ports have neither.
pub(crate) trait SidePort: PipelinePort {
    /// Applies the member changes published since the last call.
    fn sync_members(&mut self) {}
    /// Makes the member counters visible to the forwarder's reader.
    fn publish_members(&self) {}
}

impl SidePort for Side {
    fn sync_members(&mut self) {
        if let Side::Bond(b) = self {
            b.sync();
        }
    }
    fn publish_members(&self) {
        if let Side::Bond(b) = self {
            *b.stats.lock_unpoisoned() = b.port.stats();
        }
    }
}

/// Calls the same method on whichever port a side holds.
macro_rules! on_side {
    ($self:expr, $p:ident => $e:expr) => {
        match $self {
            Side::One($p) => $e,
            Side::Bond(b) => {
                let $p = &mut b.port;
                $e
            }
        }
    };
}

impl PipelinePort for Side {
    fn refill(&mut self, umem: &Umem, pool: &mut FramePool) -> xskit_pipeline::Result<()> {
        on_side!(self, p => p.refill(umem, pool))
    }
    fn receive(
        &mut self,
        umem: &Umem,
        pool: &mut FramePool,
        out: &mut Vec<Frame>,
        max: usize,
    ) -> xskit_pipeline::Result<usize> {
        on_side!(self, p => p.receive(umem, pool, out, max))
    }
    fn send(
        &mut self,
        umem: &Umem,
        frames: &mut Vec<Frame>,
        pool: &mut FramePool,
    ) -> xskit_pipeline::Result<usize> {
        on_side!(self, p => p.send(umem, frames, pool))
    }
    fn complete(&mut self, pool: &mut FramePool) -> usize {
        on_side!(self, p => p.complete(pool))
    }
    fn recycle(&mut self, frames: &mut Vec<Frame>, pool: &mut FramePool) {
        on_side!(self, p => p.recycle(frames, pool))
    }
    fn in_flight(&self) -> usize {
        match self {
            Side::One(p) => p.in_flight(),
            Side::Bond(b) => b.port.in_flight(),
        }
    }
    fn tx_in_flight(&self) -> usize {
        match self {
            Side::One(p) => p.tx_in_flight(),
            Side::Bond(b) => b.port.tx_in_flight(),
        }
    }
    fn flush(&mut self) -> xskit_pipeline::Result<()> {
        on_side!(self, p => p.flush())
    }
    fn ring_occupancy(&mut self) -> Option<RingOccupancy> {
        on_side!(self, p => p.ring_occupancy())
    }
    fn readiness<'a>(&'a self, fds: &mut Vec<BorrowedFd<'a>>) {
        match self {
            Side::One(p) => p.readiness(fds),
            Side::Bond(b) => b.port.readiness(fds),
        }
    }
}

/// ARP monitoring's running part: the decisions, the probes, and when the next check is.
#[derive(Debug)]
struct ArpRuntime {
    monitor: ArpMonitor,
    prober: ArpProber,
    interval: Duration,
    next_check: Instant,
}

/// A bond's controller: watches its members' links (and their ARP targets) and publishes
/// who is up and active.
#[derive(Debug)]
pub(crate) struct BondRuntime {
    /// The bond's name, for diagnostics.
    name: String,
    pub(crate) control: Arc<BondControl>,
    monitor: LinkMonitor,
    arp: Option<ArpRuntime>,
    lacp: Option<LacpControl>,
    /// Who is up and active, decided from what the monitors report.
    decisions: BondDecisions,
    members: Vec<Interface>,
    /// Gratuitous ARPs after a failover: the address and how many.
    announce: Option<(std::net::Ipv4Addr, u32)>,
    /// The members' MAC addresses, and whether the bond's follows the active member's.
    member_macs: Vec<[u8; 6]>,
    follow_active: bool,
    /// Gratuitous ARPs that could not be sent (a member gone).
    pub(crate) announce_errors: u64,
    /// When the last change was published.
    pub(crate) last_change: Option<Instant>,
}

impl BondRuntime {
    /// Starts watching `members` of `config` (already checked: they exist, the primary is
    /// one of them); with ARP monitoring, sends the first probes. With `respond` (the
    /// forwarder's own address) and `mac` (the bond's), an active-backup failover announces
    /// the address from the new active member.
    pub(crate) fn new(
        config: &BondConfig,
        members: &[Interface],
        respond: Option<std::net::Ipv4Addr>,
    ) -> Result<Self> {
        let monitor =
            LinkMonitor::new(members, config.updelay, config.downdelay).map_err(Error::Bond)?;
        let primary = config
            .primary
            .as_ref()
            .and_then(|p| config.members.iter().position(|m| m == p));
        let arp = match &config.arp {
            Some(arp) => {
                let prober = ArpProber::open(members, &arp.targets).map_err(Error::Bond)?;
                prober.send();
                Some(ArpRuntime {
                    monitor: ArpMonitor::new(members.len(), arp.missed_max),
                    prober,
                    interval: arp.interval,
                    next_check: Instant::now() + arp.interval,
                })
            }
            None => None,
        };
        let carrier = monitor.up().to_vec();
        let speeds: Vec<LinkSpeed> = members
            .iter()
            .map(|m| m.link_speed().ok().flatten())
            .collect();
        let member_macs = members
            .iter()
            .map(|m| m.link_info().map(|l| l.mac.unwrap_or([0; 6])))
            .collect::<xskit::Result<Vec<_>>>()?;
        let lacp = match config.mode {
            BondMode::Lacp { .. } => {
                let mut control =
                    LacpControl::open(config.lacp, member_macs[0], members).map_err(Error::Bond)?;
                for (m, &up) in carrier.iter().enumerate() {
                    control.set_link(m, up, speeds[m]);
                }
                Some(control)
            }
            _ => None,
        };
        let decisions = BondDecisions::new(
            carrier,
            speeds,
            primary,
            config.primary_reselect,
            arp.is_some(),
            lacp.as_ref().map(|l| l.distributing().to_vec()),
        );
        let runtime = BondRuntime {
            name: config.name.clone(),
            control: Arc::new(BondControl::new(members.len())),
            decisions,
            monitor,
            arp,
            lacp,
            members: members.to_vec(),
            announce: respond
                .filter(|_| config.mode == BondMode::ActiveBackup && config.num_grat_arp > 0)
                .map(|ip| (ip, config.num_grat_arp)),
            member_macs,
            follow_active: config.mode == BondMode::ActiveBackup
                && config.fail_over_mac == FailOverMac::Active,
            announce_errors: 0,
            last_change: None,
        };
        runtime.control.publish(
            runtime.decisions.up(),
            runtime.decisions.active().or(Some(0)),
        );
        Ok(runtime)
    }

    /// Decides again after `changes` member changes, tells the workers, and announces a
    /// failover (gratuitous ARPs from the new active member) when there is an address.
    fn publish(&mut self, changes: usize) {
        if let Some(arp) = &self.arp {
            self.decisions.set_arp_up(arp.monitor.up());
        }
        if let Some(lacp) = &self.lacp {
            self.decisions.set_distributing(lacp.distributing());
        }
        if let (Some(to), Some((ip, count))) = (self.decisions.settle(changes), self.announce) {
            let mac = self.bond_mac();
            let sent = xskit_bond::announce(&self.members[to], mac, ip.octets(), count as usize);
            if sent.is_err() {
                self.announce_errors += 1;
            }
        }
        let (up, active) = (self.decisions.up(), self.decisions.active());
        tracing::info!(bond = %self.name, ?up, ?active, "bond members changed");
        self.control.publish(up, active);
        self.last_change = Some(Instant::now());
    }

    /// Waits up to `timeout` for link changes and publishes them; true if any came.
    pub(crate) fn poll(&mut self, timeout: Duration) -> Result<bool> {
        let changes = self.monitor.poll(Some(timeout)).map_err(Error::Bond)?;
        if changes.is_empty() {
            return Ok(false);
        }
        for c in &changes {
            tracing::debug!(bond = %self.name, member = c.member, up = c.up, "carrier");
            // A link that comes back may have come back at another speed.
            let speed = if c.up {
                self.members[c.member].link_speed().ok().flatten()
            } else {
                None
            };
            self.decisions.set_carrier(c.member, c.up, speed);
            if let Some(lacp) = self.lacp.as_mut() {
                lacp.set_link(c.member, c.up, self.decisions.speed(c.member));
            }
        }
        self.publish(changes.len());
        Ok(true)
    }

    /// 802.3ad: takes the LACP frames that arrived, runs the machines and sends what they
    /// say; publishes a change of the members that distribute (true if there was one).
    pub(crate) fn lacp_poll(&mut self) -> bool {
        let Some(lacp) = self.lacp.as_mut() else {
            return false;
        };
        let states = |l: &LacpControl| -> Vec<_> {
            l.lacp()
                .ports()
                .iter()
                .map(|p| (p.rx, p.mux, p.selected))
                .collect()
        };
        let before = tracing::enabled!(tracing::Level::DEBUG).then(|| states(lacp));
        let changed = lacp.poll();
        if let Some(before) = before {
            for (m, (was, now)) in before.iter().zip(states(lacp)).enumerate() {
                if *was != now {
                    tracing::debug!(
                        bond = %self.name,
                        member = m,
                        rx = now.0.name(),
                        mux = now.1.name(),
                        selected = now.2.name(),
                        "lacp"
                    );
                }
            }
        }
        if !changed {
            return false;
        }
        self.publish(0);
        true
    }

    /// 802.3ad: member `m`'s LACP state, and the active aggregator.
    pub(crate) fn lacp_state(&self, m: usize) -> Option<MemberLacp> {
        let lacp = self.lacp.as_ref()?.lacp();
        let p = lacp.port(m)?;
        Some(MemberLacp {
            actor: LacpEnd::of(&p.actor),
            partner: LacpEnd::of(&p.partner),
            rx_state: p.rx.name(),
            mux_state: p.mux.name(),
            selected: p.selected.name(),
            aggregator: p.aggregator,
            pdus_in: p.counters.pdus_in,
            pdus_out: p.counters.pdus_out,
            bad_pdus: p.counters.bad_pdus,
            markers: p.counters.markers_in,
            slow_frames: 0,
            state_changes: p.counters.state_changes,
        })
    }

    /// 802.3ad: the active aggregator and the frames that could not be sent.
    pub(crate) fn lacp_bond(&self) -> Option<(Option<usize>, u64)> {
        let lacp = self.lacp.as_ref()?;
        Some((lacp.lacp().active_aggregator(), lacp.send_errors))
    }

    /// Whether an ARP check is due.
    pub(crate) fn arp_due(&self, now: Instant) -> bool {
        self.arp.as_ref().is_some_and(|a| now >= a.next_check)
    }

    /// An ARP check: `alive[m]` is member m's count of ARP packets from a target so far.
    /// Publishes what changed (true if anything did) and sends the next probes.
    pub(crate) fn arp_check(&mut self, alive: &[u64]) -> bool {
        let Some(arp) = self.arp.as_mut() else {
            return false;
        };
        let changed = arp.monitor.check(alive);
        arp.prober.send();
        arp.next_check += arp.interval;
        let now = Instant::now();
        if arp.next_check < now {
            // A check ran late (a busy machine): start counting from now.
            arp.next_check = now + arp.interval;
        }
        if changed.is_empty() {
            return false;
        }
        self.publish(changed.len());
        true
    }

    pub(crate) fn up(&self) -> &[bool] {
        self.decisions.up()
    }

    /// Times the active member changed.
    pub(crate) fn failovers(&self) -> u64 {
        self.decisions.failovers
    }

    /// Member changes (carrier or ARP) since the start.
    pub(crate) fn link_changes(&self) -> u64 {
        self.decisions.link_changes
    }

    /// The bond's MAC address: its first member's, or under `fail_over_mac active` the
    /// active member's.
    pub(crate) fn bond_mac(&self) -> [u8; 6] {
        match self.decisions.active().filter(|_| self.follow_active) {
            Some(a) => self.member_macs[a],
            None => self.member_macs[0],
        }
    }

    pub(crate) fn carrier(&self) -> &[bool] {
        self.decisions.carrier()
    }

    /// Each member's ARP state (all up without ARP monitoring).
    pub(crate) fn arp_up(&self, member: usize) -> bool {
        self.arp.as_ref().is_none_or(|a| a.monitor.up()[member])
    }

    pub(crate) fn active(&self) -> Option<usize> {
        self.decisions.active()
    }
}
