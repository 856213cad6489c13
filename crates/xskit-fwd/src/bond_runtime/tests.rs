//! The controller on a fake system and virtual time: carrier changes, ARP checks and a LACP
//! partner (the bond crate's own machines at the other end of each member's link).

use std::collections::VecDeque;

use xskit_bond::lacp::{Lacp, LacpConfig, LacpRate, Received};
use xskit_bond::{ArpConfig, XmitHashPolicy};

use super::*;

const TEN_G: LinkSpeed = Some((10_000, true));
const ADDRESS: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);

fn mac(system: u8, member: usize) -> [u8; 6] {
    [2, 0, 0, 0, system, member as u8]
}

/// The members' links, probes and announcements as the controller sees them, and a LACP
/// partner wired to every member.
struct FakeIo {
    now: Duration,
    carrier: Vec<bool>,
    speeds: Vec<LinkSpeed>,
    changes: VecDeque<Vec<MemberChange>>,
    probes: usize,
    announced: Vec<(usize, [u8; 6], Ipv4Addr, u32)>,
    announce_works: bool,
    /// Members whose frames are lost on the way out (the send fails).
    cut: Vec<bool>,
    partner: Lacp,
    /// How far the partner's clock is ahead of this one (a controller that took over).
    partner_ahead: Duration,
    to_partner: Vec<VecDeque<Vec<u8>>>,
    from_partner: Vec<VecDeque<Vec<u8>>>,
}

impl FakeIo {
    fn new(members: usize) -> FakeIo {
        let partner_macs: Vec<_> = (0..members).map(|m| mac(9, m)).collect();
        let config = LacpConfig::default().rate(LacpRate::Fast);
        let mut partner = Lacp::new(config, mac(9, 0xff), &partner_macs);
        for m in 0..members {
            partner.set_link(m, true, TEN_G, 0);
        }
        FakeIo {
            now: Duration::ZERO,
            carrier: vec![true; members],
            speeds: vec![TEN_G; members],
            changes: VecDeque::new(),
            probes: 0,
            announced: Vec::new(),
            announce_works: true,
            cut: vec![false; members],
            partner,
            partner_ahead: Duration::ZERO,
            to_partner: vec![VecDeque::new(); members],
            from_partner: vec![VecDeque::new(); members],
        }
    }

    /// The partner takes what was sent to it and answers, at the current time.
    fn exchange(&mut self) {
        let now = millis(self.now + self.partner_ahead);
        for m in 0..self.to_partner.len() {
            while let Some(frame) = self.to_partner[m].pop_front() {
                if let Received::MarkerResponse(r) = self.partner.receive(m, &frame, now) {
                    self.from_partner[m].push_back(r);
                }
            }
        }
        for (m, frame) in self.partner.step(now) {
            if !self.cut[m] {
                self.from_partner[m].push_back(frame);
            }
        }
    }
}

impl SlowFrames for FakeIo {
    fn recv(&mut self, member: usize, buf: &mut [u8]) -> Option<usize> {
        let frame = self.from_partner[member].pop_front()?;
        buf[..frame.len()].copy_from_slice(&frame);
        Some(frame.len())
    }

    fn send(&mut self, member: usize, frame: &[u8]) -> bool {
        if self.cut[member] {
            return false;
        }
        self.to_partner[member].push_back(frame.to_vec());
        true
    }
}

impl BondIo for FakeIo {
    fn now(&self) -> Duration {
        self.now
    }

    fn carrier(&self) -> Vec<bool> {
        self.carrier.clone()
    }

    fn link_changes(&mut self, _timeout: Duration) -> Result<Vec<MemberChange>> {
        Ok(self.changes.pop_front().unwrap_or_default())
    }

    fn link_speed(&self, member: usize) -> LinkSpeed {
        self.speeds[member]
    }

    fn member_macs(&self) -> Vec<[u8; 6]> {
        (0..self.carrier.len()).map(|m| mac(1, m)).collect()
    }

    fn send_arp_probes(&mut self) {
        self.probes += 1;
    }

    fn announce(&mut self, member: usize, mac: [u8; 6], ip: Ipv4Addr, count: u32) -> bool {
        self.announced.push((member, mac, ip, count));
        self.announce_works
    }
}

fn change(member: usize, up: bool) -> Vec<MemberChange> {
    vec![MemberChange {
        member,
        up,
        removed: false,
    }]
}

fn published(runtime: &BondRuntime<FakeIo>) -> (Vec<bool>, Option<usize>) {
    runtime.control.state()
}

