//! The DDoS cases of the forwarding rows, as data: what `xskit fwd`'s rules hold, where the
//! attack comes from, and what takes the same attack on the side link (the bare XDP_DROP
//! ceiling, or xdp-filter, the peer DDoS operators run); and the seeded address lists the
//! floods come from.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;

/// The rule `xskit fwd` drops the attack with (the attack is UDP from port 53 to port 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// By destination port.
    DstPort,
    /// By source port: a reflection flood's shape.
    SrcPort,
    /// By source address, in a set read from the attack's own list.
    SrcSet,
    /// A rate limit per source address, blocking sources that go over it.
    PerSourceLimit,
}

/// Where the attack comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sources {
    /// The generator's one address.
    One,
    /// The first address of each prefix of a list of [`BLOCKLIST_PREFIXES`] prefixes.
    Blocklist,
    /// [`SCATTERED_SOURCES`] host addresses spread over the address space.
    Scattered,
}

/// What takes the attack on the side link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    /// A program that counts and drops every packet: the ceiling.
    Ceiling,
    /// A program that reads each packet's UDP source port and drops the attack's (53): the
    /// least any filter by source port does.
    SrcPortFloor,
    /// Debian's xdp-filter (xdp-tools), dropping the attack's source addresses.
    XdpFilter,
}

/// One DDoS case: a pair of cells measured run by run, and the ratio row they make.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Case {
    /// Its name in the progress lines.
    pub what: &'static str,
    /// The cell of `xskit fwd`'s drops.
    pub dropped: &'static str,
    /// The cell of the peer's drops.
    pub peer_cell: &'static str,
    /// The ratio row.
    pub ratio: &'static str,
    /// Legitimate probes cross beside the attack.
    pub legit: bool,
    pub rule: Rule,
    pub sources: Sources,
    pub peer: Peer,
}

/// Prefixes in the blocklist the set flood comes from.
pub(crate) const BLOCKLIST_PREFIXES: usize = 1_000_000;
/// Sources of the scattered floods: xdp-filter's address table holds 10,000.
pub(crate) const SCATTERED_SOURCES: usize = 10_000;

/// The cases, in the order each run measures them.
pub(crate) const CASES: [Case; 7] = [
    Case {
        what: "ddos mix",
        dropped: "ddos: fwd drops in XDP",
        peer_cell: "ddos: XDP_DROP ceiling",
        ratio: "ddos drops in XDP / XDP_DROP ceiling",
        legit: true,
        rule: Rule::DstPort,
        sources: Sources::One,
        peer: Peer::Ceiling,
    },
    Case {
        what: "ddos alone",
        dropped: "ddos alone: fwd drops in XDP",
        peer_cell: "ddos alone: XDP_DROP ceiling",
        ratio: "ddos rule alone / XDP_DROP ceiling",
        legit: false,
        rule: Rule::DstPort,
        sources: Sources::One,
        peer: Peer::Ceiling,
    },
    Case {
        what: "reflection alone",
        dropped: "reflection (src_port rule): fwd drops in XDP",
        peer_cell: "reflection (src_port rule): XDP_DROP ceiling",
        ratio: "reflection, src_port rule alone / XDP_DROP ceiling",
        legit: false,
        rule: Rule::SrcPort,
        sources: Sources::One,
        peer: Peer::Ceiling,
    },
    Case {
        what: "reflection vs floor",
        dropped: "reflection beside the floor: fwd drops in XDP",
        peer_cell: "reflection: minimal source-port drop",
        ratio: "reflection, src_port rule alone / minimal source-port drop",
        legit: false,
        rule: Rule::SrcPort,
        sources: Sources::One,
        peer: Peer::SrcPortFloor,
    },
    Case {
        what: "set flood",
        dropped: "set flood (1M-prefix set): fwd drops in XDP",
        peer_cell: "set flood (1M-prefix set): XDP_DROP ceiling",
        ratio: "flood from a 1,000,000-prefix set's sources / XDP_DROP ceiling",
        legit: false,
        rule: Rule::SrcSet,
        sources: Sources::Blocklist,
        peer: Peer::Ceiling,
    },
    Case {
        what: "per-source limit",
        dropped: "per-source limit (10k sources): fwd drops in XDP",
        peer_cell: "per-source limit (10k sources): XDP_DROP ceiling",
        ratio: "per-source limit, flood from 10,000 sources / XDP_DROP ceiling",
        legit: false,
        rule: Rule::PerSourceLimit,
        sources: Sources::Scattered,
        peer: Peer::Ceiling,
    },
    Case {
        what: "vs xdp-filter",
        dropped: "10k-source set: fwd drops in XDP",
        peer_cell: "10k-source set: xdp-filter drops",
        ratio: "flood from 10,000 sources, set / xdp-filter",
        legit: false,
        rule: Rule::SrcSet,
        sources: Sources::Scattered,
        peer: Peer::XdpFilter,
    },
];

