"""A full state directory never stops the collector: on a real 2 MiB tmpfs filled to the last byte."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.outbox import Outbox
from tests.collector_edges import fullfs
from tests.collector_edges.fake_imds import FakeImds
from tests.collector_edges.fullfs import fill
from tests.collector_edges.test_edges_cli import COLLECTOR, clean_env
from tests.collector_edges.test_edges_crash import expected_ids, scenario, wait_for_polls
from tests.helpers import wait_for

small_fs = fullfs.small_fs  # the fixture, shared with the other full-disk tests


def stored(state: Path) -> list[dict[str, Any]]:
    with Outbox(state / "outbox.sqlite") as outbox:
        return [json.loads(r.payload) for r in outbox.pending(limit=100_000)]


def _told_of_the_full_disk(state: Path) -> bool:
    """Whether a heartbeat in the running collector's outbox (read only) reports the refused commits."""
    with contextlib.closing(sqlite3.connect(f"file:{state / 'outbox.sqlite'}?mode=ro", uri=True, timeout=5)) as db:
        payloads = [json.loads(p) for (p,) in db.execute("SELECT payload FROM records")]
    return any(
        set(r.get("poll_errors", ())) & {"outbox_full", "outbox_error"}
        for r in payloads
        if r["record_type"] == "heartbeat"
    )


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Collectors a test starts; any still running at its end (a failed test) is killed."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def start(imds: FakeImds, state: Path, log: Path) -> subprocess.Popen[bytes]:
    command = [COLLECTOR, "run", "--imds-url", imds.base_url, "--state-dir", str(state)]
    command += ["--poll-interval", "0.05", "--min-request-interval", "0", "--heartbeat-interval", "0.3"]
    with log.open("ab") as err:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=clean_env())


def test_full_disk_never_stops_the_collector_and_loses_nothing(
    imds: FakeImds, small_fs: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """Filled while documents change, it keeps polling; once space returns the outbox holds exactly the
    transitions of every document served, as an unharmed collector's would. Restarted while full, it comes up."""
    states = scenario(random.Random(5), 12)
    state = small_fs / "state"
    log = tmp_path / "collector.log"
    process = start(imds, state, log)
    started.append(process)
    imds.set_document(*states[0])
    wait_for_polls(imds, len(imds.scheduled()), 3, process)
    filler = fill(small_fs)
    assert os.statvfs(small_fs).f_bavail == 0
    for incarnation, events in states[1:]:
        imds.set_document(incarnation, events)
        wait_for_polls(imds, len(imds.scheduled()), 3, process)
    filler.unlink()
    wait_for_polls(imds, len(imds.scheduled()), 3, process)
    wait_for(lambda: _told_of_the_full_disk(state), 30, what="a heartbeat after space returned")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    records = stored(state)
    ids = [r["transition_id"] for r in records if r["record_type"] == "transition"]
    assert sorted(ids) == sorted(expected_ids(states))
    heartbeats = [r for r in records if r["record_type"] == "heartbeat"]
    assert any(set(h["poll_errors"]) & {"outbox_full", "outbox_error"} for h in heartbeats)
    assert b"outbox refused the commit" in log.read_bytes()

    # Full again, and restarted while full: it must come up and poll on, never exit.
    filler = fill(small_fs)
    process = start(imds, state, log)
    started.append(process)
    imds.set_document(len(states) + 1, [])
    wait_for_polls(imds, len(imds.scheduled()), 5, process)
    filler.unlink()
    wait_for_polls(imds, len(imds.scheduled()), 3, process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    again = [r["transition_id"] for r in stored(state) if r["record_type"] == "transition"]
    assert len(again) == len(set(again)) > len(ids)  # the disappearances, each once
