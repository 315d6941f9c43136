"""Ingest throughput: synthetic transitions through decode, validate and insert, against a raw client.insert.

Run: ``.venv/bin/python benchmarks/bench_ingest.py [--count 1000000] [--batch 10000]``

Per batch, untimed: the records are encoded to wire payloads, and the baseline's rows are built from those
same payload bytes (parsed by orjson, timestamps made datetimes, the position appended), so both sides
insert equal rows laid out in memory as a real ingest has them: fresh objects for every row.

Timed, into two databases with the same schema:
- raw: one bare ``client.insert`` of the pre-built row tuples (row-oriented Native insert, no settings);
- ingest: ``Handler`` on the payloads: decode and validate every record (``ingest.decode``), build the rows,
  insert them the same row-oriented way with the deduplication token and settings ``Writer`` always uses.
Both take the row-oriented insert: a column-oriented one was not cheaper here once the transpose is counted.

The two alternate which goes first from batch to batch so that machine load and cache state hit both
alike, and the garbage collector is run (untimed) before each timed call so that neither pays for garbage
the other or the set-up left. Also shown, for reference: the raw insert of rows built straight from the
generator's dicts, whose strings are shared between rows (faster than any ingest's rows can be).
Goal (issue 4): ingest / raw >= 0.5.
"""

from __future__ import annotations

import argparse
import gc
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
from ingest.clickhouse import connect
from ingest.handler import Handler
from ingest.migrate import Target, migrate
from ingest.output import table
from ingest.rows import TRANSITION_COLUMNS
from ingest.source import Delivery
from ingest.writer import Writer
from sevents.records import encode, parse_time

TIMES = {"observed_at", "prev_observed_at", "not_before"}


def column_tuple(record: dict[str, Any], position: str) -> tuple[Any, ...]:
    """The baseline's pre-built row: Python values in column order, timestamps as datetimes."""
    values = {**record, "source_position": position}
    return tuple(
        parse_time(values[c]) if c in TIMES and values[c] is not None else values[c] for c in TRANSITION_COLUMNS
    )


def timed(call: Callable[[], object]) -> float:
    gc.collect()
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="transitions in all (default 1,000,000)")
    parser.add_argument("--batch", type=int, default=10_000, help="transitions per delivery (default 10,000)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    client = connect(f"chdb://{workdir}")
    databases = ("bench_ours", "bench_raw", "bench_shared")
    try:
        for db in databases:
            migrate(client, Target(database=db))
        handler = Handler(Writer(client, "bench_ours"), source="bench", stop=threading.Event())
        columns = list(TRANSITION_COLUMNS)
        seconds = {db: 0.0 for db in databases}
        records = synthetic.stream(args.count)
        done = 0
        while done < args.count:
            chunk = [next(records) for _ in range(min(args.batch, args.count - done))]
            positions = [f"bench#{done + i}" for i in range(len(chunk))]
            payloads = [Delivery(encode(r), p) for r, p in zip(chunk, positions, strict=True)]
            rows = [column_tuple(orjson.loads(d.payload), d.position) for d in payloads]
            shared = [column_tuple(r, p) for r, p in zip(chunk, positions, strict=True)]
            calls: dict[str, Callable[[], object]] = {
                "bench_raw": partial(client.insert, "bench_raw.transitions", rows, column_names=columns),
                "bench_ours": partial(handler, payloads),
                "bench_shared": partial(client.insert, "bench_shared.transitions", shared, column_names=columns),
            }
            order = list(calls) if (done // args.batch) % 2 == 0 else list(reversed(calls))
            for db in order:
                seconds[db] += timed(calls[db])
            done += len(chunk)
            print(f"\r{done:>9,} / {args.count:,}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        for db in databases:
            stored = client.query(f"SELECT count() FROM {db}.transitions").result_rows[0][0]
            assert stored == args.count, (db, stored)
    finally:
        client.close()
        shutil.rmtree(workdir, ignore_errors=True)
    raw, ours, shr = seconds["bench_raw"], seconds["bench_ours"], seconds["bench_shared"]
    n = args.count
    print(f"Ingest throughput: {n:,} transitions in batches of {args.batch:,} (embedded ClickHouse)")
    print(
        table(
            ["path", "seconds", "rows/s", "ratio to raw"],
            [
                ["raw client.insert of pre-built rows", f"{raw:.1f}", f"{n / raw:,.0f}", "1.00"],
                ["ingest: decode + validate + insert", f"{ours:.1f}", f"{n / ours:,.0f}", f"{raw / ours:.2f}"],
                ["(raw insert, strings shared by rows)", f"{shr:.1f}", f"{n / shr:,.0f}", f"{raw / shr:.2f}"],
            ],
        )
    )
    verdict = "met" if raw / ours >= 0.5 else "NOT met"
    print(f"goal: ingest / raw >= 0.5 -> {verdict} ({raw / ours:.3f}; {shr / ours:.3f} against the shared-string rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
