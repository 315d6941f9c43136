"""A fleet's maintenance run through the real pipeline once per test package: simulator -> collectors -> ingest."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from collector.outbox import Outbox
from demo.compare import Window, observation_windows
from demo.processes import Downtimes, answers_heard, start_collectors
from ingest.clickhouse import connect
from ingest.handler import Handler
from ingest.migrate import Target, migrate
from ingest.source_outbox import OutboxSource
from ingest.writer import Writer
from simulator import SimServer, load_scenario
from tests.helpers import wait_for

SCENARIO = Path(__file__).parent / "fixtures" / "dash-scenario.toml"
POLL_S = 0.2
PENDING = ("pending-redeploy", "pending-preempt")  # scenario events still Scheduled at the end, on purpose
# One record no ingest can load (unknown schema version), written to a real outbox: the dead-letter path.
POISON = {"record_type": "transition", "schema_version": 999, "vm_id": "poison"}


@dataclass(frozen=True)
class Seeded:
    """Embedded ClickHouse holding the scenario's records, the simulator's ground truth and the time span."""

    client: Any
    target: str
    truth: list[dict[str, Any]]
    started: datetime
    finished: datetime
    vm_names: list[str]
    groups: dict[str, str]  # VM name -> the simulator's availability set or scale set
    served: dict[str, list[datetime]]  # VM name -> when the simulator answered its collector
    real_down_s: dict[tuple[str, str], float]  # (EventId, VM name) -> how long its collector was really stopped
    outboxes: Path  # an untouched copy of every collector's state dir (the ingest empties the originals)

    def windows(self, rows: list[dict[str, Any]] | None = None) -> dict[tuple[str, str], Window]:
        """(event_id, field) -> where an observed value can fall, given when the collectors polled: from the
        answer before the first one at or after the truth to the answer after that one (``rows``: one VM's)."""
        return observation_windows(self.truth if rows is None else rows, self.served)

    def fd_label(self, row: dict[str, Any]) -> str:
        """The truth row's fault domain inside its set, as the dashboards label it: ``web / FD 1``."""
        return f"{self.groups[row['vm_name']]} / FD {row['fault_domain']}"

    def events(self) -> dict[str, dict[str, Any]]:
        """Ground truth per EventId (the first row of each; event-level fields are the same on every row)."""
        out: dict[str, dict[str, Any]] = {}
        for row in self.truth:
            out.setdefault(row["event_id"], row)
        return out


def _run_fleet(state: Path) -> dict[str, Any]:
    """Collector processes poll the simulated fleet; the VMs' real downtime is done to them (demo.processes)."""
    started = datetime.now(UTC)
    stop = threading.Event()
    sim = SimServer(load_scenario(SCENARIO))
    processes = start_collectors(sim, state, poll_interval=POLL_S, heartbeat_interval=1.0)
    try:
        sim.start()
        downtimes = Downtimes(sim, {p.vm: p for p in processes})
        follower = threading.Thread(target=downtimes.run, args=(stop,), name="downtimes", daemon=True)
        follower.start()
        _wait_settled(sim, timeout=90)
        settled_at = datetime.now(UTC)
        # every collector sees the last disappearance: two answers after it, the first one's poll then committed
        wait_for(
            lambda: all(len([t for t in sim.served(n) if t > settled_at]) >= 2 for n in sim.vm_names),
            30,
            what="two polls of every VM after the scenario settled",
        )
        stop.set()
        follower.join(15)
        downtimes.release()
        truth = sim.truth()
        names = sim.vm_names
        groups = {vm.name: vm.group for vm in sim.engine.vms.values()}
        down = {(d.event_id, d.vm_name): d.down_s for d in sim.downtime()}
        served = answers_heard({name: sim.served(name) for name in names}, downtimes.applied)
        real_down_s = {
            (a.span.event_id, a.span.vm_name): (a.up_at - a.down_at).total_seconds()
            for a in downtimes.applied
            if a.up_at is not None
        }
    finally:
        stop.set()
        for proc in processes:
            proc.stop()
        sim.stop()
    assert len(down) == 5, down  # the scenario's downtime really happened to the collectors
    assert len(real_down_s) == 5, real_down_s
    return {
        "truth": truth,
        "started": started,
        "finished": datetime.now(UTC),
        "vm_names": names,
        "groups": groups,
        "served": served,
        "real_down_s": real_down_s,
    }


def _wait_settled(sim: SimServer, timeout: float) -> None:
    """Until every scenario event but the deliberately pending ones has ended."""

    def settled() -> bool:
        truth = sim.truth()
        labels = {row["label"] for row in truth}
        ended = all(row["outcome"] != "active" for row in truth if row["label"] not in PENDING)
        return ended and set(PENDING) <= labels and len(labels) >= 8

    wait_for(settled, timeout, what="the scenario to settle", interval=0.2)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads the seeded pipeline (simulator, collectors, ingest) is end-to-end: the slow tier."""
    for item in items:
        if "seeded" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@dataclass(frozen=True)
class Engine:
    """The package's one embedded ClickHouse (chdb opens one directory per process at a time)."""

    client: Any
    target: str


@pytest.fixture(scope="package")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """Embedded ClickHouse for the package: ``seeded`` loads the scenario into its ``sevents`` database, other
    tests use databases of their own."""
    target = f"chdb://{tmp_path_factory.mktemp('dash-engine') / 'clickhouse'}"
    client = connect(target)
    yield Engine(client, target)
    client.close()


@pytest.fixture(scope="package")
def seeded(tmp_path_factory: pytest.TempPathFactory, engine: Engine) -> Seeded:
    """Runs the dashboards scenario once and loads every collector's outbox into embedded ClickHouse."""
    root = tmp_path_factory.mktemp("dash-seed")
    run = _run_fleet(root / "vms")
    with Outbox(root / "vms" / run["vm_names"][0] / "outbox.sqlite") as outbox:
        outbox.commit([POISON], None)
    copy = shutil.copytree(root / "vms", root / "vms-copy")
    migrate(engine.client, Target())
    handler = Handler(Writer(engine.client), source="outbox", stop=threading.Event())
    OutboxSource([str(root / "vms" / "*")], until_idle=True).run(handler, threading.Event())
    assert handler.stored > 0
    return Seeded(engine.client, engine.target, outboxes=copy, **run)


def around(seeded: Seeded) -> tuple[datetime, datetime]:
    """A dashboard time range covering the whole run."""
    return seeded.started - timedelta(minutes=1), seeded.finished + timedelta(minutes=5)
