//! Rule sets drawn from the front of a fuzzer's input, for the classifier's targets.

const DSTS: [&str; 10] = [
    "",
    "198.51.100.0/24",
    "198.51.100.2/32",
    "203.0.113.0/25",
    "2001:db8::/32",
    "0.0.0.0/0",
    "::/0",
    "@a",
    "@b",
    "@none",
];
const SRCS: [&str; 5] = [
    "",
    "198.51.100.1/32",
    "2001:db8::1/128",
    "198.51.100.0/23",
    "@a",
];
/// The sets every rule set declares, by name, with their prefixes: a /24 whole and parts of
/// /24s (the kernel's records and the bitmaps it finds by rank, other partial /24s before
/// them in a record word), /16s holding one prefix (which the kernel's summary decides
/// alone: 198.18.4.0/22), IPv6, and a set with nothing in it.
pub const SETS: [(&str, &[&str]); 3] = [
    (
        "a",
        &[
            "198.51.96.2",
            "198.51.99.128/25",
            "198.51.100.0/31",
            "203.0.112.9",
            "203.0.113.128/25",
            "2001:db8::/127",
            "10.0.0.0/8",
            "198.18.4.0/22",
        ],
    ),
    (
        "b",
        &[
            "198.51.100.2/31",
            "203.0.113.0/24",
            "2001:db8::/32",
            "198.51.101.7",
        ],
    ),
    ("none", &[]),
];
/// The set of [`SETS`] declared with `counters = true`: kept element by element, its
/// addresses asked of the kernel's trie of elements.
pub const COUNTED: &str = "b";
const PROTOS: [&str; 6] = ["", "udp", "tcp", "icmp", "icmpv6", "47"];
const PORTS: [&str; 6] = ["", "53", "\"1-100\"", "0", "65535", "\"@p\""];
/// The port set every rule set declares, as inclusive ranges.
pub const PORT_SET: (&str, &[(u16, u16)]) = ("p", &[(53, 53), (9, 9), (60000, 65535)]);
const ACTIONS: [&str; 3] = ["drop", "pass", "forward"];
/// The keys most rules leave out, with the protocol each needs ("" for any).
const EXTRAS: [(&str, &str); 9] = [
    ("vlan = 5", ""),
    ("vlan = 0", ""),
    ("length = \"20-60\"", ""),
    ("length = 1500", ""),
    ("tcp_flags = \"syn,!ack\"", "tcp"),
    ("tcp_flags = \"rst\"", "tcp"),
    ("icmp_type = 8", "icmp"),
    ("icmp_type = 3\nicmp_code = 4", "icmp"),
    ("icmp_code = 0", "icmpv6"),
];

/// Up to 8 rules, or (a first byte of 128 or more) up to 80, so that lists past
/// LINEAR_RULES are looked up by their bit vectors: 4 bytes each, from the front of `data`
/// (the first byte says how many, the default and the unclassifiable verdict); the rest is
/// the frame.
pub fn rules(data: &[u8]) -> (String, &[u8]) {
    let first = data.first().copied().unwrap_or(0);
    let n = usize::from(first % 9) * if first >= 128 { 10 } else { 1 };
    let body = data.get(1..).unwrap_or_default();
    let (spec, frame) = body.split_at((n * 4).min(body.len()));
    let mut text = format!(
        "default = \"{}\"\nunclassifiable = \"{}\"\n",
        ACTIONS[usize::from(first / 9 % 3)],
        ACTIONS[usize::from(first / 27 % 3)]
    );
    for (name, prefixes) in SETS {
        let list: Vec<String> = prefixes.iter().map(|p| format!("{p:?}")).collect();
        text.push_str(&format!(
            "[[set]]\nname = \"{name}\"\nprefixes = [{}]\n",
            list.join(", ")
        ));
        if name == COUNTED {
            text.push_str("counters = true\n");
        }
    }
    let ports: Vec<String> = PORT_SET
        .1
        .iter()
        .map(|(lo, hi)| format!("\"{lo}-{hi}\""))
        .collect();
    text.push_str(&format!(
        "[[set]]\nname = \"{}\"\nports = [{}]\n",
        PORT_SET.0,
        ports.join(", ")
    ));
    for r in spec.chunks_exact(4) {
        let pick = |b: u8, n: usize| usize::from(b) % n;
        text.push_str("[[rule]]\n");
        let (dst, mut src) = (DSTS[pick(r[0], 10)], SRCS[pick(r[1], 5)]);
        // Prefixes of two families match nothing, and the reader refuses them.
        let prefix = |p: &str| !p.is_empty() && !p.starts_with('@');
        if prefix(dst) && prefix(src) && dst.contains(':') != src.contains(':') {
            src = "";
        }
        for (key, v) in [("dst", dst), ("src", src)] {
            if !v.is_empty() {
                text.push_str(&format!("{key} = \"{v}\"\n"));
            }
        }
        let proto = PROTOS[pick(r[2], 6)];
        if proto.parse::<u8>().is_ok() {
            text.push_str(&format!("protocol = {proto}\n"));
        } else if !proto.is_empty() {
            text.push_str(&format!("protocol = \"{proto}\"\n"));
        }
        if matches!(proto, "udp" | "tcp") {
            for (key, v) in [
                ("dst_port", PORTS[pick(r[2] >> 4, 6)]),
                ("src_port", PORTS[pick(r[3] >> 4, 6)]),
            ] {
                if !v.is_empty() {
                    text.push_str(&format!("{key} = {v}\n"));
                }
            }
        }
        // About a quarter of the rules name one more key, where their protocol allows it.
        if let Some(&(keys, needs)) = EXTRAS.get(usize::from(r[0] >> 3)) {
            if needs.is_empty() || needs == proto {
                text.push_str(&format!("{keys}\n"));
            }
        }
        text.push_str(&format!("action = \"{}\"\n", ACTIONS[pick(r[3], 3)]));
    }
    (text, frame)
}
