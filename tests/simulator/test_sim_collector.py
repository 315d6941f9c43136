"""The simulator and the real collector together: the collector's transitions match the ground truth.

For every built-in scenario, real ``collector.process.Collector`` instances poll the simulator over HTTP (one per
watched VM, each in its own thread) while the scenario runs; then every truth row of a watched VM is compared
with that VM's transition records. A change becomes visible at its truth time and a poll comes at least every
``POLL`` seconds, so each observation must fall within one poll interval (plus ``SLACK`` for the request's own
latency on a loaded machine) after the truth.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from collector.decode import DecodeError
from collector.imds import ImdsError
from collector.settings import CollectorSettings
from collector.wiring import build_agent
from sevents.records import parse_time
from simulator import BUILTIN_SCENARIOS, SimServer, load_scenario
from simulator.engine import Engine
from simulator.scenario import Scenario
from tests.helpers import wait_for
from tests.simulator.conftest import HEADERS, events_url, small_scenario

POLL = 0.1  # wall seconds between polls
# The request itself and thread scheduling: a sleeping poller on a loaded 2-core CI machine can wake late by
# far more than a poll interval, and that says nothing about the collector.
SLACK = timedelta(seconds=1.0)
TARGET_WALL_S = 2.5  # each scenario is sped up to last about this long
MAX_WATCHED = 6

pytestmark = pytest.mark.slow


def without_downtime(scenario: Scenario) -> Scenario:
    """The scenario with every VM running through its events."""
    events = tuple(dataclasses.replace(e, down_s=0.0) for e in scenario.events)
    return dataclasses.replace(scenario, events=events, pauses=())


def scenario_length_s(scenario: Scenario) -> float:
    """How long the scenario runs, in scenario seconds (from a run of the pure engine)."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    engine = Engine(scenario, start=t0, speed=1.0)
    engine.advance(t0 + timedelta(days=30))
    end = engine.end_at or t0  # a scenario with an end stops there, its events still Scheduled
    return max(((r["ended_at"] or end) - t0).total_seconds() for r in engine.truth())


def watched_vms(server: SimServer) -> list[str]:
    """A few VMs per scenario: affected and unaffected ones, none with scripted faults (they retry by design)."""
    faulted = {vm for f in server.scenario.faults for vm in f.vms}
    rows = Engine(server.scenario, start=datetime(2026, 1, 1, tzinfo=UTC), speed=1.0)
    rows.advance(datetime(2026, 3, 1, tzinfo=UTC))
    picks: list[str] = []
    for row in rows.truth():
        for name in (row["resources"][0], row["vm_name"]):
            if name not in picks and name not in faulted:
                picks.append(name)
    return picks[:MAX_WATCHED]


class Watcher:
    """One collector polling one simulated VM every POLL seconds in a thread, keeping its transition records."""

    def __init__(self, server: SimServer, vm: str, state_dir: Path, api_version: str) -> None:
        settings = CollectorSettings(
            imds_url=server.vm_base_url(vm),
            state_dir=state_dir,
            api_version=api_version,
            poll_interval=POLL,
            min_request_interval=0.0,
            request_timeout=2.0,
            first_call_timeout=5.0,
            retry_deadline=2.0,
        )
        self.vm = vm
        self.agent = build_agent(settings)
        self.records: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"watch-{vm}")

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.records.extend(r for r in self.agent.poll_once() if r["record_type"] == "transition")
            except (ImdsError, DecodeError) as error:
                self.errors.append(str(error))
            self.stop.wait(POLL)

    def settle(self, timeout: float = 30.0) -> None:
        """Wait for two more polls: the first began after now, and polls run in turn, so it was committed."""
        target = self.agent.polls + 2
        wait_for(lambda: self.agent.polls >= target, timeout, what=f"{self.vm}'s next polls", interval=POLL / 5)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.agent.close()


def within(observed: str, truth: datetime, what: str) -> None:
    """The observation is not before the truth and at most one poll (plus slack) after it."""
    moment = parse_time(observed)
    # The wire keeps milliseconds (truncated), so a change seen within the same millisecond reads as earlier.
    floor = truth.replace(microsecond=truth.microsecond - truth.microsecond % 1000)
    assert floor <= moment <= truth + timedelta(seconds=POLL) + SLACK, f"{what}: truth {truth}, observed {moment}"


