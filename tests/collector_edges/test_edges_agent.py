"""The agent in-process: poll -> diff -> outbox, heartbeats, metrics, shipping, a full outbox, identity."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from collector.agent import AgentError
from collector.imds import ImdsError
from collector.outbox import DROP_TRANSITIONS_DEFERRED, OutboxIOError, OutboxRow
from collector.process import Collector
from collector.settings import CollectorSettings
from collector.ship import SinkError
from collector.wiring import build_agent
from sevents import records
from sevents.telemetry import make_meter_provider
from tests.collector_edges.fake_imds import FakeImds, Scripted, event
from tests.helpers import metric_points, wait_for


class ScriptedSink:
    """A sink that refuses the first ``failures`` batches, then keeps what it is sent."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.received: list[OutboxRow] = []
        self.closed = False

    def send(self, rows: Sequence[OutboxRow]) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise SinkError("scripted failure")
        self.received.extend(rows)

    def close(self) -> None:
        self.closed = True


def kinds_committed(agent: Collector, sink: ScriptedSink) -> list[str]:
    """Transition kinds committed so far: those already shipped and those still in the outbox."""
    rows = [*sink.received, *agent.outbox.pending()]
    return [json.loads(r.payload).get("kind") for r in rows if r.record_type == "transition"]


def test_poll_once_commits_transitions_with_identity_and_seq(imds: FakeImds, settings: CollectorSettings) -> None:
    """A new event yields one appeared record with every wire field, the VM identity, and seq 1."""
    imds.set_document(1, [event("e1")])
    agent = build_agent(settings)
    try:
        (record,) = agent.poll_once()
        assert set(record) == set(records.TRANSITION_FIELDS)
        assert record["seq"] == 1
        assert record["kind"] == records.KIND_APPEARED
        assert record["event_id"] == "e1"
        assert record["vm_id"] == "02aab8a4-74ef-476e-8182-f6d2ba4166a6"
        assert record["fault_domain"] == 1 and record["update_domain"] == 4 and record["zone"] == "2"
        assert record["api_version"] == "2020-07-01"
        assert agent.poll_once() == []
        imds.set_document(2, [event("e1", status="Started")])
        (started,) = agent.poll_once()
        assert (started["kind"], started["seq"]) == (records.KIND_STATUS_CHANGED, 2)
        stored = [json.loads(r.payload) for r in agent.outbox.pending()]
        assert stored == [record, started]
    finally:
        agent.close()


def test_restart_diffs_against_the_committed_snapshot(imds: FakeImds, settings: CollectorSettings) -> None:
    """A new agent on the same state dir re-emits nothing for a document already committed."""
    imds.set_document(1, [event("e1")])
    first = build_agent(settings)
    assert len(first.poll_once()) == 1
    first.close()
    second = build_agent(settings)
    try:
        assert second.poll_once() == []
        imds.set_document(2, [])
        (gone,) = second.poll_once()
        assert gone["kind"] == records.KIND_DISAPPEARED and gone["seq"] == 2
    finally:
        second.close()


def test_state_dir_is_exclusive(settings: CollectorSettings) -> None:
    """A second agent on a state dir in use refuses to start."""
    agent = build_agent(settings)
    try:
        with pytest.raises(AgentError):
            build_agent(settings)
    finally:
        agent.close()


def test_metrics_are_recorded(imds: FakeImds, settings: CollectorSettings) -> None:
    """Polls, poll errors by kind, latency, transitions by kind and outbox depth reach an in-memory reader."""
    reader = InMemoryMetricReader()
    provider = make_meter_provider("test", readers=[reader], env={})
    imds.set_document(1, [event("e1"), event("e2")])
    agent = build_agent(settings, meter_provider=provider)
    try:
        agent.poll_once()
        imds.script.append(Scripted(500))
        agent.poll_once()
        imds.script.append(Scripted(200, b"not json"))
        with pytest.raises(ValueError):
            agent.poll_once()
        points = metric_points(reader)
        assert sum(p.value for p in points["sevents.collector.polls"]) == 3
        errors = {p.attributes["kind"]: p.value for p in points["sevents.collector.poll_errors"]}
        assert errors == {"server_error": 1, "decode": 1}
        transitions = {p.attributes["kind"]: p.value for p in points["sevents.collector.transitions"]}
        assert transitions == {"appeared": 2}
        assert points["sevents.collector.outbox_depth"][0].value == 2
        assert points["sevents.collector.outbox_bytes"][0].value == agent.outbox.size_bytes()
        assert sum(p.count for p in points["sevents.collector.imds_latency"]) >= 3
    finally:
        agent.close()


