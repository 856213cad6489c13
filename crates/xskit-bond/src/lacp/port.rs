//! One member's 802.3ad state machines (802.1AX 5.4): receive, periodic transmit, mux and
//! transmit, on virtual time (milliseconds the caller passes in). Selection, which looks at
//! every member at once, is the bond's ([`super::Lacp`]).

use xskit_wire::lacp::{state, PortInfo};

/// The short timeout: 3 fast periods of 1 s (LACP_Timeout short).
pub const SHORT_TIMEOUT_MS: u64 = 3_000;
/// The long timeout: 3 slow periods of 30 s.
pub const LONG_TIMEOUT_MS: u64 = 90_000;
/// The fast periodic time: a PDU a second to a partner that asked for short timeouts.
pub const FAST_PERIOD_MS: u64 = 1_000;
/// The slow periodic time.
pub const SLOW_PERIOD_MS: u64 = 30_000;
/// The aggregate wait: how long a selected member waits for others to join before it
/// attaches (wait_while_timer).
pub const AGGREGATE_WAIT_MS: u64 = 2_000;
/// At most this many PDUs in any second (802.1AX's transmit machine).
pub const MAX_PDUS_PER_SECOND: usize = 3;

/// Whether a member is attached to an aggregator (`Selected`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Selected {
    /// Not attached; the selection logic will choose.
    #[default]
    Unselected,
    /// Attached to its aggregator.
    Selected,
    /// Held back (another member of the aggregator is not ready).
    Standby,
}

/// The mux machine's states (802.1AX 5.4.15, coupled control: collecting and
/// distributing go together).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MuxState {
    /// Not attached to an aggregator.
    Detached,
    /// Selected: waiting for the aggregate wait so that members join together.
    Waiting,
    /// Attached to the aggregator and in sync; waiting for the partner's sync.
    Attached,
    /// Both sides in sync: frames are collected from and distributed to this member.
    CollectingDistributing,
}

impl MuxState {
    /// The state's name in 802.1AX.
    pub fn name(self) -> &'static str {
        match self {
            MuxState::Detached => "DETACHED",
            MuxState::Waiting => "WAITING",
            MuxState::Attached => "ATTACHED",
            MuxState::CollectingDistributing => "COLLECTING_DISTRIBUTING",
        }
    }
}

impl RxState {
    /// The state's name in 802.1AX.
    pub fn name(self) -> &'static str {
        match self {
            RxState::Initialize => "INITIALIZE",
            RxState::PortDisabled => "PORT_DISABLED",
            RxState::Expired => "EXPIRED",
            RxState::LacpDisabled => "LACP_DISABLED",
            RxState::Defaulted => "DEFAULTED",
            RxState::Current => "CURRENT",
        }
    }
}

impl Selected {
    /// The value's name in 802.1AX.
    pub fn name(self) -> &'static str {
        match self {
            Selected::Unselected => "UNSELECTED",
            Selected::Selected => "SELECTED",
            Selected::Standby => "STANDBY",
        }
    }
}

/// One member's LACP counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PortCounters {
    /// LACPDUs received and taken.
    pub pdus_in: u64,
    /// LACPDUs sent.
    pub pdus_out: u64,
    /// Slow protocol frames refused: wrong length, subtype, version or TLVs.
    pub bad_pdus: u64,
    /// Marker requests received (each answered).
    pub markers_in: u64,
    /// Marker responses sent.
    pub markers_out: u64,
    /// Times the member's machines or state bits changed.
    pub state_changes: u64,
}

/// The receive machine's states (802.1AX 5.4.12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RxState {
    /// Starting over: partner defaulted, unselected.
    Initialize,
    /// The link is down.
    PortDisabled,
    /// The partner's PDUs stopped: waiting a short timeout for one more.
    Expired,
    /// LACP is off on this member.
    LacpDisabled,
    /// No partner heard: running on the administrative defaults.
    Defaulted,
    /// The partner's information is current.
    Current,
}

