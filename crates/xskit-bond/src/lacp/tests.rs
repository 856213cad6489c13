//! Two (or three) bonds' LACP wired together on virtual time: each member's frames reach
//! the member at the other end of its link, every 10 ms of virtual time.

use super::*;

const TEN_G: LinkSpeed = Some((10_000, true));
const STEP_MS: u64 = 10;

fn mac(system: u8, member: usize) -> [u8; 6] {
    [2, 0, 0, 0, system, member as u8]
}

fn bond(system: u8, members: usize, config: LacpConfig) -> Lacp {
    let macs: Vec<_> = (0..members).map(|m| mac(system, m)).collect();
    Lacp::new(config, mac(system, 0xff), &macs)
}

fn fast() -> LacpConfig {
    LacpConfig::default().rate(LacpRate::Fast)
}

/// Bonds and the links between their members: (bond, member) to (bond, member).
struct Net {
    bonds: Vec<Lacp>,
    links: Vec<((usize, usize), (usize, usize))>,
    /// Per bond: whether it sends at all (a partner that falls silent).
    silent: Vec<bool>,
    now: u64,
    /// Frames each bond sent, per member.
    sent: Vec<Vec<u64>>,
}

impl Net {
    fn new(bonds: Vec<Lacp>, links: Vec<((usize, usize), (usize, usize))>) -> Net {
        let sent = bonds.iter().map(|b| vec![0; b.ports().len()]).collect();
        let mut net = Net {
            silent: vec![false; bonds.len()],
            bonds,
            links,
            now: 0,
            sent,
        };
        for l in 0..net.links.len() {
            net.set_link(l, true);
        }
        net
    }

    fn set_link(&mut self, link: usize, up: bool) {
        let (a, b) = self.links[link];
        for (bond, member) in [a, b] {
            self.bonds[bond].set_link(member, up, TEN_G, self.now);
        }
    }

    fn peer(&self, end: (usize, usize)) -> Option<(usize, usize)> {
        self.links.iter().find_map(|&(a, b)| {
            if a == end {
                Some(b)
            } else if b == end {
                Some(a)
            } else {
                None
            }
        })
    }

    /// Runs until `until` ms.
    fn run_to(&mut self, until: u64) {
        while self.now < until {
            self.now += STEP_MS;
            for b in 0..self.bonds.len() {
                let frames = self.bonds[b].step(self.now);
                for (member, frame) in frames {
                    self.sent[b][member] += 1;
                    if self.silent[b] {
                        continue;
                    }
                    let Some((pb, pm)) = self.peer((b, member)) else {
                        continue;
                    };
                    if self.bonds[pb].port(pm).is_some_and(|p| p.port_enabled()) {
                        assert_eq!(
                            self.bonds[pb].receive(pm, &frame, self.now),
                            Received::Lacpdu
                        );
                    }
                }
            }
        }
    }

    /// Runs until `done` holds (checked every step), up to `limit` ms; when it first held.
    fn run_until(&mut self, limit: u64, done: impl Fn(&Net) -> bool) -> Option<u64> {
        while self.now < limit {
            if done(self) {
                return Some(self.now);
            }
            self.run_to(self.now + STEP_MS);
        }
        None
    }

    fn distributing(&self, bond: usize) -> Vec<bool> {
        self.bonds[bond].distributing()
    }
}

fn pair(a: LacpConfig, b: LacpConfig) -> Net {
    Net::new(
        vec![bond(1, 2, a), bond(2, 2, b)],
        vec![((0, 0), (1, 0)), ((0, 1), (1, 1))],
    )
}

fn all_distributing(net: &Net) -> bool {
    net.distributing(0) == [true, true] && net.distributing(1) == [true, true]
}

#[test]
fn two_fast_bonds_distribute_on_both_members_after_the_aggregate_wait() {
    let mut net = pair(fast(), fast());
    let at = net
        .run_until(10_000, all_distributing)
        .expect("they aggregate");
    assert!(
        (AGGREGATE_WAIT_MS..AGGREGATE_WAIT_MS + 1_000).contains(&at),
        "after the 2 s wait, within a PDU exchange: {at} ms"
    );
    for b in 0..2 {
        for p in net.bonds[b].ports() {
            assert_eq!(p.mux, MuxState::CollectingDistributing);
            assert_eq!(p.rx, RxState::Current);
            assert_eq!(p.aggregator, net.bonds[b].active_aggregator());
            let bits = state::SYNCHRONIZATION | state::COLLECTING | state::DISTRIBUTING;
            assert_eq!(p.actor.state & bits, bits);
            assert_eq!(p.partner.state & bits, bits, "the partner says the same");
        }
    }
    assert_eq!(net.bonds[0].ports()[0].partner.system, mac(2, 0xff));
}

