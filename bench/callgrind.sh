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
# say what they added.
#
# The forwarder's rows are measured against xdpsock's l2fwd from bpf-examples' AF_XDP example
# (bench/peer/bpf-examples, built here against libxdp), whole process, empty polls,
# supervisor and counters' publication included, steady state from runs of SECS and 2*SECS
# seconds: fwd with its default rule alone, behind 64 rules of mixed shapes whose last
# matches (fwd-64), and forwarding the kernel's own UDP whose checksums the sender left
# partial (fwd-csum; fwd-csum-live: the same from the live-frames generator flat out). The
# pairings differ: xdpsock's l2fwd sends each packet back out of the interface it came in
# on, one socket; fwd takes it in on one interface and out of the
# other, two sockets on one UMEM, through its rules. fwd-ddos counts the worker's run
# function alone in a DDoS mix (the attack dropped in XDP, legitimate probes through the
# worker).
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
LOOPS=${LOOPS:-rxdrop l2fwd txpush fwd fwd-64 fwd-csum fwd-csum-live fwd-ddos}

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

gen_start() { # $1 interface in A, then gen's options: live frames flat out on CPU 0
    local ifc=$1
    shift
    ip netns exec "$A" taskset -c 0 "$BIN" gen --engine live -i "$ifc" --dst-mac "$MAC_B" "$@" \
        >/dev/null 2>"$OUT/gen.err" &
    GEN=$!
    # Its frames are counted nowhere until a program takes them at the far end: give it
    # time to start, and make sure it runs.
    sleep 0.5
    kill -0 "$GEN" 2>/dev/null || { echo "callgrind.sh: the generator stopped:" >&2; cat "$OUT/gen.err" >&2; exit 1; }
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
# The forwarder against xdpsock's l2fwd (bpf-examples' AF_XDP example, bench/peer/bpf-examples),
# whole process (supervisor, empty polls, counters' publication included), steady state from
# runs of SECS and 2*SECS seconds. xdpsock reflects on b (a - b); fwd forwards a2 - m - c.
xdpsock_run() { # $1 seconds
    ip netns exec "$B" taskset -c 1 env LC_ALL=C valgrind --tool=callgrind \
        --callgrind-out-file="$OUT/xdpsock-$1.cg" "$XDPSOCK" -l -i cg-b -q 0 -N -c -d "$1" \
        >"$OUT/xdpsock-$1.txt" 2>"$OUT/xdpsock-$1.err" || {
        echo "callgrind.sh: xdpsock failed:" >&2
        tail -5 "$OUT/xdpsock-$1.err" >&2
        exit 1
    }
}
fwd_run() { # $1 run name, $2 seconds, then fwd's extra options
    local name=$1-$2 secs=$2
    shift 2
    ip netns exec "$M" taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.cg" \
        "$BIN" fwd -i cg-ma -i cg-mc -m drv -d "$secs" --json "$@" >"$OUT/$name.json" 2>"$OUT/$name.err" || {
        echo "callgrind.sh: $name failed:" >&2
        tail -5 "$OUT/$name.err" >&2
        exit 1
    }
}
fwd_runs() { # $1 row, then fwd's extra options: runs of SECS and 2*SECS seconds
    local row=$1
    shift
    fwd_run "$row" "$SECS" "$@"
    fwd_run "$row" $((2 * SECS)) "$@"
}
if has fwd || has fwd-64 || has fwd-csum || has fwd-csum-live; then
    [ -e /usr/include/sys/capability.h ] || {
        echo "callgrind.sh: xdpsock needs libcap's headers: apt-get install libcap-dev (scripts/setup.sh test installs it)" >&2
        exit 1
    }
    XDPSOCK=$OUT/xdpsock
    "$CC" -O2 -g -w -Ibench/peer/bpf-examples/headers -Dsetrlimit=xskit_peer_setrlimit \
        -c bench/peer/bpf-examples/AF_XDP-example/xdpsock.c -o "$OUT/xdpsock.o"
    "$CC" -O2 -Wall -c bench/peer/xdpsock_memlock.c -o "$OUT/xdpsock_memlock.o"
    "$CC" -o "$XDPSOCK" "$OUT/xdpsock.o" "$OUT/xdpsock_memlock.o" -lxdp -lbpf -lpthread -lcap
    gen_start cg-a
    xdpsock_run "$SECS"
    xdpsock_run $((2 * SECS))
    gen_stop
