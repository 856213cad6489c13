//! 802.3ad (LACP) for xskit bonds, after IEEE 802.1AX, without I/O: [`Lacp`] takes the
//! members' links, the slow protocol frames they receive and the time, and says which frames
//! to send and which members distribute. Time is virtual (milliseconds the caller passes
//! in), so every transition is tested without sleeping; the forwarder drives it from its
//! control thread with real time and AF_PACKET sockets.
//!
//! Each member runs the receive, periodic, mux and transmit machines ([`Port`]); the bond
//! runs selection: members whose partners are the same system with the same key, and that
//! both ends let aggregate, share an aggregator; one aggregator is active (`ad_select`), and
//! only its members in COLLECTING_DISTRIBUTING carry traffic, and none below `min_links`.

mod control;
mod port;

pub use control::{LacpControl, SlowFrames, SlowSockets};

pub use port::{
    MuxState, Port, PortCounters, RxState, Selected, AGGREGATE_WAIT_MS, FAST_PERIOD_MS,
    LONG_TIMEOUT_MS, MAX_PDUS_PER_SECOND, SHORT_TIMEOUT_MS, SLOW_PERIOD_MS,
};

use xskit_wire::lacp::{self as wire, state, Lacpdu, Marker, PortInfo};

use crate::LinkSpeed;

/// Bytes of a slow protocol frame: the Ethernet header and the 110-byte PDU.
pub const FRAME_LEN: usize = 14 + wire::PDU_LEN;

/// How often the partner is asked to send (`lacp_rate`): our timeout, its period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LacpRate {
    /// Every 30 s; the partner is timed out after 90 s.
    #[default]
    Slow,
    /// Every second; the partner is timed out after 3 s.
    Fast,
}

/// How the active aggregator is chosen (`ad_select`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AdSelect {
    /// The active aggregator stays while it has members (and a partner, when another has
    /// one); otherwise the one of most bandwidth.
    #[default]
    Stable,
    /// The aggregator of most bandwidth, chosen again on every change.
    Bandwidth,
    /// The aggregator of most members, chosen again on every change.
    Count,
}

/// A bond's 802.3ad settings, named as Linux's bonding options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct LacpConfig {
    /// `lacp_rate`.
    pub rate: LacpRate,
    /// `lacp_active`: send PDUs unasked (on), or only answer a partner's (off).
    pub active: bool,
    /// `ad_actor_sys_prio` (1 to 65535).
    pub system_priority: u16,
    /// `ad_user_port_key` (0 to 1023): the upper bits of every member's key.
    pub user_port_key: u16,
    /// `min_links`: fewer members distributing than this, and none does.
    pub min_links: usize,
    /// `ad_select`.
    pub select: AdSelect,
}

impl Default for LacpConfig {
    fn default() -> Self {
        LacpConfig {
            rate: LacpRate::Slow,
            active: true,
            system_priority: 65535,
            user_port_key: 0,
            min_links: 0,
            select: AdSelect::Stable,
        }
    }
}

xskit_os::config_setters!(LacpConfig {
    /// Sets `lacp_rate`.
    rate: LacpRate,
    /// Sets `lacp_active`.
    active: bool,
    /// Sets `ad_actor_sys_prio`.
    system_priority: u16,
    /// Sets `ad_user_port_key`.
    user_port_key: u16,
    /// Sets `min_links`.
    min_links: usize,
    /// Sets `ad_select`.
    select: AdSelect,
});

impl LacpConfig {
    /// Checks the ranges Linux allows.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |reason: String| Err(crate::Error::LacpConfig { reason });
        if self.system_priority == 0 {
            return bad("--ad-actor-sys-prio is 1 to 65535 (lower is preferred), not 0".into());
        }
        if self.user_port_key > 1023 {
            return bad(format!(
                "--ad-user-port-key is 0 to 1023 (the upper 10 bits of the key), not {}",
                self.user_port_key
            ));
        }
        if self.min_links > crate::MAX_MEMBERS {
            return bad(format!(
                "--min-links {} is more than a bond's {} members can ever reach",
                self.min_links,
                crate::MAX_MEMBERS
            ));
        }
        Ok(())
    }
}

