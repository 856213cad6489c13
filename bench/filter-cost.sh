#!/usr/bin/env bash
# The cost of a packet in the forwarder's XDP filter against the bare XDP_DROP ceiling, steadier
# than any traffic on this VM: the kernel's BPF_PROG_TEST_RUN runs each program REPEAT times on
# one 64-byte IPv4 UDP packet to port 9 (the filter dropping it by one kernel rule, as in
# `xskit bench fwd`'s DDoS rows; the ceiling counting and dropping it), interleaved, ROUNDS
# times. Prints each program's median and lowest ns a run, and the median difference. The
# figures include the test run's own cost per repetition, the same for both.
#
#   sudo bash bench/filter-cost.sh          # ROUNDS=8 REPEAT=10000000, BIN=target/release/xskit
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-8}
REPEAT=${REPEAT:-10000000}
BIN=${BIN:-target/release/xskit}

if [ "$(id -u)" -ne 0 ]; then
    echo "filter-cost.sh: run as root (sudo): it attaches XDP programs in a network namespace" >&2
    exit 1
fi
[ -x "$BIN" ] || { echo "filter-cost.sh: no $BIN: cargo build --release first" >&2; exit 1; }
command -v bpftool >/dev/null || { echo "filter-cost.sh: needs bpftool" >&2; exit 1; }

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
ip -n "$ns" link add fc0 type veth peer name fc1
ip -n "$ns" link add fc2 type veth peer name fc3
for l in fc0 fc1 fc2 fc3; do ip -n "$ns" link set "$l" up; done

printf '[[rule]]\nname = "attack"\nprotocol = "udp"\ndst_port = 9\naction = "drop"\n' >"$work/rules.toml"
python3 - "$work/packet" <<'EOF'
import struct, sys
eth = bytes.fromhex("020000000002" "020000000001") + b"\x08\x00"
udp = struct.pack("!HHHH", 1234, 9, 26, 0) + bytes(18)
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                 bytes([198, 51, 100, 1]), bytes([198, 51, 100, 2]))
open(sys.argv[1], "wb").write(eth + ip + udp)
EOF

ip netns exec "$ns" "$BIN" fwd -i fc0 -i fc1 -m drv --rules "$work/rules.toml" -d 600 >/dev/null 2>&1 &
pids+=($!)
ip netns exec "$ns" "$BIN" bench xdp-drop -i fc2 -m drv -d 600 >/dev/null 2>&1 &
pids+=($!)
sleep 2
# The program attached to one of this namespace's links.
prog_of() {
    local id
    id=$(ip netns exec "$ns" bpftool net show dev "$1" | grep -o 'id [0-9]*' | head -1 | cut -d' ' -f2)
    [ -n "$id" ] || { echo "filter-cost.sh: no XDP program on $1 (did xskit start?)" >&2; exit 1; }
    echo "$id"
}
filter=$(prog_of fc0)
ceiling=$(prog_of fc2)
run() {
    bpftool prog run id "$1" data_in "$work/packet" repeat "$REPEAT" |
        sed -n 's/.*duration (average): \([0-9]*\)ns.*/\1/p'
}
for _ in $(seq "$ROUNDS"); do
    echo "$(run "$filter") $(run "$ceiling")"
done | python3 -c '
import statistics as st, sys
rows = [tuple(map(int, l.split())) for l in sys.stdin if l.strip()]
f = [a for a, _ in rows]; c = [b for _, b in rows]
print("filter  (xskit fwd, one drop rule): median %.1f ns, lowest %d ns" % (st.median(f), min(f)))
print("ceiling (XDP_DROP, counting):       median %.1f ns, lowest %d ns" % (st.median(c), min(c)))
print("difference, median of the rounds:   %.1f ns" % st.median(a - b for a, b in rows))'
