//! A bond's controller: what its members' links, ARP targets and LACP partners say, turned
//! into who is up and active ([`BondDecisions`]) and published to the workers.
//!
//! The controller reaches the system only through [`BondIo`] (the links' changes and
//! speeds, ARP probes, gratuitous ARPs, slow-protocol frames, the clock): [`RealBondIo`]
//! over netlink and packet sockets, and in the tests a fake on virtual time, so failover,
//! ARP checks and LACP negotiation run in milliseconds without root.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use xskit::Interface;
use xskit_bond::lacp::{LacpControl, SlowFrames, SlowSockets};
use xskit_bond::{ArpMonitor, ArpProber, BondMode, LinkMonitor, LinkSpeed, MemberChange};

use crate::bond_decisions::BondDecisions;
use crate::bonded::{
    BondConfig, BondControl, BondCount, FailOverMac, LacpEnd, MemberCount, MemberLacp,
};
use crate::error::{Error, Result};

/// What a bond's controller asks of the system.
pub(crate) trait BondIo: SlowFrames {
    /// Time since the controller started.
    fn now(&self) -> Duration;
    /// Each member's carrier when the watch began.
    fn carrier(&self) -> Vec<bool>;
    /// Waits up to `timeout` for the members' carrier changes (after their delays).
    fn link_changes(&mut self, timeout: Duration) -> Result<Vec<MemberChange>>;
    /// Member `member`'s speed and duplex, if the link says.
    fn link_speed(&self, member: usize) -> LinkSpeed;
    /// The members' MAC addresses, in member order.
    fn member_macs(&self) -> Vec<[u8; 6]>;
    /// Sends every member's ARP probes.
    fn send_arp_probes(&mut self);
    /// Sends `count` gratuitous ARPs for `ip` from `member` with source `mac`; false if
    /// they could not be sent.
    fn announce(&mut self, member: usize, mac: [u8; 6], ip: Ipv4Addr, count: u32) -> bool;
}

/// The system a bond's controller runs on: the link monitor, the ARP prober and the slow
/// protocols sockets, opened on the members in the calling thread's namespace.
#[derive(Debug)]
pub(crate) struct RealBondIo {
    members: Vec<Interface>,
    monitor: LinkMonitor,
    prober: Option<ArpProber>,
    slow: Option<SlowSockets>,
    macs: Vec<[u8; 6]>,
    start: Instant,
}

impl RealBondIo {
    /// Starts watching `members` of `config`: their links always, their ARP targets with
    /// ARP monitoring, their slow-protocol frames under 802.3ad.
    pub(crate) fn open(config: &BondConfig, members: &[Interface]) -> Result<Self> {
        let monitor =
            LinkMonitor::new(members, config.updelay, config.downdelay).map_err(Error::Bond)?;
        let prober = match &config.arp {
            Some(arp) => Some(ArpProber::open(members, &arp.targets).map_err(Error::Bond)?),
            None => None,
        };
        let slow = match config.mode {
            BondMode::Lacp { .. } => Some(SlowSockets::open(members).map_err(Error::Bond)?),
            _ => None,
        };
        let macs = members
            .iter()
            .map(|m| m.link_info().map(|l| l.mac.unwrap_or([0; 6])))
            .collect::<xskit::Result<Vec<_>>>()?;
        Ok(RealBondIo {
            members: members.to_vec(),
            macs,
            monitor,
            prober,
            slow,
            start: Instant::now(),
        })
    }
}

impl SlowFrames for RealBondIo {
    fn recv(&mut self, member: usize, buf: &mut [u8]) -> Option<usize> {
        self.slow.as_mut()?.recv(member, buf)
    }

    fn send(&mut self, member: usize, frame: &[u8]) -> bool {
        self.slow.as_mut().is_some_and(|s| s.send(member, frame))
    }
}

impl BondIo for RealBondIo {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn carrier(&self) -> Vec<bool> {
        self.monitor.up().to_vec()
    }

    fn link_changes(&mut self, timeout: Duration) -> Result<Vec<MemberChange>> {
        self.monitor.poll(Some(timeout)).map_err(Error::Bond)
    }

    fn link_speed(&self, member: usize) -> LinkSpeed {
        self.members[member].link_speed().ok().flatten()
    }

    fn member_macs(&self) -> Vec<[u8; 6]> {
        self.macs.clone()
    }

    fn send_arp_probes(&mut self) {
        if let Some(prober) = &self.prober {
            prober.send();
        }
    }

    fn announce(&mut self, member: usize, mac: [u8; 6], ip: Ipv4Addr, count: u32) -> bool {
        xskit_bond::announce(&self.members[member], mac, ip.octets(), count as usize).is_ok()
    }
}

