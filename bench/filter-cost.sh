#!/usr/bin/env bash
# The cost of a packet in the forwarder's XDP filter against the bare XDP_DROP ceiling, steadier
# than any traffic on this VM: the kernel's BPF_PROG_TEST_RUN runs each program REPEAT times on
# one 64-byte IPv4 UDP packet to port 9 (the filter dropping it by one kernel rule, as in
# `xskit bench fwd`'s DDoS rows; the ceiling counting and dropping it), interleaved, ROUNDS
# times, each run timed by the wall clock around the system call (bench/test_run_timer.py).
# Prints each program's median and lowest ns a repetition, and the median difference; then the
# floor of any filter by source port (`xskit bench xdp-drop --src-port`, which reads the
# packet's headers where the ceiling reads nothing) against both. The figures include the test
# run's own cost per repetition, the same for every program.
#
# With RULES=N (more than 1), the filters of N rules of mixed shapes from bench/rule_shapes.py
# (seed SEED, default 7) are timed beside them, the packet's rule at positions 1, N/4, N/2,
# 3N/4 and N and at none (the default drops it): each position's total, then their mean and
# worst, and those over the one-rule filter's total.
#
# With SET=N, a filter of one rule, `src = "@list"`, on a set of N prefixes from
# bench/set_prefixes.py (seed SEED) is timed beside the one-rule filter on three packets whose
# sources are: in a /24 the set holds whole, in a /24 it holds part of (found in its bitmap), and
# in that /24 but not in the set (the default, drop, takes it). With COUNTED=1 as well, the same
# set with `counters = true` (kept element by element, asked on the general path) is timed too.
#
# With LIMIT=1, a filter of one rule limiting each source (`rate-limit`, `per = "source"`,
# `block = "60s"`) on UDP to port 9 is timed beside the one-rule filter: the repetitions of the
# packet take its source over the rate at once, so what is timed is a blocked source's drop.
#
# Each forwarder runs between two veth pairs whose peers have no program, so that nothing it
# forwards comes back to it; its worker sleeps while the programs are timed.
#
#   sudo bash bench/filter-cost.sh          # ROUNDS=12 REPEAT=20000000, BIN=target/release/xskit
#   sudo RULES=64 bash bench/filter-cost.sh
#   sudo SET=1000000 bash bench/filter-cost.sh
#   sudo SET=100000 COUNTED=1 bash bench/filter-cost.sh
#   sudo LIMIT=1 bash bench/filter-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-12}
REPEAT=${REPEAT:-20000000}
BIN=${BIN:-target/release/xskit}
RULES=${RULES:-1}
SET=${SET:-0}
LIMIT=${LIMIT:-0}
COUNTED=${COUNTED:-0}
SEED=${SEED:-7}

if [ "$(id -u)" -ne 0 ]; then
    echo "filter-cost.sh: run as root (sudo): it attaches XDP programs in a network namespace" >&2
    exit 1
fi
[ -x "$BIN" ] || { echo "filter-cost.sh: no $BIN: cargo build --release first" >&2; exit 1; }
command -v bpftool >/dev/null || { echo "filter-cost.sh: needs bpftool" >&2; exit 1; }
case "$RULES" in '' | *[!0-9]* | 0) echo "filter-cost.sh: RULES is a number of rules, 1 or more" >&2; exit 2 ;; esac
case "$SET" in '' | *[!0-9]*) echo "filter-cost.sh: SET is a number of prefixes" >&2; exit 2 ;; esac
case "$LIMIT" in 0 | 1) ;; *) echo "filter-cost.sh: LIMIT is 0 or 1" >&2; exit 2 ;; esac
case "$COUNTED" in 0 | 1) ;; *) echo "filter-cost.sh: COUNTED is 0 or 1" >&2; exit 2 ;; esac

ns="xskit-fcost-$$"
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
ip netns add "$ns"
# veth pair K: fcK and its peer pK, which has no program.
link() {
    ip -n "$ns" link add "fc$1" type veth peer name "p$1"
    ip -n "$ns" link set "fc$1" up
    ip -n "$ns" link set "p$1" up
}

# A 64-byte IPv4 UDP packet from SOURCE to 198.51.100.2 port 9, into FILE.
packet() {
    python3 -c '
import ipaddress, struct, sys
eth = bytes.fromhex("020000000002" "020000000001") + b"\x08\x00"
udp = struct.pack("!HHHH", 1234, 9, 26, 0) + bytes(18)
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                 ipaddress.ip_address(sys.argv[1]).packed, bytes([198, 51, 100, 2]))
open(sys.argv[2], "wb").write(eth + ip + udp)
' "$1" "$2"
}
packet 198.51.100.1 "$work/packet"

# The program attached to one of this namespace's links, once there is one.
prog_of() {
    local id
    for _ in $(seq 100); do
        id=$(ip netns exec "$ns" bpftool net show dev "$1" | grep -o 'id [0-9]*' | head -1 | cut -d' ' -f2)
        [ -n "$id" ] && { echo "$id"; return; }
        sleep 0.1
    done
    echo "filter-cost.sh: no XDP program on $1 after 10 s (did xskit start?)" >&2
    exit 1
}

