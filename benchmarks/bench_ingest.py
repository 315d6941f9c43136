"""Ingest throughput: synthetic transitions through decode, validate and insert, against a raw client.insert.

Run: ``.venv/bin/python benchmarks/bench_ingest.py [--count 1000000] [--batch 10000]``

For every batch the same records are (untimed) built twice: as wire payloads for the ingest handler and as
ready column tuples for the baseline. Timed: ``Handler`` (decode, validate, rows, insert with dedup token)
into one database, and a bare ``client.insert`` of the tuples into another with the same schema. Batches
alternate between the two so that machine load hits both alike. Goal: ingest / raw >= 0.5.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ingest import synthetic
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    client = connect(f"chdb://{workdir}")
    try:
        for db in ("bench_ours", "bench_raw"):
            migrate(client, Target(database=db))
        handler = Handler(Writer(client, "bench_ours"), source="bench", stop=threading.Event())
        columns = list(TRANSITION_COLUMNS)
        ours = raw = 0.0
        records = synthetic.stream(args.count)
        done = 0
        while done < args.count:
            chunk = [next(records) for _ in range(min(args.batch, args.count - done))]
            payloads = [Delivery(encode(r), f"bench#{done + i}") for i, r in enumerate(chunk)]
            rows = [column_tuple(r, f"bench#{done + i}") for i, r in enumerate(chunk)]
            started = time.perf_counter()
            client.insert("bench_raw.transitions", rows, column_names=columns)
            raw += time.perf_counter() - started
            started = time.perf_counter()
            handler(payloads)
            ours += time.perf_counter() - started
            done += len(chunk)
            print(f"\r{done:>9,} / {args.count:,}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        stored = client.query("SELECT count() FROM bench_ours.transitions").result_rows[0][0]
        baseline = client.query("SELECT count() FROM bench_raw.transitions").result_rows[0][0]
        assert stored == baseline == args.count, (stored, baseline)
    finally:
        client.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"Ingest throughput: {args.count:,} transitions in batches of {args.batch:,} (embedded ClickHouse)")
    print(
        table(
            ["path", "seconds", "rows/s", "ratio to raw"],
            [
                ["raw client.insert of pre-built rows", f"{raw:.1f}", f"{args.count / raw:,.0f}", "1.00"],
                ["ingest: decode + validate + insert", f"{ours:.1f}", f"{args.count / ours:,.0f}", f"{raw / ours:.2f}"],
            ],
        )
    )
    print(f"goal: ratio >= 0.5 -> {'met' if raw / ours >= 0.5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
