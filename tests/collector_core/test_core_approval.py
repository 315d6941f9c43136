"""The approval policy: its decision (pure, property-tested), its ``[approval]`` table, and the POST body."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.approval import ACT, APPROVABLE_TYPES, DRAIN_ONLY, SKIP, ApprovalPolicy, decide, parse_policy
from collector.imds import approval_body
from collector.model import Event
from collector.settings import CollectorSettings, load_approval, load_settings
from sevents.errors import ConfigError
from simulator import BUILTIN_SCENARIOS, load_scenario
from tests.tiers import examples

NAMES = ("vm0", "vm1", "VM2", "other")
NOW = datetime(2026, 1, 1, 3, 0, tzinfo=UTC)
TYPES = (*APPROVABLE_TYPES, "Other")


def _event(**overrides: Any) -> Event:
    values: dict[str, Any] = {
        "event_id": "E",
        "event_type": "Reboot",
        "resource_type": "VirtualMachine",
        "resources": ("vm0", "vm1"),
        "status": "Scheduled",
        "not_before": datetime(2026, 1, 1, tzinfo=UTC),
        "description": "",
        "event_source": "Platform",
        "duration_s": 5,
    }
    return Event(**{**values, **overrides})


events = st.builds(
    _event,
    event_type=st.sampled_from(TYPES),
    resources=st.lists(st.sampled_from(NAMES), max_size=3).map(tuple),
    status=st.sampled_from(("Scheduled", "Started", "Canceled")),
    event_source=st.sampled_from((None, "Platform", "User")),
    duration_s=st.one_of(st.none(), st.integers(-1, 100_000)),
)
policies = st.builds(
    ApprovalPolicy,
    enabled=st.booleans(),
    event_types=st.lists(st.sampled_from(TYPES), max_size=3).map(tuple),
    sources=st.lists(st.sampled_from(("Platform", "User")), min_size=1, max_size=2).map(tuple),
    max_duration_s=st.one_of(st.none(), st.integers(0, 100_000)),
    approver=st.sampled_from(("first-in-resources", "self")),
)


@settings(max_examples=examples(2000))
@given(policies, events, st.sampled_from(NAMES))
def test_nothing_is_approved_unless_the_policy_covers_it(policy: ApprovalPolicy, event: Event, vm: str) -> None:
    """Whatever the policy and the event, ACT implies: on, Scheduled, this VM in Resources, every limit met."""
    decision = decide(policy, event, vm, NOW)
    if decision.action == SKIP:
        return
    assert decision.hooks  # the user-initiated preset (off here) is the only way past the rules without a hook
    assert policy.enabled and event.status == "Scheduled"
    assert vm.lower() in (r.lower() for r in event.resources)
    assert event.event_type in policy.event_types
    assert event.event_source is None or event.event_source in policy.sources
    limit = policy.max_duration_s
    assert limit is None or (event.duration_s is not None and 0 <= event.duration_s <= limit)
    if decision.action == ACT:
        assert policy.approver == "self" or event.resources[0].lower() == vm.lower()


@settings(max_examples=examples(1000))
@given(events)
def test_exactly_one_affected_vm_approves_under_first_in_resources(event: Event) -> None:
    """Of all the VMs an event names, exactly one acts when the policy covers it and says not to wait for the
    others; the rest drain only. By default an event naming several VMs waits for the coordinator: none acts."""
    policy = ApprovalPolicy(enabled=True, event_types=TYPES, multi_vm="approve-without-waiting")
    affected = sorted({r.lower() for r in event.resources})
    actions = [decide(policy, event, vm, NOW).action for vm in affected]
    waiting = [decide(ApprovalPolicy(enabled=True, event_types=TYPES), event, vm, NOW).action for vm in affected]
    if event.status != "Scheduled" or not affected:
        assert set(actions) <= {SKIP} and set(waiting) <= {SKIP}
    else:
        assert actions.count(ACT) == 1 and set(actions) <= {ACT, DRAIN_ONLY}
        assert waiting == actions if len(affected) == 1 else set(waiting) == {DRAIN_ONLY}


def test_the_default_policy_is_off() -> None:
    """No table: nothing is ever approved."""
    assert decide(ApprovalPolicy(), _event(), "vm0", NOW).action == SKIP


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "collector.toml"
    path.write_text('[collector]\nstate_dir = "/tmp/x"\n\n' + text)
    return path


def test_an_approval_table_turns_the_policy_on(tmp_path: Path) -> None:
    """Every key of the issue's table is read, hooks as argv lists."""
    path = _write(
        tmp_path,
        "[approval]\n"
        'event_types = ["Reboot", "Redeploy"]\nsources = ["Platform"]\nmax_duration_s = 30\n'
        'pre_hook = ["/usr/local/bin/drain", "--now"]\npost_hook = ["/usr/local/bin/undrain"]\n'
        'hook_timeout_s = 120\napprover = "self"\n',
    )
    policy = load_approval(path)
    assert policy == ApprovalPolicy(
        enabled=True,
        event_types=("Reboot", "Redeploy"),
        sources=("Platform",),
        max_duration_s=30,
        pre_hook=("/usr/local/bin/drain", "--now"),
        post_hook=("/usr/local/bin/undrain",),
        hook_timeout_s=120.0,
        approver="self",
    )
    assert load_approval(_write(tmp_path, "")) == ApprovalPolicy()
    assert load_approval(None) == ApprovalPolicy()