/// Linux's speed code for a key's bits 1 to 5 (`__get_link_speed`).
fn speed_code(mbps: u32) -> u16 {
    match mbps {
        1 => 1,
        10 => 2,
        100 => 3,
        1_000 => 4,
        2_500 => 5,
        5_000 => 6,
        10_000 => 7,
        14_000 => 8,
        20_000 => 9,
        25_000 => 10,
        40_000 => 11,
        50_000 => 12,
        56_000 => 13,
        100_000 => 14,
        200_000 => 15,
        400_000 => 16,
        800_000 => 17,
        _ => 0,
    }
}

/// A member's key as Linux makes it: the user key in bits 6 to 15, the speed code in bits 1
/// to 5, full duplex in bit 0; members of different speeds never aggregate.
pub fn port_key(user_port_key: u16, speed: LinkSpeed) -> u16 {
    let (code, full) = speed.map_or((0, false), |(mbps, full)| (speed_code(mbps), full));
    (user_port_key << 6) | (code << 1) | u16::from(full)
}

/// What a received slow protocol frame was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// A LACPDU, taken by the member's receive machine.
    Lacpdu,
    /// A marker request: send this response out of the same member.
    MarkerResponse(Vec<u8>),
    /// A marker response (xskit sends no requests): counted and ignored.
    MarkerAnswer,
    /// Refused (counted as a bad PDU): not a well-formed LACPDU or marker PDU.
    Bad,
}

/// A bond's LACP: the members' machines and the selection over them.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Lacp {
    config: LacpConfig,
    ports: Vec<Port>,
    macs: Vec<[u8; 6]>,
    speeds: Vec<LinkSpeed>,
    active_aggregator: Option<usize>,
}

impl Lacp {
    /// Its timers, set on a clock that reads `from` now, moved to one that reads `to` now.
    fn shift_clock(&mut self, from: u64, to: u64) {
        for port in &mut self.ports {
            port.shift_clock(from, to);
        }
    }

    /// Carries on from `handed`, the same bond's LACP in another process, read at
    /// `handed_ms` of that process's clock, the instant this one's read `now_ms`: every
    /// machine goes on where it was, every timer runs out when it would have. Refused, this
    /// one unchanged, when `handed` is another bond's (other settings, members or system).
    pub fn carry_on(&mut self, mut handed: Lacp, handed_ms: u64, now_ms: u64) -> crate::Result<()> {
        let system = |l: &Lacp| l.ports.first().map(|p| p.actor.system);
        if self.config != handed.config
            || self.macs != handed.macs
            || system(self) != system(&handed)
        {
            return Err(crate::Error::LacpConfig {
                reason: "the LACP handed over is another bond's (other settings, members or \
                         system): start the forwarder without --takeover"
                    .into(),
            });
        }
        handed.shift_clock(handed_ms, now_ms);
        *self = handed;
        Ok(())
    }

    /// LACP for members with MAC addresses `macs` (in member order), links down, the
    /// system being `system` (the bond's MAC address).
    pub fn new(config: LacpConfig, system: [u8; 6], macs: &[[u8; 6]]) -> Self {
        let mut actor_state = state::AGGREGATION;
        if config.active {
            actor_state |= state::ACTIVITY;
        }
        if config.rate == LacpRate::Fast {
            actor_state |= state::TIMEOUT;
        }
        let ports = (0..macs.len())
            .map(|i| {
                let actor = PortInfo {
                    system_priority: config.system_priority,
                    system,
                    key: port_key(config.user_port_key, None),
                    port_priority: 255,
                    port: i as u16 + 1,
                    state: actor_state,
                };
                // An unknown partner is assumed passive, slow and individual: a passive bond
                // stays quiet until an active partner speaks (802.1AX).
                Port::new(actor, PortInfo::default())
            })
            .collect();
        Lacp {
            config,
            ports,
            macs: macs.to_vec(),
            speeds: vec![None; macs.len()],
            active_aggregator: None,
        }
    }

    /// The settings.
    pub fn config(&self) -> &LacpConfig {
        &self.config
    }