#[test]
fn nothing_attaches_before_the_aggregate_wait() {
    let mut net = pair(fast(), fast());
    net.run_to(AGGREGATE_WAIT_MS - STEP_MS);
    for b in 0..2 {
        for p in net.bonds[b].ports() {
            assert_eq!(p.mux, MuxState::Waiting);
            assert_eq!(p.actor.state & state::SYNCHRONIZATION, 0);
        }
    }
}

#[test]
fn fast_periodic_sends_a_pdu_a_second_and_slow_one_in_thirty() {
    let mut net = pair(fast(), fast());
    net.run_to(10_000);
    let settled = net.sent[0][0];
    net.run_to(20_000);
    assert_eq!(
        net.sent[0][0] - settled,
        10,
        "one a second, nothing else once settled"
    );
    let mut net = pair(LacpConfig::default(), LacpConfig::default());
    net.run_to(10_000);
    let settled = net.sent[0][0];
    net.run_to(70_000);
    assert_eq!(net.sent[0][0] - settled, 2, "one every 30 s");
    assert!(all_distributing(&net), "slow bonds aggregate too");
}

#[test]
fn no_more_than_three_pdus_go_out_in_any_second() {
    let mut lacp = bond(1, 1, fast());
    lacp.set_link(0, true, TEN_G, 0);
    let mut times = Vec::new();
    for t in (0..5_000).step_by(STEP_MS as usize) {
        // A partner whose view of us is always stale asks for a PDU on every one of ours.
        let mut frame = vec![0; FRAME_LEN];
        frame[12..14].copy_from_slice(&wire::ETHERTYPE.to_be_bytes());
        let partner = PortInfo {
            system: mac(9, 0),
            key: t as u16,
            port: 1,
            state: state::ACTIVITY | state::TIMEOUT | state::AGGREGATION,
            ..PortInfo::default()
        };
        Lacpdu::new_unchecked(&mut frame[14..]).emit(&partner, &PortInfo::default(), 0);
        assert_eq!(lacp.receive(0, &frame, t), Received::Lacpdu);
        times.extend(lacp.step(t).iter().map(|_| t));
    }
    assert!(times.len() >= 10, "it does transmit: {times:?}");
    for w in times.windows(MAX_PDUS_PER_SECOND + 1) {
        assert!(w[MAX_PDUS_PER_SECOND] - w[0] >= 1_000, "{times:?}");
    }
}

#[test]
fn a_link_down_leaves_the_aggregate_on_both_sides_and_it_rejoins() {
    let mut net = pair(fast(), fast());
    net.run_until(10_000, all_distributing).unwrap();
    net.set_link(0, false);
    net.run_to(net.now + STEP_MS);
    assert_eq!(net.distributing(0), [false, true]);
    assert_eq!(net.distributing(1), [false, true]);
    assert_eq!(net.bonds[0].ports()[0].rx, RxState::PortDisabled);
    net.set_link(0, true);
    let back = net.now;
    let at = net
        .run_until(back + 10_000, all_distributing)
        .expect("it rejoins");
    assert!(at - back < AGGREGATE_WAIT_MS + 1_000, "{} ms", at - back);
}

#[test]
fn a_partner_that_falls_silent_is_timed_out_after_three_seconds_fast() {
    let mut net = pair(fast(), fast());
    net.run_until(10_000, all_distributing).unwrap();
    net.silent[1] = true;
    let quiet = net.now;
    let at = net
        .run_until(quiet + 10_000, |n| n.distributing(0) == [false, false])
        .unwrap();
    // The last PDU came up to a second before; the timeout runs 3 s from it.
    assert!(
        (2_000..=SHORT_TIMEOUT_MS).contains(&(at - quiet)),
        "{} ms",
        at - quiet
    );
    assert_eq!(net.bonds[0].ports()[0].rx, RxState::Expired);
    net.run_to(at + SHORT_TIMEOUT_MS);
    assert_eq!(net.bonds[0].ports()[0].rx, RxState::Defaulted);
    net.silent[1] = false;
    net.run_until(net.now + 10_000, all_distributing)
        .expect("it returns when the partner speaks again");
}

#[test]
fn a_slow_partner_that_falls_silent_is_timed_out_after_ninety_seconds() {
    let mut net = pair(LacpConfig::default(), LacpConfig::default());
    net.run_until(10_000, all_distributing).unwrap();
    net.silent[1] = true;
    let quiet = net.now;
    let at = net
        .run_until(quiet + 200_000, |n| n.distributing(0) == [false, false])
        .unwrap();
    assert!(
        (LONG_TIMEOUT_MS - SLOW_PERIOD_MS..=LONG_TIMEOUT_MS).contains(&(at - quiet)),
        "{} ms",
        at - quiet
    );
}

