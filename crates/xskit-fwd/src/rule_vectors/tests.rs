//! The vectors pick the rules the rule list's walk picks, for rule lists of every shape.
use std::net::IpAddr;
use std::sync::Arc;

use super::*;
use crate::rules::{Match, PacketKey, PortSet, Prefix, PrefixSet, RuleSet, TcpFlags};

/// A generator with a seed: the same rules and packets every run.
struct Draw(u64);

impl Draw {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next(n) == 0
    }

    /// An address near 198.51.100.7 or 2001:db8::..., so that prefixes often hold it.
    fn address(&mut self, family: u8) -> [u8; 16] {
        let mut a = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        if family == 4 {
            a = [0; 16];
            a[..4].copy_from_slice(&[198, 51, 100, 7]);
        }
        let bits = if family == 4 { 32 } else { 128 };
        for _ in 0..self.next(3) {
            let bit = self.next(bits) as usize;
            a[bit / 8] ^= 0x80 >> (bit % 8);
        }
        a
    }

    fn prefix(&mut self, family: u8) -> Prefix {
        let a = self.address(family);
        let (addr, max) = if family == 4 {
            (IpAddr::from([a[0], a[1], a[2], a[3]]), 33)
        } else {
            (IpAddr::from(a), 129)
        };
        let len = self.next(max) as u8;
        let p = Prefix { addr, len };
        Prefix {
            addr: p.network(),
            len,
        }
    }

    fn ports(&mut self) -> Option<(u16, u16)> {
        self.one_in(3).then(|| {
            let lo = self.next(60) as u16;
            (lo, lo + self.next(20) as u16)
        })
    }

    fn rule(&mut self, sets: usize, port_sets: usize) -> Match {
        let family = [4, 6][self.next(2) as usize];
        let mut m = Match {
            src: self.one_in(2).then(|| self.prefix(family)),
            dst: self.one_in(2).then(|| self.prefix(family)),
            ..Match::default()
        };
        match self.next(5) {
            0 | 1 => {
                m.protocol = Some([6, 17][self.next(2) as usize]);
                m.src_ports = self.ports();
                m.dst_ports = self.ports();
                m.src_port_set = (self.one_in(6) && port_sets > 0)
                    .then(|| self.next(port_sets as u64 + 1) as usize);
                if m.protocol == Some(6) && self.one_in(3) {
                    let mask = self.next(256) as u8;
                    m.tcp_flags = Some(TcpFlags {
                        mask,
                        value: self.next(256) as u8 & mask,
                    });
                }
            }
            2 => {
                m.protocol = Some(1);
                m.icmp_type = self.one_in(2).then(|| self.next(3) as u8);
                m.icmp_code = self.one_in(2).then(|| self.next(3) as u8);
            }
            _ => {}
        }
        if self.one_in(6) {
            let lo = self.next(200) as u16;
            m.length = Some((lo, lo + self.next(100) as u16));
        }
        m.vlan = self.one_in(8).then(|| self.next(3) as u16);
        m.src_set = (self.one_in(8) && sets > 0).then(|| self.next(sets as u64) as usize);
        m.dst_set = (self.one_in(8) && sets > 0).then(|| self.next(sets as u64) as usize);
        m
    }

    fn key(&mut self) -> PacketKey {
        let family = [0, 4, 4, 6][self.next(4) as usize];
        let protocol = [6, 17, 1, 58, 47][self.next(5) as usize];
        let later = family != 0 && self.one_in(8);
        let l4 = family != 0 && !later;
        let tcp = l4 && protocol == 6;
        let ports = l4 && (protocol == 6 || protocol == 17);
        let icmp = l4 && (protocol == 1 || protocol == 58);
        PacketKey {
            family,
            src: if family == 0 {
                [0; 16]
            } else {
                self.address(family)
            },
            dst: if family == 0 {
                [0; 16]
            } else {
                self.address(family)
            },
            protocol: if family == 0 { 0 } else { protocol },
            src_port: if ports { self.next(90) as u16 } else { 0 },
            dst_port: if ports { self.next(90) as u16 } else { 0 },
            later_fragment: later,
            ip_len: if family == 0 {
                0
            } else {
                self.next(320) as u16
            },
            vlan: [None, None, Some(0), Some(1), Some(2)][self.next(5) as usize],
            tcp_flags: if tcp { self.next(256) as u8 } else { 0 },
            icmp_type: if icmp { self.next(4) as u8 } else { 0 },
            icmp_code: if icmp { self.next(4) as u8 } else { 0 },
            ipv6_extensions: false,
        }
    }
}

