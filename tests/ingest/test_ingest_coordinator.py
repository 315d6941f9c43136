"""The coordinator (``sevents-ingest coordinate``): approval after every affected VM is ready, through a loopback
Maintenance API (bearer token from a loopback managed identity), one lease per event: a blob in Azurite, or a
SQLite row in a directory (``lease_backend = "local"``, nothing from Azure); each test runs with both.

The collectors' records go in through the ingest's handler, at the moment their hooks would have ended (1, 3 and
5 s of simulated hook time); the coordinator is polled in between, as its loop does every poll_interval.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ingest.azure_identity import make_credential
from ingest.coordinator import Coordinator, LeaseLost, Store, judge, make_leases
from ingest.coordinator_azure import Acknowledger
from ingest.coordinator_leases import LocalLeases
from ingest.coordinator_settings import CoordinatorSettings, load, problems
from ingest.handler import Handler
from sevents.errors import ConfigError
from tests.eventhubs.azurite import AZURITE, running_azurite
from tests.helpers import FakeClock, wait_for

from .conftest import deliveries
from .coordinator_data import appeared, decided, decisions, event
from .fake_arg import FakeArg
from .fake_maintenance import FakeMaintenance

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("web-0", "web-1", "web-2")
RESUMING = "resuming a decision another coordinator did not finish"  # the survivor's log line


@pytest.fixture
def arm(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeArg, FakeMaintenance]]:
    """A token endpoint (App Service managed identity) and the Maintenance API."""
    arg = FakeArg({}).start()
    maintenance = FakeMaintenance(arg.tokens).start()
    for name, value in arg.identity_env.items():
        monkeypatch.setenv(name, value)
    try:
        yield arg, maintenance
    finally:
        maintenance.close()
        arg.close()


@pytest.fixture(params=["blob", "local"])
def azure(
    request: pytest.FixtureRequest, tmp_path: Path, arm: tuple[FakeArg, FakeMaintenance]
) -> Iterator[tuple[FakeArg, FakeMaintenance, str]]:
    """``arm``, and the leases: Azurite's connection string (``blob``), or "" for a SQLite file in tmp_path/leases
    (``local``, lease_backend = "local": nothing from Azure)."""
    if request.param == "local":
        yield (*arm, "")
        return
    if not AZURITE.exists():
        pytest.skip("Azurite missing: bash scripts/setup.sh --test")
    with running_azurite(tmp_path / "azurite") as azurite:
        yield (*arm, azurite.connection_string)


def _lease_settings(connection_string: str, directory: Path) -> dict[str, Any]:
    if connection_string:
        return {"lease_connection_string": connection_string}
    return {"lease_backend": "local", "lease_dir": directory}


def _settings(
    maintenance: FakeMaintenance, connection_string: str, directory: Path, **overrides: Any
) -> CoordinatorSettings:
    base = CoordinatorSettings(
        event_types=("Reboot",),
        arm_endpoint=maintenance.url,
        credential="managed_identity",
        lease_s=15,
        poll_interval=0.2,
        name="coord-a",
        **_lease_settings(connection_string, directory),
    )
    assert problems(base) == []
    return replace(base, **overrides)


def _coordinator(s: CoordinatorSettings, ch: Any, db: str, clock: FakeClock) -> Coordinator:
    credential = make_credential(s.credential)
    acks = Acknowledger(credential, s.arm_endpoint, s.api_version, name=s.coordinator_name, timeout_s=5)
    return Coordinator(s, Store(ch, db), acks, make_leases(s), clock=clock.now)


def _whole_ms(moment: datetime) -> datetime:
    """``moment`` cut to the millisecond, as decided_at is stored: the fake clock's steps then compare exactly."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _drive(
    coordinator: Coordinator,
    handler: Handler,
    clock: FakeClock,
    timeline: list[tuple[float, dict[str, Any]]],
    until: float,
) -> dict[int, float]:
    """Store each record of ``timeline`` once the coordinator's clock reaches its offset, polling the coordinator
    at every 0.2 s step of that clock (as its loop does every poll_interval) until ``until``; returns when (real
    time.time(), as the Maintenance API records its acknowledges) each record was stored."""
    stored: dict[int, float] = {}
    while clock.elapsed < until:
        for i, (offset, record) in enumerate(timeline):
            if i not in stored and clock.elapsed >= offset:
                handler(deliveries([record], prefix=f"r{i}"))
                stored[i] = time.time()
        coordinator.once()
        clock.advance(0.2)
    return stored


