#!/usr/bin/env bash
# Instructions per forwarded packet of `xskit fwd`, whole process (supervisor, empty polls and
# counters' publication included), beside xdpsock's l2fwd from bpf-examples (AF_XDP-example),
# counted by valgrind's callgrind in the same run. Steady state is the difference of two runs
# of SECS and 2*SECS seconds: instructions over packets forwarded, so set-up cancels out.
#
# xdpsock is not part of xskit and is not built here: build it from bpf-examples against
# libxdp and give its path.
#
#   XDPSOCK=/path/to/xdpsock sudo -E bash bench/fwd-vs-xdpsock.sh    # SECS=4
#   BIN=/path/to/xskit ...                                             # another xskit build
#
# The pairings differ: xdpsock's l2fwd swaps the MAC addresses and sends each packet back out
# of the interface it came in on, one socket; fwd takes it in on one interface and out of the
# other, two sockets on one UMEM, through its rules. Both run native (DRV) copy mode on veth,
# the generator (live frames, flat out, CPU 0) outside valgrind; fwd rows: its default rule
# alone (fwd), and 64 rules of mixed shapes with the packets' match last (fwd-64).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-4}
if [ "$(id -u)" -ne 0 ]; then
    echo "fwd-vs-xdpsock.sh: run as root (sudo): it builds network namespaces" >&2
    exit 1
fi
[ -x "${XDPSOCK:-}" ] || {
    echo "fwd-vs-xdpsock.sh: give XDPSOCK=/path/to/xdpsock (bpf-examples' AF_XDP-example, built against libxdp)" >&2
    exit 1
}
command -v valgrind >/dev/null || { echo "fwd-vs-xdpsock.sh: needs valgrind (scripts/setup.sh test installs it)" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
    command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH"
    cargo build --release --locked --bin xskit >/dev/null 2>&1 || cargo build --release --locked --bin xskit
    BIN=$PWD/target/release/xskit
fi
OUT=$(mktemp -d)
P=xskit-fx-$$
A=$P-a B=$P-b M=$P-m C=$P-c
GEN=
cleanup() {
    [ -n "$GEN" ] && { kill -INT "$GEN" 2>/dev/null; wait "$GEN" 2>/dev/null || true; }
    for n in "$A" "$B" "$M" "$C"; do ip netns del "$n" 2>/dev/null || true; done
    rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for n in "$A" "$B" "$M" "$C"; do ip netns add "$n"; done
# a - b for xdpsock; a2 - m - c for fwd.
ip link add fx-a netns "$A" type veth peer name fx-b netns "$B"
ip link add fx-a2 netns "$A" type veth peer name fx-ma netns "$M"
ip link add fx-mc netns "$M" type veth peer name fx-c netns "$C"
for x in "$A fx-a" "$B fx-b" "$A fx-a2" "$M fx-ma" "$M fx-mc" "$C fx-c"; do
    set -- $x
    ip -n "$1" link set dev "$2" up
done
MAC_B=$(ip netns exec "$B" cat /sys/class/net/fx-b/address)

gen_start() { # $1 interface in A: live frames flat out on CPU 0
    ip netns exec "$A" taskset -c 0 "$BIN" gen --engine live -i "$1" --dst-mac "$MAC_B" \
        -s 60 --src-port 1234 >/dev/null 2>"$OUT/gen.err" &
    GEN=$!
    # Its frames are counted nowhere until a program takes them at the far end: give it
    # time to start, and make sure it runs.
    sleep 0.5
    kill -0 "$GEN" 2>/dev/null || { echo "fwd-vs-xdpsock.sh: the generator stopped:" >&2; cat "$OUT/gen.err" >&2; exit 1; }
}
gen_stop() { kill -INT "$GEN" 2>/dev/null || true; wait "$GEN" 2>/dev/null || true; GEN=; }

total_ir() { grep -E '^(summary|totals):' "$1" | head -1 | awk '{print $2}'; }

xdpsock_run() { # $1 seconds: "IR PACKETS"
    local cg=$OUT/xdpsock-$1.cg
    ip netns exec "$B" taskset -c 1 env LC_ALL=C valgrind --tool=callgrind --callgrind-out-file="$cg" \
        "$XDPSOCK" -l -i fx-b -q 0 -N -c -d "$1" >"$OUT/xdpsock-$1.txt" 2>"$OUT/xdpsock-$1.err"
    echo "$(total_ir "$cg") $(awk '$1 == "tx" {n = $3} END {print n}' "$OUT/xdpsock-$1.txt")"
}

fwd_run() { # $1 name, $2 seconds, then options: "IR PACKETS" (forwarded: sent out of fx-mc)
    local name=$1 secs=$2
    shift 2
    local cg=$OUT/$name-$secs.cg
    ip netns exec "$M" taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$cg" \
        "$BIN" fwd -i fx-ma -i fx-mc -m drv -d "$secs" --json "$@" >"$OUT/$name-$secs.json" 2>"$OUT/$name-$secs.err"
    echo "$(total_ir "$cg") $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sum(p["tx_packets"] for p in r["counters"]["ports"]))' "$OUT/$name-$secs.json")"
}

per_packet() { # "IR1 P1" "IR2 P2": steady-state instructions per packet
    python3 -c 'import sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print("%.1f %d" % ((int(b[0])-int(a[0]))/(int(b[1])-int(a[1])), int(b[1])-int(a[1])))' "$1" "$2"
}

# fwd-64: 64 rules of mixed shapes; only the last matches the generator's frames (the shapes'
# probe: UDP 198.51.100.1:1234 -> 198.51.100.2:9, 46 bytes of IP) and forwards them.
python3 bench/rule_shapes.py --count 64 --match-at 64 --match-action forward >"$OUT/rules-64.toml"

gen_start fx-a
x1=$(xdpsock_run "$SECS"); x2=$(xdpsock_run $((2 * SECS)))
gen_stop
read -r X XP <<<"$(per_packet "$x1" "$x2")"
gen_start fx-a2
f1=$(fwd_run fwd "$SECS"); f2=$(fwd_run fwd $((2 * SECS)))
g1=$(fwd_run fwd-64 "$SECS" --rules "$OUT/rules-64.toml"); g2=$(fwd_run fwd-64 $((2 * SECS)) --rules "$OUT/rules-64.toml")
gen_stop
read -r F FP <<<"$(per_packet "$f1" "$f2")"
read -r G GP <<<"$(per_packet "$g1" "$g2")"
printf '%-8s %14s %12s %10s\n' row "instr/packet" packets "x l2fwd"
printf '%-8s %14s %12s %10s\n' xdpsock "$X" "$XP" 1.00
printf '%-8s %14s %12s %10s\n' fwd "$F" "$FP" "$(python3 -c "print('%.2f' % ($F / $X))")"
printf '%-8s %14s %12s %10s\n' fwd-64 "$G" "$GP" "$(python3 -c "print('%.2f' % ($G / $X))")"
