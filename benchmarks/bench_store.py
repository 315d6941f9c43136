"""What storing one small batch costs, and where it goes: the ingest's Handler against a bare insert of the same
rows, and beside it the Handler with each materialized view of the record tables detached in turn.

Run: ``.venv/bin/python benchmarks/bench_store.py [--batches 100] [--transitions 12] [--heartbeats 0] [--json FILE]``

An Event Hubs partition hands the ingest what arrived since its last batch: at a real-time pace, 10 to 30 records.
Such a batch costs the embedded engine about the same whatever its size, and one engine stores the batches of
every partition in turn, so this fixed cost is what a transition waits behind (BENCHMARKS.md, issue 32).

In one embedded engine, ``--batches`` batches per step, the two paths taking turns batch by batch:
- raw: the batch's transitions, as the Arrow columns the ingest decoded them into, by ``client.insert_arrow``
  into a table of the same columns, sorting key and partitions, with no view, no skip index and no
  deduplication window: the floor of any insert of these rows;
- ingest: the ``Handler`` on the payloads (decode, the key look-up, the inserts with their views and
  deduplication tokens), into a database migrated as the ingest's, its lifecycle refresh put off (measured
  apart by ``bench_ingest.py``) and past its verify window.
The first step has every view. Then, for each view of ``transitions`` (and of ``heartbeats``, with
``--heartbeats``), a step adds a third path to the turns: the Handler while that view alone is detached. Its
difference from the ingest path of the same step is what the view costs, both measured side by side (the engine's
merges and the tables' growth hit both alike). The key look-up is also timed alone, on batches never stored (the
common case). Wall and CPU are per batch (CPU: the whole process, the engine's background merges included; the
garbage collector run before each call, untimed), medians of the step's batches.
No goal: the figures say where the time goes. This machine's speed wanders from minute to minute (the raw insert
of one run took 12 to 26 ms from step to step), so read each view's cost as its ratio to the raw insert of the
same step.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]  # run as a script: its sibling module by its package's name

from benchmarks.bench_ingest import timed  # noqa: E402
from demo import synthetic  # noqa: E402
from ingest.clickhouse import as_command, connect  # noqa: E402
from ingest.handler import DEFAULT_LIMITS, Handler, prepare  # noqa: E402
from ingest.migrate import Target, migrate  # noqa: E402
from ingest.output import table  # noqa: E402
from ingest.source import Delivery  # noqa: E402
from ingest.writer import Writer  # noqa: E402
from sevents.records import encode  # noqa: E402

OURS, RAW = "store_ours", "store_raw"
WARM_UP = 5  # batches stored before each step is timed: the first inserts of a table cost more
RECORD_TABLES = ("transitions", "heartbeats")


def batches(transitions: int, heartbeats: int) -> Iterator[list[Delivery]]:
    """Batches of distinct records: ``transitions`` transitions and ``heartbeats`` heartbeats each."""
    records = synthetic.stream(10**9)
    position = 0
    for index in range(10**9):
        made = [next(records) for _ in range(transitions)]
        made += [
            synthetic.heartbeat(vm_index=vm, seq=index + 1, observed_at=synthetic.BASE_TIME + timedelta(seconds=index))
            for vm in range(heartbeats)
        ]
        yield [Delivery(encode(record), f"bench#{position + i}") for i, record in enumerate(made)]
        position += len(made)


def views_of(client: Any, database: str, tables: tuple[str, ...]) -> list[tuple[str, str]]:
    """(table, view) for each materialized view that reads one of ``tables``, in the order ClickHouse lists them."""
    rows = client.query(
        "SELECT name, dependencies_table FROM system.tables "
        "WHERE database = {db:String} AND name IN {tables:Array(String)}",
        parameters={"db": database, "tables": list(tables)},
    ).result_rows
    found = dict(rows)
    return [(name, view) for name in tables for view in found.get(name, [])]


def bare_copy(client: Any, source: str, target: str, name: str) -> None:
    """``target.name``: ``source.name``'s columns, sorting key and partitions in a plain MergeTree, no skip index."""
    sorting, partition = client.query(
        "SELECT sorting_key, partition_key FROM system.tables WHERE database = {db:String} AND name = {name:String}",
        parameters={"db": source, "name": name},
    ).result_rows[0]
    client.command(f"CREATE DATABASE IF NOT EXISTS {target}")
    client.command(
        f"CREATE TABLE {target}.{name} AS {source}.{name} "
        f"ENGINE = MergeTree PARTITION BY {partition} ORDER BY ({sorting})"
    )
    indexes = client.query(
        "SELECT name FROM system.data_skipping_indices WHERE database = {db:String} AND table = {name:String}",
        parameters={"db": target, "name": name},
    ).result_rows
    for (index,) in indexes:
        client.command(f"ALTER TABLE {target}.{name} DROP INDEX {index}")


