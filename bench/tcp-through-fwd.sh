#!/usr/bin/env bash
# Kernel TCP through a bump in the wire: iperf3 from host a to host c across namespace m, with
# the hosts' default offloads (partial checksums, TSO), for
#   - xskit fwd, partial checksums finished by the kernel (AF_XDP transmit metadata: default)
#   - xskit fwd, partial checksums summed in user space (--checksum software)
#   - xskit fwd --xdp-forward (partial-checksum packets still go through user space)
#   - a Linux bridge in m, the peer
# in DRV and SKB mode, and at MTU 1500 and 9000. Runs are interleaved (every contender once,
# then again), RUNS rounds of SECS seconds; the forwarder is pinned to CPU 1. Prints every run
# and each contender's median Gbit/s and its ratio to the bridge's median.
#
#   sudo bash bench/tcp-through-fwd.sh         # RUNS=3 SECS=3 MTUS="1500 9000"
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
SECS=${SECS:-3}
MTUS=${MTUS:-1500 9000}

if [ "$(id -u)" -ne 0 ]; then
    echo "tcp-through-fwd.sh: run as root (sudo): it builds network namespaces" >&2
    exit 1
fi
command -v iperf3 >/dev/null || { echo "tcp-through-fwd.sh: needs iperf3 (scripts/setup.sh installs it)" >&2; exit 1; }
command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked --bin xskit >/dev/null 2>&1 || cargo build --release --locked --bin xskit
XSKIT=$PWD/target/release/xskit

P=xskit-tcp-$$
A=$P-a M=$P-m C=$P-c
cleanup() {
    [ -n "${FWD:-}" ] && kill -INT "$FWD" 2>/dev/null && wait "$FWD" 2>/dev/null
    for n in "$A" "$M" "$C"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

testbed() { # $1 MTU
    for n in "$A" "$M" "$C"; do ip netns del "$n" 2>/dev/null || true; ip netns add "$n"; ip -n "$n" link set lo up; done
    ip link add xt-a netns "$A" type veth peer name xt-ma netns "$M"
    ip link add xt-mc netns "$M" type veth peer name xt-c netns "$C"
    ip -n "$A" addr add 198.51.100.1/24 dev xt-a
    ip -n "$C" addr add 198.51.100.3/24 dev xt-c
    for x in "$A xt-a" "$M xt-ma" "$M xt-mc" "$C xt-c"; do
        set -- $x
        ip -n "$1" link set dev "$2" mtu "$MTU" up
    done
    ip netns exec "$M" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
}

# A contender: "name|how". how is "bridge" or the fwd options.
CONTENDERS=(
    "fwd drv|-m drv"
    "fwd drv --checksum software|-m drv --checksum software"
    "fwd drv --xdp-forward|-m drv --xdp-forward"
    "fwd skb|-m skb"
    "fwd skb --checksum software|-m skb --checksum software"
    "bridge|bridge"
)

start() { # $1 how
    if [ "$1" = bridge ]; then
        ip -n "$M" link add xt-br type bridge
        ip -n "$M" link set xt-ma master xt-br
        ip -n "$M" link set xt-mc master xt-br
        ip -n "$M" link set xt-br up
        FWD=
    else
        # --xdp-forward needs the far ends to take XDP frames (GRO on veth).
        for x in "$A xt-a" "$C xt-c"; do set -- $x; ip netns exec "$1" ethtool -K "$2" gro on >/dev/null; done
        ip netns exec "$M" taskset -c 1 "$XSKIT" fwd -i xt-ma -i xt-mc $how >/dev/null 2>&1 &
        FWD=$!
    fi
    sleep 1
}

stop() { # $1 how
    if [ "$1" = bridge ]; then
        ip -n "$M" link del xt-br
    else
        kill -INT "$FWD"
        wait "$FWD" || echo "  (xskit fwd exited $?)" >&2
        FWD=
        for x in "$A xt-a" "$C xt-c"; do set -- $x; ip netns exec "$1" ethtool -K "$2" gro off >/dev/null; done
    fi
}

measure() { # prints Gbit/s received
    ip netns exec "$C" iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    ip netns exec "$A" iperf3 -c 198.51.100.3 -p 5299 -t "$SECS" -J 2>/dev/null |
        python3 -c "import json,sys; print('%.2f' % (json.load(sys.stdin)['end']['sum_received']['bits_per_second'] / 1e9))" || echo 0
    wait "$srv" 2>/dev/null || true
}

for MTU in $MTUS; do
    testbed "$MTU"
    declare -A RESULTS=()
    echo "MTU $MTU, $RUNS rounds of ${SECS} s, Gbit/s:"
    for r in $(seq 1 "$RUNS"); do
        for c in "${CONTENDERS[@]}"; do
            name=${c%%|*} how=${c#*|}
            start "$how"
            g=$(measure)
            stop "$how"
            RESULTS[$name]="${RESULTS[$name]:-} $g"
            printf '  round %d  %-32s %6s\n' "$r" "$name" "$g"
        done
    done
    median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
    bridge=$(echo "${RESULTS[bridge]}" | median)
    echo "MTU $MTU medians:"
    for c in "${CONTENDERS[@]}"; do
        name=${c%%|*}
        m=$(echo "${RESULTS[$name]}" | median)
        printf '  %-32s %6s Gbit/s  %5.2fx the bridge  (runs:%s)\n' "$name" "$m" "$(echo "$m $bridge" | awk '{print ($2 > 0 ? $1 / $2 : 0)}')" "${RESULTS[$name]}"
    done
    unset RESULTS
done