/// One member's LACP state: what it says of itself, what it knows of its partner.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Port {
    /// This end, as its PDUs describe it (Actor_Oper).
    pub actor: PortInfo,
    /// The partner as last heard (Partner_Oper).
    pub partner: PortInfo,
    /// The partner assumed when none is heard (Partner_Admin).
    pub partner_admin: PortInfo,
    /// Whether this member is attached to an aggregator.
    pub selected: Selected,
    /// Need To Transmit: a PDU should go out at the next chance.
    pub ntt: bool,
    /// The receive machine's state.
    pub rx: RxState,
    /// The mux machine's state.
    pub mux: MuxState,
    /// The aggregator the member is selected for (an id the bond gives), if any.
    pub aggregator: Option<usize>,
    /// Counters.
    pub counters: PortCounters,
    /// When the partner's information runs out (current_while_timer), in ms.
    current_until: Option<u64>,
    /// When the aggregate wait ends (wait_while_timer), while WAITING.
    wait_until: Option<u64>,
    /// When the next periodic PDU is due, and whether at the fast rate.
    periodic_until: Option<u64>,
    periodic_fast: bool,
    /// When the last PDUs went out, oldest first, for the rate limit.
    sent: [Option<u64>; MAX_PDUS_PER_SECOND],
    port_enabled: bool,
    lacp_enabled: bool,
}

/// The fields by which a PDU's idea of a port is compared (802.1AX recordPDU and friends).
fn same_port(a: &PortInfo, b: &PortInfo) -> bool {
    a.port == b.port
        && a.port_priority == b.port_priority
        && a.system == b.system
        && a.system_priority == b.system_priority
        && a.key == b.key
}

fn bit(info: &PortInfo, flag: u8) -> bool {
    info.state & flag != 0
}

fn set_bit(info: &mut PortInfo, flag: u8, on: bool) {
    if on {
        info.state |= flag;
    } else {
        info.state &= !flag;
    }
}

/// `at`, a time on a clock that reads `from` now, on a clock that reads `to` now; a time
/// before the second clock began is its beginning (a PDU sent then counts against the rate
/// limit a little longer).
fn shifted(at: u64, from: u64, to: u64) -> u64 {
    let at = i128::from(at) - i128::from(from) + i128::from(to);
    u64::try_from(at.max(0)).unwrap_or(u64::MAX)
}

impl Port {
    /// Its timers, set on a clock that reads `from` now, moved to a clock that reads `to`
    /// now: each runs out when it would have.
    pub(crate) fn shift_clock(&mut self, from: u64, to: u64) {
        for timer in [
            &mut self.current_until,
            &mut self.wait_until,
            &mut self.periodic_until,
        ]
        .into_iter()
        .chain(self.sent.iter_mut())
        {
            *timer = timer.map(|at| shifted(at, from, to));
        }
    }

    /// A member that says `actor` of itself and assumes `partner_admin` until it hears
    /// better; LACP on, link down, receive machine in INITIALIZE then PORT_DISABLED.
    pub fn new(actor: PortInfo, partner_admin: PortInfo) -> Self {
        let mut port = Port {
            actor,
            partner: partner_admin,
            partner_admin,
            selected: Selected::Unselected,
            ntt: false,
            rx: RxState::Initialize,
            mux: MuxState::Detached,
            aggregator: None,
            counters: PortCounters::default(),
            current_until: None,
            wait_until: None,
            periodic_until: None,
            periodic_fast: false,
            sent: [None; MAX_PDUS_PER_SECOND],
            port_enabled: false,
            lacp_enabled: true,
        };
        port.initialize();
        port
    }

    /// INITIALIZE, then on to PORT_DISABLED (its unconditional transition).
    fn initialize(&mut self) {
        self.selected = Selected::Unselected;
        self.record_default();
        set_bit(&mut self.actor, state::EXPIRED, false);
        self.rx = RxState::Initialize;
        self.port_disabled();
    }

    fn port_disabled(&mut self) {
        // A member whose link is down leaves its aggregator (selected again when it returns).
        self.selected = Selected::Unselected;
        set_bit(&mut self.partner, state::SYNCHRONIZATION, false);
        self.current_until = None;
        self.rx = RxState::PortDisabled;
        if self.port_enabled {
            if self.lacp_enabled {
                self.expired_from(None);
            } else {
                self.lacp_disabled();
            }
        }
    }

    fn lacp_disabled(&mut self) {
        self.selected = Selected::Unselected;
        self.record_default();
        set_bit(&mut self.partner, state::AGGREGATION, false);
        set_bit(&mut self.actor, state::EXPIRED, false);
        self.rx = RxState::LacpDisabled;
    }