fn active_backup() -> BondConfig {
    BondConfig::new("bond0", ["a", "b"], BondMode::ActiveBackup)
        .fail_over_mac(FailOverMac::Active)
        .num_grat_arp(3)
}

#[test]
fn losing_the_active_members_carrier_fails_over_and_announces_from_the_new_one() {
    let mut bond = BondRuntime::new(&active_backup(), FakeIo::new(2), Some(ADDRESS)).unwrap();
    assert_eq!(published(&bond), (vec![true, true], Some(0)));
    assert!(
        !bond.poll(Duration::ZERO).unwrap(),
        "no change, nothing published"
    );

    bond.io.changes.push_back(change(0, false));
    assert!(bond.poll(Duration::ZERO).unwrap());
    assert_eq!(published(&bond), (vec![false, true], Some(1)));
    assert_eq!(bond.io.announced, vec![(1, mac(1, 1), ADDRESS, 3)]);
    assert_eq!(
        bond.bond_mac(),
        mac(1, 1),
        "fail_over_mac active follows member 1"
    );
    assert_eq!((bond.failovers(), bond.link_changes()), (1, 1));

    bond.io.changes.push_back(change(0, true));
    bond.poll(Duration::ZERO).unwrap();
    assert_eq!(published(&bond).1, Some(1), "no primary: b stays active");
    assert_eq!(bond.io.announced.len(), 1);

    let mut preferring_a = BondRuntime::new(
        &active_backup().primary(Some("a".into())),
        FakeIo::new(2),
        None,
    )
    .unwrap();
    preferring_a.io.changes.push_back(change(0, false));
    preferring_a.poll(Duration::ZERO).unwrap();
    preferring_a.io.changes.push_back(change(0, true));
    preferring_a.poll(Duration::ZERO).unwrap();
    assert_eq!(
        published(&preferring_a).1,
        Some(0),
        "the primary takes over again"
    );
    assert_eq!(preferring_a.failovers(), 2);
}

#[test]
fn an_announcement_that_cannot_be_sent_is_counted_and_nothing_is_announced_without_an_address() {
    let mut io = FakeIo::new(2);
    io.announce_works = false;
    let mut bond = BondRuntime::new(&active_backup(), io, Some(ADDRESS)).unwrap();
    bond.io.changes.push_back(change(0, false));
    bond.poll(Duration::ZERO).unwrap();
    assert_eq!(bond.count(&active_backup()).announce_errors, 1);

    let mut quiet = BondRuntime::new(&active_backup(), FakeIo::new(2), None).unwrap();
    quiet.io.changes.push_back(change(0, false));
    quiet.poll(Duration::ZERO).unwrap();
    assert!(quiet.io.announced.is_empty());
    assert_eq!(quiet.bond_mac(), mac(1, 1));
}

#[test]
fn a_link_that_comes_back_is_asked_its_speed_again() {
    let config = BondConfig::new("bond0", ["a", "b"], BondMode::ActiveBackup);
    let mut bond = BondRuntime::new(&config, FakeIo::new(2), None).unwrap();
    bond.io.changes.push_back(change(1, false));
    bond.poll(Duration::ZERO).unwrap();
    assert_eq!(bond.decisions.speed(1), TEN_G, "the speed it last had");
    bond.io.speeds[1] = Some((25_000, true));
    bond.io.changes.push_back(change(1, true));
    bond.poll(Duration::ZERO).unwrap();
    assert_eq!(bond.decisions.speed(1), Some((25_000, true)));
}

#[test]
fn arp_checks_come_each_interval_send_probes_and_take_a_silent_member_out() {
    let interval = Duration::from_millis(100);
    let arp = ArpConfig::new(interval, vec![ADDRESS]).missed_max(2);
    let config = BondConfig::new("bond0", ["a", "b"], BondMode::ActiveBackup).arp(Some(arp));
    let mut bond = BondRuntime::new(&config, FakeIo::new(2), None).unwrap();
    assert_eq!(bond.io.probes, 1, "the first probes go out at once");

    bond.io.now = Duration::from_millis(50);
    assert!(!bond.arp_due());
    bond.io.now = interval;
    assert!(bond.arp_due());
    assert!(
        !bond.arp_check(&[1, 0]),
        "member 1 missed one check: still up"
    );
    assert_eq!(bond.io.probes, 2);
    assert!(!bond.arp_due(), "the next check is an interval later");

    bond.io.now = 2 * interval;
    assert!(bond.arp_check(&[2, 0]), "a second silent check");
    assert_eq!(published(&bond).0, vec![true, false]);
    assert!(
        !bond.arp_up(1) && bond.carrier()[1],
        "out by ARP, carrier still up"
    );

    // A check that ran late counts from when it ran, not from when it was due.
    bond.io.now = Duration::from_millis(1_050);
    bond.arp_check(&[3, 1]);
    assert_eq!(
        published(&bond).0,
        vec![true, true],
        "one answer brings it back"
    );
    bond.io.now = Duration::from_millis(1_100);
    assert!(!bond.arp_due());
    bond.io.now = Duration::from_millis(1_150);
    assert!(bond.arp_due());
}

