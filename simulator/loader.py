"""Loading scenarios: built-in names or TOML files, validated into a Scenario with every problem listed at once."""

from __future__ import annotations

import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Final

from simulator.checks import cross_check
from simulator.errors import ScenarioError
from simulator.scenario import (
    COLLECTOR_FAULT_KINDS,
    DEFAULT_DESCRIPTION,
    DEFAULT_DOWN_S,
    DEFAULT_DURATION_S,
    DEFAULT_NOTICE_S,
    DEFAULT_STARTED_FOR_S,
    EVENT_TYPES,
    FAULT_KINDS,
    FAULT_PATHS,
    GROUP_KINDS,
    ApprovalSpec,
    CollectorFaultSpec,
    EventSpec,
    FaultSpec,
    FleetSpec,
    GroupSpec,
    PauseSpec,
    ResetSpec,
    Scenario,
)

SCENARIO_DIR: Final = "scenarios"


class _Table:
    """Typed reads from one TOML table that record problems instead of raising."""

    def __init__(self, data: Any, where: str, problems: list[str]) -> None:
        if not isinstance(data, dict):
            problems.append(f"{where}: expected a table")
            data = {}
        self.data: dict[str, Any] = data
        self.where = where
        self.problems = problems
        self.used: set[str] = set()

    def get(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.used.add(key)
        value = self.data.get(key, default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if value is not None and (not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)):
            self.problems.append(f"{self.where}.{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
            return default
        if isinstance(value, float) and not math.isfinite(value):
            # TOML has nan and inf; a time that is not finite would only fail later, inside the engine.
            self.problems.append(f"{self.where}.{key}: expected a finite number, got {value!r}")
            return default
        return value

    def choice(self, key: str, options: tuple[str, ...], default: str) -> str:
        value: str = self.get(key, str, default)
        if value not in options:
            self.problems.append(f"{self.where}.{key}: {value!r} is not one of {', '.join(options)}")
            return default
        return value

    def strings(self, key: str, default: list[str]) -> tuple[str, ...]:
        value = self.get(key, list, default)
        if not all(isinstance(v, str) for v in value):
            self.problems.append(f"{self.where}.{key}: expected a list of VM names")
        return tuple(v for v in value if isinstance(v, str))

    def tables(self, key: str) -> list[Any]:
        self.used.add(key)
        value = self.data.get(key, [])
        if not isinstance(value, list):
            self.problems.append(f"{self.where}.{key}: expected an array of tables")
            return []
        return value

    def finish(self) -> None:
        for key in sorted(set(self.data) - self.used):
            self.problems.append(f"{self.where}: unknown key {key!r}")


def _group(t: _Table) -> GroupSpec:
    spec = GroupSpec(
        name=t.get("name", str, ""),
        kind=t.choice("kind", GROUP_KINDS, "availability-set"),
        size=t.get("size", int, 2),
        fault_domains=t.get("fault_domains", int, 2),
        update_domains=t.get("update_domains", int, 5),
        zone=t.get("zone", str, ""),
        vm_size=t.get("vm_size", str, "Standard_D2s_v5"),
    )
    if not spec.name or "/" in spec.name:
        t.problems.append(f"{t.where}.name: a non-empty name without '/' is required")
    if spec.size < 1 or spec.fault_domains < 1 or spec.update_domains < 1:
        t.problems.append(f"{t.where}: size, fault_domains and update_domains must be at least 1")
    t.finish()
    return spec


def _event(t: _Table, label: str, wave: str = "", *, downtime: bool = False) -> EventSpec:
    event_type = t.choice("type", EVENT_TYPES, "Freeze")
    at_s = t.get("at", float, None)
    after = t.get("after", str, "")
    if (at_s is None) == (not after):
        t.problems.append(f"{t.where}: give exactly one of 'at' (seconds) or 'after' (an event label)")
    second = _Table(t.get("second_impact", dict, {}), t.where + ".second_impact", t.problems)
    spec = EventSpec(
        label=label,
        wave=wave,
        group=t.get("group", str, ""),
        vms=t.strings("vms", []),
        fault_domain=t.get("fault_domain", int, None),
        at_s=at_s,
        after=after,
        gap_s=t.get("gap", float, 0.0),
        event_type=event_type,
        source=t.choice("source", ("Platform", "User"), "Platform"),
        description=t.get("description", str, DEFAULT_DESCRIPTION[event_type]),
        duration_s=t.get("duration", int, DEFAULT_DURATION_S[event_type]),
        notice_s=t.get("notice", float, float(DEFAULT_NOTICE_S[event_type])),
        started_for_s=t.get("started_for", float, DEFAULT_STARTED_FOR_S),
        initial_status=t.choice("status", ("Scheduled", "Started"), "Scheduled"),
        cancel_after_s=t.get("cancel_after", float, None),
        second_impact_after_s=second.get("after", float, None),
        second_impact_duration_s=second.get("duration", int, 3),
        approval=t.choice("approval", ("any", "each"), "any"),
        start_delay_s=t.get("start_delay", float, 0.0),
        event_id=t.get("id", str, ""),
        down_s=t.get("down", float, _default_down(event_type, t.data.get("duration")) if downtime else 0.0),
        down_after_s=t.get("down_after", float, 0.0),
    )
    second.finish()
    if not spec.group:
        t.problems.append(f"{t.where}.group: required (the group whose VMs see the event)")
    return spec


def _default_down(event_type: str, duration: Any) -> float:
    """A Freeze pauses its VMs for what it announces; the other types for their typical wall time."""
    down = DEFAULT_DOWN_S[event_type]
    if down is not None:
        return down
    announced = duration if type(duration) is int else DEFAULT_DURATION_S[event_type]
    return float(max(announced, 0))


def _events(root: _Table, downtime: bool) -> list[EventSpec]:
    out: list[EventSpec] = []
    for i, raw in enumerate(root.tables("events")):
        t = _Table(raw, f"events[{i}]", root.problems)
        label = t.get("label", str, f"event-{i}")
        out.append(_event(t, label, downtime=downtime))
        t.finish()
    return out


def _waves(root: _Table, groups: dict[str, GroupSpec], downtime: bool) -> list[EventSpec]:
    """A wave is sugar for one event per fault domain of a group, each after the previous one ended."""
    out: list[EventSpec] = []
    for i, raw in enumerate(root.tables("waves")):
        t = _Table(raw, f"waves[{i}]", root.problems)
        label = t.get("label", str, f"wave-{i}")
        start = t.get("at", float, 0.0)
        gap = t.get("gap", float, 0.0)
        group_name = t.data.get("group", "")
        group = groups.get(group_name) if isinstance(group_name, str) else None
        fds = group.fault_domains if group else 1
        base = {k: v for k, v in t.data.items() if k not in ("label", "at", "gap")}
        for fd in range(fds):
            raw_event = {**base, "fault_domain": fd}
            raw_event.update({"at": start} if fd == 0 else {"after": f"{label}-fd{fd - 1}", "gap": gap})
            event_table = _Table(raw_event, f"waves[{i}]", root.problems)
            out.append(_event(event_table, f"{label}-fd{fd}", label, downtime=downtime))
            if fd == 0:
                event_table.finish()
    return out


def parse_scenario(data: dict[str, Any], name: str) -> Scenario:
    """Validate a parsed TOML document; raise ScenarioError listing every problem."""
    problems: list[str] = []
    root = _Table(data, name, problems)
    f = _Table(root.get("fleet", dict, {}), "fleet", problems)
    groups = [_group(_Table(g, f"fleet.groups[{i}]", problems)) for i, g in enumerate(f.tables("groups"))]
    fleet = FleetSpec(
        location=f.get("location", str, "westeurope"),
        subscription_id=f.get("subscription_id", str, "8d10da13-8125-4ba9-a717-bf7490507b3d"),
        resource_group=f.get("resource_group", str, "sevents-sim"),
        groups=tuple(groups),
        initial_incarnation=f.get("initial_incarnation", int, 1),
        idle_off_s=f.get("idle_off", float, None),
        rate_limit=f.get("rate_limit", float, 0.0),
        first_call_delay=f.get("first_call_delay", float, 0.0),
        downtime=f.get("downtime", bool, False),
    )
    f.finish()
    by_name = {g.name: g for g in groups}
    if not groups:
        problems.append("fleet.groups: at least one group of VMs is required")
    if len(by_name) != len(groups):
        problems.append("fleet.groups: group names must be unique")
    events = _events(root, fleet.downtime) + _waves(root, by_name, fleet.downtime)
    approvals = []
    for i, raw in enumerate(root.tables("approvals")):
        t = _Table(raw, f"approvals[{i}]", problems)
        approvals.append(ApprovalSpec(t.get("event", str, "*"), t.get("by", str, "first"), t.get("delay", float, 0.0)))
        t.finish()
    faults = []
    for i, raw in enumerate(root.tables("faults")):
        t = _Table(raw, f"faults[{i}]", problems)
        faults.append(
            FaultSpec(
                vms=t.strings("vms", ["*"]),
                kind=t.choice("kind", FAULT_KINDS, "500"),
                count=t.get("count", int, 1),
                at_s=t.get("at", float, 0.0),
                path=t.choice("path", FAULT_PATHS, "scheduledevents"),
                retry_after_s=t.get("retry_after", int, 1),
                seconds=t.get("seconds", float, 1.0),
            )
        )
        t.finish()
    resets = []
    for i, raw in enumerate(root.tables("resets")):
        t = _Table(raw, f"resets[{i}]", problems)
        resets.append(ResetSpec(t.get("at", float, 0.0), t.get("group", str, ""), t.get("incarnation", int, 1)))
        t.finish()
    pauses = []
    for i, raw in enumerate(root.tables("pauses")):
        t = _Table(raw, f"pauses[{i}]", problems)
        pauses.append(PauseSpec(t.strings("vms", []), t.get("at", float, 0.0), t.get("down", float, 3.0)))
        t.finish()
    collector_faults = []
    for i, raw in enumerate(root.tables("collector_faults")):
        t = _Table(raw, f"collector_faults[{i}]", problems)
        kind = t.choice("kind", COLLECTOR_FAULT_KINDS, "kill")
        collector_faults.append(CollectorFaultSpec(t.strings("vms", []), kind, t.get("at", float, 0.0)))
        t.finish()
    scenario = Scenario(
        name=root.get("name", str, name),
        description=root.get("description", str, ""),
        speed=root.get("speed", float, 60.0),
        fleet=fleet,
        events=tuple(events),
        approvals=tuple(approvals),
        faults=tuple(faults),
        resets=tuple(resets),
        pauses=tuple(pauses),
        collector_approval=root.get("collector_approval", dict, None),
        collector_faults=tuple(collector_faults),
        end_s=root.get("end", float, None),
    )
    root.finish()
    problems.extend(cross_check(scenario, set(by_name)))
    if problems:
        raise ScenarioError(problems)
    return scenario


def builtin_names() -> list[str]:
    """Names of the scenarios shipped in ``simulator/scenarios/``."""
    folder = resources.files("simulator").joinpath(SCENARIO_DIR)
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A built-in scenario by name, or a TOML file by path; raises ScenarioError with every problem."""
    text = str(name_or_path)
    if text in builtin_names():
        source = resources.files("simulator").joinpath(SCENARIO_DIR, text + ".toml").read_text("utf-8")
        label = text
    else:
        path = Path(text)
        if not path.is_file():
            known = ", ".join(builtin_names())
            raise ScenarioError([f"{text!r} is neither a built-in scenario ({known}) nor a file"])
        try:
            source, label = path.read_text("utf-8"), path.stem
        except UnicodeDecodeError as e:
            raise ScenarioError([f"{text}: not UTF-8 text (byte {e.start}), as TOML must be"]) from e
        except OSError as e:
            raise ScenarioError([f"{text}: cannot be read: {e.strerror or e}"]) from e
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError([f"{text}: not valid TOML: {e}"]) from e
    except RecursionError:
        raise ScenarioError([f"{text}: nests arrays or tables too deeply to be a scenario"]) from None
    return parse_scenario(data, label)
