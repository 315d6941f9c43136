"""Acting safely, pure parts: maintenance windows, the user-initiated preset, dry run and hook settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.approval import ACT, SKIP, USER_INITIATED, ApprovalPolicy, decide, parse_policy
from collector.hooks import ALLOWED_ENV, hook_environment
from collector.model import Event
from collector.windows import Window, parse_window, within
from tests.tiers import examples

MONDAY = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday, 00:00 UTC


def _window(text: str) -> Window:
    window = parse_window(text)
    assert isinstance(window, Window), window
    return window


def _event(**overrides: Any) -> Event:
    values: dict[str, Any] = {
        "event_id": "E",
        "event_type": "Reboot",
        "resource_type": "VirtualMachine",
        "resources": ("vm0",),
        "status": "Scheduled",
        "not_before": MONDAY,
        "description": "",
        "event_source": "Platform",
        "duration_s": 5,
    }
    return Event(**{**values, **overrides})


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        ("Mon-Fri 02:00-05:00", [(0, "02:00"), (4, "04:59")], [(0, "05:00"), (0, "01:59"), (5, "03:00")]),
        ("Sat,Sun 00:00-24:00", [(5, "00:00"), (6, "23:59")], [(4, "23:59"), (0, "00:00")]),
        ("Sat 22:00-02:00", [(5, "22:00"), (6, "01:59")], [(5, "21:59"), (6, "02:00"), (6, "22:30")]),
        ("Fri-Mon 12:00-13:00", [(4, "12:00"), (6, "12:30"), (0, "12:59")], [(1, "12:30"), (3, "12:30")]),
        ("daily 00:30-01:00", [(d, "00:45") for d in range(7)], [(3, "01:00")]),
    ],
)
def test_a_window_holds_its_days_and_hours_in_utc(
    text: str, inside: list[tuple[int, str]], outside: list[tuple[int, str]]
) -> None:
    """The start is in the window, the end is not; a span ending before its start runs into the next day."""
    window = _window(text)

    def at(day: int, hhmm: str) -> datetime:
        hours, minutes = (int(p) for p in hhmm.split(":"))
        return MONDAY + timedelta(days=day, hours=hours, minutes=minutes)

    assert all(window.holds(at(*moment)) for moment in inside)
    assert not any(window.holds(at(*moment)) for moment in outside)
    # The same moment written in another zone is the same moment.
    local = at(*inside[0]).astimezone(timezone(timedelta(hours=-7)))
    assert window.holds(local)


@pytest.mark.parametrize(
    "text", ["Mon-Fri", "Mon 2-5", "Someday 02:00-05:00", "Mon 25:00-26:00", "Mon 02:60-03:00", "Mon 02:00-02:00"]
)
def test_a_window_that_cannot_be_read_is_a_problem_not_a_guess(text: str) -> None:
    """Each malformed window is refused with a sentence saying what the form is."""
    assert isinstance(parse_window(text), str)


@settings(max_examples=examples(1000))
@given(
    st.lists(st.sampled_from(["Mon-Fri 02:00-05:00", "Sun 23:00-01:00", "Wed 00:00-24:00"]), max_size=2),
    st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC)),
    st.sampled_from(("Platform", "User", None)),
    st.booleans(),
)
def test_outside_every_window_nothing_but_a_users_own_reboot_is_approved(
    texts: list[str], now: datetime, source: str | None, preset: bool
) -> None:
    """Whatever the moment, ACT outside the windows only for a user-initiated event under the preset."""
    windows = tuple(_window(t) for t in texts)
    policy = ApprovalPolicy(
        enabled=True, event_types=("Reboot",), windows=windows, approver="self", approve_user_initiated=preset
    )
    decision = decide(policy, _event(event_source=source), "vm0", now)
    if not within(windows, now):
        assert decision.action == SKIP or (preset and source == "User" and decision.rule == USER_INITIATED)
        if source != "User" or not preset:
            assert decision.rule == "window"
    else:
        assert decision.action == ACT


def test_the_user_initiated_preset_approves_a_users_reboot_or_redeploy_at_once_and_nothing_else() -> None:
    """No hook, whatever the windows and event_types; never a Terminate (its notice is the user's own), never an
    event already Started (Azure approved it), never another VM's event, never a platform event."""
    policy = ApprovalPolicy(enabled=True, approve_user_initiated=True, windows=(_window("Sun 00:00-01:00"),))
    monday_noon = MONDAY + timedelta(hours=12)
    for kind in ("Reboot", "Redeploy"):
        decision = decide(policy, _event(event_type=kind, event_source="User"), "VM0", monday_noon)
        assert (decision.action, decision.rule, decision.approver, decision.hooks) == (
            ACT,
            USER_INITIATED,
            "VM0",
            False,
        )
    assert decide(policy, _event(event_type="Terminate", event_source="User"), "vm0", monday_noon).rule == "event_type"
    assert decide(policy, _event(event_source="Platform"), "vm0", monday_noon).rule == "event_type"
    started = decide(policy, _event(event_source="User", status="Started"), "vm0", monday_noon)
    assert (started.action, started.rule) == (SKIP, "scheduled")
    other = decide(policy, _event(event_source="User", resources=("vm1",)), "vm0", monday_noon)
    assert (other.action, other.rule) == (SKIP, "in_resources")
    off = ApprovalPolicy(enabled=True, event_types=("Reboot",), sources=("Platform",))
    assert decide(off, _event(event_source="User"), "vm0", monday_noon).rule == "source"


def test_the_new_keys_are_read_and_checked() -> None:
    """Every key of the issue's table is read; the preset alone is a complete policy; mistakes are each named."""
    table = {
        "approve_user_initiated": True,
        "windows": ["Mon-Fri 02:00-05:00", "Sat 22:00-02:00"],
        "dry_run": True,
        "dry_run_hooks": True,
        "hook_env": ["HTTPS_PROXY", "DRAIN_TOKEN_FILE"],
        "hook_output_bytes": 100,
        "log_hook_output": True,
    }
    policy, problems = parse_policy(table, "t")
    assert problems == []
    assert policy.enabled and policy.approve_user_initiated and policy.dry_run and policy.dry_run_hooks
    assert policy.event_types == () and len(policy.windows) == 2
    assert policy.hook_env == ("HTTPS_PROXY", "DRAIN_TOKEN_FILE") and policy.hook_output_bytes == 100
    assert policy.log_hook_output and policy.runs_hooks
    assert not ApprovalPolicy(dry_run=True).runs_hooks and ApprovalPolicy().runs_hooks
    bad = {
        "event_types": ["Reboot"],
        "windows": ["weekdays"],
        "dry_run": "yes",
        "hook_env": ["A=B"],
        "hook_output_bytes": -1,
        "approve_user_initiated": 1,
    }
    _, problems = parse_policy(bad, "t")
    text = "\n".join(problems)
    for word in ("windows", "dry_run", "hook_env", "hook_output_bytes", "approve_user_initiated"):
        assert word in text
    _, problems = parse_policy({"event_types": ["Reboot"], "windows": []}, "t")
    assert any("at least one window" in p for p in problems)


def test_a_hooks_environment_is_the_allow_list_and_its_event_fields() -> None:
    """Of the collector's environment only PATH, HOME, LANG, TZ and the listed names pass; SEVENTS_* come from the
    event alone (the collector's own SEVENTS_* settings, secrets among them, do not)."""
    base = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "LISTED": "1",
        "SEVENTS_WEBHOOK_URL": "https://hooks.example.com/T0K3N",
        "SEVENTS_EVENT_ID": "forged",
        "OTHER": "x",
    }
    env = hook_environment({"event_id": "E", "resources": ["a", "b"], "duration_s": None}, base, ("LISTED",))
    assert env == {
        **{k: base[k] for k in ALLOWED_ENV if k in base},
        "LISTED": "1",
        "SEVENTS_EVENT_ID": "E",
        "SEVENTS_RESOURCES": "a,b",
        "SEVENTS_DURATION_S": "",
    }