def test_three_vms_are_approved_after_the_last_ready_record_and_not_before(
    ch: Any, db: str, handler: Handler, azure: tuple[FakeArg, FakeMaintenance, str], tmp_path: Path
) -> None:
    """Hooks of 1, 3 and 5 s: one acknowledge, after the third ready record, on the first VM's resource."""
    arg, maintenance, connection_string = azure
    t0 = _whole_ms(datetime.now(UTC))
    clock = FakeClock(t0)  # the hooks' 1, 3 and 5 s pass on the coordinator's clock, not the test's
    coordinator = _coordinator(_settings(maintenance, connection_string, tmp_path / "leases"), ch, db, clock)
    e = event("E-three", NAMES, t0 + timedelta(minutes=15))
    handler(deliveries([appeared(e, name, t0) for name in NAMES], prefix="appeared"))
    timeline = [
        (s, decided(e, name, "ready", t0 + timedelta(seconds=s), s)) for s, name in zip((1, 3, 5), NAMES, strict=True)
    ]
    stored = _drive(coordinator, handler, clock, timeline, until=7.0)

    (ack,) = maintenance.acks
    assert ack.status == 200 and ack.event_id == "E-three" and ack.api_version == "2025-11-01"
    assert ack.resource.endswith("/providers/Microsoft.Compute/virtualMachines/web-0")
    assert "coord-a" in ack.user_agent
    assert ack.at >= stored[2] > stored[1] > stored[0]  # after the last ready record was stored, not before
    (record,) = decisions(ch, db)
    assert (record["decision"], record["rule"], record["approver"], record["http_status"]) == (
        "approved",
        "coordinator",
        "coord-a",
        200,
    )
    decided_at = record["decided_at"].replace(tzinfo=UTC)
    assert decided_at >= t0 + timedelta(seconds=5)
    approved_after = round((decided_at - t0).total_seconds(), 2)
    print("three-VM timeline (s after t0): ready", [s for s, _ in timeline], "approved", approved_after)
    assert arg.log.tokens_issued >= 1


@pytest.mark.parametrize("third", ["hook_failed", "silent"])
def test_a_failed_or_silent_vm_leaves_the_event_to_the_platform_at_the_deadline(
    ch: Any, db: str, handler: Handler, azure: tuple[FakeArg, FakeMaintenance, str], third: str, tmp_path: Path
) -> None:
    """Two VMs ready, the third failed its hook or never reported: nothing is POSTed, and at NotBefore - deadline_s
    the coordinator records the event as left to the platform."""
    _, maintenance, connection_string = azure
    t0 = _whole_ms(datetime.now(UTC))
    clock = FakeClock(t0)
    s = _settings(maintenance, connection_string, tmp_path / "leases", deadline_s=3.0)
    coordinator = _coordinator(s, ch, db, clock)
    e = event("E-" + third, NAMES, t0 + timedelta(seconds=6))
    handler(deliveries([appeared(e, name, t0) for name in NAMES], prefix="appeared"))
    timeline = [
        (s, decided(e, name, "ready", t0 + timedelta(seconds=s), s))
        for s, name in zip((0.5, 1), NAMES[:2], strict=True)
    ]
    if third == "hook_failed":
        timeline.append((1.5, decided(e, "web-2", "hook_failed", t0 + timedelta(seconds=1.5), 1.5, hook_exit=3)))
    _drive(coordinator, handler, clock, timeline, until=4.5)

    assert maintenance.acks == []
    (record,) = decisions(ch, db)
    rule = "hook_failed" if third == "hook_failed" else "deadline"
    assert (record["decision"], record["rule"], record["approver"], record["http_status"]) == (
        "not_covered",
        rule,
        "",
        None,
    )
    assert t0 + timedelta(seconds=3) <= record["decided_at"].replace(tzinfo=UTC) < t0 + timedelta(seconds=6)


def _ready(names: tuple[str, ...], t0: datetime, **kw: Any) -> list[Any]:
    from ingest.coordinator import Report

    return [
        Report("E", f"id-{n}", n, "ready", "Reboot", t0 + timedelta(minutes=15), t0, **kw)  # type: ignore[arg-type]
        for n in names
    ]