link 0
ip netns exec "$ns" "$BIN" bench xdp-drop -i fc0 -m drv -d 3600 >/dev/null 2>&1 &
pids+=($!)
ids=("$(prog_of fc0)")
positions=(one)
python3 bench/rule_shapes.py --count 1 --match-at 1 >"$work/one.toml"
files=("$work/one.toml")
if [ "$RULES" -gt 1 ]; then
    for at in 1 $((RULES / 4)) $((RULES / 2)) $((3 * RULES / 4)) "$RULES" 0; do
        python3 bench/rule_shapes.py --seed "$SEED" --count "$RULES" --match-at "$at" >"$work/at-$at.toml"
        files+=("$work/at-$at.toml")
        positions+=("$at")
    done
fi
if [ "$SET" -gt 0 ]; then
    python3 bench/set_prefixes.py --seed "$SEED" --count "$SET" >"$work/list.txt"
    printf '%s\n' 'default = "drop"' '[[set]]' 'name = "list"' "file = \"$work/list.txt\"" \
        '[[rule]]' 'src = "@list"' 'action = "drop"' >"$work/set.toml"
    files+=("$work/set.toml")
    if [ "$COUNTED" -eq 1 ]; then
        sed 's/^name = "list"$/name = "list"\ncounters = true/' "$work/set.toml" >"$work/counted.toml"
        files+=("$work/counted.toml")
    fi
fi
if [ "$LIMIT" -eq 1 ]; then
    printf '%s\n' '[[rule]]' 'protocol = "udp"' 'dst_port = 9' 'action = "rate-limit"' \
        'rate = "10pps"' 'per = "source"' 'block = "60s"' >"$work/limit.toml"
    files+=("$work/limit.toml")
    positions+=(limit)
fi
k=1
for f in "${files[@]}"; do
    link "$k"
    link "$((k + 1))"
    ip netns exec "$ns" "$BIN" fwd -i "fc$k" -i "fc$((k + 1))" -m drv --rules "$f" -d 3600 >/dev/null 2>&1 &
    pids+=($!)
    ids+=("$(prog_of "fc$k")")
    k=$((k + 2))
done
# The floor of any filter by source port (`bench xdp-drop --src-port`): it reads the packet's
# headers and drops it by its UDP source port, where the ceiling reads nothing.
if [ "$SET" -eq 0 ]; then
    link 99
    ip netns exec "$ns" "$BIN" bench xdp-drop -i fc99 -m drv --src-port 1234 -d 3600 >/dev/null 2>&1 &
    pids+=($!)
    ids+=("$(prog_of fc99)")
fi
sleep 1
if [ "$SET" -gt 0 ]; then
    echo "a set of $SET prefixes (bench/set_prefixes.py, seed $SEED); ns a packet, median:"
    for src in 198.51.100.1 203.0.113.1 203.0.113.200; do
        packet "$src" "$work/p-$src"
        python3 bench/test_run_timer.py "$work/p-$src" "$ROUNDS" "$REPEAT" "${ids[@]}" >"$work/t-$src"
    done
    python3 - "$work" <<'EOF'
import sys
work = sys.argv[1]
cases = [("198.51.100.1", "in a /24 the set holds whole"),
         ("203.0.113.1", "in a /24 held in part (its bitmap)"),
         ("203.0.113.200", "not in the set (its /24 held in part)")]
for src, what in cases:
    rows = [l.split() for l in open("%s/t-%s" % (work, src))]
    ceiling, one, sets = (float(r[1]) for r in rows[:3])
    print("  source %-14s %-38s %7.2f ns, %6.2f over the ceiling, %.2fx the one-rule filter's %.2f"
          % (src, what, sets, sets - ceiling, sets / one, one))
    if len(rows) > 3:
        counted = float(rows[3][1])
        print("  %-53s %7.2f ns, %6.2f over the ceiling, %.2fx the one-rule filter"
              % ("  the same set with counters = true", counted, counted - ceiling, counted / one))
EOF
    exit 0
fi
python3 bench/test_run_timer.py "$work/packet" "$ROUNDS" "$REPEAT" "${ids[@]}" >"$work/times"
python3 - "$work/times" "$RULES" "${positions[@]}" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
n, positions = int(sys.argv[2]), sys.argv[3:]
floor = rows.pop()
ceiling, one = rows[0], rows[1]
print("filter  (xskit fwd, one drop rule): median %s ns, lowest %s ns" % (one[1], one[2]))
print("ceiling (XDP_DROP, counting):       median %s ns, lowest %s ns" % (ceiling[1], ceiling[2]))
print("difference, median of the rounds:   %s ns" % one[3])
print("floor (reads the UDP source port and drops): median %s ns, %s over the ceiling; the "
      "filter %.2f ns over it" % (floor[1], floor[3], float(one[3]) - float(floor[3])))
limit = rows.pop() if positions[-1] == "limit" else None
if len(rows) > 2:
    print("%d rules of mixed shapes (median ns a packet; over the ceiling):" % n)
    totals = []
    for at, r in zip(positions[1:], rows[2:]):
        where = "no rule (the default)" if at == "0" else "rule %s" % at
        print("  matching %-22s %7s ns  %6s over" % (where, r[1], r[3]))
        totals.append(float(r[1]))
    mean, worst, base = sum(totals) / len(totals), max(totals), float(one[1])
    print("mean %.2f ns, %.2fx the one rule's %.2f; worst %.2f ns, %.2fx"
          % (mean, mean / base, base, worst, worst / base))
if limit:
    print("per-source limit, a blocked source: median %s ns, %s over the ceiling, %.2fx the "
          "one-rule filter" % (limit[1], limit[3], float(limit[1]) / float(one[1])))
EOF
