#!/usr/bin/env bash
# The cost of a packet in the forwarder's XDP filter against the bare XDP_DROP ceiling, steadier
# than any traffic on this VM: the kernel's BPF_PROG_TEST_RUN runs each program REPEAT times on
# one 64-byte IPv4 UDP packet to port 9 (the filter dropping it by one kernel rule, as in
# `xskit bench fwd`'s DDoS rows; the ceiling counting and dropping it), interleaved, ROUNDS
# times, each run timed by the wall clock around the system call (the kernel's own figure is
# whole nanoseconds). Prints each program's median and lowest ns a repetition, and the median
# difference. The figures include the test run's own cost per repetition, the same for both.
#
# The forwarder runs between two veth pairs (fc0 and fc2, whose peers have no program), so that
# nothing it forwards comes back to it; its worker sleeps while the programs are timed.
#
#   sudo bash bench/filter-cost.sh          # ROUNDS=12 REPEAT=20000000, BIN=target/release/xskit
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-12}
REPEAT=${REPEAT:-20000000}
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
for pair in "fc0 fc1" "fc2 fc3" "fc4 fc5"; do
    set -- $pair
    ip -n "$ns" link add "$1" type veth peer name "$2"
    ip -n "$ns" link set "$1" up
    ip -n "$ns" link set "$2" up
done

printf '[[rule]]\nname = "attack"\nprotocol = "udp"\ndst_port = 9\naction = "drop"\n' >"$work/rules.toml"
python3 - "$work/packet" <<'EOF'
import struct, sys
eth = bytes.fromhex("020000000002" "020000000001") + b"\x08\x00"
udp = struct.pack("!HHHH", 1234, 9, 26, 0) + bytes(18)
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                 bytes([198, 51, 100, 1]), bytes([198, 51, 100, 2]))
open(sys.argv[1], "wb").write(eth + ip + udp)
EOF

ip netns exec "$ns" "$BIN" fwd -i fc0 -i fc2 -m drv --rules "$work/rules.toml" -d 600 >/dev/null 2>&1 &
pids+=($!)
ip netns exec "$ns" "$BIN" bench xdp-drop -i fc4 -m drv -d 600 >/dev/null 2>&1 &
pids+=($!)
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
filter=$(prog_of fc0)
ceiling=$(prog_of fc4)
sleep 1
python3 - "$work/packet" "$filter" "$ceiling" "$ROUNDS" "$REPEAT" <<'EOF'
import ctypes, os, statistics as st, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
SYS_BPF, PROG_TEST_RUN, PROG_GET_FD_BY_ID = 321, 10, 13

def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 160)
    if libc.syscall(SYS_BPF, cmd, buf, 160) < 0:
        err = ctypes.get_errno()
        sys.exit("filter-cost.sh: bpf(%d): %s" % (cmd, os.strerror(err)))
    return buf

packet = open(sys.argv[1], "rb").read()
ids, rounds, repeat = [int(sys.argv[2]), int(sys.argv[3])], int(sys.argv[4]), int(sys.argv[5])
fds = [libc.syscall(SYS_BPF, PROG_GET_FD_BY_ID, ctypes.create_string_buffer(
    struct.pack("III", i, 0, 0), 160), 160) for i in ids]
data = ctypes.create_string_buffer(packet, len(packet))
times = [[], []]
for _ in range(rounds):
    for k, fd in enumerate(fds):
        attr = struct.pack("IIIIQQII", fd, 0, len(packet), 0, ctypes.addressof(data), 0, repeat, 0)
        start = time.perf_counter()
        out = bpf(PROG_TEST_RUN, attr)
        times[k].append((time.perf_counter() - start) / repeat * 1e9)
        if struct.unpack_from("I", out.raw, 4)[0] != 1:
            sys.exit("filter-cost.sh: program %d did not drop the packet" % ids[k])
f, c = times
print("filter  (xskit fwd, one drop rule): median %.2f ns, lowest %.2f ns" % (st.median(f), min(f)))
print("ceiling (XDP_DROP, counting):       median %.2f ns, lowest %.2f ns" % (st.median(c), min(c)))
print("difference, median of the rounds:   %.2f ns" % st.median(a - b for a, b in zip(f, c)))
EOF