def test_the_rules_types_sources_duration_quorum() -> None:
    """judge, pure: each rule of the [coordinator] table in turn."""
    from ingest.coordinator import APPROVE, LEAVE, WAIT, Facts

    t0 = datetime(2026, 11, 21, 2, 0, tzinfo=UTC)
    s = CoordinatorSettings(event_types=("Reboot",), max_duration_s=60, lease_connection_string="x")
    facts = Facts(NAMES, "Platform", 30, False)
    two = _ready(NAMES[:2], t0)
    assert judge(s, two, facts, t0).action == WAIT
    assert judge(replace(s, quorum="2"), two, facts, t0).action == APPROVE
    assert judge(s, _ready(NAMES, t0), facts, t0).action == APPROVE
    assert judge(s, _ready(NAMES, t0), replace(facts, event_source="User"), t0).action == APPROVE  # both by default
    assert judge(
        replace(s, sources=("Platform",)), _ready(NAMES, t0), replace(facts, event_source="User"), t0
    ).rule == ("source")
    assert judge(s, _ready(NAMES, t0), replace(facts, duration_s=600), t0).rule == "duration"
    assert judge(s, _ready(NAMES, t0), replace(facts, over=True), t0).rule == "scheduled"
    assert judge(replace(s, event_types=("Freeze",)), _ready(NAMES, t0), facts, t0).rule == "event_type"
    late = t0 + timedelta(minutes=14)
    assert (judge(s, two, facts, late).action, judge(s, two, facts, late).rule) == (LEAVE, "deadline")
    assert judge(replace(s, windows=("Sat 22:00-23:00",)), _ready(NAMES, t0), facts, t0).rule == "window"
    assert judge(s, _ready(NAMES, t0), None, t0).action == WAIT  # Resources unknown: wait for the transitions


def test_the_coordinator_table_lists_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "sevents.toml"
    path.write_text('[coordinator]\nevent_types = ["Reboto"]\nquorum = "most"\nlease_s = 5\ndeadline_s = -1\n')
    with pytest.raises(ConfigError) as raised:
        load(file=path, env={}, flags={})
    text = "\n".join(raised.value.problems)
    for word in ("Reboto", "quorum", "lease_s", "deadline_s", "leases"):
        assert word in text
    path.write_text('[ingest]\n\n[coordinator]\nevent_types = ["Reboot"]\nquorum = 2\n')
    s = load(file=path, env={"SEVENTS_COORDINATOR_LEASE_CONNECTION_STRING": "UseDevelopmentStorage=true"}, flags={})
    assert s.needed == 2 and s.event_types == ("Reboot",)


# -- two coordinators, one killed mid-decision ------------------------------------------------------------------


def _helper(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tests.ingest.coordinator_data", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def _start(name: str, directory: Path, config: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-c",
        "import sys; from ingest.entry import main; sys.exit(main())",
        "coordinate",
        "--config",
        str(config),
        "--clickhouse",
        f"chdb://{directory}",
        "--database",
        "sevents",
        "--name",
        name,
    ]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def test_two_coordinators_one_killed_mid_decision_acknowledge_each_event_once(
    tmp_path: Path, azure: tuple[FakeArg, FakeMaintenance, str]
) -> None:
    """Two coordinator processes; the first acknowledge is held and its sender SIGKILLed while it waits for the
    answer. The other takes the event over once the lease expires and records it (approved, answer unheard)
    without POSTing again: exactly one acknowledge per event, one decision per event."""
    arg, maintenance, connection_string = azure
    maintenance.hold_first = True
    t0 = datetime.now(UTC)
    events = [
        event(f"E-{i}", tuple(f"{p}-{i}" for p in ("app", "db", "web")), t0 + timedelta(minutes=15)) for i in range(3)
    ]
    lines = []
    for e in events:
        lines += [appeared(e, n, t0) for n in e.resources]
        lines += [decided(e, n, "ready", t0 + timedelta(seconds=1), 1) for n in e.resources]
    seed = tmp_path / "seed.jsonl"
    seed.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    directories = {name: tmp_path / f"ch-{name}" for name in ("coord-a", "coord-b")}
    for directory in directories.values():
        _helper("seed", str(directory), str(seed))  # each process its own embedded copy of the shared table
    config = tmp_path / "sevents.toml"
    config.write_text(
        "[coordinator]\n"
        'event_types = ["Reboot"]\n'
        f'arm_endpoint = "{maintenance.url}"\n'
        'credential = "managed_identity"\n'
        "lease_s = 15\npoll_interval = 0.3\n"
        + ("" if connection_string else f'lease_backend = "local"\nlease_dir = "{tmp_path / "leases"}"\n')
    )
    env = {**os.environ, **arg.identity_env, "PYTHONPATH": str(ROOT)}
    if connection_string:
        env["SEVENTS_COORDINATOR_LEASE_CONNECTION_STRING"] = connection_string
    procs = {n: _start(n, d, config, env, tmp_path / f"{n}.log") for n, d in directories.items()}
    try:
        wait_for(lambda: maintenance.held.is_set() or any(p.poll() is not None for p in procs.values()), 60)
        assert maintenance.held.is_set(), [(tmp_path / f"{n}.log").read_text(errors="replace") for n in procs]
        held = next(a for a in maintenance.acks if a.status == 200)
        victim = next(n for n in procs if f"({n})" in held.user_agent)
        survivor = next(n for n in procs if n != victim)
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(10)
        killed_at = time.time()
        # the survivor acknowledges the other events and, once the lease is gone, records the held one
        wait_for(lambda: len({a.event_id for a in maintenance.acks}) == 3, 60)
        # past the victim's lease the survivor resumes the held event; a SIGTERM lets it finish storing it
        survivor_log = tmp_path / f"{survivor}.log"
        wait_for(lambda: RESUMING in survivor_log.read_text(errors="replace"), 60, what="the survivor to resume")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
        maintenance.release.set()
    rows = {n: [json.loads(x) for x in _helper("dump", str(d)).splitlines()] for n, d in directories.items()}
    logs = {n: (tmp_path / f"{n}.log").read_text(errors="replace") for n in procs}

    posts = sorted(a.event_id for a in maintenance.acks)
    assert posts == ["E-0", "E-1", "E-2"], (posts, logs)  # exactly one acknowledge per event
    all_rows = rows[victim] + rows[survivor]
    assert sorted(r["event_id"] for r in all_rows) == ["E-0", "E-1", "E-2"], (all_rows, logs)  # one decision each
    assert all(r["decision"] == "approved" for r in all_rows)
    (resumed,) = [r for r in all_rows if r["event_id"] == held.event_id]
    assert resumed in rows[survivor] and resumed["http_status"] is None  # sent by the victim, answer unheard
    assert resumed["approver"] == victim and resumed["vm_name"] == victim
    assert datetime.fromisoformat(resumed["decided_at"].replace("Z", "+00:00")).timestamp() < killed_at
    assert RESUMING in logs[survivor]


