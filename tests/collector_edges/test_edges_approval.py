"""The approval policy against the IMDS simulator: real collectors, real hook processes, approvals over HTTP. Their
events name several VMs, approved here without waiting for the others (``multi_vm = "approve-without-waiting"``);
the default, waiting for the coordinator, is tested in test_edges_approval_coordinator.py."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from collector.approval import ApprovalPolicy
from collector.approver import LEDGER_KEY
from collector.imds import ImdsClient
from collector.process import Collector
from collector.settings import CollectorSettings, load_approval
from collector.wiring import build_agent
from demo.fleetrun import write_approval_config
from sevents import records
from simulator import SimServer, load_scenario
from simulator.loader import parse_scenario
from tests.helpers import wait_for

SPEED = 20.0  # 900 scenario seconds of notice are 45 s here: an approval that counts is far ahead of NotBefore


def _scenario(notice: float = 900.0, approval: str = "any", event_type: str = "Reboot", ends: float = 100000) -> Any:
    return parse_scenario(
        {
            "name": "approve",
            "fleet": {"groups": [{"name": "web", "kind": "availability-set", "size": 4, "fault_domains": 2}]},
            "events": [
                {
                    "label": "e",
                    "group": "web",
                    "fault_domain": 0,
                    "type": event_type,
                    "at": 2,
                    "notice": notice,
                    "approval": approval,
                    "started_for": ends,
                }
            ],
        },
        "approve",
    )


def _hook(tmp_path: Path, body: str) -> tuple[str, ...]:
    """A hook: a small Python script that appends what it was given to ``calls.jsonl`` and then runs ``body``."""
    script = tmp_path / "hook.py"
    script.write_text(
        "import json, os, sys\n"
        "event = json.load(sys.stdin)\n"
        f"with open({str(tmp_path / 'calls.jsonl')!r}, 'a') as f:\n"
        "    f.write(json.dumps({'stdin': event, 'env_id': os.environ.get('SEVENTS_EVENT_ID')}) + '\\n')\n"
        + body
        + "\n"
    )
    return (sys.executable, str(script))


@contextmanager
def _fleet(sim: SimServer, tmp_path: Path, policy: ApprovalPolicy) -> Iterator[dict[str, Collector]]:
    agents = {
        name: build_agent(
            CollectorSettings(
                imds_url=sim.vm_base_url(name),
                state_dir=tmp_path / name,
                poll_interval=0.05,
                min_request_interval=0.0,
                retry_deadline=2.0,
            ),
            approval=policy,
        )
        for name in sim.vm_names
    }
    stop = threading.Event()
    threads = [threading.Thread(target=a.run, args=(stop,)) for a in agents.values()]
    for thread in threads:
        thread.start()
    try:
        yield agents
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        for agent in agents.values():
            agent.close()


def _decisions(agent: Collector) -> list[dict[str, Any]]:
    rows = [json.loads(r.payload) for r in agent.outbox.pending(limit=10_000)]
    return [r for r in rows if r["record_type"] == "approval"]


def _affected(sim: SimServer) -> list[dict[str, Any]]:
    return [row for row in sim.truth() if row["affected"]]


@pytest.mark.slow
def test_a_reboot_approved_after_its_hook_starts_long_before_not_before(tmp_path: Path) -> None:
    """One approval per event (the first VM in Resources), after its hook; the event starts then, not at NotBefore."""
    policy = ApprovalPolicy(
        multi_vm="approve-without-waiting",
        enabled=True,
        event_types=("Reboot",),
        pre_hook=_hook(tmp_path, "sys.exit(0)"),
    )
    with SimServer(load_scenario("approve-drain"), speed=SPEED).start() as sim, _fleet(sim, tmp_path, policy) as agents:
        wait_for(lambda: bool(_affected(sim)) and all(r["started_at"] for r in _affected(sim)))
        affected = _affected(sim)
        resources = affected[0]["resources"]
        wait_for(lambda: all(_decisions(agents[name]) for name in resources))
        approvals = sim.approvals()
        by_vm = {name: _decisions(agents[name]) for name in sim.vm_names}
    fact = affected[0]
    assert [(vm, how) for _, vm, _, how in approvals] == [(resources[0], "http")]
    assert fact["approved_by"] == resources[0]
    assert fact["started_at"] == fact["approved_at"] < fact["not_before"]
    (approved,) = by_vm[resources[0]]
    assert approved["decision"] == "approved"
    assert approved["rule"] == "first-in-resources"
    assert approved["hook_exit"] == 0 and approved["http_status"] == 200
    assert approved["hook_ms"] is not None
    # The approval (so the start) came after the hook had ended and before the collector heard IMDS answer it.
    assert fact["approved_at"] - timedelta(milliseconds=1) <= records.parse_time(approved["decided_at"])
    assert (
        records.parse_time(approved["decided_at"]) - timedelta(milliseconds=approved["hook_ms"]) <= fact["approved_at"]
    )
    for name in resources[1:]:
        (left,) = by_vm[name]
        assert left["decision"] == "left_to_approver" and left["approver"] == resources[0]
        assert left["hook_exit"] == 0 and left["http_status"] is None
    for name in set(sim.vm_names) - set(resources):
        assert by_vm[name] == []  # not in Resources: not this VM's event to judge
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert sorted(c["stdin"]["vm_name"] for c in calls) == sorted(resources)  # each VM drained itself
    assert {c["env_id"] for c in calls} == {fact["event_id"]} == {c["stdin"]["event_id"] for c in calls}


def _policy_of(scenario: str, tmp_path: Path) -> ApprovalPolicy:
    """The [collector_approval] table a built-in scenario gives its collectors, as the demo hands it over."""
    table = load_scenario(scenario).collector_approval
    assert table is not None
    return load_approval(write_approval_config(tmp_path / f"{scenario}.toml", table))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "decision"), [("approve-hook-fails", "hook_failed"), ("approve-hook-hangs", "hook_timeout")]
)
def test_a_failing_or_hanging_hook_approves_nothing(tmp_path: Path, scenario: str, decision: str) -> None:
    """The event waits for NotBefore; the hook's end (its exit code, or killed at its timeout) is recorded."""
    policy = _policy_of(scenario, tmp_path)
    with SimServer(load_scenario(scenario), speed=SPEED).start() as sim, _fleet(sim, tmp_path, policy) as agents:
        wait_for(lambda: bool(_affected(sim)) and all(r["started_at"] for r in _affected(sim)))
        resources = _affected(sim)[0]["resources"]
        wait_for(lambda: all(_decisions(agents[name]) for name in resources))
        approvals = sim.approvals()
        fact = _affected(sim)[0]
        first = _decisions(agents[resources[0]])
    assert approvals == []
    assert fact["approved_at"] is None
    assert fact["started_at"] >= fact["not_before"]
    (record,) = first
    assert record["decision"] == decision and record["http_status"] is None
    assert record["hook_exit"] == (1 if decision == "hook_failed" else -9)
    if decision == "hook_timeout":
        assert record["hook_ms"] >= policy.hook_timeout_s * 1000