    /// EXPIRED at `now` (None: when the link came up, time taken at the next step).
    fn expired_from(&mut self, now: Option<u64>) {
        set_bit(&mut self.partner, state::SYNCHRONIZATION, false);
        set_bit(&mut self.partner, state::TIMEOUT, true);
        self.current_until = now.map(|t| t + SHORT_TIMEOUT_MS);
        set_bit(&mut self.actor, state::EXPIRED, true);
        self.rx = RxState::Expired;
    }

    fn defaulted(&mut self) {
        // update_Default_Selected: a different default partner means a new selection.
        if !same_port(&self.partner_admin, &self.partner)
            || bit(&self.partner_admin, state::AGGREGATION)
                != bit(&self.partner, state::AGGREGATION)
        {
            self.selected = Selected::Unselected;
        }
        self.record_default();
        set_bit(&mut self.actor, state::EXPIRED, false);
        self.current_until = None;
        self.rx = RxState::Defaulted;
    }

    /// recordDefault: the partner is the administrative one.
    fn record_default(&mut self) {
        self.partner = self.partner_admin;
        set_bit(&mut self.actor, state::DEFAULTED, true);
    }

    /// The link went up or down (port_enabled), at `now`.
    pub fn set_port_enabled(&mut self, enabled: bool, now: u64) {
        self.port_enabled = enabled;
        if !enabled {
            if self.rx != RxState::PortDisabled {
                self.port_disabled();
            }
        } else if self.rx == RxState::PortDisabled {
            self.port_disabled();
            if self.rx == RxState::Expired && self.current_until.is_none() {
                self.current_until = Some(now + SHORT_TIMEOUT_MS);
            }
        }
    }

    /// LACP turned on or off on this member (LACP_Enabled: off in a non-802.3ad mode).
    pub fn set_lacp_enabled(&mut self, enabled: bool, now: u64) {
        self.lacp_enabled = enabled;
        if self.port_enabled {
            self.port_disabled();
            if self.rx == RxState::Expired && self.current_until.is_none() {
                self.current_until = Some(now + SHORT_TIMEOUT_MS);
            }
        }
    }

    /// A LACPDU from the partner (`pdu_actor`, and what it says of us, `pdu_partner`)
    /// arrived at `now`: CURRENT, with the selection and NTT updated as 802.1AX says.
    pub fn receive(&mut self, pdu_actor: &PortInfo, pdu_partner: &PortInfo, now: u64) {
        if !matches!(
            self.rx,
            RxState::Expired | RxState::Defaulted | RxState::Current
        ) {
            return;
        }
        // update_Selected: another partner, or the same one changing its aggregation.
        if !same_port(pdu_actor, &self.partner)
            || bit(pdu_actor, state::AGGREGATION) != bit(&self.partner, state::AGGREGATION)
        {
            self.selected = Selected::Unselected;
        }
        // update_NTT: the partner's view of us is out of date.
        let mask = state::ACTIVITY | state::TIMEOUT | state::SYNCHRONIZATION | state::AGGREGATION;
        if !same_port(pdu_partner, &self.actor)
            || pdu_partner.state & mask != self.actor.state & mask
        {
            self.ntt = true;
        }
        // recordPDU.
        let matched = same_port(pdu_partner, &self.actor)
            && bit(pdu_partner, state::AGGREGATION) == bit(&self.actor, state::AGGREGATION);
        let individual = !bit(pdu_actor, state::AGGREGATION);
        let both_passive = !bit(&self.actor, state::ACTIVITY) && !bit(pdu_actor, state::ACTIVITY);
        self.partner = *pdu_actor;
        set_bit(
            &mut self.partner,
            state::SYNCHRONIZATION,
            (matched || individual) && bit(pdu_actor, state::SYNCHRONIZATION) && !both_passive,
        );
        set_bit(&mut self.actor, state::DEFAULTED, false);
        set_bit(&mut self.actor, state::EXPIRED, false);
        let timeout = if bit(&self.actor, state::TIMEOUT) {
            SHORT_TIMEOUT_MS
        } else {
            LONG_TIMEOUT_MS
        };
        self.current_until = Some(now + timeout);
        self.rx = RxState::Current;
    }

