"""Collector cost and detection latency at 1 Hz against a loopback IMDS, with a bare requests loop as baseline.

Run: ``.venv/bin/python benchmarks/bench_collector.py [--polls 300] [--interval 1.0]``

Measures, for ``sevents-collector run`` as a subprocess and for a bare ``requests`` GET loop at the same rate:
CPU time per poll (user+sys from /proc, start-up excluded), CPU share of one core, and peak RSS (VmHWM).
While the collector runs, the document changes every few polls at a random phase; detection latency is the
time from the change to the transition being visible in the outbox, reported as a ratio of the poll interval.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
INSTANCE = {"compute": {"vmId": "bench-vm", "name": "bench-0", "platformFaultDomain": "0", "platformUpdateDomain": "0"}}

BARE_LOOP = """
import sys, time, requests
url, interval, polls = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
session = requests.Session()
session.trust_env = False
start = time.monotonic()
for i in range(polls):
    session.get(url, headers={"Metadata": "true"}, timeout=10).content
    print(i, flush=True)
    time.sleep(max(0.0, start + (i + 1) * interval - time.monotonic()))
"""


class Imds:
    """A loopback IMDS whose document the benchmark changes; counts Scheduled Events requests."""

    def __init__(self) -> None:
        self.body = b'{"DocumentIncarnation": 0, "Events": []}'
        self.requests = 0
        imds = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if "scheduledevents" in self.path:
                    imds.requests += 1
                    body = imds.body
                else:
                    body = json.dumps(INSTANCE).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def set_events(self, incarnation: int, ids: list[str]) -> None:
        events = [
            {
                "EventId": i,
                "EventType": "Reboot",
                "ResourceType": "VirtualMachine",
                "Resources": ["bench-0"],
                "EventStatus": "Scheduled",
                "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT",
                "Description": "",
                "EventSource": "Platform",
                "DurationInSeconds": -1,
            }
            for i in ids
        ]
        self.body = json.dumps({"DocumentIncarnation": incarnation, "Events": events}).encode()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_requests(imds: Imds, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while imds.requests < count:
        if time.monotonic() > deadline:
            raise SystemExit("IMDS requests stopped arriving")
        time.sleep(0.005)


def bench_collector(polls: int, interval: float, warmup: int) -> dict[str, Any]:
    from collector.outbox import Outbox

    imds = Imds()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as state:
        command = [str(BIN / "sevents-collector"), "run", "--imds-url", imds.url, "--state-dir", state]
        command += ["--poll-interval", str(interval), "--log-level", "warning"]
        process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        try:
            wait_requests(imds, warmup, 60 + warmup * interval * 3)
            cpu0, t0, req0 = cpu_seconds(process.pid), time.monotonic(), imds.requests
            outbox = Outbox(Path(state) / "outbox.sqlite")
            latencies: list[float] = []
            live: list[str] = []
            incarnation = 0
            while imds.requests - req0 < polls:
                # Change the document at a random phase of the poll cycle, then watch the outbox for the result.
                time.sleep(interval * (2 + rng.random()))
                incarnation += 1
                if live and rng.random() < 0.5:
                    live.pop(0)
                else:
                    live.append(f"ev-{incarnation}")
                seen = outbox.last_seq()
                imds.set_events(incarnation, live)
                changed = time.monotonic()
                while outbox.last_seq() == seen:
                    time.sleep(0.002)
                    if time.monotonic() - changed > 30 * interval:
                        raise SystemExit("change not detected")
                latencies.append((time.monotonic() - changed) / interval)
            cpu1, t1, req1 = cpu_seconds(process.pid), time.monotonic(), imds.requests
            rss = peak_rss_mib(process.pid)
            outbox.close()
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)
    made = req1 - req0
    return {
        "cpu_per_poll_ms": (cpu1 - cpu0) / made * 1000,
        "cpu_share": (cpu1 - cpu0) / (t1 - t0),
        "rss_mib": rss,
        "polls": made,
        "latencies": latencies,
        "exit": code,
    }


def bench_bare(polls: int, interval: float, warmup: int) -> dict[str, Any]:
    imds = Imds()
    url = f"{imds.url}/metadata/scheduledevents?api-version=2020-07-01"
    process = subprocess.Popen(
        [sys.executable, "-c", BARE_LOOP, url, str(interval), str(polls + warmup)], stdout=subprocess.DEVNULL
    )
    wait_requests(imds, warmup, 60)
    cpu0, t0, req0 = cpu_seconds(process.pid), time.monotonic(), imds.requests
    wait_requests(imds, warmup + polls, polls * interval * 3 + 60)
    cpu1, t1, req1 = cpu_seconds(process.pid), time.monotonic(), imds.requests
    rss = peak_rss_mib(process.pid)
    process.wait(timeout=30)
    made = req1 - req0
    return {"cpu_per_poll_ms": (cpu1 - cpu0) / made * 1000, "cpu_share": (cpu1 - cpu0) / (t1 - t0), "rss_mib": rss}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=int, default=300, help="polls measured per run (default 300)")
    parser.add_argument("--interval", type=float, default=1.0, help="poll interval in seconds (default 1)")
    parser.add_argument("--warmup", type=int, default=5, help="polls before measuring (default 5)")
    args = parser.parse_args(argv)

    # Run both at the same time: same machine load for the collector and its baseline.
    bare: dict[str, Any] = {}
    baseline = threading.Thread(target=lambda: bare.update(bench_bare(args.polls, args.interval, args.warmup)))
    baseline.start()
    collector = bench_collector(args.polls, args.interval, args.warmup)
    baseline.join()

    lat = collector["latencies"]
    print(f"collector benchmark: {collector['polls']} polls at {args.interval:g} s, {len(lat)} document changes")
    print()
    print(f"{'':32}{'collector':>12}{'bare GET loop':>15}{'ratio':>9}")
    rows = [
        ("CPU per poll (ms)", "cpu_per_poll_ms", "{:.2f}"),
        ("CPU share of one core (%)", "cpu_share", "{:.3f}"),
        ("peak RSS (MiB)", "rss_mib", "{:.1f}"),
    ]
    for label, key, fmt in rows:
        scale = 100 if key == "cpu_share" else 1
        c, b = collector[key] * scale, bare[key] * scale
        print(f"{label:32}{fmt.format(c):>12}{fmt.format(b):>15}{c / b if b else float('nan'):>9.2f}")
    print()
    print("detection latency (change -> committed in the outbox), as a multiple of the poll interval:")
    print(
        f"  p50 {percentile(lat, 0.5):.2f}   p99 {percentile(lat, 0.99):.2f}   max {max(lat):.2f}   "
        f"mean {statistics.fmean(lat):.2f}"
    )
    print()
    goal_cpu = collector["cpu_share"] * 100 < 0.5
    goal_rss = collector["rss_mib"] < 64
    print(
        f"goals: CPU < 0.5% of a core: {'met' if goal_cpu else 'MISSED'}; RSS < 64 MiB: "
        f"{'met' if goal_rss else 'MISSED'}; SIGTERM exit status {collector['exit']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
