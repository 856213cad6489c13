//! The forwarder's counters as one pure function of what was read: the workers' cells, the
//! sockets' and devices' kernel counters and the filters' counters, snapshotted by the
//! forwarder ([`crate::Forwarder::counters`]) and summed here without I/O, so that every
//! attribution (a kernel rule's packets to its port and verdict, a bond member's share,
//! what XDP forwarded that never left) is tested without root.

use std::ops::Range;

use xskit::Statistics;
use xskit_bond::BondStats;
use xskit_pipeline::PoolStats;

use crate::abi::Slot;
use crate::counter::{UserPortCounts, UserRuleCounts as RuleTally};
use crate::counts::{
    BlockedCount, Counters, ElementCount, PortCount, RuleCount, SetCount, TOP_BLOCKED, TOP_ELEMENTS,
};
use crate::filter::{BlockedSource, PoliceCount, RuleCounter};
use crate::rules::{KernelShare, Verdict};
use crate::sets::Element;
use crate::worker::FramesSeen;

/// What one worker had published.
#[derive(Clone, Debug, Default)]
pub(crate) struct WorkerSnapshot {
    /// Per side.
    pub(crate) ports: Vec<UserPortCounts>,
    /// Per socket, in filter order (a side's members in order, sides in order).
    pub(crate) sockets: Vec<Statistics>,
    /// Per side: a bond's member counters.
    pub(crate) bonds: Vec<Option<BondStats>>,
    /// Per rule, then the default, then the unclassifiable.
    pub(crate) rules: Vec<RuleTally>,
    pub(crate) pool: PoolStats,
    pub(crate) frames: FramesSeen,
}

/// What one interface's filter and device had counted (a side's, or a bond member's).
#[derive(Clone, Debug, Default)]
pub(crate) struct FilterSnapshot {
    /// Packets the device transmitted since the forwarder started.
    pub(crate) device_tx: u64,
    /// Per rule, then the default.
    pub(crate) rules: Vec<RuleCounter>,
    /// Per rule: what its rate limit did.
    pub(crate) police: Vec<PoliceCount>,
    /// The sources blocked now, most dropped first.
    pub(crate) blocked: Vec<BlockedSource>,
    /// Per [`Slot`], in its order.
    pub(crate) slots: Vec<RuleCounter>,
    /// Per set of the rules: its elements with their counts (none for a set without
    /// timeouts or counters, or when they were not read).
    pub(crate) elements: Vec<Vec<(Element, u64)>>,
}

impl FilterSnapshot {
    fn slot(&self, slot: Slot) -> RuleCounter {
        self.slots.get(slot as usize).copied().unwrap_or_default()
    }
}

/// The forwarder's shape: what the snapshots' indices mean.
pub(crate) struct Shape<'a> {
    /// The rules as the workers and filters run them.
    pub(crate) rules: KernelShare<'a>,
    /// Which filters (and sockets) belong to each side.
    pub(crate) sides: &'a [Range<usize>],
    /// Frames in the UMEM.
    pub(crate) umem_frames: usize,
    /// Frames in the shared pool, outside every worker.
    pub(crate) shared_free: usize,
    /// When the counters were read (CLOCK_MONOTONIC nanoseconds): which elements expired.
    pub(crate) now_ns: u64,
}

impl Shape<'_> {
    fn side_of(&self, filter: usize) -> usize {
        self.sides
            .iter()
            .position(|r| r.contains(&filter))
            .unwrap_or(0)
    }
}