def test_heartbeat_reports_health(imds: FakeImds, settings: CollectorSettings) -> None:
    """A heartbeat carries the heartbeat fields, poll counts, errors and the outbox depth."""
    imds.set_document(7, [event("e1")])
    agent = build_agent(settings)
    try:
        agent.poll_once()
        imds.script.append(Scripted(404))
        with pytest.raises(ImdsError):
            agent.poll_once()
        beat = agent.heartbeat()
        assert beat is not None
        assert set(beat) == set(records.HEARTBEAT_FIELDS)
        assert beat["record_type"] == records.RECORD_HEARTBEAT
        assert (beat["polls"], beat["poll_errors"], beat["last_poll_ok"]) == (2, {"http_404": 1}, False)
        assert (beat["last_poll_error"], beat["last_incarnation"], beat["active_events"]) == ("http_404", 7, 1)
        assert beat["outbox_depth"] == 1 and beat["seq"] == 2
    finally:
        agent.close()


def test_full_outbox_defers_transitions_without_losing_them(imds: FakeImds, settings: CollectorSettings) -> None:
    """Transitions that do not fit are counted once, the stored snapshot stays; all are stored once room returns."""
    tight = dataclasses.replace(settings, outbox_max_bytes=160_000)  # on disk: pages and WAL count too
    agent = build_agent(tight)
    try:
        big = [dict(event(f"e{i}"), Description="x" * 20_000) for i in range(10)]
        imds.set_document(1, big)
        assert agent.poll_once() == []
        assert agent.poll_once() == []
        assert agent.outbox.drops() == {DROP_TRANSITIONS_DEFERRED: 10}  # counted once, not once per poll
        assert agent.outbox.snapshot() is None
        imds.set_document(2, big[:3])
        assert agent.poll_once() == []
        assert agent.outbox.drops() == {DROP_TRANSITIONS_DEFERRED: 17}
        agent.outbox.max_bytes = 10 * 2**20  # as if the ingest had made room
        new = agent.poll_once()
        # Everything seen while full is stored in order: the seven that came and went are not merged away.
        assert [(r["kind"], r["event_id"]) for r in new] == [
            *(("appeared", f"e{i}") for i in range(10)),
            *(("disappeared", f"e{i}") for i in range(3, 10)),
        ]
        assert agent.poll_once() == []
    finally:
        agent.close()


def test_stored_identity_is_used_while_imds_instance_fails(imds: FakeImds, settings: CollectorSettings) -> None:
    """After a restart with instance metadata failing, records still carry the last known identity."""
    agent = build_agent(settings)
    agent.poll_once()
    agent.close()
    imds.instance = {"error": "broken"}
    imds.set_document(1, [event("e9")])
    again = build_agent(dataclasses.replace(settings, retry_deadline=0.0))
    try:
        (record,) = again.poll_once()
        assert record["vm_id"] == "02aab8a4-74ef-476e-8182-f6d2ba4166a6"
    finally:
        again.close()


def test_run_ships_retries_and_drains_on_stop(imds: FakeImds, settings: CollectorSettings) -> None:
    """With a sink that fails twice, run() ships every record once and leaves the outbox empty after stop."""
    sink = ScriptedSink(failures=2)
    fast = dataclasses.replace(settings, ship_max_wait=0.0, heartbeat_interval=0.2)
    agent = build_agent(fast, sink=sink)
    stop = threading.Event()
    worker = threading.Thread(target=agent.run, args=(stop,))
    imds.set_document(1, [event("e1")])
    worker.start()
    try:
        wait_for(lambda: any(r.record_type == "transition" for r in sink.received))
        imds.set_document(2, [event("e1", status="Started")])
        # Stop once the change is committed (shipped or not): the drain on stop must ship what is left.
        wait_for(lambda: "status_changed" in kinds_committed(agent, sink))
    finally:
        stop.set()
        worker.join(timeout=15)
    assert not worker.is_alive()
    seqs = [r.seq for r in sink.received]
    assert seqs == sorted(set(seqs))
    kinds = [json.loads(r.payload).get("kind") for r in sink.received if r.record_type == "transition"]
    assert kinds == ["appeared", "status_changed"]
    beats = [json.loads(r.payload) for r in sink.received if r.record_type == "heartbeat"]
    # The clean stop's last heartbeat says so (``final``), and is shipped by the drain; no earlier one does.
    assert [b["final"] for b in beats] == [False] * (len(beats) - 1) + [True]
    assert agent.outbox.depth() == 0
    agent.close()
    assert sink.closed


def test_clock_is_injected(imds: FakeImds, settings: CollectorSettings) -> None:
    """observed_at comes from the injected clock."""
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    imds.set_document(1, [event("e1")])
    agent = build_agent(settings, clock=lambda: moment + timedelta(milliseconds=6))
    try:
        (record,) = agent.poll_once()
        assert record["observed_at"] == "2026-01-02T03:04:05.006Z"
    finally:
        agent.close()


def test_a_failed_start_releases_the_state_dir(settings: CollectorSettings) -> None:
    """An agent that cannot open its outbox lets go of the state-dir lock, so a retry in the same process works."""
    settings.outbox_path.mkdir(parents=True)  # a directory where the SQLite file should be
    with pytest.raises(OutboxIOError):
        build_agent(settings)
    settings.outbox_path.rmdir()
    build_agent(settings).close()