/// What a bond's controller hands to the controller of a forwarder taking over, read while
/// neither runs it: its decisions, ARP monitor and LACP machines, so that the successor goes
/// on where it stopped and the partners see nothing change.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct HandedBond {
    decisions: BondDecisions,
    /// The ARP monitor, and the time to its next check.
    arp: Option<(xskit_bond::ArpMonitor, Duration)>,
    lacp: Option<LacpControl>,
    /// The handing controller's clock when it was read.
    at: Duration,
    announce_errors: u64,
}

/// ARP monitoring's running part: the decisions, and when the next check is.
#[derive(Debug)]
struct ArpRuntime {
    monitor: ArpMonitor,
    interval: Duration,
    next_check: Duration,
}

/// A bond's controller: watches its members' links (and their ARP targets, and their LACP
/// partners) and publishes who is up and active.
#[derive(Debug)]
pub(crate) struct BondRuntime<I: BondIo = RealBondIo> {
    /// The bond's name, for diagnostics.
    name: String,
    pub(crate) control: Arc<BondControl>,
    io: I,
    arp: Option<ArpRuntime>,
    lacp: Option<LacpControl>,
    /// Who is up and active, decided from what the monitors report.
    decisions: BondDecisions,
    /// Gratuitous ARPs after a failover: the address and how many.
    announce: Option<(Ipv4Addr, u32)>,
    /// The members' MAC addresses, and whether the bond's follows the active member's.
    member_macs: Vec<[u8; 6]>,
    follow_active: bool,
    /// Failovers whose gratuitous ARPs could not be sent (the new member gone).
    announce_errors: u64,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl<I: BondIo> BondRuntime<I> {
    /// Starts deciding for `config` (already checked: its members exist, the primary is one
    /// of them) on `io`; with ARP monitoring, sends the first probes. With `respond` (the
    /// forwarder's own address), an active-backup failover announces the address from the
    /// new active member.
    pub(crate) fn new(config: &BondConfig, mut io: I, respond: Option<Ipv4Addr>) -> Result<Self> {
        let primary = config
            .primary
            .as_ref()
            .and_then(|p| config.members.iter().position(|m| m == p));
        let arp = config.arp.as_ref().map(|arp| {
            io.send_arp_probes();
            ArpRuntime {
                monitor: ArpMonitor::new(config.members.len(), arp.missed_max),
                interval: arp.interval,
                next_check: io.now() + arp.interval,
            }
        });
        let carrier = io.carrier();
        let speeds: Vec<LinkSpeed> = (0..carrier.len()).map(|m| io.link_speed(m)).collect();
        let member_macs = io.member_macs();
        let lacp = match config.mode {
            BondMode::Lacp { .. } => {
                let mut control = LacpControl::new(config.lacp, member_macs[0], &member_macs)
                    .map_err(Error::Bond)?;
                for (m, &up) in carrier.iter().enumerate() {
                    control.set_link(m, up, speeds[m], millis(io.now()));
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
            control: Arc::new(BondControl::new(config.members.len())),
            io,
            arp,
            lacp,
            decisions,
            announce: respond
                .filter(|_| config.mode == BondMode::ActiveBackup && config.num_grat_arp > 0)
                .map(|ip| (ip, config.num_grat_arp)),
            member_macs,
            follow_active: config.mode == BondMode::ActiveBackup
                && config.fail_over_mac == FailOverMac::Active,
            announce_errors: 0,
        };
        let (up, active) = (runtime.decisions.up(), runtime.decisions.active());
        runtime.control.publish(up, active.or(Some(0)));
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
            if !self.io.announce(to, mac, ip, count) {
                self.announce_errors += 1;
            }
        }
        let (up, active) = (self.decisions.up(), self.decisions.active());
        tracing::info!(bond = %self.name, ?up, ?active, "bond members changed");
        self.control.publish(up, active);
    }

    /// What a successor's controller carries on with ([`BondRuntime::carry_on`]): read once
    /// this one has stopped.
    pub(crate) fn handed(&self) -> HandedBond {
        let now = self.io.now();
        HandedBond {
            decisions: self.decisions.clone(),
            arp: self
                .arp
                .as_ref()
                .map(|a| (a.monitor.clone(), a.next_check.saturating_sub(now))),
            lacp: self.lacp.clone(),
            at: now,
            announce_errors: self.announce_errors,
        }
    }

    /// Carries on from `handed`, read `ago` before now by the controller of the forwarder
    /// this one takes over from, on the same bond: its decisions, ARP monitor and LACP
    /// machines (every timer running out when it would have), then publishes them. What the
    /// members' slow-protocol sockets hold is dropped: the other controller took it in.
    pub(crate) fn carry_on(&mut self, handed: HandedBond, ago: Duration) -> Result<()> {
        let then = self.io.now().saturating_sub(ago);
        if let (Some(ours), Some(theirs)) = (self.lacp.as_mut(), handed.lacp) {
            ours.carry_on(theirs, millis(handed.at), millis(then))
                .map_err(Error::Bond)?;
        }
        if let (Some(ours), Some((monitor, next))) = (self.arp.as_mut(), handed.arp) {
            ours.monitor = monitor;
            ours.next_check = then + next;
        }
        let mut buf = [0u8; 256];
        for member in 0..self.member_macs.len() {
            while self.io.recv(member, &mut buf).is_some() {}
        }
        self.decisions = handed.decisions;
        self.announce_errors = handed.announce_errors;
        let (up, active) = (self.decisions.up(), self.decisions.active());
        self.control.publish(up, active);
        Ok(())
    }

    /// Waits up to `timeout` for link changes and publishes them; true if any came.
    pub(crate) fn poll(&mut self, timeout: Duration) -> Result<bool> {
        let changes = self.io.link_changes(timeout)?;
        if changes.is_empty() {
            return Ok(false);
        }
        let now_ms = millis(self.io.now());
        for c in &changes {
            tracing::debug!(bond = %self.name, member = c.member, up = c.up, "carrier");
            // A link that comes back may have come back at another speed.
            let speed = if c.up {
                self.io.link_speed(c.member)
            } else {
                None
            };
            self.decisions.set_carrier(c.member, c.up, speed);
            if let Some(lacp) = self.lacp.as_mut() {
                lacp.set_link(c.member, c.up, self.decisions.speed(c.member), now_ms);
            }
        }
        self.publish(changes.len());
        Ok(true)
    }

    /// 802.3ad: takes the LACP frames that arrived, runs the machines and sends what they
    /// say; publishes a change of the members that distribute (true if there was one).
    pub(crate) fn lacp_poll(&mut self) -> bool {
        let now_ms = millis(self.io.now());
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
        let changed = lacp.poll(&mut self.io, now_ms);
        if let Some(before) = before {
            for (m, (was, now)) in before.iter().zip(states(lacp)).enumerate() {
                if *was != now {
                    tracing::debug!(bond = %self.name, member = m, rx = now.0.name(),
                        mux = now.1.name(), selected = now.2.name(), "lacp");
                }
            }
        }
        if changed {
            self.publish(0);
        }
        changed
    }

    /// Whether an ARP check is due.
    pub(crate) fn arp_due(&self) -> bool {
        self.arp
            .as_ref()
            .is_some_and(|a| self.io.now() >= a.next_check)
    }

    /// An ARP check: `alive[m]` is member m's count of ARP packets from a target so far.
    /// Publishes what changed (true if anything did) and sends the next probes.
    pub(crate) fn arp_check(&mut self, alive: &[u64]) -> bool {
        let now = self.io.now();
        let Some(arp) = self.arp.as_mut() else {
            return false;
        };
        let changed = arp.monitor.check(alive);
        self.io.send_arp_probes();
        arp.next_check += arp.interval;
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

    /// The bond's state as the report shows it, its members' packet counters still zero:
    /// the active member and failovers under active-backup only, the hash policy where
    /// one is used.
    pub(crate) fn count(&self, config: &BondConfig) -> BondCount {
        let policy = match config.mode {
            BondMode::BalanceXor { policy } | BondMode::Lacp { policy } => Some(policy.name()),
            _ => None,
        };
        let (aggregator, lacp_send_errors) = self.lacp_bond().unwrap_or_default();
        let active_backup = config.mode == BondMode::ActiveBackup;
        let active = self.active().filter(|_| active_backup);
        let members = config
            .members
            .iter()
            .enumerate()
            .map(|(i, name)| MemberCount {
                interface: name.clone(),
                up: self.up()[i],
                active: active == Some(i),
                carrier: self.carrier()[i],
                arp_up: self.arp_up(i),
                lacp: self.lacp_state(i),
                ..MemberCount::default()
            });
        BondCount {
            mode: config.mode.name(),
            xmit_hash_policy: policy,
            active: active.map(|a| config.members[a].clone()),
            failovers: if active_backup { self.failovers() } else { 0 },
            link_changes: self.link_changes(),
            aggregator,
            lacp_send_errors,
            announce_errors: self.announce_errors,
            members: members.collect(),
            ..BondCount::default()
        }
    }

    /// 802.3ad: member `m`'s LACP state.
    pub(crate) fn lacp_state(&self, m: usize) -> Option<MemberLacp> {
        let p = self.lacp.as_ref()?.lacp().port(m)?;
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

#[cfg(test)]
mod tests;
