#!/usr/bin/env python3
"""A blocklist of COUNT IPv4 prefixes for bench/set-cost.sh, the same for the same seed.

    python3 bench/set_prefixes.py --seed 7 --count 1000000 > list.txt

Written as published lists are (Spamhaus DROP's `PREFIX ; SBLn`): mostly host addresses, the
rest /24s and prefixes of every other length from /8 to /31, drawn from the whole IPv4 space
but 198.51.100.0/24 and 203.0.113.0/24, which hold the probes' three cases instead:
198.51.100.0/24 whole (a /24 the set holds whole: one load decides), 203.0.113.0/25 (a /24 the
set holds part of: its bitmap decides, 203.0.113.1 in it, 203.0.113.200 not).
"""
import argparse
import random

PROBE_BLOCKS = (0xC6336400 >> 8, 0xCB007100 >> 8)  # 198.51.100.0/24, 203.0.113.0/24


def prefixes(seed, count):
    rng = random.Random(seed)
    yield "198.51.100.0/24"
    yield "203.0.113.0/25"
    made = 2
    while made < count:
        roll = rng.random()
        length = 32 if roll < 0.7 else 24 if roll < 0.9 else rng.randint(8, 31)
        addr = rng.getrandbits(32) & ((0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF)
        last = addr | ((1 << (32 - length)) - 1)
        if any(addr >> 8 <= b <= last >> 8 for b in PROBE_BLOCKS):
            continue
        made += 1
        yield "%d.%d.%d.%d/%d" % (addr >> 24, addr >> 16 & 255, addr >> 8 & 255, addr & 255,
                                  length)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--count", type=int, default=1_000_000)
    a = p.parse_args()
    print("; %d prefixes, seed %d, in Spamhaus DROP's format" % (a.count, a.seed))
    for i, prefix in enumerate(prefixes(a.seed, a.count)):
        print("%s ; SBL%d" % (prefix, i))


if __name__ == "__main__":
    main()