    /// Member `member`'s machines.
    pub fn port(&self, member: usize) -> Option<&Port> {
        self.ports.get(member)
    }

    /// The members' machines, in member order.
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    /// The active aggregator (the id its members show), if any.
    pub fn active_aggregator(&self) -> Option<usize> {
        self.active_aggregator
    }

    /// Member `member`'s link went up (at `speed`, which makes its key) or down, at `now`.
    pub fn set_link(&mut self, member: usize, up: bool, speed: LinkSpeed, now: u64) {
        let Some(port) = self.ports.get_mut(member) else {
            return;
        };
        if up {
            let key = port_key(self.config.user_port_key, speed);
            if key != port.actor.key {
                // A new key is a new aggregation: select again.
                port.actor.key = key;
                port.selected = Selected::Unselected;
                port.ntt = true;
            }
            // Half duplex cannot aggregate (802.1AX): the member is individual.
            let full = speed.is_some_and(|(_, full)| full);
            let aggregation = port.actor.state & state::AGGREGATION != 0;
            if full != aggregation {
                port.actor.state ^= state::AGGREGATION;
                port.selected = Selected::Unselected;
                port.ntt = true;
            }
            self.speeds[member] = speed;
        }
        port.set_port_enabled(up, now);
    }

    /// A slow protocol frame (the whole Ethernet frame) received on `member` at `now`.
    pub fn receive(&mut self, member: usize, frame: &[u8], now: u64) -> Received {
        let Some(port) = self.ports.get_mut(member) else {
            return Received::Bad;
        };
        let pdu = frame.get(14..).unwrap_or(&[]);
        let ethertype = frame.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
        if ethertype != Some(wire::ETHERTYPE) {
            port.counters.bad_pdus += 1;
            return Received::Bad;
        }
        if let Ok(lacpdu) = Lacpdu::new_checked(pdu) {
            port.counters.pdus_in += 1;
            port.receive(&lacpdu.actor(), &lacpdu.partner(), now);
            return Received::Lacpdu;
        }
        if let Ok(marker) = Marker::new_checked(pdu) {
            if marker.is_response() {
                return Received::MarkerAnswer;
            }
            port.counters.markers_in += 1;
            port.counters.markers_out += 1;
            let mut response = frame[..FRAME_LEN].to_vec();
            response[..6].copy_from_slice(&wire::DESTINATION);
            response[6..12].copy_from_slice(&self.macs[member]);
            Marker::new_unchecked(&mut response[14..]).make_response();
            return Received::MarkerResponse(response);
        }
        port.counters.bad_pdus += 1;
        Received::Bad
    }

    /// Runs every machine to `now` and returns the LACPDUs to send: (member, whole frame).
    pub fn step(&mut self, now: u64) -> Vec<(usize, Vec<u8>)> {
        let before: Vec<_> = self.ports.iter().map(Port::snapshot).collect();
        for port in &mut self.ports {
            port.tick(now);
        }
        // Selection and the mux feed each other (a detached member may be selected again,
        // a selected one attaches): run both until nothing moves. Each round moves some
        // member forward, so this ends; the bound is a guard.
        for _ in 0..4 * (self.ports.len() + 1) {
            self.select();
            let mut moved = false;
            for i in 0..self.ports.len() {
                let ready = self.ready(i, now);
                moved |= self.ports[i].mux_step(now, ready);
            }
            if !moved {
                break;
            }
        }
        let mut out = Vec::new();
        for (i, port) in self.ports.iter_mut().enumerate() {
            if port.snapshot() != before[i] {
                port.counters.state_changes += 1;
            }
            port.periodic_step(now);
            if let Some((actor, partner)) = port.transmit(now) {
                let mut frame = vec![0; FRAME_LEN];
                frame[..6].copy_from_slice(&wire::DESTINATION);
                frame[6..12].copy_from_slice(&self.macs[i]);
                frame[12..14].copy_from_slice(&wire::ETHERTYPE.to_be_bytes());
                Lacpdu::new_unchecked(&mut frame[14..]).emit(&actor, &partner, 0);
                out.push((i, frame));
            }
        }
        out
    }