    /// Time passed to `now`: a partner that fell silent expires (CURRENT to EXPIRED), and
    /// one that stays silent is given up (EXPIRED to DEFAULTED).
    pub fn tick(&mut self, now: u64) {
        let Some(until) = self.current_until else {
            return;
        };
        if now < until {
            return;
        }
        match self.rx {
            RxState::Current => {
                self.expired_from(Some(now));
            }
            RxState::Expired => self.defaulted(),
            _ => self.current_until = None,
        }
    }

    /// The earliest time at which [`Port::tick`], the mux, periodic or transmit machine has
    /// something to do, if ever.
    pub fn next_deadline(&self) -> Option<u64> {
        let waiting = self.wait_until.filter(|_| self.mux == MuxState::Waiting);
        let held = self.ntt.then(|| self.tx_allowed_at()).flatten();
        [self.current_until, waiting, self.periodic_until, held]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether the link is up.
    pub fn port_enabled(&self) -> bool {
        self.port_enabled
    }

    /// Whether LACP is on.
    pub fn lacp_enabled(&self) -> bool {
        self.lacp_enabled
    }

    /// Whether frames are collected from and distributed to this member.
    pub fn distributing(&self) -> bool {
        self.mux == MuxState::CollectingDistributing
    }

    /// Whether the member can aggregate with others: both ends say so (a member that
    /// cannot is individual, an aggregator of its own).
    pub fn aggregatable(&self) -> bool {
        bit(&self.actor, state::AGGREGATION) && bit(&self.partner, state::AGGREGATION)
    }

    /// Whether the partner's information came from its PDUs (not the defaults).
    pub fn has_partner(&self) -> bool {
        !bit(&self.actor, state::DEFAULTED) && self.partner.system != [0; 6]
    }

    /// Whether the aggregate wait is over (Ready_N): true outside WAITING.
    pub(crate) fn wait_over(&self, now: u64) -> bool {
        self.mux != MuxState::Waiting || self.wait_until.is_some_and(|t| now >= t)
    }

    /// One step of the mux machine at `now`, `ready` when every member waiting for the same
    /// aggregator has waited long enough. True if the state changed.
    pub(crate) fn mux_step(&mut self, now: u64, ready: bool) -> bool {
        let partner_sync = bit(&self.partner, state::SYNCHRONIZATION);
        let next = match (self.mux, self.selected) {
            (MuxState::Detached, Selected::Selected | Selected::Standby) => MuxState::Waiting,
            (MuxState::Waiting, Selected::Unselected) => MuxState::Detached,
            (MuxState::Waiting, Selected::Selected) if ready => MuxState::Attached,
            (MuxState::Attached, Selected::Unselected | Selected::Standby) => MuxState::Detached,
            (MuxState::Attached, Selected::Selected) if partner_sync => {
                MuxState::CollectingDistributing
            }
            (MuxState::CollectingDistributing, Selected::Selected) if partner_sync => {
                return false;
            }
            (MuxState::CollectingDistributing, _) => MuxState::Attached,
            _ => return false,
        };
        self.mux = next;
        match next {
            MuxState::Detached => {
                self.aggregator = None;
                set_bit(&mut self.actor, state::SYNCHRONIZATION, false);
                set_bit(&mut self.actor, state::COLLECTING, false);
                set_bit(&mut self.actor, state::DISTRIBUTING, false);
            }
            MuxState::Waiting => self.wait_until = Some(now + AGGREGATE_WAIT_MS),
            MuxState::Attached => {
                set_bit(&mut self.actor, state::SYNCHRONIZATION, true);
                set_bit(&mut self.actor, state::COLLECTING, false);
                set_bit(&mut self.actor, state::DISTRIBUTING, false);
            }
            MuxState::CollectingDistributing => {
                set_bit(&mut self.actor, state::COLLECTING, true);
                set_bit(&mut self.actor, state::DISTRIBUTING, true);
            }
        }
        if next != MuxState::Waiting {
            self.ntt = true;
        }
        true
    }

    /// The periodic machine at `now`: no PDUs when the link is down, LACP is off or both
    /// ends are passive; else one every fast or slow period, as the partner's timeout asks.
    pub(crate) fn periodic_step(&mut self, now: u64) {
        if !self.periodic_on() {
            self.periodic_until = None;
            return;
        }
        let fast = bit(&self.partner, state::TIMEOUT);
        let period = if fast { FAST_PERIOD_MS } else { SLOW_PERIOD_MS };
        match self.periodic_until {
            None => self.periodic_until = Some(now + period),
            // The partner asked for fast PDUs: one now, then every second.
            Some(_) if fast && !self.periodic_fast => {
                self.ntt = true;
                self.periodic_until = Some(now + period);
            }
            Some(until) if now >= until => {
                self.ntt = true;
                self.periodic_until = Some(now + period);
            }
            Some(_) => {}
        }
        self.periodic_fast = fast;
    }

    fn periodic_on(&self) -> bool {
        self.port_enabled
            && self.lacp_enabled
            && (bit(&self.actor, state::ACTIVITY) || bit(&self.partner, state::ACTIVITY))
    }

    /// When the rate limit lets the next PDU out (None: now).
    fn tx_allowed_at(&self) -> Option<u64> {
        self.sent[0].map(|oldest| oldest + 1_000)
    }

    /// The transmit machine at `now`: when a PDU is needed and the rate limit allows, the
    /// actor and partner information it carries; NTT is then cleared.
    pub(crate) fn transmit(&mut self, now: u64) -> Option<(PortInfo, PortInfo)> {
        if !self.ntt || !self.periodic_on() {
            return None;
        }
        if self.tx_allowed_at().is_some_and(|t| now < t) {
            return None;
        }
        self.sent.rotate_left(1);
        self.sent[MAX_PDUS_PER_SECOND - 1] = Some(now);
        self.ntt = false;
        self.counters.pdus_out += 1;
        Some((self.actor, self.partner))
    }

    /// What the machines are in, to count changes.
    pub(crate) fn snapshot(&self) -> (RxState, MuxState, Selected, u8, u8) {
        (
            self.rx,
            self.mux,
            self.selected,
            self.actor.state,
            self.partner.state,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor() -> PortInfo {
        PortInfo {
            system_priority: 65535,
            system: [2, 0, 0, 0, 0, 1],
            key: 9,
            port_priority: 255,
            port: 1,
            state: state::ACTIVITY | state::TIMEOUT | state::AGGREGATION,
        }
    }

    fn partner() -> PortInfo {
        PortInfo {
            system_priority: 100,
            system: [2, 0, 0, 0, 0, 2],
            key: 17,
            port_priority: 255,
            port: 5,
            state: state::ACTIVITY | state::TIMEOUT | state::AGGREGATION | state::SYNCHRONIZATION,
        }
    }

    fn up_port() -> Port {
        let mut p = Port::new(actor(), PortInfo::default());
        p.set_port_enabled(true, 0);
        p
    }

    #[test]
    fn a_new_member_is_disabled_defaulted_and_unselected_until_its_link_is_up() {
        let p = Port::new(actor(), PortInfo::default());
        assert_eq!(p.rx, RxState::PortDisabled);
        assert_eq!(p.selected, Selected::Unselected);
        assert!(bit(&p.actor, state::DEFAULTED));
        let p = up_port();
        assert_eq!(
            p.rx,
            RxState::Expired,
            "link up, LACP on: waiting for the partner"
        );
        assert!(bit(&p.actor, state::EXPIRED));
        assert!(
            bit(&p.partner, state::TIMEOUT),
            "the partner is assumed fast"
        );
        assert_eq!(p.next_deadline(), Some(SHORT_TIMEOUT_MS));
    }

    #[test]
    fn a_silent_partner_expires_then_defaults_after_the_short_timeout() {
        let mut p = up_port();
        p.tick(SHORT_TIMEOUT_MS - 1);
        assert_eq!(p.rx, RxState::Expired);
        p.tick(SHORT_TIMEOUT_MS);
        assert_eq!(p.rx, RxState::Defaulted);
        assert!(!bit(&p.actor, state::EXPIRED));
        assert!(bit(&p.actor, state::DEFAULTED));
        assert_eq!(p.next_deadline(), None);
    }

    #[test]
    fn a_pdu_makes_the_partner_current_and_in_sync_when_it_knows_us() {
        let mut p = up_port();
        let mut us = actor();
        us.state = actor().state;
        p.receive(&partner(), &us, 100);
        assert_eq!(p.rx, RxState::Current);
        assert_eq!(p.partner.system, partner().system);
        assert!(
            bit(&p.partner, state::SYNCHRONIZATION),
            "it knows us and is in sync"
        );
        assert!(!bit(&p.actor, state::DEFAULTED) && !bit(&p.actor, state::EXPIRED));
        assert!(!p.ntt, "its view of us is right: nothing to send");
        assert_eq!(
            p.next_deadline(),
            Some(100 + SHORT_TIMEOUT_MS),
            "our timeout is short"
        );
        assert_eq!(
            p.selected,
            Selected::Unselected,
            "a new partner: select again"
        );
    }

    #[test]
    fn a_partner_with_a_stale_view_of_us_is_not_in_sync_and_we_must_transmit() {
        let mut p = up_port();
        p.receive(&partner(), &PortInfo::default(), 0);
        assert!(!bit(&p.partner, state::SYNCHRONIZATION));
        assert!(p.ntt);
    }

    #[test]
    fn the_same_partner_again_keeps_the_selection() {
        let mut p = up_port();
        p.receive(&partner(), &actor(), 0);
        p.selected = Selected::Selected;
        p.receive(&partner(), &actor(), 1_000);
        assert_eq!(p.selected, Selected::Selected);
        let mut other = partner();
        other.key = 18;
        p.receive(&other, &actor(), 2_000);
        assert_eq!(
            p.selected,
            Selected::Unselected,
            "another key: select again"
        );
    }

    #[test]
    fn a_current_partner_that_falls_silent_expires_then_defaults() {
        let mut p = up_port();
        p.receive(&partner(), &actor(), 0);
        p.tick(SHORT_TIMEOUT_MS);
        assert_eq!(p.rx, RxState::Expired);
        assert!(!bit(&p.partner, state::SYNCHRONIZATION));
        p.tick(2 * SHORT_TIMEOUT_MS);
        assert_eq!(p.rx, RxState::Defaulted);
        assert_eq!(p.partner, PortInfo::default(), "the administrative partner");
    }

    #[test]
    fn with_the_long_timeout_the_partner_stays_current_for_90_seconds() {
        let mut slow = actor();
        slow.state &= !state::TIMEOUT;
        let mut p = Port::new(slow, PortInfo::default());
        p.set_port_enabled(true, 0);
        p.receive(&partner(), &slow, 0);
        p.tick(LONG_TIMEOUT_MS - 1);
        assert_eq!(p.rx, RxState::Current);
        p.tick(LONG_TIMEOUT_MS);
        assert_eq!(p.rx, RxState::Expired);
    }

    #[test]
    fn a_link_down_disables_and_a_link_up_starts_over_expired() {
        let mut p = up_port();
        p.receive(&partner(), &actor(), 0);
        p.set_port_enabled(false, 10);
        assert_eq!(p.rx, RxState::PortDisabled);
        assert!(!bit(&p.partner, state::SYNCHRONIZATION));
        p.receive(&partner(), &actor(), 20);
        assert_eq!(p.rx, RxState::PortDisabled, "a disabled port hears nothing");
        p.set_port_enabled(true, 30);
        assert_eq!(p.rx, RxState::Expired);
        assert_eq!(p.next_deadline(), Some(30 + SHORT_TIMEOUT_MS));
    }

    #[test]
    fn lacp_off_leaves_the_member_individual_on_the_default_partner() {
        let mut p = up_port();
        p.set_lacp_enabled(false, 0);
        assert_eq!(p.rx, RxState::LacpDisabled);
        assert!(!bit(&p.partner, state::AGGREGATION));
        p.receive(&partner(), &actor(), 10);
        assert_eq!(p.rx, RxState::LacpDisabled, "PDUs are ignored");
    }

    #[test]
    fn two_passive_ends_never_synchronize() {
        let mut passive = actor();
        passive.state &= !state::ACTIVITY;
        let mut p = Port::new(passive, PortInfo::default());
        p.set_port_enabled(true, 0);
        let mut other = partner();
        other.state &= !state::ACTIVITY;
        p.receive(&other, &passive, 0);
        assert!(!bit(&p.partner, state::SYNCHRONIZATION));
    }
}