@pytest.mark.slow
def test_each_affected_vm_approves_for_itself_on_a_shared_host(tmp_path: Path) -> None:
    """With approver = "self" and approval "each", one approval per affected VM releases the event."""
    policy = _policy_of("shared-host", tmp_path)
    with SimServer(load_scenario("shared-host"), speed=SPEED).start() as sim, _fleet(sim, tmp_path, policy) as agents:
        wait_for(lambda: bool(_affected(sim)) and all(r["started_at"] for r in _affected(sim)))
        fact = _affected(sim)[0]
        # IMDS answers the approval before the collector commits its record of it: wait for the records too.
        wait_for(lambda: all(_decisions(agents[name]) for name in fact["resources"]))
        approvals = sim.approvals()
        records = {name: _decisions(agents[name]) for name in fact["resources"]}
    assert sorted(vm for _, vm, _, how in approvals if how == "http") == sorted(fact["resources"])
    assert fact["started_at"] < fact["not_before"]
    for rows in records.values():
        assert [(r["decision"], r["rule"], r["hook_exit"]) for r in rows] == [("approved", "self", None)]


@pytest.mark.slow
def test_an_event_the_policy_does_not_cover_is_never_approved(tmp_path: Path) -> None:
    """A Reboot under a policy for Redeploy only: no hook, no approval, and a not_covered record naming the rule."""
    policy = ApprovalPolicy(
        multi_vm="approve-without-waiting",
        enabled=True,
        event_types=("Redeploy",),
        pre_hook=_hook(tmp_path, "sys.exit(0)"),
    )
    with SimServer(_scenario(notice=60.0), speed=SPEED).start() as sim, _fleet(sim, tmp_path, policy) as agents:
        wait_for(lambda: bool(_affected(sim)) and all(r["started_at"] for r in _affected(sim)))
        resources = _affected(sim)[0]["resources"]
        wait_for(lambda: all(_decisions(agents[name]) for name in resources))
        approvals = sim.approvals()
        records = [r for name in resources for r in _decisions(agents[name])]
    assert approvals == []
    assert not (tmp_path / "calls.jsonl").exists()
    assert {(r["decision"], r["rule"]) for r in records} == {("not_covered", "event_type")}


