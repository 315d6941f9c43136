"""End to end: simulator -> real collectors -> outboxes -> ingest -> ClickHouse, checked against ground truth."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo.compare import compare
from demo.fleetrun import start
from ingest import queries

POLL_S = 0.5
SLACK_S = 0.25  # HTTP round trip and thread scheduling on a busy two-core machine, on top of one poll interval


@pytest.mark.slow
def test_every_number_in_events_matches_the_simulators_ground_truth(ch: Any, ch_path: Path, tmp_path: Path) -> None:
    """The demo fleet's events, as stored, agree with what the simulator did, within one poll interval."""
    database = "e2e_" + uuid.uuid4().hex[:8]
    began = datetime.now(UTC)
    run = start(
        tmp_path,
        speed=30,
        poll_interval=POLL_S,
        heartbeat_interval=2.0,
        batch_max_wait=0.2,
        clickhouse=f"chdb://{ch_path}",
        database=database,
    )
    try:
        assert run.sim.wait_done(150), run.sim.status()
        run.finish()
        truth = run.sim.truth()
        served = {vm: run.sim.served(vm) for vm in run.sim.vm_names}
        window = {"since": began - timedelta(minutes=1), "until": datetime.now(UTC) + timedelta(minutes=1)}
        events = queries.run(ch, queries.EVENTS_IN_WINDOW, database, **window).dicts()
        counts = queries.run(ch, queries.COUNTS, database).dicts()[0]
        backlog = run.backlog()
        vms = len(run.sim.vm_names)
    finally:
        run.close()
    checks = compare(events, truth, tolerance_s=POLL_S + SLACK_S, served=served)
    bad = [c for c in checks if not c.ok]
    assert not bad, "\n".join(f"{c.label} {c.field}: ours {c.ours} truth {c.truth} delta {c.delta_s}" for c in bad)
    assert len(events) == len({row["event_id"] for row in truth}) == 7
    assert {e["outcome"] for e in events} == {"completed", "cancelled"}
    assert counts["dead_letters"] == 0
    assert counts["vms_with_heartbeat"] == vms
    assert backlog == 0