/// The rules file of `rule`; `list` is the attack's source list, for a set.
pub(crate) fn rules_text(rule: Rule, list: &Path) -> String {
    let head = "[[rule]]\nname = \"attack\"\n";
    match rule {
        Rule::DstPort => format!("{head}protocol = \"udp\"\ndst_port = 9\naction = \"drop\"\n"),
        Rule::SrcPort => format!("{head}protocol = \"udp\"\nsrc_port = 53\naction = \"drop\"\n"),
        Rule::SrcSet => format!(
            "[[set]]\nname = \"attackers\"\nfile = {:?}\n\n{head}src = \"@attackers\"\n\
             action = \"drop\"\n",
            list.display().to_string()
        ),
        // 10 packets a second a source: above what a legitimate host sends (a ping a
        // second), and well below what each of the flood's sources sends even when the
        // flood is slowed. On veth the sender pays for the receiver's work: were the limit
        // near a source's rate, a flood slowed by having its packets sent up to user space
        // would fall within it and stay slowed.
        Rule::PerSourceLimit => format!(
            "{head}protocol = \"udp\"\ndst_port = 9\naction = \"rate-limit\"\nrate = \"10pps\"\n\
             per = \"source\"\nblock = \"60s\"\n"
        ),
    }
}

/// The testbed's own /24s, which no flood source may fall in (the legitimate probes and
/// pings come from there).
const TESTBED_BLOCKS: [u32; 2] = [0xC633_6400 >> 8, 0xCB00_7100 >> 8];

/// A deterministic generator (SplitMix64): the same lists for the same seed, run after run.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// True if the range `first..=last` touches one of the testbed's /24s.
fn touches_testbed(first: u32, last: u32) -> bool {
    TESTBED_BLOCKS
        .iter()
        .any(|&b| first >> 8 <= b && b <= last >> 8)
}

/// A blocklist of `count` IPv4 prefixes as published lists are written (Spamhaus DROP's
/// `PREFIX ; SBLn`): mostly host addresses, a fifth /24s, the rest every length from /8 to
/// /31, drawn from the whole space but the testbed's /24s.
pub(crate) fn blocklist(seed: u64, count: usize) -> String {
    let mut rng = SplitMix(seed);
    let mut out = format!("; {count} prefixes, seed {seed}, in Spamhaus DROP's format\n");
    let mut made = 0;
    while made < count {
        let roll = rng.next() % 100;
        let length = match roll {
            0..70 => 32,
            70..90 => 24,
            _ => 8 + (rng.next() % 24) as u32,
        };
        let mask = u32::MAX << (32 - length);
        let first = (rng.next() as u32) & mask;
        if touches_testbed(first, first | !mask) {
            continue;
        }
        let _ = writeln!(out, "{}/{length} ; SBL{made}", Ipv4Addr::from(first));
        made += 1;
    }
    out
}

/// `count` distinct host addresses spread over the space but the testbed's /24s, one a line.
pub(crate) fn scattered_hosts(seed: u64, count: usize) -> String {
    let mut rng = SplitMix(seed);
    let mut seen = HashSet::with_capacity(count);
    let mut out = String::new();
    while seen.len() < count {
        let addr = rng.next() as u32;
        if touches_testbed(addr, addr) || !seen.insert(addr) {
            continue;
        }
        let _ = writeln!(out, "{}", Ipv4Addr::from(addr));
    }
    out
}

