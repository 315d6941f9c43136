"""Identity and api-version: VMs never merge while their identity is unknown, a version change invents nothing."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

from collector.instance import DEFAULT_RETRY, FALLBACK_FILE
from collector.outbox import Outbox, OutboxRow
from collector.settings import CollectorSettings
from collector.wiring import build_agent
from tests.collector_edges.fake_imds import INSTANCE, SE_VERSIONS, FakeImds, event
from tests.helpers import FakeClock, wait_for


def test_collectors_without_instance_metadata_never_share_transition_ids(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    """Two collectors whose instance metadata is down see the same event yet record distinct ids, each stable."""
    imds.instance_status = 500
    imds.set_document(1, [event("e1")])
    first = dataclasses.replace(settings, state_dir=tmp_path / "a", retry_deadline=0.0)
    second = dataclasses.replace(settings, state_dir=tmp_path / "b", retry_deadline=0.0)
    records: dict[str, list[dict[str, Any]]] = {}
    for each in (first, second):
        agent = build_agent(each)
        try:
            records[str(each.state_dir)] = agent.poll_once()
        finally:
            agent.close()
    a, b = records.values()
    assert [r["kind"] for r in a] == [r["kind"] for r in b] == ["appeared"]
    assert a[0]["transition_id"] != b[0]["transition_id"]
    assert a[0]["vm_id"].startswith("unknown-") and b[0]["vm_id"].startswith("unknown-")
    # The fallback is kept in the state dir: a restart records under the same identity.
    assert (first.state_dir / FALLBACK_FILE).read_text().strip() == a[0]["vm_id"]
    imds.set_document(2, [])
    again = build_agent(first)
    try:
        assert [r["vm_id"] for r in again.poll_once()] == [a[0]["vm_id"]]
    finally:
        again.close()


def strip(events: list[dict[str, Any]], version: str) -> list[dict[str, Any]]:
    """The events as ``version`` shows them (later fields absent)."""
    since = {"Description": "2019-04-01", "EventSource": "2019-08-01", "DurationInSeconds": "2020-07-01"}
    return [{k: v for k, v in e.items() if since.get(k, "") <= version} for e in events]


def test_a_version_downgrade_and_the_way_back_invent_no_history(imds: FakeImds, settings: CollectorSettings) -> None:
    """Falling back to 2019-01-01 and returning to 2020-07-01 records nothing; a real change is still seen."""
    events = [event("e1"), event("e2", status="Started")]
    imds.set_document(1, events)
    agent = build_agent(dataclasses.replace(settings, api_version_retry=0.0))
    try:
        assert [r["kind"] for r in agent.poll_once()] == ["appeared", "appeared"]
        # IMDS now serves only older versions (as after a rollback of IMDS itself), under the same incarnation.
        imds.versions = tuple(v for v in SE_VERSIONS if v <= "2019-01-01")
        imds.set_document(1, strip(events, "2019-01-01"))
        assert agent.poll_once() == []
        assert agent.client.api_version == "2019-01-01"
        # The newer version is back: it is asked for again, and its fields reappearing are no change either.
        imds.versions = SE_VERSIONS
        imds.set_document(1, events)
        assert agent.poll_once() == []
        assert agent.client.api_version == "2020-07-01"
        moved = [{**events[0], "NotBefore": "Mon, 19 Sep 2016 18:45:00 GMT"}, events[1]]
        imds.set_document(2, moved)
        changed = agent.poll_once()
        assert [(r["kind"], r["changed_fields"], r["anomaly"]) for r in changed] == [("updated", ["not_before"], "")]
    finally:
        agent.close()
    stored = [json.loads(r.payload) for r in agent_rows(settings)]
    assert not [r for r in stored if r["record_type"] == "transition" and r["anomaly"]]


def agent_rows(settings: CollectorSettings) -> list[OutboxRow]:
    with Outbox(settings.outbox_path) as outbox:
        return outbox.pending(limit=10_000)


def test_the_identity_is_learned_once_instance_metadata_recovers(imds: FakeImds, settings: CollectorSettings) -> None:
    """Records carry the fallback while instance metadata fails. The poll that learns the real vmId closes the
    stand-in (its final heartbeat) and records the events still present afresh, so every (event, VM) entry that
    was opened also sees its event end."""
    imds.instance_status = 500
    imds.set_document(1, [event("e1")])
    clock = FakeClock()  # the identity's retry waits out its backoff on this clock, not the test's
    agent = build_agent(dataclasses.replace(settings, retry_deadline=0.0), monotonic=clock.monotonic)
    real = INSTANCE["compute"]["vmId"]
    try:
        [first] = agent.poll_once()
        stand_in = first["vm_id"]
        assert stand_in.startswith("unknown-") and first["kind"] == "appeared"
        imds.instance_status = 200
        clock.advance(DEFAULT_RETRY.initial * 0.4)  # within the first retry's wait (at least half of it): no try
        assert agent.poll_once() == [] and agent.instance.identity.vm_id == stand_in
        clock.advance(DEFAULT_RETRY.initial * 0.6)  # the wait is over: the next poll fetches the identity again
        records = agent.poll_once()
        assert agent.instance.identity.vm_id == real
        # The poll that learned it (identity is read before the diff): the stand-in's last word, then e1 afresh.
        assert [(r["record_type"], r["vm_id"]) for r in records] == [("heartbeat", stand_in), ("transition", real)]
        assert records[0]["final"] is True
        assert (records[1]["kind"], records[1]["event_id"]) == ("appeared", "e1")
        assert agent.poll_once() == []  # nothing more to say while the document stays the same
        imds.set_document(2, [])
        assert [(r["kind"], r["vm_id"]) for r in agent.poll_once()] == [("disappeared", real)]
    finally:
        agent.close()
    # After a restart the snapshot on disk says who recorded it: nothing is closed or recorded again.
    again = build_agent(dataclasses.replace(settings, retry_deadline=0.0))
    try:
        imds.set_document(3, [])
        assert again.poll_once() == []
    finally:
        again.close()


def test_the_first_poll_waits_while_instance_metadata_fails_once(imds: FakeImds, settings: CollectorSettings) -> None:
    """Instance metadata fails the first try: the first poll waits for the retry, so no record carries the stand-in."""
    imds.instance_failures = 1
    imds.set_document(1, [event("e1")])
    agent = build_agent(dataclasses.replace(settings, request_timeout=60.0))  # the wait's bound, not its length
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    runner.start()
    try:
        wait_for(lambda: [r for r in agent.outbox.pending() if r.record_type == "transition"], 60, what="a transition")
    finally:
        stop.set()
        runner.join(timeout=10)
        agent.close()
    rows = [json.loads(r.payload) for r in agent_rows(settings)]
    assert {r["vm_id"] for r in rows} == {INSTANCE["compute"]["vmId"]}
    assert [r["kind"] for r in rows if r["record_type"] == "transition"] == ["appeared"]
    assert len([s for s in imds.seen if s.path == "/metadata/instance"]) >= 2
