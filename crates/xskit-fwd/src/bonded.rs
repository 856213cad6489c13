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
use std::time::Duration;

use serde::Serialize;
use xskit::{Frame, Umem};
use xskit_bond::lacp::LacpConfig;
use xskit_bond::{ArpConfig, BondMode, BondPort, BondStats, PrimaryReselect};
use xskit_os::sync::LockUnpoisoned;
use xskit_pipeline::{FramePool, PipelinePort, RingOccupancy, XskPort};
use xskit_wire::lacp::{state, PortInfo};

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
    pub(crate) fn of(info: &PortInfo) -> Self {
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
    /// Failovers whose gratuitous ARPs could not be sent (the new active member gone).
    pub announce_errors: u64,
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
    pub(crate) fn new(members: usize) -> Self {
        BondControl {
            generation: AtomicU64::new(0),
            state: Mutex::new((vec![true; members], Some(0))),
        }
    }

    pub(crate) fn publish(&self, up: &[bool], active: Option<usize>) {
        *self.state.lock_unpoisoned() = (up.to_vec(), active);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Who is up and who is active, as last published.
    pub(crate) fn state(&self) -> (Vec<bool>, Option<usize>) {
        self.state.lock_unpoisoned().clone()
    }
}

/// Where a bond publishes its members' counters.
pub(crate) type BondStatsCell = Arc<Mutex<BondStats>>;

/// A queue's sides, and where each bond among them publishes its counters.
pub(crate) type QueueSides<P> = (Vec<Side<P>>, Vec<Option<BondStatsCell>>);

/// A queue's ports, one per interface (`open` takes the interface's index), gathered into
/// `sides`: a plain interface's port alone, a bond's members' ports (in member order) into
/// one bond port that follows its `bonds` entry's published changes.
pub(crate) fn gather_sides<P: PipelinePort>(
    sides: &[std::ops::Range<usize>],
    bonds: &[Option<(&BondConfig, &Arc<BondControl>)>],
    mut open: impl FnMut(usize) -> Result<P>,
) -> Result<QueueSides<P>> {
    let mut ports = Vec::with_capacity(sides.len());
    let mut bond_stats = Vec::with_capacity(sides.len());
    for (range, bond) in sides.iter().zip(bonds) {
        let members = range.clone().map(&mut open).collect::<Result<Vec<_>>>()?;
        match bond {
            Some((config, control)) => {
                let (port, stats) = Side::bond(members, config, control)?;
                ports.push(port);
                bond_stats.push(Some(stats));
            }
            // A side that is no bond has exactly one interface.
            None => {
                ports.extend(members.into_iter().map(Side::One));
                bond_stats.push(None);
            }
        }
    }
    Ok((ports, bond_stats))
}

/// A worker's bond: the port, where its changes come from, and where its counters go.
pub(crate) struct BondedPort<P: PipelinePort = XskPort> {
    port: BondPort<P>,
    control: Arc<BondControl>,
    seen: u64,
    stats: Arc<Mutex<BondStats>>,
}

/// What a worker serves on one side: an interface, or a bond of them.
// A worker holds two of these: the plain port stays inline, off a pointer on the data path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Side<P: PipelinePort = XskPort> {
    One(P),
    Bond(Box<BondedPort<P>>),
}

impl<P: PipelinePort> Side<P> {
    /// A bond over `members`' sockets (one per member, in member order), following the
    /// member changes `control` publishes; and where its counters are published.
    pub(crate) fn bond(
        members: Vec<P>,
        config: &BondConfig,
        control: &Arc<BondControl>,
    ) -> Result<(Self, Arc<Mutex<BondStats>>)> {
        let port = BondPort::new(members, config.mode).map_err(Error::Bond)?;
        let stats = Arc::new(Mutex::new(BondStats::default()));
        let mut bonded = BondedPort {
            port,
            control: Arc::clone(control),
            seen: u64::MAX,
            stats: Arc::clone(&stats),
        };
        bonded.sync();
        Ok((Side::Bond(Box::new(bonded)), stats))
    }
}

/// A port whose socket's kernel counters the forwarder reads.
pub(crate) trait SocketPort: PipelinePort {
    /// The socket, if the port is one (an in-memory port is not).
    fn socket_handle(&mut self) -> Option<xskit::SocketHandle>;
}

impl SocketPort for XskPort {
    fn socket_handle(&mut self) -> Option<xskit::SocketHandle> {
        Some(self.socket().handle())
    }
}

impl<P: SocketPort> Side<P> {
    /// The member ports' sockets, in member order.
    pub(crate) fn sockets(&mut self) -> Vec<xskit::SocketHandle> {
        match self {
            Side::One(p) => p.socket_handle().into_iter().collect(),
            Side::Bond(b) => {
                let mut out = Vec::new();
                let mut i = 0;
                while let Some(p) = b.port.member(i) {
                    out.extend(p.socket_handle());
                    i += 1;
                }
                out
            }
        }
    }
}

impl<P: PipelinePort> BondedPort<P> {
    fn sync(&mut self) {
        let generation = self.control.generation.load(Ordering::Acquire);
        if generation == self.seen {
            return;
        }
        self.seen = generation;
        let (up, active) = self.control.state();
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

impl<P: PipelinePort> SidePort for Side<P> {
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

impl<P: PipelinePort> PipelinePort for Side<P> {
    fn refill(&mut self, umem: &Umem, pool: &mut FramePool) -> xskit_pipeline::Result<()> {
        on_side!(self, p => p.refill(umem, pool))
    }
    /// A bond's members are asked in its receive, whatever they hold.
    fn may_have_received(&mut self) -> bool {
        match self {
            Side::One(p) => p.may_have_received(),
            Side::Bond(_) => true,
        }
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
    /// Between two single ports only: a bond's members take their buffers from the pool.
    fn refill_from(&mut self, from: &mut Self) -> usize {
        match (self, from) {
            (Side::One(to), Side::One(from)) => to.refill_from(from),
            _ => 0,
        }
    }
    /// Between two single ports only: a bond's members are picked by its hash per packet.
    fn forward_to(
        &mut self,
        to: &mut Self,
        umem: &Umem,
        pool: &mut FramePool,
        max: usize,
        decide: impl FnMut(&mut [u8], bool, xskit::Front<'_>) -> xskit::Onward,
    ) -> xskit_pipeline::Result<xskit::MovedOn> {
        match (self, to) {
            (Side::One(from), Side::One(to)) => from.forward_to(to, umem, pool, max, decide),
            _ => Ok(xskit::MovedOn::default()),
        }
    }
    fn kick(&mut self) -> xskit_pipeline::Result<()> {
        on_side!(self, p => p.kick())
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
    fn ledgers(&self) -> Vec<(usize, usize)> {
        match self {
            Side::One(p) => p.ledgers(),
            Side::Bond(b) => b.port.ledgers(),
        }
    }
    fn flush(&mut self) -> xskit_pipeline::Result<()> {
        on_side!(self, p => p.flush())
    }
    fn wakeups(&self) -> xskit::Wakeups {
        match self {
            Side::One(p) => p.wakeups(),
            Side::Bond(b) => b.port.wakeups(),
        }
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