/// bpftool's batch commands that put each address of `hosts` (one a line) in xdp-filter's
/// IPv4 table at `map`, as `xdp-filter ip ADDR -m src` does (the value's flag bit 0: match
/// the source).
pub(crate) fn xdp_filter_batch(hosts: &str, map: &str) -> String {
    let mut out = String::new();
    for addr in hosts
        .lines()
        .filter_map(|l| l.trim().parse::<Ipv4Addr>().ok())
    {
        let [a, b, c, d] = addr.octets();
        let _ = writeln!(
            out,
            "map update pinned {map} key {a} {b} {c} {d} value 1 0 0 0 0 0 0 0"
        );
    }
    out
}

/// The packets xdp-filter dropped, from its `status` text's aggregate line
/// (`  XDP_DROP   1000 pkts   62 KiB`).
pub(crate) fn xdp_filter_drops(status: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("XDP_DROP")).then(|| words.next()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blocklist_is_the_same_for_a_seed_and_spares_the_testbed() {
        let list = blocklist(7, 5_000);
        assert_eq!(list, blocklist(7, 5_000));
        assert_ne!(list, blocklist(8, 5_000));
        let prefixes: Vec<(u32, u32)> = list
            .lines()
            .skip(1)
            .map(|l| {
                let (prefix, comment) = l.split_once(" ; SBL").unwrap();
                assert!(comment.parse::<usize>().is_ok(), "{l}");
                let (addr, len) = prefix.split_once('/').unwrap();
                (
                    u32::from(addr.parse::<Ipv4Addr>().unwrap()),
                    len.parse().unwrap(),
                )
            })
            .collect();
        assert_eq!(prefixes.len(), 5_000);
        let hosts = prefixes.iter().filter(|p| p.1 == 32).count();
        assert!((3_200..3_800).contains(&hosts), "{hosts} host addresses");
        for (addr, len) in prefixes {
            let last = addr | u32::MAX.checked_shr(len).unwrap_or(0);
            assert_eq!(addr & !(u32::MAX << (32 - len)), 0, "no host bits");
            assert!(!touches_testbed(addr, last));
        }
        assert!(!touches_testbed(0xC633_6300, 0xC633_63FF));
        assert!(touches_testbed(0xC633_0000, 0xC633_FFFF));
    }

    #[test]
    fn scattered_hosts_are_distinct_and_the_batch_and_status_read_as_xdp_filter_writes() {
        let hosts = scattered_hosts(3, 2_000);
        let set: HashSet<&str> = hosts.lines().collect();
        assert_eq!(set.len(), 2_000);
        let batch = xdp_filter_batch("198.51.100.7\n10.1.2.3\n", "/sys/fs/bpf/f");
        assert_eq!(
            batch,
            "map update pinned /sys/fs/bpf/f key 198 51 100 7 value 1 0 0 0 0 0 0 0\n\
             map update pinned /sys/fs/bpf/f key 10 1 2 3 value 1 0 0 0 0 0 0 0\n"
        );
        let status = "Aggregate per-action statistics:\n  XDP_ABORTED   0 pkts   0 KiB\n  \
                      XDP_DROP   1000 pkts   62 KiB\n  XDP_PASS   0 pkts   0 KiB\n";
        assert_eq!(xdp_filter_drops(status), Some(1000));
        assert_eq!(xdp_filter_drops("nothing"), None);
    }

    #[test]
    fn every_case_names_its_cells_once() {
        let mut names = HashSet::new();
        for case in CASES {
            for name in [case.what, case.dropped, case.peer_cell, case.ratio] {
                assert!(names.insert(name), "{name} twice");
            }
        }
        let rules = rules_text(Rule::SrcSet, Path::new("/tmp/a list"));
        assert!(rules.contains("file = \"/tmp/a list\""), "{rules}");
    }
}