fi
# fwd-64: 64 rules of mixed shapes (bench/rule_shapes.py); only the last matches the
# generator's frames (UDP 198.51.100.1:1234 -> 198.51.100.2:9) and forwards them.
python3 bench/rule_shapes.py --count 64 --match-at 64 --match-action forward >"$OUT/rules-64.toml"
if has fwd || has fwd-64; then
    gen_start cg-a2 --src-port 1234
    has fwd && fwd_runs fwd
    has fwd-64 && fwd_runs fwd-64 --rules "$OUT/rules-64.toml"
    gen_stop
fi
# fwd-csum: UDP from the kernel's own socket at a, whose checksum the sender left partial for
# the device (veth offers the offload): fwd finishes each one before sending it on.
if has fwd-csum; then
    "$CC" -O2 -Wall -o "$OUT/udp_flood" bench/peer/udp_flood.c
    ip -n "$A" addr add 198.51.100.1/24 dev cg-a2
    ip -n "$C" addr add 198.51.100.2/24 dev cg-c
    # Each side knows the other's MAC: nothing waits for ARP to cross a forwarder that is not
    # running between two runs.
    ip -n "$A" neigh add 198.51.100.2 lladdr "$(ip netns exec "$C" cat /sys/class/net/cg-c/address)" dev cg-a2 nud permanent
    ip -n "$C" neigh add 198.51.100.1 lladdr "$(ip netns exec "$A" cat /sys/class/net/cg-a2/address)" dev cg-c nud permanent
    ip netns exec "$A" taskset -c 0 "$OUT/udp_flood" 198.51.100.2 9 >/dev/null 2>"$OUT/gen.err" &
    GEN=$!
    fwd_runs fwd-csum
    gen_stop
fi
# fwd-csum-live: the same finishing step on frames from the live-frames generator flat out
# (gen --partial-csum writes the pseudo-header sum a partial checksum holds), so that every
# vector is full: fwd-csum's vectors are as full as the kernel socket's pace leaves them,
# which moves its figure between runs.
if has fwd-csum-live; then
    gen_start cg-a2 --partial-csum
    fwd_runs fwd-csum-live
    gen_stop
fi
# fwd-ddos: the attack (UDP port 9, the generator's, flat out) dropped by a kernel rule, and
# legitimate probes at up to 200 kpps to port 5000 forwarded by the worker: the worker's run
# function alone, one run.
printf '[[rule]]\nname = "attack"\nprotocol = "udp"\ndst_port = 9\naction = "drop"\n' >"$OUT/rules-ddos.toml"
if has fwd-ddos; then
    gen_start cg-a2
    # The probes run until fwd is done: fwd's start under valgrind takes a varying while,
    # longer on a busy machine, and a probe stream that ended first leaves nothing to count.
    ip netns exec "$A" taskset -c 0 "$BIN" gen -i cg-a2 -m skb --dst-mac "$MAC_B" --dst-port 5000 \
        -r 200000 >/dev/null 2>"$OUT/legit.err" &
    LEGIT=$!
    ip netns exec "$M" taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$OUT/fwd-ddos.cg" \
        --toggle-collect="xskit_fwd::worker::Worker<*>::run" \
        "$BIN" fwd -i cg-ma -i cg-mc -m drv -d "$SECS" --json --rules "$OUT/rules-ddos.toml" \
        >"$OUT/fwd-ddos.json" 2>"$OUT/fwd-ddos.err" || {
        echo "callgrind.sh: fwd-ddos failed:" >&2
        tail -5 "$OUT/fwd-ddos.err" >&2
        exit 1
    }
    if ! kill -INT "$LEGIT" 2>/dev/null; then
        echo "callgrind.sh: the legitimate probes' generator stopped early:" >&2
        tail -5 "$OUT/legit.err" >&2
        exit 1
    fi
    wait "$LEGIT" || true
    gen_stop
fi

python3 bench/callgrind_report.py "$OUT" "$COUNT" "$SECS" $LOOPS