    /// When [`Lacp::step`] next has something to do, if ever.
    pub fn next_deadline(&self) -> Option<u64> {
        self.ports.iter().filter_map(Port::next_deadline).min()
    }

    /// Per member, whether it carries traffic: in COLLECTING_DISTRIBUTING on the active
    /// aggregator, with at least `min_links` such members.
    pub fn distributing(&self) -> Vec<bool> {
        let out: Vec<bool> = self
            .ports
            .iter()
            .map(|p| p.distributing() && p.aggregator == self.active_aggregator)
            .collect();
        let count = out.iter().filter(|&&d| d).count();
        if count < self.config.min_links.max(1) {
            return vec![false; out.len()];
        }
        out
    }

    /// Ready for member `i`: every member waiting for its aggregator has waited enough.
    fn ready(&self, i: usize, now: u64) -> bool {
        let Some(agg) = self.ports[i].aggregator else {
            return false;
        };
        self.ports
            .iter()
            .filter(|p| p.aggregator == Some(agg))
            .all(|p| p.wait_over(now))
    }

    /// Whether members `a` and `b` may share an aggregator.
    fn same_aggregation(a: &Port, b: &Port) -> bool {
        a.aggregatable()
            && b.aggregatable()
            && a.actor.key == b.actor.key
            && a.partner.system == b.partner.system
            && a.partner.system_priority == b.partner.system_priority
            && a.partner.key == b.partner.key
    }

    /// The selection logic: gives detached, unselected members an aggregator, chooses the
    /// active aggregator, and marks every member SELECTED on it or STANDBY elsewhere.
    fn select(&mut self) {
        for i in 0..self.ports.len() {
            let p = &self.ports[i];
            if !p.port_enabled()
                || p.selected != Selected::Unselected
                || p.mux != MuxState::Detached
            {
                continue;
            }
            let joined = (0..self.ports.len()).find_map(|j| {
                let q = &self.ports[j];
                (j != i && q.selected != Selected::Unselected && Self::same_aggregation(p, q))
                    .then_some(q.aggregator)
                    .flatten()
            });
            let aggregator = joined.unwrap_or_else(|| {
                (0..self.ports.len())
                    .find(|&id| self.ports.iter().all(|q| q.aggregator != Some(id)))
                    .unwrap_or(i)
            });
            let p = &mut self.ports[i];
            p.aggregator = Some(aggregator);
            p.selected = Selected::Standby;
        }
        self.active_aggregator = self.choose_active();
        for p in &mut self.ports {
            if p.selected == Selected::Unselected {
                continue;
            }
            p.selected = if p.aggregator == self.active_aggregator {
                Selected::Selected
            } else {
                Selected::Standby
            };
        }
    }

    /// The aggregator to use, by `ad_select`: ranked by whether it has a partner, then by
    /// bandwidth (or members, for `count`), then the lowest id.
    fn choose_active(&self) -> Option<usize> {
        let mut ids: Vec<usize> = self
            .ports
            .iter()
            .filter(|p| p.selected != Selected::Unselected && p.port_enabled())
            .filter_map(|p| p.aggregator)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let rank = |id: usize| {
            let members = || {
                self.ports
                    .iter()
                    .enumerate()
                    .filter(move |(_, p)| p.aggregator == Some(id) && p.port_enabled())
            };
            let partner = members().any(|(_, p)| p.has_partner());
            let bandwidth: u64 = members()
                .map(|(i, _)| u64::from(self.speeds[i].map_or(0, |(mbps, _)| mbps)))
                .sum();
            let weight = match self.config.select {
                AdSelect::Count => members().count() as u64,
                _ => bandwidth,
            };
            (partner, weight, std::cmp::Reverse(id))
        };
        let best = ids.iter().copied().max_by_key(|&id| rank(id));
        if self.config.select == AdSelect::Stable {
            if let Some(current) = self.active_aggregator.filter(|c| ids.contains(c)) {
                // Stable keeps the active aggregator, unless it has no partner and another does.
                if rank(current).0 || !best.is_some_and(|b| rank(b).0) {
                    return Some(current);
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests;
