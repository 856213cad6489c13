#!/usr/bin/env python3
"""bench/callgrind.sh's table: instructions per packet of xskit and the xsk.h peer.

  callgrind_report.py OUT_DIR COUNT SECS LOOP...

OUT_DIR holds, per ring loop, `LOOP-xskit-N.cg/.json` and `LOOP-peer-N.cg/.json` for N = COUNT
and 2*COUNT; per fwd row `ROW-S.cg/.json` and xdpsock's `xdpsock-S.cg/.txt` for S = SECS and
2*SECS; and `fwd-ddos.cg/.json` (the worker alone, one run). Steady state is the difference
between the two runs, so set-up cancels out. With JSON=path in the environment, the figures are also
written there.
"""

import json
import os
import re
import subprocess
import sys

LOOP_FUNCTION = {
    ("rxdrop", "xskit"): "xskit::bench::rxdrop",
    ("l2fwd", "xskit"): "xskit::bench::l2fwd",
    ("txpush", "xskit"): "xskit::bench::txpush",
    ("rxdrop", "peer"): "peer_rxdrop",
    ("l2fwd", "peer"): "peer_l2fwd",
    ("txpush", "peer"): "peer_txpush",
}


def total(cg):
    with open(cg) as f:
        for line in f:
            m = re.match(r"^(summary|totals):\s+(\d+)", line)
            if m:
                return int(m.group(2))
    raise SystemExit(f"callgrind_report.py: no totals in {cg}")


def functions(cg, inclusive):
    """Instructions per function (exclusive, or inclusive of what it calls)."""
    args = ["callgrind_annotate", "--threshold=100", f"--inclusive={'yes' if inclusive else 'no'}", cg]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    lines = text.split("\n")
    # Only the table of functions, not the annotated sources after it.
    start = next((i for i, l in enumerate(lines) if l.rstrip().endswith("file:function")), len(lines))
    by_fn = {}
    for line in lines[start + 2:]:
        if not line.strip():
            break
        m = re.match(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.*?):(.*?)(?: \[.*\])?$", line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        ir = int(m.group(1).replace(",", ""))
        # gcc's clones (peer_rxdrop.constprop.0) are the function itself.
        name = re.sub(r"\.(constprop|isra|part|cold)\.\d+$", "", m.group(3))
        if inclusive:
            # Code inlined from other files is listed again under their names; the entry of
            # the function's own file already holds everything it ran.
            by_fn[name] = max(by_fn.get(name, 0), ir)
        else:
            by_fn[name] = by_fn.get(name, 0) + ir
    return by_fn


def counts(path, loop, program):
    """The packets a run counted, and its polls of an empty rx ring."""
    with open(path) as f:
        d = json.load(f)
    if program == "peer":
        return d["packets"], d.get("empty_polls", 0)
    packets = d["tx_packets"] if loop == "txpush" else d["rx_packets"]
    return packets, d.get("empty_polls", 0) if loop != "txpush" else 0


def run(out, name, loop, program):
    """A run's packets, empty polls, whole-process instructions, the loop's inclusive
    instructions and each function's own."""
    base = os.path.join(out, name)
    p, e = counts(base + ".json", loop, program)
    incl = functions(base + ".cg", inclusive=True)
    return {"p": p, "e": e, "whole": total(base + ".cg"),
            "loop": incl.get(LOOP_FUNCTION[(loop, program)], 0),
            "fns": functions(base + ".cg", inclusive=False)}


def per_empty_poll(out, loop, program):
    """What one empty poll costs (whole process, inside the loop), from two idle runs."""
    if loop == "txpush":
        return 0.0, 0.0
    a, b = (run(out, f"{loop}-{program}-idle{k}", loop, program) for k in (1, 2))
    de = b["e"] - a["e"]
    if de <= 0:
        raise SystemExit(f"callgrind_report.py: {loop} {program}: the idle runs polled no more in the longer one")
    return (b["whole"] - a["whole"]) / de, (b["loop"] - a["loop"]) / de


def short(name):
    return "::".join(re.sub(r"<[^<>]*>", "", name).split("::")[-2:]) or name


