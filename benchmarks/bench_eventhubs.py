"""End-to-end latency through Event Hubs beside the embedded path, from simulator change to ClickHouse row.

Run: ``.venv/bin/python benchmarks/bench_eventhubs.py [--scenario rolling-wave] [--speed 30] [--poll 0.5]``
(needs Azurite: ``bash scripts/setup.sh --test``).

Both paths run in this process, one after the other, on the same scenario, poll interval and embedded
ClickHouse (two databases):

- embedded: collectors -> outboxes -> ``sevents-ingest``'s outbox source -> ClickHouse (``demo.fleetrun``);
- Event Hubs: collectors -> ``EventHubsSink`` -> the local AMQP Event Hubs endpoint -> two ``EventHubsSource``
  workers with Azurite checkpoints -> ClickHouse (``tests/eventhubs/eh_fleet.py``).

Latency per transition = ``ingested_at`` minus the simulator's true moment of the change (as in
bench_latency.py). The local endpoint has no network in between: the figures show what the transport's
batching and polling add, not Azure's network latency.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_latency import latencies, percentile  # noqa: E402

from demo.fleetrun import start  # noqa: E402
from ingest.clickhouse import connect  # noqa: E402
from ingest.migrate import Target, migrate  # noqa: E402
from ingest.output import table  # noqa: E402
from sevents.logs import setup_logging  # noqa: E402
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint  # noqa: E402
from tests.eventhubs.azurite import CheckpointStores, running_azurite  # noqa: E402
from tests.eventhubs.eh_fleet import start_fleet  # noqa: E402
from tests.eventhubs.helpers import wait_for  # noqa: E402


def embedded(workdir: Path, ch: str, args: argparse.Namespace) -> list[float]:
    run = start(
        workdir / "embedded",
        scenario=args.scenario,
        speed=args.speed,
        poll_interval=args.poll,
        batch_max_wait=0.2,
        clickhouse=ch,
        database="bench_embedded",
    )
    try:
        run.sim.wait_done(600)
        run.finish()
        return latencies(run.client, "bench_embedded", run.sim.truth())
    finally:
        run.close()


def through_eventhubs(workdir: Path, client: Any, args: argparse.Namespace) -> list[float]:
    migrate(client, Target(database="bench_eventhubs"))
    with running_azurite(workdir / "azurite") as azurite, EventHubsEndpoint() as endpoint:
        stores = CheckpointStores.create(azurite, "bench")
        fleet = start_fleet(
            workdir / "eventhubs",
            endpoint,
            client,
            "bench_eventhubs",
            stores,
            scenario=args.scenario,
            speed=args.speed,
            poll_interval=args.poll,
            workers=args.workers,
        )
        try:
            fleet.sim.wait_done(600)
            fleet.stop_collectors(settle_s=2 * args.poll + 0.5)
            wait_for(lambda: fleet.deliver.record_ids >= set(fleet.hub_records()), 120)
            fleet.stop_workers()
            return latencies(client, "bench_eventhubs", fleet.sim.truth())
        finally:
            fleet.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenario", default="rolling-wave")
    parser.add_argument("--speed", type=float, default=30.0)
    parser.add_argument("--poll", type=float, default=0.5, help="collector poll interval, seconds")
    parser.add_argument("--workers", type=int, default=2, help="Event Hubs ingest workers")
    args = parser.parse_args(argv)
    setup_logging("error")
    workdir = Path(tempfile.mkdtemp(prefix="bench-eventhubs-"))
    ch = f"chdb://{workdir / 'clickhouse'}"
    client = connect(ch)
    try:
        base = embedded(workdir, ch, args)
        hubs = through_eventhubs(workdir, client, args)
    finally:
        client.close()
    rows = []
    for name, values in (("embedded (outbox)", base), ("event hubs (local AMQP)", hubs)):
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        rows.append([name, str(len(values)), f"{p50:.3f}", f"{p99:.3f}", f"{max(values):.3f}"])
    ratio_50 = statistics.median(hubs) / statistics.median(base)
    ratio_99 = percentile(hubs, 0.99) / percentile(base, 0.99)
    print(
        f"End-to-end latency, simulator change -> row in ClickHouse (scenario {args.scenario}, "
        f"speed {args.speed:g}, poll {args.poll:g} s, {args.workers} Event Hubs workers)"
    )
    print(table(["path", "rows", "p50 s", "p99 s", "max s"], rows))
    print(f"event hubs / embedded: p50 x{ratio_50:.2f}, p99 x{ratio_99:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
