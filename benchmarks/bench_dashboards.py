"""Dashboard query cost: every panel and alert query (All selected) against a full scan of the transitions.

Run: ``.venv/bin/python benchmarks/bench_dashboards.py [--vms 2000] [--events 30]``

Seeds embedded ClickHouse through the real ingest handler with ``--events`` maintenance events, each a full
lifecycle (Scheduled, Started, gone) on every one of ``--vms`` VMs, plus heartbeats. Then, in alternating
rounds so machine load hits both alike, times each panel query as Grafana would run it and the baseline
``SELECT count() FROM transitions FINAL``; prints each query's median time as a ratio to the baseline's.
Goal: no panel above 10x (the views aggregate transitions FINAL, so about 1-5x is expected).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

from dashboards.generate import outputs
from dashboards.macros import QueryContext, expand
from dashboards.templating import ALL, Selection, apply
from demo import synthetic
from ingest.clickhouse import connect
from ingest.handler import Handler
from ingest.migrate import Target, migrate
from ingest.source import Delivery
from ingest.writer import Writer
from sevents.records import encode

BASELINE = "SELECT count() FROM sevents.transitions FINAL"


def grafana_queries() -> dict[str, tuple[str, bool]]:
    """Every panel and alert query of the generated files: name -> (SQL, uses dashboard variables)."""
    found: dict[str, tuple[str, bool]] = {}
    for text in outputs().values():
        model = json.loads(text)
        for panel in model.get("panels", []):
            for target in panel.get("targets", []):
                found[f"{model['uid']}: {panel['title']}"] = (target["rawSql"], True)
        for group in model.get("groups", []):
            for rule in group["rules"]:
                found[f"alert: {rule['title']}"] = (rule["data"][0]["model"]["rawSql"], False)
    return found


def seed(client: object, vms: int, events: int) -> int:
    handler = Handler(Writer(client), source="bench", stop=threading.Event())
    batch: list[Delivery] = []
    total = 0
    for e in range(events):
        start = synthetic.BASE_TIME + timedelta(hours=e)
        for v in range(vms):
            for record in synthetic.lifecycle(f"E-{e:04d}", v, start=start, seq=3 * e + 1):
                batch.append(Delivery(encode(record), f"{v}:{e}"))
            batch.append(
                Delivery(encode(synthetic.heartbeat(vm_index=v, observed_at=start, seq=3 * e + 4)), f"h{v}:{e}")
            )
            if len(batch) >= 10_000:
                handler(batch)
                total += len(batch)
                batch = []
    if batch:
        handler(batch)
        total += len(batch)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=2000)
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-dashboards-"))
    client = connect(f"chdb://{workdir}")
    try:
        migrate(client, Target())
        began = time.perf_counter()
        rows = seed(client, args.vms, args.events)
        print(f"seeded {rows} records in {time.perf_counter() - began:.1f} s")
        vm_names = tuple(synthetic.vm(i)["vm_name"] for i in range(args.vms))
        variables = {
            name: Selection(values=(ALL,), options=values)
            for name, values in {
                "subscription": (synthetic.vm(0)["subscription_id"],),
                "location": ("westeurope",),
                "scale_set": ("",),
                "fault_domain": ("0", "1", "2"),
                "vm": vm_names,
                "event_type": ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"),
            }.items()
        }
        variables["event_id"] = Selection(values=("",), multi=False)
        ctx = QueryContext(
            synthetic.BASE_TIME - timedelta(days=1), synthetic.BASE_TIME + timedelta(days=7), timedelta(minutes=10)
        )
        queries = {
            name: expand(apply(sql, variables) if templated else sql, ctx)
            for name, (sql, templated) in grafana_queries().items()
        }
        timings: dict[str, list[float]] = {name: [] for name in queries}
        baseline: list[float] = []
        for _ in range(args.rounds):
            for name, sql in queries.items():
                t0 = time.perf_counter()
                client.query(BASELINE)
                baseline.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                client.query(sql)
                timings[name].append(time.perf_counter() - t0)
        base = statistics.median(baseline)
        print(f"baseline {BASELINE}: {base * 1000:.1f} ms (median)")
        worst = 0.0
        for name, values in sorted(timings.items(), key=lambda kv: -statistics.median(kv[1])):
            ratio = statistics.median(values) / base
            worst = max(worst, ratio)
            print(f"{ratio:6.2f}x  {statistics.median(values) * 1000:8.1f} ms  {name}")
        print(f"worst ratio {worst:.2f}x (goal <= 10x)")
        return 0 if worst <= 10 else 1
    finally:
        client.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