def test_a_bad_policy_lists_every_problem(tmp_path: Path) -> None:
    """A policy with mistakes is refused whole, each mistake named: never a silent approve-all."""
    path = _write(
        tmp_path,
        '[approval]\nevent_types = ["Reboot", "Reboto"]\nsources = []\nmax_duration_s = -1\n'
        'pre_hook = "drain.sh --now"\nhook_timeout_s = 0\napprover = "anyone"\nextra = 1\n',
    )
    with pytest.raises(ConfigError) as raised:
        load_approval(path)
    text = "\n".join(raised.value.problems)
    for word in ("Reboto", "sources", "max_duration_s", "pre_hook", "hook_timeout_s", "approver", "extra"):
        assert word in text
    _, problems = parse_policy({}, "t")
    assert any("event_types is required" in p for p in problems)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("2017-03-01", b'{"DocumentIncarnation":"5","StartRequests":[{"EventId":"E"}]}'),
        ("2017-11-01", b'{"DocumentIncarnation":"5","StartRequests":[{"EventId":"E"}]}'),
        ("2019-08-01", b'{"StartRequests":[{"EventId":"E"}]}'),
        ("2020-07-01", b'{"StartRequests":[{"EventId":"E"}]}'),
    ],
)
def test_the_approval_body_follows_the_docs_of_each_version(version: str, expected: bytes) -> None:
    """The 2017 samples also send DocumentIncarnation (as a string); newer versions StartRequests alone."""
    assert approval_body(["E"], version, 5) == expected


def test_a_file_with_only_an_approval_table_leaves_the_settings_at_their_defaults(tmp_path: Path) -> None:
    """Without a [collector] table the collector's settings are its defaults; settings written outside any table
    are refused (they used to be read as the collector's, and a misspelt table was then silently ignored)."""
    path = tmp_path / "collector.toml"
    path.write_text('[approval]\nevent_types = ["Reboot"]\n')
    assert load_settings(file=path, env={}).poll_interval == CollectorSettings().poll_interval
    assert load_approval(path).event_types == ("Reboot",)
    path.write_text('poll_interval = 2\n\n[approval]\nevent_types = ["Reboot"]\n')
    with pytest.raises(ConfigError, match=r"'poll_interval' is outside any table; .* under \[collector\]"):
        load_settings(file=path, env={})
    assert load_approval(path).event_types == ("Reboot",)  # the policy alone reads as before


def test_every_scenario_policy_is_a_valid_approval_table() -> None:
    """The [collector_approval] tables of the built-in scenarios pass the collector's own validation."""
    tables = {name: load_scenario(name).collector_approval for name in BUILTIN_SCENARIOS}
    given = {name: table for name, table in tables.items() if table is not None}
    assert {"demo", "approve-drain", "approve-hook-fails", "approve-hook-hangs", "shared-host"} <= set(given)
    for name, table in given.items():
        assert parse_policy(table, name)[1] == [], name
