#!/usr/bin/env bash
# User-space instructions per packet, counted by valgrind's callgrind, of xskit's ring loops
# (rxdrop, l2fwd, txpush: `xskit bench`) beside a peer built on libxdp's xsk.h with the
# kernel's xdpsock loops (bench/peer/xsk_peer.c), and of xskit fwd's worker. On this VM
# packet rates move by ±20% between runs and the kernel does ~95% of the work; instructions
# per packet are machine-independent and stable, so they show what user space costs.
#
# Each ring loop runs twice per program, for COUNT and 2*COUNT packets, on the same veth
# pair in native (DRV) mode, copy; the generator (live frames, flat out, CPU 0) runs outside
# valgrind. Steady state is the difference of the two runs: instructions over packets, for
# the whole process and inside the loop's function (inclusive), so set-up (loading programs,
# parsing BTF) cancels out. Each program counts its own packets (received for rxdrop and
# l2fwd, completed for txpush) and its polls that found the rx ring empty: under valgrind a
# receiver keeps up with the generator and polls an empty ring about once per packet, a
# number that varies from run to run. So rxdrop and l2fwd also run twice without traffic
# (IDLE_POLLS and twice as many empty polls, each program), which gives what one empty poll
# costs each; the table's per-packet figures leave those polls out, and the last columns
# say what they added. fwd runs SECS seconds with only its worker's run function counted:
# plain forwarding, behind 64 rules none of which matches (fwd-64), and in a DDoS mix
# (fwd-ddos: the attack dropped in XDP, the legitimate probes through the worker).
#
#   sudo bash bench/callgrind.sh              # COUNT=1000000 SECS=4
#   BIN=/path/to/other/xskit sudo -E bash bench/callgrind.sh    # measure another build
#   LOOPS="rxdrop txpush" sudo -E bash bench/callgrind.sh         # some loops only
#
# Prints, per loop: xskit's and the peer's instructions per packet and their ratio, whole
# process and inside the loop; then the functions that spend most in each.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${COUNT:-1000000}
SECS=${SECS:-4}
IDLE_POLLS=${IDLE_POLLS:-200000}
LOOPS=${LOOPS:-rxdrop l2fwd txpush fwd fwd-64 fwd-ddos}

if [ "$(id -u)" -ne 0 ]; then
    echo "callgrind.sh: run as root (sudo): it builds network namespaces" >&2
    exit 1
fi
for tool in valgrind callgrind_annotate python3; do
    command -v "$tool" >/dev/null || { echo "callgrind.sh: needs $tool (scripts/setup.sh test installs it)" >&2; exit 1; }
done
if [ ! -e /usr/include/xdp/xsk.h ]; then
    echo "callgrind.sh: the peer needs libxdp's headers: apt-get install libxdp-dev (scripts/setup.sh test installs it)" >&2
    exit 1
fi
if [ -z "${BIN:-}" ]; then
    command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH"
    cargo build --release --locked --bin xskit >/dev/null 2>&1 || cargo build --release --locked --bin xskit
    BIN=$PWD/target/release/xskit
fi
OUT=$(mktemp -d)
PEER=$OUT/xsk_peer
# Any C compiler: setup.sh installs clang, and Rust's linker brings cc on most machines.
CC=${CC:-$(command -v cc || command -v clang || true)}
[ -n "$CC" ] || { echo "callgrind.sh: needs a C compiler for the peer (scripts/setup.sh installs clang)" >&2; exit 1; }
"$CC" -O2 -g -Wall -o "$PEER" bench/peer/xsk_peer.c -lxdp -lbpf

P=xskit-cg-$$
A=$P-a B=$P-b M=$P-m C=$P-c
GEN= LEGIT=
cleanup() {
    for g in $GEN $LEGIT; do kill -INT "$g" 2>/dev/null && wait "$g" 2>/dev/null; done
    for n in "$A" "$B" "$M" "$C"; do ip netns del "$n" 2>/dev/null || true; done
    if [ -n "${KEEP:-}" ]; then echo "callgrind.sh: the runs are kept in $OUT" >&2; else rm -rf "$OUT"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for n in "$A" "$B" "$M" "$C"; do
    ip netns add "$n"
    ip netns exec "$n" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'
done
# a - b for the ring loops; a2 - m - c for fwd.
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

measure() { # $1 run name, $2 namespace, then the command; whole process, on CPU 1
    local name=$1 ns=$2
    shift 2
    ip netns exec "$ns" taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.cg" \
        "$@" >"$OUT/$name.json" 2>"$OUT/$name.err" || {
        echo "callgrind.sh: $name failed:" >&2
        tail -5 "$OUT/$name.err" >&2
        exit 1
    }
}