def top(by_fn, whole, n=4):
    rows = sorted(by_fn.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{short(f)} {round(100 * ir / max(whole, 1))}%" for f, ir in rows)


def ring_loop(out, count, loop):
    row = {}
    for program in ("xskit", "peer"):
        r1, r2 = (run(out, f"{loop}-{program}-{n}", loop, program) for n in (count, 2 * count))
        idle_whole, idle_loop = per_empty_poll(out, loop, program)
        dp, de = max(r2["p"] - r1["p"], 1), r2["e"] - r1["e"]
        # The steady state's functions: what the longer run spent beyond the shorter one.
        steady = {f: ir - r1["fns"].get(f, 0) for f, ir in r2["fns"].items()}
        row[program] = {
            "packets": dp,
            "whole": (r2["whole"] - r1["whole"] - idle_whole * de) / dp,
            "loop": (r2["loop"] - r1["loop"] - idle_loop * de) / dp,
            "empty_polls_per_packet": de / dp,
            "per_empty_poll": idle_whole,
            "idle_per_packet": idle_whole * de / dp,
            # Shares of what grew: a noisy pair of runs can leave the totals' difference
            # near zero (or below) while each function's own difference stands.
            "top": top(steady, sum(v for v in steady.values() if v > 0)),
        }
    row["unsteady"] = [p for p in ("xskit", "peer") if unsteady(row[p])]
    if not row["unsteady"]:
        row["ratio_whole"] = row["xskit"]["whole"] / row["peer"]["whole"]
        row["ratio_loop"] = row["xskit"]["loop"] / row["peer"]["loop"]
    return row


def unsteady(r):
    """Whether a program's figure is no count at all: on a busy machine the generator is
    starved now and then, the shorter run can poll an empty ring far more often than the
    longer one, and what an empty poll costs with no traffic no longer accounts for the
    difference, which then comes out at or below zero instructions a packet."""
    return r["whole"] <= 0 or r["loop"] <= 0


FWD_ROWS = {
    "fwd": "its default rule alone",
    "fwd-64": "64 rules of mixed shapes, the match last",
    "fwd-csum": "the kernel's UDP, checksums left partial",
    "fwd-csum-live": "live frames flat out, checksums left partial",
}
WORKER = re.compile(r"^xskit_fwd::worker::Worker<.*>::run$")


def xdpsock_packets(path):
    """The packets xdpsock's l2fwd sent back: the last `tx` line's count."""
    n = None
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) >= 3 and w[0] == "tx":
                n = int(w[2].replace(",", ""))
    if n is None:
        sys.exit(f"callgrind_report.py: no tx count in {path}")
    return n


def forwarded(path):
    """The packets a fwd run sent out of its ports."""
    with open(path) as f:
        d = json.load(f)
    return sum(port["tx_packets"] for port in d["counters"]["ports"])


def steady(out, runs, packets, loop_fn):
    """Whole-process and in-loop instructions per packet between two runs, and the steady
    state's top functions."""
    (a, b) = runs
    pa, pb = packets(a), packets(b)
    if pa == 0 or pb == 0:
        sys.exit(f"callgrind_report.py: {a if pa == 0 else b} forwarded no packets: was the "
                 "generator running? (KEEP=1 keeps the runs)")
    wa, wb = total(os.path.join(out, a + ".cg")), total(os.path.join(out, b + ".cg"))
    if pb <= pa or wb <= wa:
        # On a busy machine the generator can be starved during the longer run, which then
        # forwards no more than the shorter: the difference is no count at all.
        return None
    ia, ib = (functions(os.path.join(out, r + ".cg"), True) for r in (a, b))
    loop = lambda incl: max((ir for f, ir in incl.items() if loop_fn(f)), default=0)
    if loop(ib) <= loop(ia):
        # Likewise when the shorter run's loop polled an empty ring so much more often
        # that it spent more than the longer one's.
        return None
    fa, fb = (functions(os.path.join(out, r + ".cg"), False) for r in (a, b))
    own = {f: ir - fa.get(f, 0) for f, ir in fb.items()}
    return {"packets": pb - pa, "whole": (wb - wa) / (pb - pa),
            "loop": (loop(ib) - loop(ia)) / (pb - pa), "top": top(own, wb - wa)}


def finished_checksums(path):
    """The partial checksums a fwd run finished (offloaded or summed)."""
    with open(path) as f:
        d = json.load(f)
    return sum(p["checksums_offloaded"] + p["checksums_completed"] for p in d["counters"]["ports"])


def check_csum_rows(out, secs, loops):
    """A checksum row whose runs finished no checksum measured something else: refuse it."""
    for loop in loops:
        if loop.startswith("fwd-csum"):
            for run in (f"{loop}-{secs}", f"{loop}-{2 * secs}"):
                if finished_checksums(os.path.join(out, run + ".json")) == 0:
                    sys.exit(f"callgrind_report.py: {run} finished no partial checksum: its "
                             "sender did not leave them partial (KEEP=1 keeps the runs)")


