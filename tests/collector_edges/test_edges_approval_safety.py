"""Observe before acting, windows and users' own reboots: the real collector against the loopback IMDS, which
records every approval POSTed to it."""

from __future__ import annotations

import json
import logging
import sys
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from collector.approval import ApprovalPolicy
from collector.process import Collector
from collector.settings import CollectorSettings
from collector.windows import DAYS, parse_window
from collector.wiring import build_agent
from tests.collector_edges.fake_imds import FakeImds, event
from tests.helpers import wait_for


def _decisions(agent: Collector) -> list[dict[str, Any]]:
    rows = [json.loads(r.payload) for r in agent.outbox.pending(limit=10_000)]
    return [r for r in rows if r["record_type"] == "approval"]


def _poll(settings: CollectorSettings, policy: ApprovalPolicy, **kwargs: Any) -> list[dict[str, Any]]:
    """One poll of a fresh collector (hooks and approvals inline); the approval records it stored."""
    agent = build_agent(settings, approval=policy, **kwargs)
    try:
        agent.poll_once()
        return _decisions(agent)
    finally:
        agent.close()


def _hook(tmp_path: Path, code: str = "") -> tuple[str, ...]:
    """A hook that notes each run in ``runs`` (then runs ``code``)."""
    runs = tmp_path / "runs"
    return (sys.executable, "-c", f"open({str(runs)!r}, 'a').write('run\\n'); {code}")


def _runs(tmp_path: Path) -> int:
    runs = tmp_path / "runs"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def _user(event_id: str, status: str = "Scheduled", event_type: str = "Reboot") -> dict[str, Any]:
    return {
        **event(event_id, status, event_type),
        "EventSource": "User",
        "Description": "Virtual machine is being rebooted",
    }