/// A rule set of `rules` with `sets` prefix sets and `port_sets` port sets, looked up by
/// vectors (more than LINEAR_RULES rules) and walked, as RuleSet holds both.
fn both(rules: Vec<Match>, d: &mut Draw, sets: usize, port_sets: usize) -> (RuleSet, RuleSet) {
    let prefix_sets: Vec<Arc<PrefixSet>> = (0..sets)
        .map(|i| {
            let items: Vec<String> = (0..20)
                .map(|_| {
                    let family = [4, 6][d.next(2) as usize];
                    let p = d.prefix(family);
                    format!("{}/{}", p.addr, p.len)
                })
                .collect();
            Arc::new(
                PrefixSet::from_items(
                    &format!("s{i}"),
                    items.iter().enumerate().map(|(n, s)| (n + 1, s.as_str())),
                )
                .unwrap(),
            )
        })
        .collect();
    let ports: Vec<Arc<PortSet>> = (0..port_sets)
        .map(|i| {
            let ranges: Vec<(u16, u16)> = (0..4)
                .map(|_| {
                    let lo = d.next(80) as u16;
                    (lo, lo + d.next(5) as u16)
                })
                .collect();
            Arc::new(PortSet::from_ranges(&format!("p{i}"), &ranges))
        })
        .collect();
    let vectored = RuleSet::for_tests(rules.clone(), prefix_sets.clone(), ports.clone(), true);
    let walked = RuleSet::for_tests(rules, prefix_sets, ports, false);
    (vectored, walked)
}

#[test]
fn the_vectors_pick_the_rule_the_walk_picks() {
    let mut d = Draw(0x9e37_79b9_7f4a_7c15);
    let mut decided = [0usize; 3];
    for round in 0..40 {
        let count = [9, 40, 64, 65, 200, 700][round % 6];
        let (sets, port_sets) = (round % 3, round % 2);
        let rules: Vec<Match> = (0..count).map(|_| d.rule(sets, port_sets)).collect();
        let (vectored, walked) = both(rules, &mut d, sets, port_sets);
        for _ in 0..3000 {
            let key = d.key();
            let (want, got) = (walked.classify(&key), vectored.classify(&key));
            assert_eq!(got, want, "{key:?} in a set of {count} rules");
            decided[match want {
                Ok(Some(_)) => 0,
                Ok(None) => 1,
                Err(_) => 2,
            }] += 1;
        }
    }
    assert!(
        decided.iter().all(|&n| n > 1000),
        "rules, default, unclassifiable: {decided:?}"
    );
}

/// As the XDP filter's plain path takes them: a rule naming no set is its packet's when
/// the lookup holds it, with no match to confirm it.
#[test]
fn a_plain_packets_lookup_decides_every_rule_without_sets_alone() {
    let mut d = Draw(0x2545_f491_4f6c_dd1d);
    let mut seen = [0usize; 2];
    for round in 0..36 {
        let count = [9, 40, 64, 65, 200, 700][round % 6];
        let (sets, port_sets) = (round / 6 % 3, round % 2);
        let rules: Vec<Match> = (0..count).map(|_| d.rule(sets, port_sets)).collect();
        let (vectored, _) = both(rules, &mut d, sets, port_sets);
        for _ in 0..3000 {
            let key = d.key();
            for (rule, held, matched) in vectored.plain_decisions(&key) {
                assert_eq!(held, matched, "rule {rule} of {count}, {key:?}");
                seen[usize::from(matched)] += 1;
            }
        }
    }
    assert!(
        seen.iter().all(|&n| n > 1000),
        "decided rules not matched, matched: {seen:?}"
    );
}

#[test]
fn equal_vectors_are_stored_once_and_ipv4_prefixes_split_in_halves() {
    let p = |s: &str| Some(Prefix::parse(s).unwrap());
    let rules = vec![
        Match {
            dst: p("198.51.100.0/24"),
            ..Match::default()
        },
        Match {
            dst: p("198.48.0.0/12"),
            ..Match::default()
        },
        Match {
            dst: p("2001:db8::/32"),
            ..Match::default()
        },
    ];
    let v = crate::rules::vectors::build(&rules, &[]);
    let high = |a: u32| v.field(Field::Dst4High, (a >> 16) as usize).words[0];
    let low = |a: u32| v.field(Field::Dst4Low, (a & 0xffff) as usize).words[0];
    let at = |a: [u8; 4]| u32::from_be_bytes(a);
    // 198.51.100.1: both IPv4 rules; 198.51.99.1: the /12 only; 10.0.0.1: neither.
    assert_eq!(
        high(at([198, 51, 100, 1])) & low(at([198, 51, 100, 1])),
        0b011
    );
    assert_eq!(
        high(at([198, 51, 99, 1])) & low(at([198, 51, 99, 1])),
        0b010
    );
    assert_eq!(high(at([10, 0, 0, 1])) & low(at([10, 0, 0, 1])), 0);
    // The IPv6 rule is in no IPv4 vector, and its prefix's vector has it alone.
    assert_eq!(
        v.dst6.lookup(0x2001_0db8 << 96, 0),
        v.dst6.lookup((0x2001_0db8 << 96) | 5, 1)
    );
    assert_eq!(
        v.special(v.dst6.lookup(0x2001_0db8 << 96, 0)).words[0],
        0b100
    );
    assert_eq!(v.special(v.special.dst6_none).words[0], 0);
    let distinct: std::collections::HashSet<_> = v.vectors.iter().collect();
    assert_eq!(distinct.len(), v.vectors.len(), "each vector once");
    assert!(v.vectors.len() < 20, "{} vectors", v.vectors.len());
}
