#!/usr/bin/env python3
"""bench/callgrind.sh's table: instructions per packet of xskit and the xsk.h peer.

  callgrind_report.py OUT_DIR COUNT LOOP...

OUT_DIR holds, per ring loop, `LOOP-xskit-N.cg/.json` and `LOOP-peer-N.cg/.json` for N = COUNT
and 2*COUNT, and `fwd.cg/.json`, `fwd-64`, `fwd-ddos` (the worker alone). Steady state is the difference between
the two runs, so set-up cancels out. With JSON=path in the environment, the figures are also
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
            "top": top(steady, r2["whole"] - r1["whole"]),
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


FWD_RUNS = {
    "fwd": "plain forwarding",
    "fwd-64": "behind 64 rules, none matching",
    "fwd-ddos": "DDoS mix: the legitimate probes",
}


def fwd(out, name):
    """The worker's instructions per packet it received (idle polls included)."""
    with open(os.path.join(out, f"{name}.json")) as f:
        d = json.load(f)
    p = sum(port["rx_packets"] for port in d["counters"]["ports"])
    if p == 0:
        # Instructions over no packets is no figure: say so rather than print one.
        sys.exit(f"callgrind_report.py: {name}: the forwarder received no packets in its run; "
                 "was the generator running? (its errors are in the run's directory, KEEP=1)")
    cg = os.path.join(out, f"{name}.cg")
    t = total(cg)
    return {"packets": p, "worker": t / p, "top": top(functions(cg, False), t)}


def main():
    out, count, loops = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    results = {}
    head = "%-7s %9s %9s %8s %6s %10s %9s %6s %12s"
    print(head % ("", "", "whole process", "", "", "inside the loop", "", "", "empty polls"))
    print(head % ("loop", "packets", "xskit", "peer", "ratio", "xskit", "peer", "ratio", "xskit/peer"))
    for loop in loops:
        if loop in FWD_RUNS:
            r = results[loop] = fwd(out, loop)
            print("%-8s %8d %9.1f %8s %6s %10s %9s %6s %12s   (the worker only: %s)"
                  % (loop, r["packets"], r["worker"], "-", "-", "-", "-", "-", "-", FWD_RUNS[loop]))
            continue
        r = results[loop] = ring_loop(out, count, loop)
        x, p = r["xskit"], r["peer"]
        polls = "-" if loop == "txpush" else "%.1f/%.1f" % (x["idle_per_packet"], p["idle_per_packet"])
        if r["unsteady"]:
            print("%-7s %9d   unsteady (%s): the runs' empty polls, %s per packet, outweigh the "
                  "packets; run it on a quieter machine" % (loop, x["packets"],
                                                             " and ".join(r["unsteady"]), polls))
            continue
        print("%-7s %9d %9.1f %8.1f %5.2fx %10.1f %9.1f %5.2fx %12s"
              % (loop, x["packets"], x["whole"], p["whole"], r["ratio_whole"], x["loop"], p["loop"],
                 r["ratio_loop"], polls))
    print()
    print("Instructions per packet; the empty polls' share (per packet, left out of the figures")
    print("before it) is measured with no traffic. Where the instructions go, polls included:")
    for loop in loops:
        if loop in FWD_RUNS:
            print(f"  {loop} worker: {results[loop]['top']}")
        else:
            print(f"  {loop} xskit: {results[loop]['xskit']['top']}")
            print(f"  {loop} peer:  {results[loop]['peer']['top']}")
    if os.environ.get("JSON"):
        with open(os.environ["JSON"], "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