def test_a_dry_run_records_every_decision_and_sends_nothing(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    """The covered Reboot is recorded as dry_run_approved (who would have approved), the Freeze the policy does not
    cover as not_covered; no hook runs, IMDS receives no POST."""
    policy = ApprovalPolicy(enabled=True, event_types=("Reboot",), pre_hook=_hook(tmp_path), dry_run=True)
    imds.set_document(1, [event("R1"), event("F1", event_type="Freeze")])
    rows = _poll(settings, policy)
    assert sorted((r["event_id"], r["decision"], r["rule"], r["hook_exit"], r["http_status"]) for r in rows) == [
        ("F1", "not_covered", "event_type", None, None),
        ("R1", "dry_run_approved", "first-in-resources", None, None),
    ]
    assert imds.posts == [] and _runs(tmp_path) == 0


def test_a_dry_run_runs_the_hooks_only_when_asked(imds: FakeImds, settings: CollectorSettings, tmp_path: Path) -> None:
    """dry_run_hooks: the pre-hook runs (and its failure is recorded as such), still nothing is POSTed."""
    policy = ApprovalPolicy(
        enabled=True, event_types=("Reboot",), pre_hook=_hook(tmp_path), dry_run=True, dry_run_hooks=True
    )
    imds.set_document(1, [event("R1")])
    (row,) = _poll(settings, policy)
    assert (row["decision"], row["hook_exit"], row["http_status"]) == ("dry_run_approved", 0, None)
    failing = replace(policy, pre_hook=_hook(tmp_path, "raise SystemExit(4)"))
    imds.set_document(2, [event("R2")])
    (row,) = _poll(replace(settings, state_dir=tmp_path / "other"), failing)
    assert (row["decision"], row["hook_exit"]) == ("hook_failed", 4)
    assert imds.posts == [] and _runs(tmp_path) == 2


def _window_not_today(now: datetime) -> str:
    return f"{DAYS[(now.weekday() + 3) % 7].title()} 00:00-24:00"


def test_outside_a_maintenance_window_nothing_is_approved(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    """A window on another day: the event is left to the platform (no hook, no POST), recorded with rule window;
    the same event inside a window is approved."""
    window = parse_window(_window_not_today(datetime.now(UTC)))
    assert not isinstance(window, str)
    policy = ApprovalPolicy(enabled=True, event_types=("Reboot",), pre_hook=_hook(tmp_path), windows=(window,))
    imds.set_document(1, [event("R1")])
    (row,) = _poll(settings, policy)
    assert (row["decision"], row["rule"], row["approver"], row["hook_exit"]) == ("not_covered", "window", "", None)
    assert imds.posts == [] and _runs(tmp_path) == 0
    always = parse_window("daily 00:00-24:00")
    assert not isinstance(always, str)
    (row,) = _poll(replace(settings, state_dir=tmp_path / "inside"), replace(policy, windows=(always,)))
    assert (row["decision"], row["http_status"]) == ("approved", 200)
    assert imds.approved() == ["R1"]


def test_a_window_that_closes_during_the_drain_approves_nothing(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    """Decided inside the window; the hook (a long drain) ends after it closed: no POST, recorded with rule window
    and the hook's exit."""
    closed = tmp_path / "closed"
    inside = datetime(2026, 1, 5, 4, 59, tzinfo=UTC)  # Monday, a minute before the window's end

    def clock() -> datetime:
        return inside + timedelta(minutes=2) if closed.exists() else inside

    window = parse_window("Mon-Fri 02:00-05:00")
    assert not isinstance(window, str)
    hook = _hook(tmp_path, f"open({str(closed)!r}, 'w').close()")  # the drain took the window's last minute
    policy = ApprovalPolicy(enabled=True, event_types=("Reboot",), pre_hook=hook, windows=(window,))
    imds.set_document(1, [event("R1")])
    (row,) = _poll(settings, policy, clock=clock)
    assert (row["decision"], row["rule"], row["hook_exit"], row["http_status"]) == ("not_covered", "window", 0, None)
    assert imds.posts == []


def test_a_users_reboot_is_approved_by_the_first_poll_that_sees_it(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    """With approve_user_initiated (and nothing else: no event_types, no hook, a window on another day), the daemon
    POSTs the approval before its next poll: the first poll that could know of the event is the one that acts."""
    window = parse_window(_window_not_today(datetime.now(UTC)))
    assert not isinstance(window, str)
    policy = ApprovalPolicy(enabled=True, approve_user_initiated=True, windows=(window,), pre_hook=_hook(tmp_path))
    agent = build_agent(replace(settings, poll_interval=1.0), approval=policy)
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(stop,))
    runner.start()
    try:
        wait_for(imds.scheduled, 30, what="a first poll", interval=0.01)
        imds.set_document(7, [_user("U1")])
        wait_for(lambda: imds.posts and _decisions(agent), 30, what="the approval", interval=0.01)
        saw = [s.at for s in imds.scheduled() if s.incarnation == 7]
        posted_at = imds.posts[0][0]
        rows = _decisions(agent)
    finally:
        stop.set()
        runner.join(timeout=30)
        agent.close()
    assert imds.approved() == ["U1"]
    assert len([at for at in saw if at < posted_at]) == 1  # approved between the first poll that saw it and the next
    assert [(r["decision"], r["rule"], r["approver"], r["hook_exit"], r["http_status"]) for r in rows] == [
        ("approved", "user_initiated", "web-0", None, 200)
    ]
    assert _runs(tmp_path) == 0


def test_user_initiated_events_without_the_preset_or_already_started_are_not_approved(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    """Without the preset a user's Reboot waits (a policy for Redeploy only: not covered); with it, an event that
    appears already Started (Azure's automaticallyApprove) is recorded and never approved again; a user's Terminate
    keeps its notice."""
    imds.set_document(1, [_user("U1")])
    (row,) = _poll(settings, ApprovalPolicy(enabled=True, event_types=("Redeploy",)))
    assert (row["decision"], row["rule"]) == ("not_covered", "event_type")
    imds.set_document(2, [_user("U2", status="Started"), _user("U3", event_type="Terminate")])
    rows = _poll(
        replace(settings, state_dir=tmp_path / "preset"), ApprovalPolicy(enabled=True, approve_user_initiated=True)
    )
    assert sorted((r["event_id"], r["decision"], r["rule"]) for r in rows) == [
        ("U2", "not_covered", "scheduled"),
        ("U3", "not_covered", "event_type"),
    ]
    assert imds.posts == []


def test_the_first_start_says_once_per_state_dir_that_polling_turns_scheduled_events_on(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One warning at the first start of a state directory (none at the next), naming the preset that fixes it;
    with the preset on, it says the preset approves them."""

    def notices(state: str, policy: ApprovalPolicy | None = None) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.INFO):
            build_agent(replace(settings, state_dir=tmp_path / state), approval=policy).close()
        return [r.getMessage() for r in caplog.records if "turns Scheduled Events on" in r.getMessage()]

    (first,) = notices("a")
    assert "waits up to its NotBefore" in first and "approve_user_initiated = true" in first
    assert notices("a") == []
    (with_preset,) = notices("b", ApprovalPolicy(enabled=True, approve_user_initiated=True))
    assert "approves them at the first poll" in with_preset