/// The counters: `blank` (names, bond states, links, replies, counts at zero) with every
/// worker's and filter's counts added where they belong.
pub(crate) fn counters(
    mut blank: Counters,
    shape: &Shape<'_>,
    workers: &[WorkerSnapshot],
    filters: &[FilterSnapshot],
) -> Counters {
    for w in workers {
        add_worker(&mut blank, shape, w);
    }
    blank.frames.umem = shape.umem_frames as u64;
    blank.frames.pool += shape.shared_free as u64;
    for (i, f) in filters.iter().enumerate() {
        add_filter(&mut blank, shape, i, f);
        add_blocked(&mut blank, shape, i, f);
    }
    blank
        .blocked_sources
        .sort_by_key(|b| std::cmp::Reverse(b.drops));
    blank.blocked_sources.truncate(TOP_BLOCKED);
    blank.sets = set_counts(shape, filters);
    if blank.ports.len() == 2 {
        for q in 0..2 {
            let into_q = blank.ports[1 - q].xdp_forwarded;
            let port = &mut blank.ports[q];
            let left_by_xdp = port
                .device_tx_packets
                .saturating_sub(port.user.tx_packets + port.user.from_kernel);
            port.xdp_forward_undelivered = into_q.saturating_sub(left_by_xdp);
        }
    }
    blank
}

fn add_worker(out: &mut Counters, shape: &Shape<'_>, w: &WorkerSnapshot) {
    for (p, (user, count)) in w.ports.iter().zip(out.ports.iter_mut()).enumerate() {
        count.user += *user;
        count.unclassifiable += user.unclassifiable;
        let first = shape.sides[p].start;
        for i in shape.sides[p].clone() {
            let s = w.sockets.get(i).copied().unwrap_or_default();
            count.socket_rx_dropped += s.rx_dropped;
            count.socket_rx_ring_full += s.rx_ring_full;
            count.socket_fill_ring_empty += s.rx_fill_ring_empty_descs;
            count.statistics += s;
            if let Some(bond) = count.bond.as_mut() {
                bond.members[i - first].socket_rx_dropped += s.rx_dropped;
            }
        }
        if let (Some(bond), Some(Some(stats))) = (count.bond.as_mut(), w.bonds.get(p)) {
            for (m, s) in bond.members.iter_mut().zip(&stats.members) {
                m.rx_packets += s.rx_packets;
                m.tx_packets += s.tx_packets;
                m.tx_dropped += s.tx_dropped;
                m.rx_inactive += s.rx_inactive;
            }
            bond.tx_no_member += stats.tx_no_member;
            bond.tx_no_frame += stats.tx_no_frame;
            count.user.copies += stats.copies;
        }
    }
    let counts = out
        .rules
        .iter_mut()
        .chain(std::iter::once(&mut out.unclassifiable));
    for (tally, count) in w.rules.iter().zip(counts) {
        count.packets += tally.packets;
        count.bytes += tally.bytes;
        count.over_rate += tally.over_rate;
    }
    out.pool += w.pool;
    let seen = w.frames;
    let in_rings = seen.rings.fill + seen.rings.rx + seen.rings.tx;
    out.frames.pool += seen.cached as u64;
    out.frames.fill += seen.rings.fill as u64;
    out.frames.rx += seen.rings.rx as u64;
    out.frames.tx += seen.rings.tx as u64;
    out.frames.kernel_held += seen.in_kernel.saturating_sub(in_rings) as u64;
}

/// Adds what the kernel decided under `verdict` to the port's XDP counts.
fn add_xdp_verdict(port: &mut PortCount, verdict: Verdict, packets: u64) {
    match verdict {
        Verdict::Drop => port.xdp_dropped += packets,
        Verdict::Forward => port.xdp_forwarded += packets,
        _ => port.xdp_passed += packets,
    }
}

fn add_kernel_decision(count: &mut RuleCount, k: RuleCounter) {
    count.packets += k.packets;
    count.bytes += k.bytes;
    count.in_kernel += k.packets;
}

