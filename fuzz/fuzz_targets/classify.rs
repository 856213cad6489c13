//! The forwarder's classifier: the key read from any frame is the same by the fast path and
//! the general walk, a packet said to need no checksum work has no partial checksum, and the
//! rule a rule set picks is the first one a plain byte-wise reading of its fields accepts,
//! failing closed: a later fragment, whose ports cannot be read, never passes a rule with
//! ports to reach a later rule or the default.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;

#[path = "shared/rules_menu.rs"]
mod rules_menu;

use xskit_fwd::rules::{ChecksumState, Match, PacketKey, Prefix, RuleSet, RuleSpec};
use xskit_wire::offload::L4Checksum;

/// Whether the first `len` bits of `addr` are the prefix's, the family being the prefix's.
fn within(p: &Option<Prefix>, family: u8, addr: &[u8; 16]) -> bool {
    let Some(p) = p else {
        return true;
    };
    let (bytes, fam): (Vec<u8>, u8) = match p.addr {
        IpAddr::V4(a) => (a.octets().to_vec(), 4),
        IpAddr::V6(a) => (a.octets().to_vec(), 6),
    };
    family == fam
        && (0..usize::from(p.len)).all(|bit| {
            let mask = 0x80 >> (bit % 8);
            bytes[bit / 8] & mask == addr[bit / 8] & mask
        })
}

/// Whether the address is in one of the menu's set's prefixes, as written.
fn in_set(set: Option<usize>, family: u8, addr: &[u8; 16]) -> bool {
    let Some(i) = set else {
        return true;
    };
    rules_menu::SETS[i]
        .1
        .iter()
        .any(|p| within(&Some(Prefix::parse(p).unwrap()), family, addr))
}

fn ports_within(r: Option<(u16, u16)>, p: u16) -> bool {
    r.is_none_or(|(lo, hi)| lo <= p && p <= hi)
}

/// Whether the port is in one of the menu's port set's ranges, when the rule names it.
fn in_port_set(set: Option<usize>, p: u16) -> bool {
    set.is_none_or(|_| {
        rules_menu::PORT_SET
            .1
            .iter()
            .any(|&r| ports_within(Some(r), p))
    })
}

/// The first rule a plain reading picks, failing closed: a later fragment (its TCP, UDP or
/// ICMP header is in the first one) that meets a rule with ports, TCP flags or ICMP keys, the
/// rule's other fields matching, cannot be told that rule's or not, and no later rule or the
/// default may take it (`Err`).
fn reference(rules: &[RuleSpec], k: &PacketKey) -> Result<Option<usize>, ()> {
    for (i, r) in rules.iter().enumerate() {
        let m: &Match = &r.matcher;
        let others = within(&m.src, k.family, &k.src)
            && within(&m.dst, k.family, &k.dst)
            && in_set(m.src_set, k.family, &k.src)
            && in_set(m.dst_set, k.family, &k.dst)
            && m.protocol.is_none_or(|p| k.family != 0 && p == k.protocol)
            && m.vlan.is_none_or(|v| k.vlan == Some(v))
            && m.length
                .is_none_or(|(lo, hi)| k.family != 0 && lo <= k.ip_len && k.ip_len <= hi);
        if !others {
            continue;
        }
        let all = Some((0, u16::MAX));
        let has_ports = m.src_ports.is_some_and(|r| Some(r) != all)
            || m.dst_ports.is_some_and(|r| Some(r) != all);
        let needs_l4 = has_ports
            || m.src_port_set.is_some()
            || m.dst_port_set.is_some()
            || m.tcp_flags.is_some_and(|f| f.mask != 0)
            || m.icmp_type.is_some()
            || m.icmp_code.is_some();
        if k.later_fragment && needs_l4 {
            return Err(());
        }
        let l4 = ports_within(m.src_ports, k.src_port)
            && ports_within(m.dst_ports, k.dst_port)
            && in_port_set(m.src_port_set, k.src_port)
            && in_port_set(m.dst_port_set, k.dst_port)
            && m.tcp_flags.is_none_or(|f| k.tcp_flags & f.mask == f.value)
            && m.icmp_type.is_none_or(|t| t == k.icmp_type)
            && m.icmp_code.is_none_or(|c| c == k.icmp_code);
        if l4 {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

fuzz_target!(|data: &[u8]| {
    let (text, frame) = rules_menu::rules(data);
    let set = RuleSet::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let parsed = PacketKey::parse(frame);
    let (noted, state) = PacketKey::parse_noting_checksum(frame, false);
    assert_eq!(parsed, noted, "the two reads of {frame:02x?}");
    assert_eq!(
        PacketKey::classifiable_noting_checksum(frame, false),
        (noted.is_ok(), state),
        "the read without a key, of {frame:02x?}"
    );
    let located = L4Checksum::locate(frame, frame.len()).filter(|c| c.is_partial(frame));
    match state {
        ChecksumState::Settled => assert!(located.is_none(), "settled, yet partial: {frame:02x?}"),
        ChecksumState::Partial { start, offset } => assert_eq!(
            located.map(|c| (c.start, c.offset)),
            Some((start, offset)),
            "partial, but not where locate finds it: {frame:02x?}"
        ),
        ChecksumState::Unknown => {}
    }
    let Ok(key) = parsed else {
        return;
    };
    let want = reference(set.rules(), &key);
    assert_eq!(set.classify(&key).map_err(|_| ()), want, "{key:?}\n{text}");
});
