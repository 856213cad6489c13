#!/usr/bin/env python3
"""The metrics endpoint under a connection flood: scrape latency while others hold it open.

Runs `xskit recv` with --metrics in a network namespace of its own, then, over that
namespace's loopback, holds IDLE connections that send nothing, SLOW connections that send a
request head a byte at a time (slowloris), and RECONNECT clients that connect again as soon
as the endpoint closes them, while one scraper asks for /metrics SCRAPES times. Prints each
scrape's latency percentiles, how many were answered 200 and how the rest were answered,
and how long the command took to exit on SIGTERM with every connection still held.

    sudo python3 bench/metrics-load.py [--idle 1000] [--slow 100] [--reconnect 300]
        [--scrapes 200] [--xskit target/release/xskit]

Needs root (a namespace, and an XDP program on its loopback).
"""

import argparse
import asyncio
import os
import resource
import signal
import statistics
import subprocess
import sys
import time

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n"


async def hold_idle(port, stop):
    """A connection that sends nothing; opened again whenever the endpoint closes it."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await reader.read()  # until the endpoint closes it
            writer.close()
        except OSError:
            await asyncio.sleep(0.01)


async def hold_slow(port, stop):
    """A slowloris: the request head a byte every 200 ms."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for b in REQUEST:
                if stop.is_set() or reader.at_eof():
                    break
                writer.write(bytes([b]))
                await writer.drain()
                await asyncio.sleep(0.2)
            writer.close()
        except OSError:
            await asyncio.sleep(0.01)


async def reconnect(port, stop, counts):
    """Connects, waits to be closed, connects again at once."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            counts["reconnects"] += 1
            await reader.read()
            writer.close()
        except OSError:
            counts["reconnect_errors"] += 1


async def scrape(port):
    """One scrape: (seconds, status line or the error)."""
    start = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        await writer.drain()
        text = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        status = text.split(b"\r\n", 1)[0].decode(errors="replace") or "closed, no answer"
    except (OSError, asyncio.TimeoutError) as e:
        status = type(e).__name__
    return time.monotonic() - start, status


async def run(args, port):
    stop = asyncio.Event()
    counts = {"reconnects": 0, "reconnect_errors": 0}
    tasks = [asyncio.create_task(hold_idle(port, stop)) for _ in range(args.idle)]
    tasks += [asyncio.create_task(hold_slow(port, stop)) for _ in range(args.slow)]
    tasks += [asyncio.create_task(reconnect(port, stop, counts)) for _ in range(args.reconnect)]
    await asyncio.sleep(2)  # let the flood build up before measuring
    results = []
    for _ in range(args.scrapes):
        results.append(await scrape(port))
        await asyncio.sleep(0.05)
    return stop, tasks, results, counts


def percentile(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p / 100))]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--idle", type=int, default=1000)
    p.add_argument("--slow", type=int, default=100)
    p.add_argument("--reconnect", type=int, default=300)
    p.add_argument("--scrapes", type=int, default=200)
    p.add_argument("--xskit", default="target/release/xskit")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("metrics-load: run as root (a namespace and an XDP program)")
    if not args.inside:
        # A signal ends the run through the clean-up below, not around it.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        ns = f"xskit-metrics-load-{os.getpid()}"
        subprocess.run(["ip", "netns", "add", ns], check=True)
        try:
            # The clients and the endpoint meet on the namespace's loopback.
            inside = ["ip", "netns", "exec", ns, sys.executable, __file__, "--inside"]
            sys.exit(subprocess.run(inside + sys.argv[1:]).returncode)
        finally:
            subprocess.run(["ip", "netns", "del", ns], check=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # recv's XDP program takes every packet of its interface: it runs on a veth of its own, and
    # the endpoint is reached over the loopback.
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "link", "add", "xm0", "type", "veth", "peer", "name", "xm1"], check=True)
    for link in ("xm0", "xm1"):
        subprocess.run(["ip", "link", "set", link, "up"], check=True)
    xskit = subprocess.Popen(
        [args.xskit, "recv", "-i", "xm0", "-m", "skb", "--metrics", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    for line in xskit.stderr:
        if "metrics at http://" in line:
            port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
            break
    if port is None:
        sys.exit("metrics-load: xskit did not start its endpoint")
    exit_s, results, counts = asyncio.run(measure(args, port, xskit))
    report(args, results, counts, exit_s)


async def measure(args, port, xskit):
    stop, tasks, results, counts = await run(args, port)
    # SIGTERM with every connection still held: how long until the command is gone.
    start = time.monotonic()
    xskit.terminate()
    while xskit.poll() is None:
        await asyncio.sleep(0.005)
    exit_s = time.monotonic() - start
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return exit_s, results, counts


def report(args, results, counts, exit_s):
    times = sorted(t for t, s in results if s.startswith("HTTP/1.1 200"))
    others = {}
    for _, s in results:
        if not s.startswith("HTTP/1.1 200"):
            others[s] = others.get(s, 0) + 1
    print(f"flood: {args.idle} idle, {args.slow} slowloris, {args.reconnect} reconnecting "
          f"({counts['reconnects']} connections made)")
    print(f"scrapes answered 200: {len(times)} of {len(results)}; others: {others or 'none'}")
    if times:
        ms = [t * 1000 for t in times]
        print(f"latency ms: p50 {statistics.median(ms):.1f}  p99 {percentile(ms, 99):.1f}  "
              f"max {ms[-1]:.1f}")
    print(f"exit on SIGTERM with the flood held: {exit_s * 1000:.0f} ms")


if __name__ == "__main__":
    main()