@pytest.mark.slow
def test_the_post_hook_runs_once_the_event_is_gone(tmp_path: Path) -> None:
    """Each VM whose pre-hook ran runs its post-event hook (to undrain) once, after the event left the document."""
    post = tmp_path / "post"
    post.mkdir()
    policy = ApprovalPolicy(
        enabled=True,
        event_types=("Reboot",),
        pre_hook=_hook(tmp_path, "sys.exit(0)"),
        post_hook=_hook(post, "sys.exit(0)"),
        multi_vm="approve-without-waiting",
    )
    with SimServer(_scenario(ends=20), speed=SPEED).start() as sim, _fleet(sim, tmp_path, policy) as agents:
        wait_for(lambda: bool(_affected(sim)) and all(r["ended_at"] for r in _affected(sim)))
        fact = _affected(sim)[0]
        wait_for(lambda: all(len(_decisions(agents[name])) == 2 for name in fact["resources"]))
        # a few more polls of each VM (no fixed pause): the post-hook runs once, not once per poll
        polled = {name: agents[name].polls for name in fact["resources"]}
        wait_for(lambda: all(agents[name].polls >= polled[name] + 5 for name in polled))
        by_vm = {name: _decisions(agents[name]) for name in fact["resources"]}
    for rows in by_vm.values():
        assert [r["decision"] for r in rows] == [rows[0]["decision"], "post_hook"]
        assert rows[1]["hook_exit"] == 0
    calls = [json.loads(line) for line in (post / "calls.jsonl").read_text().splitlines()]
    assert sorted(c["stdin"]["vm_name"] for c in calls) == sorted(fact["resources"])
    assert {c["stdin"]["phase"] for c in calls} == {"post"}


def test_an_approval_sent_before_a_crash_is_recorded_at_the_restart(tmp_path: Path) -> None:
    """The ledger said "sending" when the collector died: the restart records the approval (no HTTP status heard)
    and neither decides the event again nor runs its hook again."""
    policy = ApprovalPolicy(
        multi_vm="approve-without-waiting",
        enabled=True,
        event_types=("Reboot",),
        pre_hook=_hook(tmp_path, "sys.exit(0)"),
    )
    with SimServer(_scenario(), speed=SPEED).start() as sim:
        settings = CollectorSettings(
            imds_url=sim.vm_base_url("web-0"), state_dir=tmp_path / "web-0", min_request_interval=0.0
        )
        agent = build_agent(settings, approval=policy)
        try:
            wait_for(lambda: bool(_affected(sim)))
            agent.poll_once()  # sees the event, runs the hook and approves (no approver thread: inline)
            event_id = _affected(sim)[0]["event_id"]
            ledger = json.loads(agent.outbox.get_state(LEDGER_KEY) or "{}")
            assert ledger[event_id]["stage"] == "done"  # decided and approved in this (inline) run
            # As if the collector had died between the POST and storing its record:
            (approved,) = _decisions(agent)
            outcome = {k: approved[k] for k in ("decision", "rule", "approver", "decided_at", "hook_exit", "hook_ms")}
            ledger[event_id] = {**ledger[event_id], "stage": "sending", "outcome": {**outcome, "http_status": None}}
            agent.outbox.set_state(LEDGER_KEY, json.dumps(ledger))
            agent.outbox.remove([approved["seq"]])
        finally:
            agent.close()
        again = build_agent(settings, approval=policy)
        try:
            again.poll_once()
            rows = _decisions(again)
        finally:
            again.close()
    assert [(r["decision"], r["http_status"], r["hook_exit"]) for r in rows] == [("approved", None, 0)]
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 1  # the hook ran once, before the crash


@pytest.mark.slow
def test_a_hook_cut_short_by_a_restart_is_recorded_once_the_event_went_on(tmp_path: Path) -> None:
    """A drain-only VM whose collector died in its hook (the approver's release rebooted it): after the restart the
    event is Started, so the hook is not run again and the decision is hook_interrupted, with the rule it had."""
    policy = ApprovalPolicy(
        multi_vm="approve-without-waiting",
        enabled=True,
        event_types=("Reboot",),
        pre_hook=_hook(tmp_path, "sys.exit(0)"),
    )
    with SimServer(_scenario(), speed=SPEED).start() as sim:
        # web-2 is the second VM of fault domain 0: it drains, web-0 approves.
        settings = CollectorSettings(
            imds_url=sim.vm_base_url("web-2"), state_dir=tmp_path / "web-2", min_request_interval=0.0
        )
        agent = build_agent(settings, approval=policy)
        try:
            wait_for(lambda: bool(_affected(sim)))
            agent.poll_once()
            event_id = _affected(sim)[0]["event_id"]
            (left,) = _decisions(agent)
            assert left["decision"] == "left_to_approver"
            ledger = json.loads(agent.outbox.get_state(LEDGER_KEY) or "{}")
            # As if the collector had died while its hook ran:
            ledger[event_id] = {**ledger[event_id], "stage": "hook", "rule": left["rule"], "approver": left["approver"]}
            agent.outbox.set_state(LEDGER_KEY, json.dumps(ledger))
            agent.outbox.remove([left["seq"]])
        finally:
            agent.close()
        # The event goes on: web-0 approves it (over HTTP, as its collector would).
        ImdsClient(sim.vm_base_url("web-0")).approve(threading.Event(), [event_id], None)
        wait_for(lambda: all(r["started_at"] for r in _affected(sim)))
        again = build_agent(settings, approval=policy)
        try:
            again.poll_once()
            rows = _decisions(again)
        finally:
            again.close()
    assert [(r["decision"], r["rule"], r["approver"], r["hook_exit"]) for r in rows] == [
        ("hook_interrupted", "first-in-resources", "web-0", None)
    ]
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 1  # not run again once the event went on