def compare(rows: list[dict[str, Any]], records: list[dict[str, Any]], vm: str, api_version: str) -> None:
    """Every event the VM saw: appeared, started, updated and gone when the truth says, nothing extra."""
    mine = [r for r in rows if r["vm_name"] == vm]
    seen = {r["event_id"] for r in records if r["event_id"]}
    assert seen == {r["event_id"] for r in mine}, vm
    for row in mine:
        recs = sorted((r for r in records if r["event_id"] == row["event_id"]), key=lambda r: r["seq"])
        where = f"{vm} {row['label']}"
        appeared = [r for r in recs if r["kind"] == "appeared"]
        assert len(appeared) == 1, where
        within(appeared[0]["observed_at"], row["first_visible_at"], where + " appeared")
        assert appeared[0]["event_type"] == row["event_type"] and appeared[0]["resources"] == row["resources"]
        started = [r for r in recs if r["status"] == "Started"]
        if row["started_at"] is None:
            assert started == [], where
        else:
            within(started[0]["observed_at"], row["started_at"], where + " started")
        updated = [r for r in recs if r["kind"] == "updated" and "duration_s" in r["changed_fields"]]
        if row["second_impact_at"] is not None and api_version >= "2020-07-01":
            within(updated[0]["observed_at"], row["second_impact_at"], where + " second impact")
        else:  # versions before 2020-07-01 have no DurationInSeconds: the second impact is invisible there
            assert updated == [], where
        gone = [r for r in recs if r["kind"] == "disappeared"]
        if row["ended_at"] is None:  # still there when the scenario ended
            assert gone == [], where
            continue
        assert len(gone) == 1, where
        within(gone[0]["observed_at"], row["ended_at"], where + " gone")


def run_with_collectors(
    start_sim: Callable[..., SimServer], tmp_path: Path, name: str, api_version: str = "2020-07-01"
) -> None:
    # The VMs keep running: this is the lifecycle a running collector sees at any speed. Real downtime (a VM that
    # answers nothing while its collector is stopped) is tested with collector processes (test_ingest_downtime).
    scenario = without_downtime(load_scenario(name))
    speed = scenario_length_s(scenario) / TARGET_WALL_S
    server = start_sim(scenario, speed=speed)
    watchers = [Watcher(server, vm, tmp_path / vm, api_version) for vm in watched_vms(server)]
    for w in watchers:
        w.thread.start()
    try:
        assert server.wait_done(TARGET_WALL_S * 4 + 10)
        for w in watchers:
            w.settle()  # every collector saw the last disappearance
    finally:
        for w in watchers:
            w.close()
    rows = server.truth()
    for w in watchers:
        assert w.errors == [], (w.vm, w.errors)
        compare(rows, w.records, w.vm, api_version)


@pytest.mark.parametrize("name", sorted(BUILTIN_SCENARIOS))
def test_collector_matches_truth(start_sim: Callable[..., SimServer], tmp_path: Path, name: str) -> None:
    """The collector's transitions for each watched VM match the simulator's ground truth within one poll."""
    run_with_collectors(start_sim, tmp_path, name)


@pytest.mark.parametrize("version", ["2017-03-01", "2019-01-01"])
def test_collector_matches_truth_on_old_api_versions(
    start_sim: Callable[..., SimServer], tmp_path: Path, version: str
) -> None:
    """Old api-versions (latest path form, "_" resource names, fewer fields) give the same lifecycle."""
    run_with_collectors(start_sim, tmp_path, "second-impact" if version > "2017-03-01" else "live-migration", version)


def test_collector_rides_out_injected_faults(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    """With every fault kind injected into its polls, the collector still records the whole lifecycle once."""
    event = {"label": "freeze", "group": "web", "type": "Freeze", "at": 0, "notice": 900, "started_for": 20}
    server = start_sim(small_scenario([event]), speed=10.0)
    kinds = [("slow", {"seconds": 0.3}), ("500", {}), ("malformed", {}), ("truncated", {}), ("reset", {})]
    kinds += [("429", {"retry_after": 1}), ("410", {}), ("timeout", {"seconds": 1.0})]
    for kind, extra in kinds:
        assert server.arm_faults({"vm": "web-1", "kind": kind, **extra}) == (1, [])
    watcher = Watcher(server, "web-1", tmp_path / "web-1", "2020-07-01")
    watcher.thread.start()
    try:
        streak = {"polls": -1, "ok": 0}  # polls in a row that succeeded after the last fault was handed out

        def recovered() -> bool:
            if watcher.agent.polls != streak["polls"]:
                streak["polls"] = watcher.agent.polls
                ok = not server.faults.pending() and watcher.records and watcher.agent.last_poll_ok
                streak["ok"] = streak["ok"] + 1 if ok else 0
            return streak["ok"] >= 3

        wait_for(recovered, 30, what="three good polls after the last fault", interval=POLL / 5)
        event_id = watcher.records[0]["event_id"]
        with requests.Session() as http:
            http.trust_env = False
            body = {"StartRequests": [{"EventId": event_id}]}
            assert http.post(events_url(server, "web-0"), json=body, headers=HEADERS).status_code == 200
        assert server.wait_done(30)
        watcher.settle()
    finally:
        watcher.close()
    assert server.status()["faults_injected"] == {kind: 1 for kind, _ in kinds}
    assert watcher.errors  # the faults were felt, and counted, by the collector
    row = next(r for r in server.truth() if r["vm_name"] == "web-1")
    mine = sorted(watcher.records, key=lambda r: r["seq"])
    assert [(r["kind"], r["status"]) for r in mine] == [
        ("appeared", "Scheduled"),
        ("status_changed", "Started"),
        ("disappeared", ""),
    ]
    within(mine[1]["observed_at"], row["started_at"], "started")
    within(mine[2]["observed_at"], row["ended_at"], "gone")