fn lacp_bond(members: usize) -> BondRuntime<FakeIo> {
    let names: Vec<String> = (0..members).map(|m| format!("m{m}")).collect();
    let mode = BondMode::Lacp {
        policy: XmitHashPolicy::Layer34,
    };
    let config =
        BondConfig::new("bond0", names, mode).lacp(LacpConfig::default().rate(LacpRate::Fast));
    BondRuntime::new(&config, FakeIo::new(members), None).unwrap()
}

/// Runs the controller and its partner for `ms` of virtual time, 10 ms a step; how many
/// times the members that distribute changed.
fn run_lacp(bond: &mut BondRuntime<FakeIo>, ms: u64) -> usize {
    let mut changes = 0;
    for _ in 0..ms / 10 {
        bond.io.now += Duration::from_millis(10);
        changes += usize::from(bond.lacp_poll());
        bond.io.exchange();
    }
    changes
}

#[test]
fn lacp_members_distribute_once_the_partner_agrees_and_stop_when_their_link_goes() {
    let mut bond = lacp_bond(2);
    assert_eq!(
        published(&bond).0,
        vec![false, false],
        "nothing before LACP agrees"
    );
    assert!(run_lacp(&mut bond, 5_000) > 0);
    assert_eq!(published(&bond).0, vec![true, true]);
    let (aggregator, send_errors) = bond.lacp_bond().unwrap();
    assert!(aggregator.is_some());
    assert_eq!(send_errors, 0);
    let state = bond.lacp_state(1).unwrap();
    assert_eq!(state.mux_state, "COLLECTING_DISTRIBUTING");
    assert!(state.pdus_in > 0 && state.pdus_out > 0);

    bond.io.changes.push_back(change(1, false));
    bond.io
        .partner
        .set_link(1, false, None, millis(bond.io.now));
    bond.poll(Duration::ZERO).unwrap();
    run_lacp(&mut bond, 1_000);
    assert_eq!(published(&bond).0, vec![true, false]);
}

#[test]
fn a_member_whose_frames_stop_leaves_the_aggregate_and_its_failed_sends_are_counted() {
    let mut bond = lacp_bond(2);
    run_lacp(&mut bond, 5_000);
    assert_eq!(published(&bond).0, vec![true, true]);
    // The link stays up but carries no LACP either way: the partner times out (fast
    // rate: 3 s) and so do we.
    bond.io.cut[1] = true;
    run_lacp(&mut bond, 5_000);
    assert_eq!(published(&bond).0, vec![true, false]);
    assert!(
        bond.lacp_bond().unwrap().1 > 0,
        "the frames member 1 could not send"
    );
}

#[test]
fn the_report_names_the_active_member_only_under_active_backup_and_the_policy_only_where_hashed() {
    let config = active_backup();
    let mut bond = BondRuntime::new(&config, FakeIo::new(2), None).unwrap();
    bond.io.changes.push_back(change(0, false));
    bond.poll(Duration::ZERO).unwrap();
    let count = bond.count(&config);
    assert_eq!(count.mode, "active-backup");
    assert_eq!((count.active.as_deref(), count.failovers), (Some("b"), 1));
    assert_eq!(count.xmit_hash_policy, None);
    let states: Vec<_> = count
        .members
        .iter()
        .map(|m| (m.up, m.active, m.carrier))
        .collect();
    assert_eq!(states, vec![(false, false, false), (true, true, true)]);
    assert!(count.members.iter().all(|m| m.arp_up && m.lacp.is_none()));

    let xor = BondConfig::new(
        "bond0",
        ["a", "b"],
        BondMode::BalanceXor {
            policy: XmitHashPolicy::Layer23,
        },
    );
    let mut bond = BondRuntime::new(&xor, FakeIo::new(2), None).unwrap();
    bond.io.changes.push_back(change(0, false));
    bond.poll(Duration::ZERO).unwrap();
    let count = bond.count(&xor);
    assert_eq!((count.active, count.failovers), (None, 0));
    assert_eq!(count.xmit_hash_policy, Some("layer2+3"));
    assert_eq!(count.link_changes, 1);
}

