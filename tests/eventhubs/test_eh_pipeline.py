"""The whole pipeline through Event Hubs: simulator, collectors, the local hub, two ingest workers, ClickHouse.

Workers are threads with their own EventHubConsumerClient sharing one chdb-backed handler (chdb admits one
process per directory; see eh_fleet.py). Correctness is checked exactly as the embedded path's end-to-end
test checks it: ``demo.compare.compare`` of the stored events against the simulator's ground truth.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo.compare import compare
from ingest import queries
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.eh_fleet import EhFleet, start_fleet
from tests.helpers import eventually

POLL_S = 0.5
SLACK_S = 0.25


def _finish(fleet: EhFleet, client: Any, database: str, began: datetime) -> dict[str, Any]:
    """Drain collectors and workers; the stored events, counts and what the hub holds."""
    assert fleet.sim.wait_done(150), fleet.sim.status()
    fleet.stop_collectors(settle_s=2 * POLL_S + 0.5)
    assert fleet.backlog() == 0
    hub = fleet.hub_records()
    assert eventually(lambda: fleet.deliver.record_ids >= set(hub), 60), set(hub) - fleet.deliver.record_ids
    fleet.stop_workers()
    assert not fleet.failures, fleet.failures
    window = {"since": began - timedelta(minutes=1), "until": datetime.now(UTC) + timedelta(minutes=1)}
    return {
        "events": queries.run(client, queries.EVENTS_IN_WINDOW, database, **window).dicts(),
        "counts": queries.run(client, queries.COUNTS, database).dicts()[0],
        "hub": hub,
        "truth": fleet.sim.truth(),
        "served": {vm: fleet.sim.served(vm) for vm in fleet.sim.vm_names},
    }


def _assert_matches_truth(result: dict[str, Any]) -> None:
    # times within the polls that could see them (the simulator's answers), however loaded the machine
    checks = compare(result["events"], result["truth"], tolerance_s=POLL_S + SLACK_S, served=result["served"])
    bad = [c for c in checks if not c.ok]
    assert not bad, "\n".join(f"{c.label} {c.field}: ours {c.ours} truth {c.truth}" for c in bad)
    assert len(result["events"]) == len({row["event_id"] for row in result["truth"]})
    transitions = sum(1 for kind in result["hub"].values() if kind == "transition")
    assert result["counts"]["transitions"] == transitions > 0


@pytest.mark.slow
def test_every_transition_arrives_once_with_the_embedded_numbers(
    endpoint: EventHubsEndpoint, ch: Any, db: str, checkpoint_store: Any, tmp_path: Path
) -> None:
    """Two workers share the hub; each transition is stored once and the events match the ground truth."""
    began = datetime.now(UTC)
    fleet = start_fleet(tmp_path, endpoint, ch, db, checkpoint_store, scenario="rolling-wave", speed=30, workers=2)
    try:
        workers = list(fleet.workers)
        result = _finish(fleet, ch, db, began)
    finally:
        fleet.close()
    _assert_matches_truth(result)
    assert result["counts"]["dead_letters"] == 0
    assert all(worker.source.delivered > 0 for worker in workers), "both workers should own partitions"


@pytest.mark.slow
def test_hub_outage_buffers_in_outboxes_and_drains(
    endpoint: EventHubsEndpoint, ch: Any, db: str, checkpoint_store: Any, tmp_path: Path
) -> None:
    """The hub goes away mid-scenario: collectors keep observing into their outboxes and ship it all later."""
    began = datetime.now(UTC)
    fleet = start_fleet(tmp_path, endpoint, ch, db, checkpoint_store, scenario="rolling-wave", speed=20, workers=1)
    try:
        assert eventually(lambda: endpoint.store.total() > 0, 30)
        endpoint.stop()
        assert eventually(lambda: fleet.backlog() > 0, 30)
        fleet.collectors_stop.wait(5.0)
        buffered = fleet.backlog()
        endpoint.start()
        result = _finish(fleet, ch, db, began)
        failures = sum(agent.sink.failures for agent in fleet.agents)  # type: ignore[union-attr]
    finally:
        fleet.close()
    assert buffered > 0 and failures > 0
    _assert_matches_truth(result)
