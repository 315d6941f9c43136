"""vmss-terminate with the terminated VM's collector killed: the event ends completed and no alert fires.

Real parts throughout: the simulator on loopback, one ``sevents-collector run`` process per VM, SIGKILL for the
terminated VM once its collector has stored the Started transition (read from its outbox, which is what that
VM could know), the ingest reading the outboxes into embedded ClickHouse, and the alert rule's own SQL.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from dashboards.alerts import RULES
from ingest.settings import IngestSettings
from ingest.wiring import build
from simulator import SimServer, load_scenario
from tests.helpers import wait_for

pytestmark = pytest.mark.slow
COLLECTOR = str(Path(sys.executable).with_name("sevents-collector"))
VICTIM = "pool_3"


def _collector(server: SimServer, name: str, state: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEVENTS_") and "PROXY" not in k.upper()}
    command = [COLLECTOR, "run", "--imds-url", server.vm_base_url(name), "--state-dir", str(state)]
    command += ["--poll-interval", "0.1", "--min-request-interval", "0", "--heartbeat-interval", "1"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def _stored(state: Path) -> list[dict[str, Any]]:
    """The records a collector committed to its outbox so far (read-only)."""
    path = state / "outbox.sqlite"
    if not path.exists():
        return []
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return [json.loads(p) for (p,) in db.execute("SELECT payload FROM records ORDER BY seq")]
    except sqlite3.OperationalError:
        return []  # created but not yet initialised by the collector: nothing stored yet


def test_terminated_vm_with_its_collector_killed(ch: Any, db: str, tmp_path: Path) -> None:
    """The VM sees its own Terminate start, dies; the others see the event go: completed, nothing firing."""
    processes: dict[str, subprocess.Popen[bytes]] = {}
    with SimServer(load_scenario("vmss-terminate"), speed=40) as server:
        try:
            for name in server.vm_names:
                processes[name] = _collector(server, name, tmp_path / name)

            def victim_saw_start() -> bool:
                return any(r.get("status") == "Started" for r in _stored(tmp_path / VICTIM))

            wait_for(victim_saw_start, 60, what="the terminated VM's collector to store its Terminate's start")
            processes[VICTIM].send_signal(signal.SIGKILL)
            processes[VICTIM].wait(timeout=10)
            wait_for(server.done, 60, what="the scenario to end")
            survivors = [n for n in server.vm_names if n != VICTIM]

            def survivors_saw_end() -> bool:
                return all(any(r.get("kind") == "disappeared" for r in _stored(tmp_path / n)) for n in survivors)

            wait_for(survivors_saw_end, 60, what="the other collectors to see the event go")
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=30)
    settings = IngestSettings(clickhouse="chdb:///unused", database=db, source=f"outbox:{tmp_path}/*")
    drain = build(settings, threading.Event(), client=ch, apply_migrations=False, until_idle=True)
    drain.run(threading.Event())

    victim_rows = ch.query(
        f"SELECT kind, status FROM {db}.transitions FINAL WHERE vm_name = {{vm:String}} AND event_id != ''",
        parameters={"vm": VICTIM},
    ).result_rows
    # it saw its Terminate Started (at its first poll, appeared already Started, or later) and never the end
    assert all(kind != "disappeared" for kind, _ in victim_rows), "the victim never saw the end"
    assert any(status == "Started" for _, status in victim_rows)
    events = ch.query(f"SELECT event_type, outcome, ended_at IS NOT NULL FROM {db}.events").result_rows
    assert events == [("Terminate", "completed", True)]
    rule = next(r for r in RULES if r.title == "Preempt or Terminate scheduled")
    assert ch.query(rule.sql.replace("sevents.", f"{db}.")).result_rows == [], "no alert firing"