/// The controller of a forwarder taking over, started `started_ago` before the handover on
/// a clock of its own, the partner and whatever it has sent moved to it; carried on from
/// `bond` after a pause of `pause`.
fn successor_of(
    bond: BondRuntime<FakeIo>,
    config: &BondConfig,
    started_ago: Duration,
    pause: Duration,
) -> BondRuntime<FakeIo> {
    let handed = bond.handed();
    let mut io = FakeIo::new(bond.io.carrier.len());
    io.now = started_ago + pause;
    io.partner_ahead = bond.io.now + pause - io.now;
    // Frames from the partner the successor's sockets also got, and the old one handled.
    io.from_partner = bond.io.from_partner.clone();
    io.partner = bond.io.partner;
    let mut next = BondRuntime::new(config, io, None).unwrap();
    next.carry_on(handed, pause).unwrap();
    next
}

#[test]
fn a_successor_carries_lacp_on_and_the_partner_sees_no_change() {
    let mut bond = lacp_bond(2);
    run_lacp(&mut bond, 5_000);
    assert_eq!(published(&bond).0, vec![true, true]);
    let pdus = bond.lacp_state(0).unwrap().pdus_in;
    let partner_changes = |b: &BondRuntime<FakeIo>| -> Vec<u64> {
        b.io.partner
            .ports()
            .iter()
            .map(|p| p.counters.state_changes)
            .collect()
    };
    let before = partner_changes(&bond);
    let config = BondConfig::new(
        "bond0",
        ["m0", "m1"],
        BondMode::Lacp {
            policy: XmitHashPolicy::Layer34,
        },
    )
    .lacp(LacpConfig::default().rate(LacpRate::Fast));
    let mut next = successor_of(
        bond,
        &config,
        Duration::from_secs(2),
        Duration::from_millis(400),
    );
    assert_eq!(published(&next).0, vec![true, true], "distributing at once");
    assert_eq!(next.lacp_state(0).unwrap().pdus_in, pdus, "counted on");
    assert_eq!(run_lacp(&mut next, 10_000), 0, "never stopped distributing");
    assert_eq!(
        partner_changes(&next),
        before,
        "the partner saw nothing change"
    );
    assert!(next.lacp_state(0).unwrap().pdus_in > pdus + 5);
}

#[test]
fn a_successor_keeps_the_active_member_and_the_failovers() {
    let mut bond = BondRuntime::new(&active_backup(), FakeIo::new(2), Some(ADDRESS)).unwrap();
    bond.io.changes.push_back(change(0, false));
    bond.poll(Duration::ZERO).unwrap();
    bond.io.changes.push_back(change(0, true));
    bond.poll(Duration::ZERO).unwrap();
    assert_eq!(
        published(&bond),
        (vec![true, true], Some(1)),
        "no primary: 1 stays"
    );
    assert_eq!(bond.io.announced.len(), 1);
    let mut next = successor_of(bond, &active_backup(), Duration::ZERO, Duration::ZERO);
    assert_eq!(
        published(&next),
        (vec![true, true], Some(1)),
        "not the first member, as a fresh start would have it"
    );
    assert_eq!((next.failovers(), next.link_changes()), (1, 2));
    assert_eq!(
        next.bond_mac(),
        mac(1, 1),
        "fail_over_mac active: member 1's"
    );
    assert!(
        next.io.announced.is_empty(),
        "nothing announced: nothing failed over"
    );
    next.io.changes.push_back(change(1, false));
    next.poll(Duration::ZERO).unwrap();
    assert_eq!(published(&next), (vec![true, false], Some(0)));
    assert_eq!(next.failovers(), 2);
}

#[test]
fn another_bonds_lacp_is_refused() {
    let mut bond = lacp_bond(2);
    run_lacp(&mut bond, 5_000);
    let handed = bond.handed();
    let mut other = BondRuntime::new(
        &BondConfig::new(
            "bond0",
            ["m0", "m1"],
            BondMode::Lacp {
                policy: XmitHashPolicy::Layer34,
            },
        ),
        FakeIo::new(2),
        None,
    )
    .unwrap();
    let e = other
        .carry_on(handed, Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(e.contains("another bond's"), "{e}");
}