# -- local leases (lease_backend = "local") ---------------------------------------------------------------------


def test_local_leases_one_holder_at_a_time_and_a_killed_holder_s_lease_expires(tmp_path: Path) -> None:
    """Two coordinators' connections to one lease directory, on a clock the test moves: while A holds an event B
    gets nothing; A stops answering (killed: never released) and once its lease has run out B takes the event over
    with the stage A wrote, and A, should it wake, can no longer write, renew or take it back."""
    now = [1000.0]
    a = LocalLeases(tmp_path / "leases", 15, clock=lambda: now[0])
    b = LocalLeases(tmp_path / "leases", 15, clock=lambda: now[0])
    try:
        held_by_a = a.hold("E-1")
        held_a = held_by_a.__enter__()  # not left until B took over: A was killed or stalled while it held the lease
        assert held_a is not None and held_a.read() == {}
        held_a.write({"stage": "sending", "record": {"decision": "approved"}})
        now[0] += 14.9
        with b.hold("E-1") as held_b:
            assert held_b is None  # A's lease runs: B looks again at its next pass
        with b.hold("E-2") as other:
            assert other is not None  # other events are free
        held_a.renew()  # A renews at 14.9 s: its lease runs 15 s from now
        now[0] += 14.9
        with b.hold("E-1") as held_b:
            assert held_b is None
        now[0] += 0.2
        with b.hold("E-1") as held_b:
            assert held_b is not None
            assert held_b.read() == {"stage": "sending", "record": {"decision": "approved"}}
            for late in (lambda: held_a.write({"stage": "decided"}), held_a.renew, held_a.read):
                with pytest.raises(LeaseLost):
                    late()
            held_by_a.__exit__(None, None, None)  # A wakes and ends its hold: B's lease is not A's to release
            with a.hold("E-1") as again:
                assert again is None  # B holds it now
            held_b.write({"stage": "done"})
        with a.hold("E-1") as again:  # released by B: free at once, with B's stage
            assert again is not None and again.read() == {"stage": "done"}
    finally:
        a.close()
        b.close()


def test_the_lease_backend_is_configuration(tmp_path: Path) -> None:
    """local needs lease_dir and nothing from Azure; blob needs its storage; an unknown backend is named."""
    path = tmp_path / "sevents.toml"
    path.write_text(f'[coordinator]\nevent_types = ["Reboot"]\nlease_backend = "local"\nlease_dir = "{tmp_path}"\n')
    s = load(file=path, env={}, flags={})
    leases = make_leases(s)
    assert isinstance(leases, LocalLeases)
    leases.close()
    path.write_text('[coordinator]\nevent_types = ["Reboot"]\nlease_backend = "local"\n')
    with pytest.raises(ConfigError, match="lease_dir"):
        load(file=path, env={}, flags={})
    path.write_text('[coordinator]\nevent_types = ["Reboot"]\nlease_backend = "lcoal"\n')
    with pytest.raises(ConfigError, match="lease_backend must be one of blob, local"):
        load(file=path, env={}, flags={})