/// The sets with timeouts or counters: their elements' counts summed over the filters, the
/// expired ones counted, the busiest listed.
fn set_counts(shape: &Shape<'_>, filters: &[FilterSnapshot]) -> Vec<SetCount> {
    let sets = shape.rules.rule_set().sets();
    sets.iter()
        .enumerate()
        .filter(|(_, set)| set.is_tracked())
        .map(|(i, set)| {
            let mut elements: Vec<(Element, u64)> =
                set.elements().iter().map(|e| (*e, 0)).collect();
            for f in filters {
                let Some(counted) = f.elements.get(i) else {
                    continue;
                };
                for ((_, total), (_, packets)) in elements.iter_mut().zip(counted) {
                    *total += packets;
                }
            }
            let left_s = |e: &Element| {
                e.expires_ns
                    .map(|t| t.saturating_sub(shape.now_ns).div_ceil(1_000_000_000))
            };
            let mut count = SetCount {
                name: set.name().to_string(),
                elements: elements.len() as u64,
                expired: elements
                    .iter()
                    .filter(|(e, _)| left_s(e) == Some(0))
                    .count() as u64,
                packets: elements.iter().map(|(_, p)| p).sum(),
                top: Vec::new(),
            };
            if set.counts_elements() {
                // The busiest few of what may be millions: selected, then only they sorted.
                let by_count = |&(e, p): &(Element, u64)| (std::cmp::Reverse(p), e);
                elements.retain(|(_, p)| *p > 0);
                if elements.len() > TOP_ELEMENTS {
                    elements.select_nth_unstable_by_key(TOP_ELEMENTS - 1, by_count);
                    elements.truncate(TOP_ELEMENTS);
                }
                elements.sort_by_key(by_count);
                count.top = elements
                    .iter()
                    .map(|(e, p)| ElementCount {
                        element: e.prefix().to_string(),
                        packets: *p,
                        left_s: left_s(e),
                    })
                    .collect();
            }
            count
        })
        .collect()
}

/// The sources filter `i` blocks now.
fn add_blocked(out: &mut Counters, shape: &Shape<'_>, i: usize, f: &FilterSnapshot) {
    let interface = &out.ports[shape.side_of(i)].interface;
    let rules = shape.rules.rule_set().rules();
    out.blocked_now += f.blocked.len() as u64;
    out.blocked_sources
        .extend(f.blocked.iter().take(TOP_BLOCKED).map(|b| {
            BlockedCount {
                interface: interface.clone(),
                rule: rules
                    .get(b.rule)
                    .map_or_else(String::new, |r| r.name.clone()),
                source: b.source.clone(),
                drops: b.drops,
                left_s: b.left_ns.div_ceil(1_000_000_000),
            }
        }));
}