def step(
    client: Any, handler: Handler, made: Iterator[list[Delivery]], count: int, view: str | None = None
) -> dict[str, float]:
    """``count`` rounds of the paths in turns, each on batches of its own; medians per batch (ms). With ``view``, a
    third path: the Handler while that view is detached (attached again before the next path runs)."""
    spent: dict[str, list[float]] = {}
    for index in range(WARM_UP + count):
        deliveries = next(made)
        decoded = prepare(deliveries, source="bench", limits=DEFAULT_LIMITS, received_at=synthetic.BASE_TIME)[0]
        paths: dict[str, Callable[[], object]] = {
            "raw": lambda rows=decoded.columns["transitions"]: client.insert_arrow(f"{RAW}.transitions", rows),
            "ingest": lambda deliveries=deliveries: handler(deliveries),
        }
        if view is not None:
            apart = next(made)  # its own records: the ingest path's are stored by then
            paths["without"] = lambda apart=apart: handler(apart)
        names = list(paths)
        for name in names[index % len(names) :] + names[: index % len(names)]:
            if name == "without":
                client.command(f"DETACH TABLE {OURS}.{view}")
            try:
                wall, cpu = timed(paths[name])
            finally:
                if name == "without":
                    client.command(f"ATTACH TABLE {OURS}.{view}")
            if index >= WARM_UP:
                spent.setdefault(f"{name}_ms", []).append(wall * 1000)
                spent.setdefault(f"{name}_cpu_ms", []).append(cpu * 1000)
    return {key: round(statistics.median(values), 2) for key, values in spent.items()}


def lookup_alone(handler: Handler, made: Iterator[list[Delivery]], count: int) -> float:
    """Median wall ms of the key look-up of batches never stored (what the Handler does before it inserts)."""
    spent = []
    for _ in range(count):
        batch = prepare(next(made), source="bench", limits=DEFAULT_LIMITS, received_at=synthetic.BASE_TIME)[0]
        spent.append(timed(lambda batch=batch: handler.writer.stored_versions(batch))[0] * 1000)
    return round(statistics.median(spent), 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100, help="batches timed per step (default 100)")
    parser.add_argument("--transitions", type=int, default=12, help="transitions per batch (default 12)")
    parser.add_argument("--heartbeats", type=int, default=0, help="heartbeats per batch as well (default 0)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.batches < 1 or args.transitions < 1 or args.heartbeats < 0:
        parser.error("--batches and --transitions must be at least 1, --heartbeats at least 0")
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
    workdir = Path(tempfile.mkdtemp(prefix="bench-store-"))
    client = connect(f"chdb://{workdir}")
    load_before = os.getloadavg()[0]
    try:
        migrate(client, Target(database=OURS))
        bare_copy(client, OURS, RAW, "transitions")
        writer = Writer(client, OURS, verify_window=0, refresh_every=3600.0)
        handler = Handler(writer, source="bench", stop=threading.Event())
        made = batches(args.transitions, args.heartbeats)
        tables = RECORD_TABLES if args.heartbeats else RECORD_TABLES[:1]
        views = views_of(client, OURS, tables)
        steps = [{"step": "every view", **step(client, handler, made, args.batches)}]
        lookup_ms = lookup_alone(handler, made, args.batches)
        for number, (source, view) in enumerate(views, 1):
            print(f"step {number} of {len(views)}: with and without {view}", file=sys.stderr, flush=True)
            steps.append(
                {"step": f"{view} ({source})", "view": view, **step(client, handler, made, args.batches, view)}
            )
        per_step = (WARM_UP + args.batches) * args.transitions
        stored = {
            "ingest": client.query(f"SELECT count() FROM {OURS}.transitions").result_rows[0][0],
            "raw": client.query(f"SELECT count() FROM {RAW}.transitions").result_rows[0][0],
        }
        expected = {"ingest": (1 + 2 * len(views)) * per_step, "raw": (1 + len(views)) * per_step}
        if stored != expected or handler.dead_letters:
            raise SystemExit(f"stored {stored}, dead letters {handler.dead_letters}: expected {expected}, none")
    finally:
        client.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"A batch of {args.transitions} transitions and {args.heartbeats} heartbeats, stored by the ingest's Handler "
        f"and by a bare insert_arrow of its transitions, {args.batches} batches a step in turns (embedded ClickHouse)"
    )
    every = steps[0]
    print(
        f"every view: raw {every['raw_ms']:.1f} ms, ingest {every['ingest_ms']:.1f} ms "
        f"({every['ingest_cpu_ms']:.1f} ms CPU), ingest / raw {every['ingest_ms'] / every['raw_ms']:.2f}"
    )
    rows = [
        [
            s["step"],
            f"{s['raw_ms']:.1f}",
            f"{s['ingest_ms']:.1f}",
            f"{s['without_ms']:.1f}",
            f"{s['ingest_ms'] - s['without_ms']:+.1f}",
            f"{s['ingest_cpu_ms'] - s['without_cpu_ms']:+.1f}",
            f"{(s['ingest_ms'] - s['without_ms']) / s['raw_ms']:+.2f}",
        ]
        for s in steps[1:]
    ]
    headers = [
        "view (table it reads)",
        "raw ms",
        "ingest ms",
        "without it ms",
        "its cost, ms",
        "its CPU, ms",
        "its cost / raw",
    ]
    print(table(headers, rows))
    print(f"key look-up alone (a batch never stored): {lookup_ms:.1f} ms")
    print(
        f"stored {stored['ingest']:,} transitions by the Handler and {stored['raw']:,} raw, as sent, no dead letter; "
        f"load average before {load_before:.2f}"
    )
    if args.json is not None:
        figures = {
            "batch": {"transitions": args.transitions, "heartbeats": args.heartbeats},
            "batches_per_step": args.batches,
            "warm_up_batches": WARM_UP,
            "views": [view for _, view in views],
            "steps": steps,
            "lookup_ms": lookup_ms,
            "stored": stored,
            "load_average_before": round(load_before, 2),
            "cpus": os.cpu_count(),
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(as_command(main)())  # the embedded engine closed before the interpreter exits
