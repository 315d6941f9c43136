"""Ingest throughput: synthetic transitions through decode, validate and insert, against a raw client.insert.

Run: ``.venv/bin/python benchmarks/bench_ingest.py [--count 1000000] [--batch 10000] [--json FILE]``

Per round of ``--round`` batches, untimed: the records are encoded to wire payloads, and the baseline's rows
are built from those same payload bytes (parsed by orjson, timestamps made datetimes, the position appended),
so both sides insert equal rows laid out in memory as a real ingest has them: fresh objects for every row.

Timed, into databases with the same schema (materialized views included):
- raw: one bare ``client.insert`` per batch of the pre-built row tuples (row-oriented Native insert, no
  settings);
- ingest: the ``Handler`` on the payloads, batch after batch as a source calls it: every record decoded and
  validated (``ingest.decode``), the rows handed over as Arrow columns (``ingest.columns``) with the
  deduplication token and settings ``Writer`` always uses.
The writer puts off computing the events' lifecycles as the ingest does (``ingest.lifecycle_refresher``: while
batches keep coming, at most one refresh a second and at most 2% of the time; the last one, when it stops, is
timed too) and runs as after its verify window (``verify_window``: a restarted ingest looks every insert up for
its first two minutes, which costs about a third of an insert); the steady state is what a replay runs at.

The paths take turns going first from round to round so that machine load and cache state hit all alike, and
the garbage collector is run (untimed) before each timed call. Goal (issue 15): ingest / raw >= 1.0.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from demo import synthetic
from ingest import lifecycle_refresher
from ingest.clickhouse import as_command, connect
from ingest.handler import Handler
from ingest.migrate import Target, migrate
from ingest.output import table
from ingest.rows import COLUMNS_OF
from ingest.source import Delivery
from ingest.writer import Writer
from sevents.records import encode, parse_time

TRANSITION_COLUMNS = COLUMNS_OF["transitions"]

TIMES = {"observed_at", "prev_observed_at", "not_before"}


def column_tuple(record: dict[str, Any], position: str) -> tuple[Any, ...]:
    """The baseline's pre-built row: Python values in column order, timestamps as datetimes."""
    values = {**record, "source_position": position}
    return tuple(
        parse_time(values[c]) if c in TIMES and values[c] is not None else values[c] for c in TRANSITION_COLUMNS
    )


def timed(call: Callable[[], object]) -> tuple[float, float]:
    """Wall seconds and the process's CPU seconds (Python and the embedded ClickHouse's threads) of one call."""
    gc.collect()
    started, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - started, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="transitions in all (default 1,000,000)")
    parser.add_argument("--batch", type=int, default=10_000, help="transitions per delivery (default 10,000)")
    parser.add_argument("--round", type=int, default=5, help="batches per turn of each path (default 5)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    client = connect(f"chdb://{workdir}")
    databases = ("bench_raw", "bench_ours")
    load_before = os.getloadavg()
    try:
        for db in databases:
            migrate(client, Target(database=db))
        stop = threading.Event()
        writer = Writer(client, "bench_ours", verify_window=0, refresh_every=lifecycle_refresher.DEFAULT_EVERY)
        ours = Handler(writer, source="bench", stop=stop)
        columns = list(TRANSITION_COLUMNS)
        seconds = dict.fromkeys(databases, 0.0)
        cpu_seconds = dict.fromkeys(databases, 0.0)
        records = synthetic.stream(args.count)
        done = turn = 0
        while done < args.count:
            batches: list[list[Delivery]] = []
            rows: list[list[tuple[Any, ...]]] = []
            for _ in range(args.round):
                chunk = [next(records) for _ in range(min(args.batch, args.count - done))]
                if not chunk:
                    break
                payloads = [Delivery(encode(r), f"bench#{done + i}") for i, r in enumerate(chunk)]
                batches.append(payloads)
                rows.append([column_tuple(orjson.loads(d.payload), d.position) for d in payloads])
                done += len(chunk)
            calls: dict[str, Callable[[], object]] = {
                "bench_raw": partial(_raw, client, "bench_raw.transitions", rows, columns),
                "bench_ours": partial(_ingest, ours, batches),
            }
            order = list(calls) if turn % 2 == 0 else list(reversed(calls))
            gc.collect()
            gc.freeze()  # the round's inputs are the benchmark's, not the ingest's: keep them out of its GC passes
            for db in order:
                wall, cpu = timed(calls[db])
                seconds[db] += wall
                cpu_seconds[db] += cpu
            gc.unfreeze()
            turn += 1
            print(f"\r{done:>9,} / {args.count:,}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        wall, cpu = timed(ours.close)  # the lifecycles the ingest put off, as it computes them when it stops
        seconds["bench_ours"] += wall
        cpu_seconds["bench_ours"] += cpu
        for db in databases:
            stored = client.query(f"SELECT count() FROM {db}.transitions").result_rows[0][0]
            assert stored == args.count, (db, stored)
    finally:
        client.close()
        shutil.rmtree(workdir, ignore_errors=True)
    raw, ovl = seconds["bench_raw"], seconds["bench_ours"]
    raw_cpu, ovl_cpu = cpu_seconds["bench_raw"], cpu_seconds["bench_ours"]
    n = args.count
    print(f"Ingest throughput: {n:,} transitions in batches of {args.batch:,} (embedded ClickHouse)")
    print(
        table(
            ["path", "seconds", "rows/s", "ratio to raw", "CPU seconds", "CPU ratio"],
            [
                [
                    "raw client.insert of pre-built rows",
                    f"{raw:.1f}",
                    f"{n / raw:,.0f}",
                    "1.00",
                    f"{raw_cpu:.1f}",
                    "1.00",
                ],
                [
                    "ingest: decode + validate + insert",
                    f"{ovl:.1f}",
                    f"{n / ovl:,.0f}",
                    f"{raw / ovl:.2f}",
                    f"{ovl_cpu:.1f}",
                    f"{raw_cpu / ovl_cpu:.2f}",
                ],
            ],
        )
    )
    verdict = "met" if raw / ovl >= 1.0 else "NOT met"
    print(f"goal: ingest / raw >= 1.0 -> {verdict} ({raw / ovl:.3f})")
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    if args.json is not None:
        figures = {
            "ratio_to_raw_insert": round(raw / ovl, 3),
            "count": n,
            "batch": args.batch,
            "raw_s": round(raw, 2),
            "ingest_s": round(ovl, 2),
            "cpu_ratio_to_raw_insert": round(raw_cpu / ovl_cpu, 3),
            "raw_cpu_s": round(raw_cpu, 2),
            "ingest_cpu_s": round(ovl_cpu, 2),
            "cpus": os.cpu_count(),
            "load_average_before": round(load_before[0], 2),
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


def _raw(client: Any, name: str, rows: list[list[tuple[Any, ...]]], columns: list[str]) -> None:
    for batch in rows:
        client.insert(name, batch, column_names=columns)


def _ingest(handler: Handler, batches: list[list[Delivery]]) -> None:
    for batch in batches:
        handler(batch)


if __name__ == "__main__":
    sys.exit(as_command(main)())  # the embedded engine closed before the interpreter exits
