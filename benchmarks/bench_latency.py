"""End-to-end latency: from a change in the simulated IMDS to the row visible in ClickHouse.

Run: ``.venv/bin/python benchmarks/bench_latency.py [--scenario demo] [--speed 20] [--intervals 1.0,0.2]``

For each poll interval the whole pipeline runs in one process (simulator, one collector thread per VM, outbox,
ingest, embedded ClickHouse). Every stored transition is matched with the simulator's ground truth for the
same (event, VM): ``appeared`` with the moment the event became visible, ``Started`` with its start,
``disappeared`` with its end. Latency = ``ingested_at`` (set by ClickHouse when the row was inserted) minus
that moment, reported as p50 / p99 / max and as multiples of the poll interval (the baseline: a change can
wait up to one interval before any poller sees it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from demo.fleetrun import start
from ingest.output import table
from sevents.logs import setup_logging

SQL = """
SELECT event_id, vm_name, kind, status, ingested_at, transition_id, observed_at
FROM {db}.transitions FINAL
WHERE event_id != ''
"""


def timed(client: Any, database: str, truth: list[dict[str, Any]]) -> list[tuple[str, datetime, datetime, datetime]]:
    """(transition_id, true moment of the change, observed_at, ingested_at) of each stored transition that
    matches the simulator's ground truth for its (event, VM)."""
    moments = {(t["event_id"], t["vm_name"]): t for t in truth}
    out = []
    rows = client.query(SQL.format(db=database)).result_rows
    for event_id, vm_name, kind, status, ingested_at, transition_id, observed_at in rows:
        t = moments.get((event_id, vm_name))
        true_at = None if t is None else true_moment(t, kind, status)
        if true_at is None:
            continue
        out.append((str(transition_id), true_at, _utc(observed_at), _utc(ingested_at)))
    return out


def true_moment(truth: dict[str, Any], kind: str, status: str) -> datetime | None:
    """The simulator's true moment of the change a transition (``kind``, ``status``) of ``truth``'s (event, VM)
    records: visible, started or gone; None for a transition the ground truth has no moment for."""
    if kind == "appeared":
        started = status == "Started" and truth["not_before"] is None
        moment: datetime | None = truth["started_at"] if started else truth["first_visible_at"]
    elif kind == "status_changed" and status == "Started":
        moment = truth["started_at"]
    elif kind == "disappeared":
        moment = truth["ended_at"]
    else:
        moment = None
    return moment


def latencies(client: Any, database: str, truth: list[dict[str, Any]]) -> list[float]:
    """Seconds from each true change to its stored row."""
    return [(stored - true_at).total_seconds() for _, true_at, _, stored in timed(client, database, truth)]


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="demo")
    parser.add_argument("--speed", type=float, default=None)
    parser.add_argument("--intervals", default="1.0,0.2", help="poll intervals in seconds, comma separated")
    parser.add_argument("--batch-max-wait", type=float, default=0.2, help="ingest: max wait of a partial batch")
    args = parser.parse_args(argv)
    setup_logging("error")
    rows = []
    for interval in [float(x) for x in args.intervals.split(",")]:
        workdir = Path(tempfile.mkdtemp(prefix="bench-latency-"))
        began = datetime.now(UTC)
        run = start(
            workdir,
            scenario=args.scenario,
            speed=args.speed,
            poll_interval=interval,
            batch_max_wait=args.batch_max_wait,
        )
        try:
            run.sim.wait_done(600)
            run.finish()
            values = latencies(run.client, run.settings.database, run.sim.truth())
        finally:
            run.close()
        print(
            f"poll {interval:g} s: {len(values)} transitions in {(datetime.now(UTC) - began).seconds} s",
            file=sys.stderr,
        )
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        rows.append(
            [
                f"{interval:g}",
                str(len(values)),
                f"{p50:.3f}",
                f"{p99:.3f}",
                f"{max(values):.3f}",
                f"{p50 / interval:.2f}",
                f"{p99 / interval:.2f}",
            ]
        )
    print(
        f"End-to-end latency, simulator change -> row in ClickHouse (scenario {args.scenario}, "
        f"ingest batch_max_wait {args.batch_max_wait:g} s)"
    )
    print(table(["poll s", "rows", "p50 s", "p99 s", "max s", "p50 / poll", "p99 / poll"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
