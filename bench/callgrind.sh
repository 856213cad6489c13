#!/usr/bin/env bash
# User-space instructions per packet of each xskit loop, counted by valgrind's callgrind:
# rxdrop, l2fwd and txpush (xskit bench) and xskit fwd's worker. On this VM packet rates move
# by ±20% between runs and the kernel does ~95% of the work; instructions per packet are
# machine-independent and stable, so they show what user space costs and what a change saves.
#
# Each loop runs under callgrind with --toggle-collect on its own function, so set-up (loading
# the XDP programs, parsing BTF) is left out; the generator (live frames, flat out, CPU 0) runs
# outside valgrind and keeps the receiver's rings full, so idle polling is rare and counted.
# rxdrop, l2fwd and txpush stop after COUNT packets; fwd runs SECS seconds.
#
#   sudo bash bench/callgrind.sh              # COUNT=2000000 SECS=4
#   BIN=/path/to/other/xskit sudo -E bash bench/callgrind.sh    # measure another build
#
# Prints, per loop: packets, instructions per packet, and the functions that spend most.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${COUNT:-2000000}
SECS=${SECS:-4}

if [ "$(id -u)" -ne 0 ]; then
    echo "callgrind.sh: run as root (sudo): it builds network namespaces" >&2
    exit 1
fi
for tool in valgrind callgrind_annotate python3; do
    command -v "$tool" >/dev/null || { echo "callgrind.sh: needs $tool (scripts/setup.sh installs valgrind)" >&2; exit 1; }
done
if [ -z "${BIN:-}" ]; then
    command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH"
    cargo build --release --locked --bin xskit >/dev/null 2>&1 || cargo build --release --locked --bin xskit
    BIN=$PWD/target/release/xskit
fi

P=xskit-cg-$$
A=$P-a B=$P-b M=$P-m C=$P-c
OUT=$(mktemp -d)
GEN=
cleanup() {
    [ -n "$GEN" ] && kill -INT "$GEN" 2>/dev/null && wait "$GEN" 2>/dev/null
    for n in "$A" "$B" "$M" "$C"; do ip netns del "$n" 2>/dev/null || true; done
    rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for n in "$A" "$B" "$M" "$C"; do
    ip netns add "$n"
    ip netns exec "$n" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'
done
# a - b for the bench loops; a2 - m - c for fwd.
ip link add cg-a netns "$A" type veth peer name cg-b netns "$B"
ip link add cg-a2 netns "$A" type veth peer name cg-ma netns "$M"
ip link add cg-mc netns "$M" type veth peer name cg-c netns "$C"
for x in "$A cg-a" "$B cg-b" "$A cg-a2" "$M cg-ma" "$M cg-mc" "$C cg-c"; do
    set -- $x
    ip -n "$1" link set dev "$2" up
done
MAC_B=$(ip netns exec "$B" cat /sys/class/net/cg-b/address)

gen_start() { # $1 interface in A: live frames flat out on CPU 0
    ip netns exec "$A" taskset -c 0 "$BIN" gen --engine live -i "$1" --dst-mac "$MAC_B" >/dev/null 2>&1 &
    GEN=$!
    sleep 0.5
}
gen_stop() { kill -INT "$GEN" 2>/dev/null || true; wait "$GEN" 2>/dev/null || true; GEN=; }

measure() { # $1 name, $2 function to count, $3 namespace, then the command
    local name=$1 func=$2 ns=$3
    shift 3
    ip netns exec "$ns" taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.cg" \
        --toggle-collect="$func" "$@" >"$OUT/$name.json" 2>"$OUT/$name.err" || {
        echo "callgrind.sh: $name failed:" >&2
        tail -5 "$OUT/$name.err" >&2
        exit 1
    }
}

measure_bench() { # $1 bench, $2 namespace, $3 interface
    measure "$1" "xskit::bench::$1" "$2" "$BIN" bench "$1" -i "$3" -m drv -n "$COUNT" -d 120 --json
}

gen_start cg-a
measure_bench rxdrop "$B" cg-b
measure_bench l2fwd "$B" cg-b
gen_stop
measure_bench txpush "$A" cg-a
gen_start cg-a2
measure fwd "xskit_fwd::worker::Worker<*>::run" "$M" "$BIN" fwd -i cg-ma -i cg-mc -m drv -d "$SECS" --json
gen_stop

printf '%-8s %12s %14s   %s\n' loop packets "instr/packet" "where the instructions go (share of the loop's)"
for name in rxdrop l2fwd txpush fwd; do
    packets=$(python3 - "$OUT/$name.json" "$name" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
if sys.argv[2] == "fwd":
    print(sum(p["rx_packets"] for p in d["counters"]["ports"]))
elif sys.argv[2] == "txpush":
    print(d["tx_packets"])
else:
    print(d["rx_packets"])
EOF
)
    total=$(awk '/^(summary|totals):/ {print $2; exit}' "$OUT/$name.cg")
    top=$(callgrind_annotate "$OUT/$name.cg" 2>/dev/null | python3 -c '
import re, sys
total = int(sys.argv[1])
by_fn = {}
lines = sys.stdin.read().split("\n")
# Only the table of functions (exclusive counts), not the annotated sources after it.
start = next((i for i, l in enumerate(lines) if l.rstrip().endswith("file:function")), len(lines))
table = []
for l in lines[start + 2:]:
    if not l.strip():
        break
    table.append(l)
for line in table:
    m = re.match(r"^\s*([\d,]+)\s+\([^)]*\)\s+(.*?):(.*?)(?: \[.*\])?$", line)
    if not m or "PROGRAM TOTALS" in line:
        continue
    ir = int(m.group(1).replace(",", ""))
    fn = "::".join(m.group(3).split("::")[-2:])
    by_fn[fn] = by_fn.get(fn, 0) + ir
rows = sorted(((ir, f) for f, ir in by_fn.items()), reverse=True)
print(", ".join("%s %d%%" % (f, round(100 * ir / max(total, 1))) for ir, f in rows[:4]))
' "$total")
    awk -v n="$name" -v p="$packets" -v t="$total" -v top="$top" \
        'BEGIN { printf "%-8s %12d %14.1f   %s\n", n, p, (p > 0 ? t / p : 0), top }'
done