#[test]
fn members_on_two_different_partner_systems_use_one_aggregator_and_hold_the_other() {
    let mut net = Net::new(
        vec![bond(1, 2, fast()), bond(2, 1, fast()), bond(3, 1, fast())],
        vec![((0, 0), (1, 0)), ((0, 1), (2, 0))],
    );
    net.run_to(10_000);
    let ports = net.bonds[0].ports();
    assert_ne!(ports[0].aggregator, ports[1].aggregator);
    assert_eq!(
        net.distributing(0),
        [true, false],
        "the first aggregator only"
    );
    assert_eq!(ports[1].selected, Selected::Standby);
    assert_eq!(ports[1].mux, MuxState::Waiting, "held, never in sync");
    assert_eq!(
        net.distributing(2),
        [false],
        "its partner sees it out of sync"
    );
    assert_eq!(ports[1].partner.system, mac(3, 0xff), "the state shows why");
}

#[test]
fn a_partner_whose_members_have_different_keys_gets_two_aggregators() {
    let mut net = pair(fast(), fast());
    net.bonds[1].ports[1].actor.key = 99;
    net.run_to(10_000);
    let ports = net.bonds[0].ports();
    assert_ne!(ports[0].aggregator, ports[1].aggregator);
    assert_eq!(net.distributing(0), [true, false]);
}

#[test]
fn members_of_different_speeds_get_different_keys() {
    let mut lacp = bond(1, 2, fast());
    lacp.set_link(0, true, Some((10_000, true)), 0);
    lacp.set_link(1, true, Some((25_000, true)), 0);
    assert_ne!(lacp.ports()[0].actor.key, lacp.ports()[1].actor.key);
    assert_eq!(port_key(3, Some((10_000, true))), 3 << 6 | 7 << 1 | 1);
    lacp.set_link(1, true, Some((1_000, false)), 0);
    assert_eq!(
        lacp.ports()[1].actor.state & state::AGGREGATION,
        0,
        "half duplex is individual"
    );
}

#[test]
fn below_min_links_no_member_distributes() {
    let mut net = pair(fast().min_links(2), fast());
    net.run_until(10_000, all_distributing).unwrap();
    net.set_link(1, false);
    net.run_to(net.now + STEP_MS);
    assert_eq!(net.distributing(0), [false, false]);
    assert_eq!(
        net.bonds[0].ports()[0].mux,
        MuxState::CollectingDistributing
    );
}

#[test]
fn two_passive_bonds_never_speak_and_a_passive_one_answers_an_active_one() {
    let passive = fast().active(false);
    let mut net = pair(passive, passive);
    net.run_to(10_000);
    assert_eq!(net.sent[0], [0, 0]);
    assert_eq!(net.sent[1], [0, 0]);
    let mut net = pair(passive, fast());
    net.run_until(10_000, all_distributing)
        .expect("an active partner wakes a passive bond");
}

#[test]
fn stable_keeps_its_aggregator_while_bandwidth_and_count_move_to_the_bigger_one() {
    for (select, moves) in [
        (AdSelect::Stable, false),
        (AdSelect::Count, true),
        (AdSelect::Bandwidth, true),
    ] {
        // Member 0 to system 2 alone, members 1 and 2 to system 3; member 0 comes up first.
        let mut net = Net::new(
            vec![
                bond(1, 3, fast().select(select)),
                bond(2, 1, fast()),
                bond(3, 2, fast()),
            ],
            vec![((0, 0), (1, 0)), ((0, 1), (2, 0)), ((0, 2), (2, 1))],
        );
        net.set_link(1, false);
        net.set_link(2, false);
        net.run_until(10_000, |n| n.distributing(0) == [true, false, false])
            .unwrap();
        net.set_link(1, true);
        net.set_link(2, true);
        net.run_to(net.now + 10_000);
        let expected = if moves {
            [false, true, true]
        } else {
            [true, false, false]
        };
        assert_eq!(net.distributing(0), expected, "{select:?}");
    }
}

