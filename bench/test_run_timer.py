#!/usr/bin/env python3
"""Times XDP programs by BPF_PROG_TEST_RUN, for bench/filter-cost.sh.

    python3 bench/test_run_timer.py PACKET ROUNDS REPEAT PROG_ID...

Runs each program REPEAT times on the packet in the file PACKET, the programs interleaved,
ROUNDS times, each run timed by the wall clock around the system call (the kernel's own figure
is whole nanoseconds), and checks that each dropped it. Prints one line a program: its id, the
median and the lowest nanoseconds a repetition, and the median over the rounds of its time less
the first program's.
"""
import ctypes
import os
import statistics as st
import struct
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
SYS_BPF, PROG_TEST_RUN, PROG_GET_FD_BY_ID = 321, 10, 13


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 160)
    if libc.syscall(SYS_BPF, cmd, buf, 160) < 0:
        err = ctypes.get_errno()
        sys.exit("filter-cost.sh: bpf(%d): %s" % (cmd, os.strerror(err)))
    return buf


def main():
    packet = open(sys.argv[1], "rb").read()
    rounds, repeat = int(sys.argv[2]), int(sys.argv[3])
    ids = [int(i) for i in sys.argv[4:]]
    fds = []
    for i in ids:
        attr = ctypes.create_string_buffer(struct.pack("III", i, 0, 0), 160)
        fd = libc.syscall(SYS_BPF, PROG_GET_FD_BY_ID, attr, 160)
        if fd < 0:
            sys.exit("filter-cost.sh: no program %d: %s" % (i, os.strerror(ctypes.get_errno())))
        fds.append(fd)
    data = ctypes.create_string_buffer(packet, len(packet))
    times = [[] for _ in ids]
    for _ in range(rounds):
        for k, fd in enumerate(fds):
            attr = struct.pack("IIIIQQII", fd, 0, len(packet), 0, ctypes.addressof(data), 0,
                               repeat, 0)
            start = time.perf_counter()
            out = bpf(PROG_TEST_RUN, attr)
            times[k].append((time.perf_counter() - start) / repeat * 1e9)
            if struct.unpack_from("I", out.raw, 4)[0] != 1:
                sys.exit("filter-cost.sh: program %d did not drop the packet" % ids[k])
    for i, t in zip(ids, times):
        over = st.median(a - b for a, b in zip(t, times[0]))
        print("%d %.2f %.2f %.2f" % (i, st.median(t), min(t), over))


if __name__ == "__main__":
    main()
