#!/usr/bin/env bash
# xskit against dpdk-testpmd (net_af_xdp PMD) on one veth testbed, in the same run.
#
#   sudo bash bench/peers.sh            # RUNS=3 SECS=3 by default
#
# Pairs, each run interleaved xskit, peer, xskit, peer, ...:
#   rxdrop  vs testpmd rxonly   (receiver on CPU 1; xskit gen --engine live on CPU 0 feeds both)
#   txpush  vs testpmd txonly   (sender on CPU 1)
#   l2fwd   vs testpmd macswap  (forwarder on CPU 1, the same generator)
# Both sides run in native (DRV) copy mode: testpmd 22.11 cannot choose, and takes native.
# testpmd gets busy_budget=0, its faster setting on veth. Both are counted by the kernel over
# the same window (see window() below). Prints every run, then each xskit/peer ratio with its
# median and spread (min..max).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
SECS=${SECS:-3}

if [ "$(id -u)" -ne 0 ]; then
    echo "peers.sh: run as root (sudo): it builds network namespaces and attaches XDP programs" >&2
    exit 1
fi
for p in dpdk-dev python3; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || {
        echo "peers.sh: installing $p"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
    }
done
command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked --bin xskit >/dev/null 2>&1 || cargo build --release --locked --bin xskit
XSKIT=$PWD/target/release/xskit

A=xskit-peers-$$-a
B=xskit-peers-$$-b
cleanup() {
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    rm -rf "/var/run/dpdk/xskitpeer$$"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$A"
ip netns add "$B"
ip link add xp-a netns "$A" address 02:58:53:4b:00:0a type veth peer name xp-b netns "$B" address 02:58:53:4b:00:0b
for ns in "$A" "$B"; do
    ip netns exec "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'
done
ip -n "$A" link set xp-a up
ip -n "$B" link set xp-b up
MAC_B=02:58:53:4b:00:0b
OUT=$(mktemp -d)


gen_start() { # flat-out generator on CPU 0 into xp-b
    ip netns exec "$A" taskset -c 0 "$XSKIT" gen --engine live -i xp-a --dst-mac "$MAC_B" -d $((SECS + 4)) --json >"$OUT/gen.json" 2>/dev/null &
    GEN=$!
}
gen_stop() { kill -INT "$GEN" 2>/dev/null || true; wait "$GEN" 2>/dev/null || true; }

# Both contenders are counted alike, by the kernel, over the same window: after a second of
# warm-up, SECS seconds of the receiving veth's XDP redirects into AF_XDP (rxdrop, rxonly),
# or of the far device's received packets (txpush and txonly: what b received; l2fwd and
# macswap: what came back to a). Neither tool's own count or start-up time enters.
counter() { # $1 what (redirect|rx), $2 ns, $3 iface
    case $1 in
    redirect) ip netns exec "$2" ethtool -S "$3" | awk '/rx_queue_0_xdp_redirect:/ {print $2}' ;;
    rx) ip -n "$2" -s -j link show dev "$3" | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['stats64']['rx']['packets'])" ;;
    esac
}
window() { # $1 what, $2 ns, $3 iface: packets per second over SECS seconds
    sleep 1
    local c0 t0 c1 t1
    c0=$(counter "$1" "$2" "$3"); t0=$(date +%s.%N)
    sleep "$SECS"
    c1=$(counter "$1" "$2" "$3"); t1=$(date +%s.%N)
    python3 -c "print(($c1 - $c0) / ($t1 - $t0))"
}

# Where each pair is counted: (what, namespace, interface).
where() {
    case $1 in
    rxdrop) echo "redirect $B xp-b" ;;
    txpush) echo "rx $B xp-b" ;;
    l2fwd) echo "rx $A xp-a" ;;
    esac
}

xskit_run() { # $1 bench, $2 ns, $3 iface
    ip netns exec "$2" taskset -c 1 "$XSKIT" bench "$1" -i "$3" -m drv -d $((SECS + 3)) --json >"$OUT/x.json" 2>/dev/null &
    local pid=$!
    sleep 0.5
    [ "$1" != txpush ] && gen_start
    window $(where "$1")
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [ "$1" != txpush ] && gen_stop
    return 0
}

testpmd_run() { # $1 forward mode, $2 ns, $3 iface, $4 the pair it is measured against
    ip netns exec "$2" env LIBXDP_SKIP_DISPATCHER=1 timeout -s INT $((SECS + 4)) \
        dpdk-testpmd --no-huge -m 1024 --file-prefix="xskitpeer$$" -l 0,1 --main-lcore 0 --no-pci \
        --vdev "net_af_xdp0,iface=$3,start_queue=0,queue_count=1,busy_budget=0" -- \
        --forward-mode="$1" --stats-period 1 --total-num-mbufs=16384 >"$OUT/tp.log" 2>&1 &
    local pid=$!
    sleep 1.5
    [ "$1" != txonly ] && gen_start
    window $(where "$4")
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [ "$1" != txonly ] && gen_stop
    return 0
}

printf "%-8s %-4s %14s %14s %8s\n" pair run "xskit pps" "testpmd pps" ratio
: >"$OUT/ratios"
for run in $(seq 1 "$RUNS"); do
    for pair in rxdrop txpush l2fwd; do
        case $pair in
        rxdrop) x=$(xskit_run rxdrop "$B" xp-b); p=$(testpmd_run rxonly "$B" xp-b rxdrop) ;;
        txpush) x=$(xskit_run txpush "$A" xp-a); p=$(testpmd_run txonly "$A" xp-a txpush) ;;
        l2fwd) x=$(xskit_run l2fwd "$B" xp-b); p=$(testpmd_run macswap "$B" xp-b l2fwd) ;;
        esac
        r=$(python3 -c "print(f'{float(\"$x\")/max(float(\"$p\"),1):.2f}')")
        printf "%-8s %-4s %14.0f %14.0f %8s\n" "$pair" "$run" "$x" "$p" "$r"
        echo "$pair $r" >>"$OUT/ratios"
    done
done
echo
python3 - "$OUT/ratios" <<'PY'
import collections, statistics, sys
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    pair, r = line.split()
    by[pair].append(float(r))
print(f"{'pair':<28} {'median':>7} {'spread':>14}")
names = {"rxdrop": "rxdrop / testpmd rxonly", "txpush": "txpush / testpmd txonly", "l2fwd": "l2fwd / testpmd macswap"}
for pair, rs in by.items():
    print(f"{names[pair]:<28} {statistics.median(rs):>6.2f}x {min(rs):>6.2f}..{max(rs):<6.2f}")
PY
rm -rf "$OUT"