#[test]
fn a_marker_request_is_answered_from_the_member_and_bad_pdus_are_counted() {
    let mut lacp = bond(1, 2, fast());
    let mut request = vec![0; FRAME_LEN];
    request[..6].copy_from_slice(&wire::DESTINATION);
    request[6..12].copy_from_slice(&mac(5, 1));
    request[12..14].copy_from_slice(&wire::ETHERTYPE.to_be_bytes());
    Marker::new_unchecked(&mut request[14..]).emit(false, 7, mac(5, 0xff), 0xdead);
    let Received::MarkerResponse(response) = lacp.receive(1, &request, 0) else {
        panic!("a marker request is answered");
    };
    assert_eq!(&response[6..12], &mac(1, 1), "from the member's own MAC");
    let marker = Marker::new_checked(&response[14..]).unwrap();
    assert!(marker.is_response());
    assert_eq!((marker.requester_port(), marker.transaction()), (7, 0xdead));
    assert_eq!(lacp.ports()[1].counters.markers_in, 1);

    let mut bad = request.clone();
    bad[14] = 9;
    assert_eq!(lacp.receive(1, &bad, 0), Received::Bad, "unknown subtype");
    let mut bad = vec![0; FRAME_LEN];
    bad[12..14].copy_from_slice(&wire::ETHERTYPE.to_be_bytes());
    Lacpdu::new_unchecked(&mut bad[14..]).emit(&PortInfo::default(), &PortInfo::default(), 0);
    bad[15] = 0;
    assert_eq!(lacp.receive(1, &bad, 0), Received::Bad, "version 0");
    assert_eq!(lacp.receive(1, &bad[..60], 0), Received::Bad, "cut short");
    assert_eq!(lacp.ports()[1].counters.bad_pdus, 3);
    assert_eq!(lacp.ports()[1].counters.pdus_in, 0);
    assert_eq!(lacp.ports()[1].rx, RxState::PortDisabled, "nothing taken");
}

#[test]
fn the_settings_are_checked_as_linux_checks_them() {
    assert!(LacpConfig::default().validate().is_ok());
    assert!(LacpConfig::default().system_priority(0).validate().is_err());
    assert!(LacpConfig::default()
        .user_port_key(1024)
        .validate()
        .is_err());
    assert!(LacpConfig::default().min_links(9).validate().is_err());
}

/// Each of bond `b`'s ports' state changes so far.
fn state_changes(net: &Net, b: usize) -> Vec<u64> {
    net.bonds[b]
        .ports()
        .iter()
        .map(|p| p.counters.state_changes)
        .collect()
}

/// Bond 0 handed to a new process after `pause` ms in which neither runs it, carried on
/// (`carry`) or started afresh; then ten seconds more. Whether every member distributed on
/// both sides throughout, and the partner's ports' state changes meanwhile.
fn hand_bond_over(carry: bool, pause: u64) -> (bool, Vec<u64>) {
    let mut net = pair(fast(), fast());
    net.run_until(10_000, all_distributing).unwrap();
    net.run_to(net.now + 5_000);
    let before = state_changes(&net, 1);
    let (handed, at) = (net.bonds[0].clone(), net.now);
    // The old process is paused, then gone: what it would send is lost.
    net.silent[0] = true;
    net.run_to(at + pause);
    let mut successor = bond(1, 2, fast());
    for m in 0..2 {
        successor.set_link(m, true, TEN_G, net.now);
    }
    if carry {
        // One clock here: the handed state was read at `at` of both.
        successor.carry_on(handed, at, at).unwrap();
    }
    net.bonds[0] = successor;
    net.silent[0] = false;
    let broke = net.run_until(net.now + 10_000, |n| !all_distributing(n));
    let changes = state_changes(&net, 1);
    let changed = changes.iter().zip(&before).map(|(a, b)| a - b).collect();
    (broke.is_none(), changed)
}

#[test]
fn a_bond_carried_on_by_another_process_goes_on_as_if_nothing_happened() {
    assert_eq!(hand_bond_over(true, 300), (true, vec![0, 0]));
    // A pause near the partner's timeout (3 s fast, from the last PDU up to 1 s before).
    assert_eq!(hand_bond_over(true, 1_900), (true, vec![0, 0]));
    // Started afresh, the successor leaves the aggregate until the wait is over.
    assert!(!hand_bond_over(false, 300).0);
}

#[test]
fn timers_move_between_clocks_and_another_bonds_state_is_refused() {
    let mut net = pair(fast(), fast());
    net.run_until(10_000, all_distributing).unwrap();
    let original = net.bonds[0].clone();
    let mut moved = original.clone();
    moved.shift_clock(net.now, net.now + 1_000_000);
    moved.shift_clock(net.now + 1_000_000, net.now);
    assert_eq!(format!("{moved:?}"), format!("{original:?}"));
    let mut other = bond(3, 2, fast());
    let e = other.carry_on(original, 0, 0).unwrap_err().to_string();
    assert!(e.contains("another bond's"), "{e}");
    assert_eq!(format!("{other:?}"), format!("{:?}", bond(3, 2, fast())));
}
