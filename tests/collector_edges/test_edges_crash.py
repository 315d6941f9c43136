"""Crash safety: a daemon SIGKILLed at random moments across a changing scenario loses and repeats nothing."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from collector.decode import decode_document
from collector.enrich import transition_key
from collector.model import Snapshot
from collector.outbox import Outbox
from collector.transitions import diff
from tests.collector_edges.fake_imds import INSTANCE, FakeImds, event
from tests.collector_edges.test_edges_cli import COLLECTOR, clean_env
from tests.helpers import wait_for

KILLS = 55


def scenario(rng: random.Random, steps: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """Documents that change at every step: events appear, start, move NotBefore, finish or get cancelled."""
    states: list[tuple[int, list[dict[str, Any]]]] = []
    live: dict[str, dict[str, Any]] = {}
    serial = 0
    for step in range(steps):
        scheduled = [k for k, e in live.items() if e["EventStatus"] == "Scheduled"]
        choices = ["add"] if len(live) < 4 else []
        choices += ["start", "move"] if scheduled else []
        choices += ["remove"] if live else []
        action = rng.choice(choices)
        if action == "add":
            serial += 1
            live[f"ev-{serial}"] = event(f"ev-{serial}", event_type=rng.choice(["Reboot", "Freeze", "Redeploy"]))
        elif action == "start":
            key = rng.choice(scheduled)
            live[key] = {**live[key], "EventStatus": "Started", "NotBefore": ""}
        elif action == "move":
            key = rng.choice(scheduled)
            live[key] = {**live[key], "NotBefore": f"Mon, 19 Sep 2016 18:{step % 60:02d}:47 GMT"}
        else:
            del live[rng.choice(sorted(live))]
        states.append((step + 1, [dict(e, EventId=k) for k, e in live.items()]))
    return states


def expected_ids(states: list[tuple[int, list[dict[str, Any]]]]) -> list[str]:
    """The transition ids the pure core derives from the documents in order."""
    snapshot = Snapshot.empty()
    ids: list[str] = []
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    for incarnation, events in states:
        document = decode_document(json.dumps({"DocumentIncarnation": incarnation, "Events": events}).encode())
        snapshot, transitions = diff(snapshot, document, moment)
        ids += [transition_key(t, INSTANCE["compute"]["vmId"]) for t in transitions]
    return ids


def start(imds: FakeImds, state: Path) -> subprocess.Popen[bytes]:
    command = [COLLECTOR, "run", "--imds-url", imds.base_url, "--state-dir", str(state)]
    command += ["--poll-interval", "0.05", "--min-request-interval", "0", "--heartbeat-interval", "0.3"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())


def wait_for_polls(imds: FakeImds, after: int, count: int, process: subprocess.Popen[bytes]) -> None:
    def polled() -> bool:
        assert process.poll() is None, "collector died on its own"
        return len(imds.scheduled()) >= after + count

    wait_for(polled, 30, what=f"{count} polls (the collector stopped polling)", interval=0.01)


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_and_repeats_nothing(imds: FakeImds, tmp_path: Path) -> None:
    """After 55 SIGKILLs the outbox holds exactly the transitions of every document served, each once."""
    rng = random.Random(20261121)
    states = scenario(rng, KILLS)
    state = tmp_path / "state"
    process = start(imds, state)
    for incarnation, events in states:
        imds.set_document(incarnation, events)
        time.sleep(rng.uniform(0.0, 0.5))
        process.send_signal(signal.SIGKILL)
        process.wait()
        # Restart before the document changes again, and wait for two polls of the new process: a second poll
        # starts only after the first one committed, so this document is then durably diffed. (Three requests,
        # because one request of the killed process may still be arriving.)
        seen = len(imds.scheduled())
        process = start(imds, state)
        wait_for_polls(imds, seen, 3, process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0

    with Outbox(state / "outbox.sqlite") as outbox:
        rows = outbox.pending(limit=100_000)
    stored = [json.loads(r.payload) for r in rows]
    transitions = [r for r in stored if r["record_type"] == "transition"]
    assert [r["seq"] for r in stored] == sorted({r["seq"] for r in stored})
    ids = [r["transition_id"] for r in transitions]
    expected = expected_ids(states)
    assert len(ids) == len(set(ids)), "a transition was stored twice"
    assert sorted(ids) == sorted(expected)
    assert len(expected) >= KILLS
    assert {r["kind"] for r in transitions} >= {"appeared", "status_changed", "updated", "disappeared"}