fn add_filter(out: &mut Counters, shape: &Shape<'_>, i: usize, f: &FilterSnapshot) {
    let side = shape.side_of(i);
    let member = i - shape.sides[side].start;
    // What this side forwarded in XDP towards the other one that found none of its members up.
    if shape.sides.len() == 2 {
        if let Some(bond) = out.ports[1 - side].bond.as_mut() {
            bond.tx_no_member += f.slot(Slot::NoMember).packets;
        }
    }
    let port = &mut out.ports[side];
    port.device_tx_packets += f.device_tx;
    if let Some(bond) = port.bond.as_mut() {
        let m = &mut bond.members[member];
        m.device_tx_packets = f.device_tx;
        m.rx_inactive += f.slot(Slot::Inactive).packets;
        m.arp_alive = f.slot(Slot::ArpAlive).packets;
        if let Some(lacp) = m.lacp.as_mut() {
            lacp.slow_frames = f.slot(Slot::Lacp).packets;
        }
    }
    port.xdp_partial_checksums += f.slot(Slot::PartialCsum).packets;
    port.xdp_no_socket_dropped += f.slot(Slot::NoSocket).packets;
    let (share, rules) = (shape.rules, shape.rules.rule_set());
    let u = f.slot(Slot::Unclassifiable);
    port.unclassifiable += u.packets;
    if share.unclassifiable_decided_in_kernel() {
        add_kernel_decision(&mut out.unclassifiable, u);
        add_xdp_verdict(port, rules.unclassifiable_verdict(), u.packets);
    }
    let default = rules.rules().len();
    for (r, k) in f.rules.iter().enumerate() {
        let (index, verdict, decided) = if r < default {
            (r, rules.rules()[r].verdict(), share.decided_in_kernel(r))
        } else {
            (
                default,
                rules.default_verdict(),
                share.default_decided_in_kernel(),
            )
        };
        if !decided {
            continue;
        }
        add_kernel_decision(&mut out.rules[index], *k);
        if verdict == Verdict::RateLimit {
            // Over the rate (or blocked) dropped; within it forwarded in XDP (what went to
            // user space is not on the kernel's count: user space counts it).
            let p = f.police.get(r).copied().unwrap_or_default();
            let count = &mut out.rules[index];
            count.over_rate += p.over_rate;
            count.blocked += p.blocked;
            count.sources_blocked += p.blocks;
            count.blocks_refused += p.refused;
            let dropped = p.over_rate + p.blocked;
            add_xdp_verdict(port, Verdict::Drop, dropped);
            add_xdp_verdict(port, Verdict::Forward, k.packets.saturating_sub(dropped));
        } else {
            add_xdp_verdict(port, verdict, k.packets);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::RuleSet;
    use crate::{BondCount, MemberCount};

    /// A kernel drop rule on UDP 53, a user-space rule on a source, the default forward.
    fn rules() -> RuleSet {
        crate::tests::dns_and_source_rules()
    }

    fn blank(rules: &RuleSet, ports: usize) -> Counters {
        let rule = |name: &str| RuleCount {
            name: name.into(),
            ..RuleCount::default()
        };
        Counters {
            rules: rules
                .rules()
                .iter()
                .map(|r| rule(&r.name))
                .chain([rule("default")])
                .collect(),
            unclassifiable: rule("unclassifiable"),
            ports: vec![PortCount::default(); ports],
            ..Counters::default()
        }
    }

    fn kernel(rules: [u64; 3], slots: &[(Slot, u64)], device_tx: u64) -> FilterSnapshot {
        let counter = |packets| RuleCounter {
            packets,
            bytes: packets * 100,
        };
        let mut f = FilterSnapshot {
            device_tx,
            rules: rules.iter().map(|&p| counter(p)).collect(),
            police: Vec::new(),
            blocked: Vec::new(),
            slots: vec![RuleCounter::default(); Slot::ALL.len()],
            elements: Vec::new(),
        };
        for &(slot, n) in slots {
            f.slots[slot as usize] = counter(n);
        }
        f
    }

    fn worker(sides: usize, sockets: usize) -> WorkerSnapshot {
        WorkerSnapshot {
            ports: vec![UserPortCounts::default(); sides],
            sockets: vec![Statistics::default(); sockets],
            bonds: vec![None; sides],
            rules: vec![RuleTally::default(); 4],
            ..WorkerSnapshot::default()
        }
    }

    #[test]
    fn kernel_decisions_count_on_their_rule_and_their_port() {
        let rules = rules();
        let sides = [0..1, 1..2];
        let shape = Shape {
            rules: rules.kernel_share(true),
            sides: &sides,
            umem_frames: 4096,
            shared_free: 10,
            now_ns: 0,
        };
        let mut w = worker(2, 2);
        w.ports[0].rx_packets = 7;
        w.rules[1].packets = 7; // from-a, decided in user space
        w.rules[3].packets = 2; // unclassifiable in user space (arrived undecided)
        w.ports[0].unclassifiable = 2; // ... on port a
        w.sockets[1].rx_dropped = 4;
        let filters = [
            kernel([50, 0, 900], &[(Slot::Unclassifiable, 3)], 0),
            kernel([0, 0, 0], &[], 880),
        ];
        let c = counters(blank(&rules, 2), &shape, &[w], &filters);
        assert_eq!((c.rules[0].packets, c.rules[0].in_kernel), (50, 50));
        assert_eq!(c.rules[0].bytes, 5000);
        assert_eq!((c.rules[1].packets, c.rules[1].in_kernel), (7, 0));
        assert_eq!((c.rules[2].packets, c.rules[2].in_kernel), (900, 900));
        assert_eq!(
            (c.unclassifiable.packets, c.unclassifiable.in_kernel),
            (5, 3)
        );
        // The port's unclassifiable and the unclassifiable rule's are one number.
        let a = &c.ports[0];
        assert_eq!(
            (a.xdp_dropped, a.xdp_forwarded, a.unclassifiable),
            (53, 900, 5)
        );
        assert_eq!(c.ports[1].socket_rx_dropped, 4);
        // 900 forwarded towards b in XDP, 880 left b's device, nothing from user space.
        assert_eq!(c.ports[1].xdp_forward_undelivered, 20);
        assert_eq!(c.frames.umem, 4096);
        assert_eq!(c.frames.pool, 10);
    }

    #[test]
    fn what_user_space_decides_is_not_counted_twice() {
        // Forward in user space: the kernel redirects the default's packets up, and its count
        // of them is not a decision.
        let rules = rules();
        let sides = [0..1, 1..2];
        let shape = Shape {
            rules: rules.kernel_share(false),
            sides: &sides,
            umem_frames: 64,
            shared_free: 0,
            now_ns: 0,
        };
        let mut w = worker(2, 2);
        w.rules[2].packets = 900;
        let filters = [kernel([0, 0, 900], &[], 0), kernel([0, 0, 0], &[], 900)];
        let c = counters(blank(&rules, 2), &shape, &[w.clone(), w], &filters);
        assert_eq!((c.rules[2].packets, c.rules[2].in_kernel), (1800, 0));
        assert_eq!(c.ports[0].xdp_forwarded, 0);
        assert_eq!(c.ports[1].xdp_forward_undelivered, 0);
    }

    #[test]
    fn a_bond_sides_members_get_their_own_and_the_other_sides_no_member_drops() {
        let rules = rules();
        let sides = [0..2, 2..3];
        let shape = Shape {
            rules: rules.kernel_share(true),
            sides: &sides,
            umem_frames: 64,
            shared_free: 0,
            now_ns: 0,
        };
        let mut blank = blank(&rules, 2);
        blank.ports[0].bond = Some(BondCount {
            members: vec![MemberCount::default(); 2],
            ..BondCount::default()
        });
        let mut w = worker(2, 3);
        w.sockets[1].rx_dropped = 6;
        w.bonds[0] = Some(BondStats {
            members: vec![Default::default(); 2],
            copies: 9,
            ..BondStats::default()
        });
        let filters = [
            kernel(
                [0, 0, 0],
                &[(Slot::Inactive, 5), (Slot::PartialCsum, 1)],
                100,
            ),
            kernel(
                [0, 0, 0],
                &[(Slot::ArpAlive, 3), (Slot::PartialCsum, 2)],
                200,
            ),
            kernel([0, 0, 0], &[(Slot::NoMember, 8)], 0),
        ];
        let c = counters(blank, &shape, &[w], &filters);
        let bond = c.ports[0].bond.as_ref().unwrap();
        assert_eq!(bond.members[0].rx_inactive, 5);
        assert_eq!(bond.members[1].arp_alive, 3);
        assert_eq!(bond.members[1].socket_rx_dropped, 6);
        assert_eq!(
            (
                bond.members[0].device_tx_packets,
                bond.members[1].device_tx_packets
            ),
            (100, 200)
        );
        assert_eq!(
            bond.tx_no_member, 8,
            "c's filter found no member of the bond up"
        );
        assert_eq!(c.ports[0].device_tx_packets, 300);
        assert_eq!(c.ports[0].xdp_partial_checksums, 3, "both members' filters");
        assert_eq!(c.ports[0].user.copies, 9);
    }

    /// A set with counters and timeouts: each element's counts summed over the interfaces,
    /// the expired counted, the busiest listed most first.
    #[test]
    fn set_elements_are_summed_over_interfaces_and_the_busiest_listed() {
        let rules = crate::rules::RuleSet::from_toml(
            "[[set]]\nname = \"s\"\ncounters = true\nprefixes = [\"198.51.100.0/24\", \
             \"198.51.100.7 timeout 10s\", \"2001:db8::/32\"]\n\
             [[rule]]\nsrc = \"@s\"\naction = \"drop\"\n",
        )
        .unwrap();
        let set = &rules.sets()[0];
        let elements = set.elements().to_vec();
        assert_eq!(elements.len(), 3);
        let expires = elements.iter().find_map(|e| e.expires_ns).unwrap();
        let sides = [0..1, 1..2];
        let shape = |now_ns| Shape {
            rules: rules.kernel_share(true),
            sides: &sides,
            umem_frames: 64,
            shared_free: 0,
            now_ns,
        };
        let counted = |n: [u64; 3]| FilterSnapshot {
            elements: vec![elements.iter().copied().zip(n).collect()],
            ..kernel([0, 0, 0], &[], 0)
        };
        let filters = [counted([5, 1, 0]), counted([2, 9, 0])];
        let c = counters(blank(&rules, 2), &shape(expires - 1), &[], &filters);
        assert_eq!(c.sets.len(), 1);
        let s = &c.sets[0];
        assert_eq!(
            (s.name.as_str(), s.elements, s.expired, s.packets),
            ("s", 3, 0, 17)
        );
        let top: Vec<_> = s
            .top
            .iter()
            .map(|e| (e.element.as_str(), e.packets, e.left_s))
            .collect();
        assert_eq!(
            top,
            [
                ("198.51.100.7/32", 10, Some(1)),
                ("198.51.100.0/24", 7, None)
            ]
        );
        let c = counters(blank(&rules, 2), &shape(expires), &[], &filters);
        assert_eq!(c.sets[0].expired, 1);
        assert_eq!(c.sets[0].top[0].left_s, Some(0));
    }

    /// Of more elements than the list holds, the busiest TOP_ELEMENTS, most first (a tie in
    /// address order); none that counted nothing.
    #[test]
    fn only_the_busiest_elements_are_listed_in_order() {
        let hosts: Vec<String> = (1..=14).map(|h| format!("\"198.51.100.{h}\"")).collect();
        let rules = crate::rules::RuleSet::from_toml(&format!(
            "[[set]]\nname = \"s\"\ncounters = true\nprefixes = [{}]\n\
             [[rule]]\nsrc = \"@s\"\naction = \"drop\"\n",
            hosts.join(", ")
        ))
        .unwrap();
        let elements = rules.sets()[0].elements().to_vec();
        // Host h counts h packets, but 14 counts 0 and 13 ties with 12.
        let packets = |e: &Element| match (e.network >> 96) as u32 & 0xff {
            14 => 0,
            13 => 12,
            h => u64::from(h),
        };
        let sides = [std::ops::Range { start: 0, end: 1 }];
        let shape = Shape {
            rules: rules.kernel_share(true),
            sides: &sides,
            umem_frames: 64,
            shared_free: 0,
            now_ns: 0,
        };
        let filter = FilterSnapshot {
            elements: vec![elements.iter().map(|e| (*e, packets(e))).collect()],
            ..kernel([0, 0, 0], &[], 0)
        };
        let c = counters(blank(&rules, 1), &shape, &[], &[filter]);
        let top: Vec<_> = c.sets[0]
            .top
            .iter()
            .map(|e| (e.element.as_str(), e.packets))
            .collect();
        let expected: Vec<(String, u64)> = [12, 13, 11, 10, 9, 8, 7, 6, 5, 4]
            .iter()
            .map(|&h| (format!("198.51.100.{h}/32"), if h == 13 { 12 } else { h }))
            .collect();
        let expected: Vec<_> = expected.iter().map(|(e, p)| (e.as_str(), *p)).collect();
        assert_eq!(top, expected);
    }
}