def fwd_rows(out, secs, loops):
    """xdpsock's l2fwd, then each fwd row beside it."""
    check_csum_rows(out, secs, loops)
    rows = {"xdpsock": steady(out, (f"xdpsock-{secs}", f"xdpsock-{2 * secs}"),
                              lambda r: xdpsock_packets(os.path.join(out, r + ".txt")),
                              lambda f: f == "main")}
    for loop in loops:
        if loop in FWD_ROWS:
            r = steady(out, (f"{loop}-{secs}", f"{loop}-{2 * secs}"),
                       lambda r: forwarded(os.path.join(out, r + ".json")), WORKER.match)
            if r is not None and rows["xdpsock"] is not None:
                r["ratio_whole"] = r["whole"] / rows["xdpsock"]["whole"]
                r["ratio_loop"] = r["loop"] / max(rows["xdpsock"]["loop"], 1e-9)
            rows[loop] = r
    return rows


def ddos(out):
    """The worker's instructions per packet it received (idle polls included), one run."""
    with open(os.path.join(out, "fwd-ddos.json")) as f:
        d = json.load(f)
    p = sum(port["rx_packets"] for port in d["counters"]["ports"])
    if p == 0:
        # Instructions over no packets is no figure: say so rather than print one.
        sys.exit("callgrind_report.py: fwd-ddos: the forwarder received no packets in its run; "
                 "was the generator running? (its errors are in the run's directory, KEEP=1)")
    cg = os.path.join(out, "fwd-ddos.cg")
    t = total(cg)
    return {"packets": p, "worker": t / p, "top": top(functions(cg, False), t)}


def main():
    out, count, secs, loops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    results = {}
    head = "%-8s %9s %9s %8s %6s %10s %9s %6s %12s"
    print(head % ("", "", "whole process", "", "", "inside the loop", "", "", "empty polls"))
    print(head % ("loop", "packets", "xskit", "peer", "ratio", "xskit", "peer", "ratio", "xskit/peer"))
    for loop in loops:
        if loop in FWD_ROWS or loop == "fwd-ddos":
            continue
        r = results[loop] = ring_loop(out, count, loop)
        x, p = r["xskit"], r["peer"]
        polls = "-" if loop == "txpush" else "%.1f/%.1f" % (x["idle_per_packet"], p["idle_per_packet"])
        if r["unsteady"]:
            print("%-8s %9d   unsteady (%s): the runs' empty polls, %s per packet, outweigh the "
                  "packets; run it on a quieter machine" % (loop, x["packets"],
                                                             " and ".join(r["unsteady"]), polls))
            continue
        print("%-8s %9d %9.1f %8.1f %5.2fx %10.1f %9.1f %5.2fx %12s"
              % (loop, x["packets"], x["whole"], p["whole"], r["ratio_whole"], x["loop"], p["loop"],
                 r["ratio_loop"], polls))
    if any(l in FWD_ROWS for l in loops):
        rows = fwd_rows(out, secs, loops)
        xd = results["xdpsock"] = rows.pop("xdpsock")
        for loop, r in rows.items():
            results[loop] = r
            if r is None or xd is None:
                which = "its" if r is None else "xdpsock's"
                print("%-8s %9s   unsteady: %s longer run forwarded, or spent in its loop, no "
                      "more than its shorter one (a starved generator); run it on a quieter "
                      "machine" % (loop, "-", which))
                continue
            print("%-8s %9d %9.1f %8.1f %5.2fx %10.1f %9.1f %5.2fx %12s   (%s)"
                  % (loop, r["packets"], r["whole"], xd["whole"], r["ratio_whole"], r["loop"],
                     xd["loop"], r["ratio_loop"], "included", FWD_ROWS[loop]))
    if "fwd-ddos" in loops:
        r = results["fwd-ddos"] = ddos(out)
        print("%-8s %9d %9.1f %8s %6s %10s %9s %6s %12s   (the worker only: the DDoS mix's legitimate probes)"
              % ("fwd-ddos", r["packets"], r["worker"], "-", "-", "-", "-", "-", "-"))
    print()
    print("Instructions per packet. Ring loops: xskit's bench against the xsk.h peer, the empty")
    print("polls' share (per packet, left out of the figures before it) measured with no traffic.")
    print("fwd rows: the forwarder against bpf-examples' xdpsock l2fwd, empty polls included;")
    print("inside the loop: the worker's run function, xdpsock's main (l2fwd_all inlined). Where the")
    print("instructions go, polls included:")
    for loop in loops:
        r = results.get(loop)
        if r is None or (loop in FWD_ROWS and results.get("xdpsock") is None):
            continue
        if "xskit" in r:
            print(f"  {loop} xskit: {r['xskit']['top']}")
            print(f"  {loop} peer:  {r['peer']['top']}")
        else:
            print(f"  {loop} xskit: {r['top']}")
    if results.get("xdpsock") is not None:
        print(f"  xdpsock l2fwd: {results['xdpsock']['top']}")
    if os.environ.get("JSON"):
        with open(os.environ["JSON"], "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
