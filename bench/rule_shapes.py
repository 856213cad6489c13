#!/usr/bin/env python3
"""Rule sets of mixed shapes for bench/filter-cost.sh, the same for the same seed.

    python3 bench/rule_shapes.py --seed 7 --count 64 --match-at 32 > rules.toml

Writes a rules file of COUNT rules: destination and source prefixes of every length and both
families, protocols, single ports and port ranges, TCP flags, ICMP types, lengths and VLANs,
drawn from at least 16 combinations of keys and overlapping one another; none of them matches
the probe packet filter-cost.sh times (IPv4 UDP 198.51.100.1:1234 -> 198.51.100.2:9, 46 bytes
of IP, untagged) except rule MATCH_AT (1-based), `protocol = "udp"`, `dst_port = 9`, which drops
it (or does --match-action to it). With --match-at 0 no rule matches it and the default,
drop, takes it.
"""
import argparse
import ipaddress
import random

PROBE = {
    "family": 4,
    "src": ipaddress.ip_address("198.51.100.1"),
    "dst": ipaddress.ip_address("198.51.100.2"),
    "protocol": 17,
    "src_port": 1234,
    "dst_port": 9,
    "length": 46,
}

# Each shape is the set of keys a rule names; every rule picks one.
SHAPES = [
    ("dst",),
    ("src",),
    ("dst", "protocol"),
    ("src", "protocol"),
    ("dst", "protocol", "dst_port"),
    ("src", "protocol", "src_port"),
    ("protocol", "dst_port"),
    ("protocol", "src_port"),
    ("dst", "src"),
    ("dst", "src", "protocol", "dst_port", "src_port"),
    ("protocol", "dst_port", "src_port"),
    ("protocol", "tcp_flags"),
    ("dst", "protocol", "tcp_flags", "dst_port"),
    ("protocol", "icmp_type"),
    ("length",),
    ("dst", "length"),
    ("vlan",),
    ("src", "vlan", "protocol"),
]


def prefix(rng):
    if rng.random() < 0.7:
        length = rng.randint(8, 32)
        addr = ipaddress.ip_address(rng.getrandbits(32))
        return ipaddress.ip_network(f"{addr}/{length}", strict=False)
    length = rng.randint(16, 128)
    addr = ipaddress.ip_address(0x20010DB8 << 96 | rng.getrandbits(96))
    return ipaddress.ip_network(f"{addr}/{length}", strict=False)


def ports(rng):
    lo = rng.randint(0, 65000)
    return (lo, lo) if rng.random() < 0.5 else (lo, lo + rng.randint(1, 500))


def draw(rng, shape):
    """A rule on `shape`'s keys, as a dict of key -> value."""
    rule = {}
    family = None
    for key in shape:
        if key in ("dst", "src"):
            net = prefix(rng) if family is None else prefix_of(rng, family)
            family = net.version
            rule[key] = net
        elif key == "protocol":
            rule[key] = rng.choice([6, 17, 1, 47])
        elif key in ("dst_port", "src_port"):
            rule[key] = ports(rng)
        elif key == "length":
            lo = rng.randint(20, 1400)
            rule[key] = (lo, lo + rng.randint(0, 100))
        elif key == "vlan":
            rule[key] = rng.randint(1, 4094)
    if "dst_port" in shape or "src_port" in shape:
        rule["protocol"] = rng.choice([6, 17])
    if "tcp_flags" in shape:
        rule["protocol"] = 6
        rule["tcp_flags"] = rng.choice(["syn,!ack", "rst", "fin,ack", "!ack"])
    if "icmp_type" in shape:
        rule["protocol"] = 1
        rule["icmp_type"] = rng.choice([0, 3, 8, 11])
    return rule


def prefix_of(rng, family):
    while True:
        net = prefix(rng)
        if net.version == family:
            return net


def matches_probe(rule):
    p = PROBE
    for key in ("dst", "src"):
        if key in rule and (rule[key].version != 4 or p[key] not in rule[key]):
            return False
    if "protocol" in rule and rule["protocol"] != p["protocol"]:
        return False
    for key in ("dst_port", "src_port"):
        if key in rule and not rule[key][0] <= p[key] <= rule[key][1]:
            return False
    if "length" in rule and not rule["length"][0] <= p["length"] <= rule["length"][1]:
        return False
    # The probe is untagged UDP: a VLAN, TCP flags or an ICMP type never match it.
    return not any(k in rule for k in ("vlan", "tcp_flags", "icmp_type"))


def toml(name, rule, action):
    names = {6: "tcp", 17: "udp", 1: "icmp"}
    lines = ["[[rule]]", f'name = "{name}"']
    for key, value in rule.items():
        if key in ("dst", "src"):
            lines.append(f'{key} = "{value}"')
        elif key == "protocol":
            p = names.get(value)
            lines.append(f'protocol = "{p}"' if p else f"protocol = {value}")
        elif key in ("dst_port", "src_port", "length"):
            lo, hi = value
            lines.append(f"{key} = {lo}" if lo == hi else f'{key} = "{lo}-{hi}"')
        elif key == "tcp_flags":
            lines.append(f'tcp_flags = "{value}"')
        else:
            lines.append(f"{key} = {value}")
    lines.append(f'action = "{action}"')
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--match-at", type=int, required=True)
    ap.add_argument("--match-action", default="drop", choices=["drop", "forward", "pass"])
    args = ap.parse_args()
    if not 0 <= args.match_at <= args.count:
        ap.error("--match-at is 0 (none) or a rule's position, 1 to --count")
    rng = random.Random(args.seed)
    out = ['default = "drop"']
    for i in range(1, args.count + 1):
        if i == args.match_at:
            out.append(toml("attack", {"protocol": 17, "dst_port": (9, 9)}, args.match_action))
            continue
        while True:
            rule = draw(rng, SHAPES[(i - 1) % len(SHAPES)])
            if not matches_probe(rule):
                break
        out.append(toml(f"shape{i}", rule, rng.choice(["drop", "pass", "forward"])))
    print("\n\n".join(out))


if __name__ == "__main__":
    main()