ring_runs() { # $1 loop, $2 namespace, $3 interface: xskit and the peer, COUNT and 2*COUNT
    local loop=$1 ns=$2 ifc=$3 n
    for n in "$COUNT" $((2 * COUNT)); do
        measure "$loop-xskit-$n" "$ns" "$BIN" bench "$loop" -i "$ifc" -m drv -n "$n" -d 300 \
            --dst-mac "$MAC_B" --json
        measure "$loop-peer-$n" "$ns" "$PEER" "$loop" "$ifc" "$n" "$MAC_B"
    done
}

idle_runs() { # $1 loop, $2 namespace, $3 interface: no traffic, two lengths of idle polling
    local loop=$1 ns=$2 ifc=$3 k
    for k in 1 2; do
        measure "$loop-xskit-idle$k" "$ns" "$BIN" bench "$loop" -i "$ifc" -m drv \
            --idle-polls $((IDLE_POLLS * k)) -d 600 --dst-mac "$MAC_B" --json
        measure "$loop-peer-idle$k" "$ns" "$PEER" "$loop" "$ifc" 1000000000000 "$MAC_B" \
            $((IDLE_POLLS * k))
    done
}

has() { case " $LOOPS " in *" $1 "*) return 0 ;; esac; return 1; }
# What an empty poll costs each program, measured with no traffic, so that the packets'
# cost can be told from the polls that found nothing (how many varies from run to run).
has rxdrop && idle_runs rxdrop "$B" cg-b
has l2fwd && idle_runs l2fwd "$B" cg-b
if has rxdrop || has l2fwd; then
    gen_start cg-a
    has rxdrop && ring_runs rxdrop "$B" cg-b
    has l2fwd && ring_runs l2fwd "$B" cg-b
    gen_stop
fi
has txpush && ring_runs txpush "$A" cg-a
fwd_run() { # $1 run name, then fwd's extra options: SECS seconds, the worker's run function only
    local name=$1
    shift
    ip netns exec "$M" taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.cg" \
        --toggle-collect="xskit_fwd::worker::Worker<*>::run" \
        "$BIN" fwd -i cg-ma -i cg-mc -m drv -d "$SECS" --json "$@" >"$OUT/$name.json" 2>"$OUT/$name.err" || {
        echo "callgrind.sh: $name failed:" >&2
        tail -5 "$OUT/$name.err" >&2
        exit 1
    }
}
# fwd-64: 64 rules, each naming a source, none matching: user space looks them up by their
# bit vectors.
for i in $(seq 1 64); do
    printf '[[rule]]\nname = "r%d"\nsrc = "203.0.113.%d/32"\nprotocol = "udp"\ndst_port = %d\naction = "drop"\n' \
        "$i" "$i" $((1000 + i))
done >"$OUT/rules-64.toml"
# fwd-ddos: the attack (UDP port 9, the generator's, flat out) dropped by a kernel rule, and
# legitimate probes at up to 200 kpps to port 5000 forwarded by the worker.
printf '[[rule]]\nname = "attack"\nprotocol = "udp"\ndst_port = 9\naction = "drop"\n' >"$OUT/rules-ddos.toml"
if has fwd || has fwd-64; then
    gen_start cg-a2
    has fwd && fwd_run fwd
    has fwd-64 && fwd_run fwd-64 --rules "$OUT/rules-64.toml"
    gen_stop
fi
if has fwd-ddos; then
    gen_start cg-a2
    # The probes run until fwd is done: fwd's start under valgrind takes a varying while,
    # longer on a busy machine, and a probe stream that ended first leaves nothing to count.
    ip netns exec "$A" taskset -c 0 "$BIN" gen -i cg-a2 -m skb --dst-mac "$MAC_B" --dst-port 5000 \
        -r 200000 >/dev/null 2>"$OUT/legit.err" &
    LEGIT=$!
    fwd_run fwd-ddos --rules "$OUT/rules-ddos.toml"
    if ! kill -INT "$LEGIT" 2>/dev/null; then
        echo "callgrind.sh: the legitimate probes' generator stopped early:" >&2
        tail -5 "$OUT/legit.err" >&2
        exit 1
    fi
    wait "$LEGIT" || true
    gen_stop
fi

python3 bench/callgrind_report.py "$OUT" "$COUNT" $LOOPS
