"""The fleet's Scheduled Events as a pure state machine, driven by the times its caller passes in.

Theory of operation: every scripted step (an event appearing, an approval, a start, a second impact, an end,
a cancellation, a reset) is a *candidate* with a due time derived from the current state. ``advance(now)``
applies candidates in time order until none is due; after all candidates of one instant are applied, each
VM's view (the events array it would be served) is recomputed, and the VM's ``DocumentIncarnation`` goes up
by one if and only if that view changed. Nothing here reads a clock, sleeps or does I/O.

Event lifecycle (one state per event; every VM of the event's group sees the same state):

    pending --visible--> Scheduled --approved or NotBefore--> Started --started_for--> completed (gone)
    pending --status="Started" (host failure)-------------->  Started
    Scheduled --cancel_after--> cancelled (gone)

A scenario with an ``end`` stops there: nothing due after it happens, and an event still Scheduled stays so.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from simulator.fleet import Vm, build_fleet
from simulator.protocol import EventView
from simulator.scenario import EventSpec, Scenario
from simulator.state import GONE, CollectorFault, DownSpan, EventState, Happening, Served, VmState, truth_row


@dataclass(frozen=True)
class _Candidate:
    at: datetime
    order: int
    apply: Callable[[datetime], list[Happening]]


def _new_id() -> str:
    return str(uuid.uuid4()).upper()


class Engine:
    """The scenario's state; every method takes the current time, none reads a clock."""

    def __init__(
        self, scenario: Scenario, *, start: datetime, speed: float, new_id: Callable[[], str] = _new_id
    ) -> None:
        self.scenario = scenario
        self.start = start
        self.speed = speed
        self.vms: dict[str, Vm] = {vm.name: vm for vm in build_fleet(scenario.fleet)}
        self._vm = {name: VmState(scenario.fleet.initial_incarnation) for name in self.vms}
        self._events = [self._make_event(spec, new_id) for spec in scenario.events]
        self._by_label = {e.spec.label: e for e in self._events}
        self._scripted_done: set[tuple[int, str, str]] = set()
        self._resets_done: set[int] = set()
        self.approval_log: list[tuple[datetime, str, str, str]] = []  # (at, vm, event_id, "http"|"script")
        self.end_at = None if scenario.end_s is None else self._after(start, scenario.end_s)
        self._ended = False
        for state in self._vm.values():
            state.history.append(Served(start, state.incarnation, ()))

    def _make_event(self, spec: EventSpec, new_id: Callable[[], str]) -> EventState:
        group = [vm for vm in self.vms.values() if vm.group == spec.group]
        if spec.vms:
            affected = tuple(spec.vms)
        else:
            fd = spec.fault_domain
            affected = tuple(vm.name for vm in group if fd is None or vm.fault_domain == fd)
        # Availability sets and scale sets deliver an event to every member; standalone VMs only to themselves.
        standalone = all(vm.group_kind == "standalone" for vm in group)
        recipients = affected if standalone else tuple(vm.name for vm in group)
        return EventState(spec, spec.event_id or new_id(), affected, recipients, duration_s=spec.duration_s)

    def _after(self, base: datetime, scenario_seconds: float) -> datetime:
        return base + timedelta(seconds=scenario_seconds / self.speed)

    # -- candidates -------------------------------------------------------------------------------------

    def _candidates(self) -> list[_Candidate]:
        out: list[_Candidate] = []
        for order, e in enumerate(self._events):
            out.extend(self._event_candidates(order, e))
        for i, reset in enumerate(self.scenario.resets):
            if i not in self._resets_done:
                out.append(_Candidate(self._after(self.start, reset.at_s), 10**6 + i, self._reset_action(i)))
        return out

    def _event_candidates(self, order: int, e: EventState) -> list[_Candidate]:
        spec = e.spec
        if e.state == "pending":
            if spec.at_s is not None:
                return [_Candidate(self._after(self.start, spec.at_s), order, lambda t: self._appear(e, t))]
            ref = self._by_label[spec.after]
            if ref.ended_at is None:
                return []
            return [_Candidate(self._after(ref.ended_at, spec.gap_s), order, lambda t: self._appear(e, t))]
        assert e.visible_at is not None
        if e.state == "Scheduled":
            out = self._approval_candidates(order, e)
            if spec.cancel_after_s is not None:
                at = self._after(e.visible_at, spec.cancel_after_s)
                out.append(_Candidate(at, order, lambda t: self._end(e, t, "cancelled")))
            assert e.not_before is not None
            begin = min(e.not_before, e.start_at) if e.start_at else e.not_before
            out.append(_Candidate(begin, order, lambda t: self._begin(e, t)))
            return out
        if e.state == "Started":
            assert e.started_at is not None
            out = [_Candidate(self._after(e.started_at, spec.started_for_s), order, lambda t: self._end(e, t))]
            if spec.second_impact_after_s is not None and e.second_impact_at is None:
                at = self._after(e.started_at, spec.second_impact_after_s)
                out.append(_Candidate(at, order, lambda t: self._second_impact(e, t)))
            return out
        return []

    def _approval_candidates(self, order: int, e: EventState) -> list[_Candidate]:
        assert e.visible_at is not None
        out = []
        for i, a in enumerate(self.scenario.approvals):
            if a.event not in ("*", e.spec.label, e.spec.wave):
                continue
            approvers = {"first": e.resources[:1], "all": e.resources}.get(a.by, (a.by,))
            for vm in approvers:
                key = (i, e.spec.label, vm)
                if key not in self._scripted_done and vm in e.recipients:
                    at = self._after(e.visible_at, a.delay_s)
                    out.append(_Candidate(at, order, self._scripted_approval(key, e, vm)))
        return out

    def _scripted_approval(
        self, key: tuple[int, str, str], e: EventState, vm: str
    ) -> Callable[[datetime], list[Happening]]:
        def apply(t: datetime) -> list[Happening]:
            self._scripted_done.add(key)
            return self._approve_one(vm, e, t, "script")

        return apply

    def _reset_action(self, i: int) -> Callable[[datetime], list[Happening]]:
        def apply(t: datetime) -> list[Happening]:
            self._resets_done.add(i)
            reset = self.scenario.resets[i]
            names = tuple(n for n, vm in self.vms.items() if not reset.group or vm.group == reset.group)
            for name in names:
                self._restart_incarnation(name, t, reset.incarnation)
            return [Happening(t, "reset", "", "", "", names)]

        return apply

    # -- actions ----------------------------------------------------------------------------------------

    def _happening(self, e: EventState, t: datetime, kind: str) -> Happening:
        not_before = e.not_before if kind == "scheduled" else None
        return Happening(t, kind, e.spec.label, e.event_id, e.spec.event_type, e.recipients, e.resources, not_before)

    # Several candidates of one event can fall on the same instant (say NotBefore and cancel_after); the
    # first one applied wins and the others, computed from the state before it, must then do nothing.

    def _appear(self, e: EventState, t: datetime) -> list[Happening]:
        if e.state != "pending":
            return []
        e.visible_at = t
        if e.spec.initial_status == "Started":
            e.state, e.started_at = "Started", t
            return [self._happening(e, t, "started")]
        e.state = "Scheduled"
        e.not_before = self._after(t, e.spec.notice_s)
        return [self._happening(e, t, "scheduled")]

    def _begin(self, e: EventState, t: datetime) -> list[Happening]:
        if e.state != "Scheduled":
            return []
        e.state, e.started_at = "Started", t
        return [self._happening(e, t, "started")]

    def _second_impact(self, e: EventState, t: datetime) -> list[Happening]:
        if e.state != "Started" or e.second_impact_at is not None:
            return []
        e.second_impact_at = t
        e.duration_s = e.spec.second_impact_duration_s
        return [self._happening(e, t, "updated")]

    def _end(self, e: EventState, t: datetime, outcome: str = "completed") -> list[Happening]:
        if e.state != ("Started" if outcome == "completed" else "Scheduled"):
            return []
        e.state, e.ended_at = outcome, t
        return [self._happening(e, t, "ended" if outcome == "completed" else "cancelled")]

    def _approve_one(self, vm: str, e: EventState, t: datetime, source: str) -> list[Happening]:
        self.approval_log.append((t, vm, e.event_id, source))
        e.approvals.setdefault(vm, t)
        if e.state != "Scheduled" or e.approved_at is not None:
            return []
        released = e.spec.approval == "any" or all(r in e.approvals for r in e.resources)
        if not released:
            return []
        e.approved_at, e.approved_by = t, vm
        e.start_at = self._after(t, e.spec.start_delay_s)
        return [Happening(t, "approved", e.spec.label, e.event_id, e.spec.event_type, (vm,), e.resources)]

    def _restart_incarnation(self, name: str, t: datetime, incarnation: int) -> None:
        state = self._vm[name]
        state.incarnation = incarnation
        state.history.append(Served(t, incarnation, state.view))

    # -- views ------------------------------------------------------------------------------------------

    def _view_of(self, name: str) -> tuple[EventView, ...]:
        shown = [e for e in self._events if e.state in ("Scheduled", "Started") and name in e.recipients]
        shown.sort(key=lambda e: (e.visible_at or self.start, e.spec.label))
        return tuple(
            EventView(
                event_id=e.event_id,
                event_type=e.spec.event_type,
                resources=e.resources,
                status=e.state,
                not_before=e.not_before.replace(microsecond=0) if e.state == "Scheduled" and e.not_before else None,
                description=e.spec.description,
                event_source=e.spec.source,
                duration_s=e.duration_s,
            )
            for e in shown
        )

    def _refresh(self, t: datetime) -> None:
        for name, state in self._vm.items():
            view = self._view_of(name)
            if view != state.view:
                state.view = view
                state.incarnation += 1
                state.seen.update(ev.event_id for ev in view)
                state.history.append(Served(t, state.incarnation, view))

    # -- public -----------------------------------------------------------------------------------------

    def advance(self, now: datetime) -> list[Happening]:
        """Apply every scripted step due at or before ``now`` (and the scenario's end), oldest first."""
        if self.end_at is not None and now >= self.end_at:
            now, self._ended = self.end_at, True
        happened: list[Happening] = []
        instant: datetime | None = None
        while True:
            due = [c for c in self._candidates() if c.at <= now]
            moment = min((c.at for c in due), default=None)
            if instant is not None and moment != instant:
                self._refresh(instant)
            if moment is None:
                return happened
            instant = moment
            for c in sorted((c for c in due if c.at == moment), key=lambda c: c.order):
                happened.extend(c.apply(moment))

    def switched_on(self, name: str, now: datetime) -> bool:
        """Whether VM ``name``'s Scheduled Events is on: polled before and not idle for longer than idle_off."""
        last = self._vm[name].last_poll
        idle = self.scenario.fleet.idle_off_s
        return last is not None and (idle is None or now - last <= self._after_delta(idle))

    def poll(self, name: str, now: datetime) -> tuple[int, tuple[EventView, ...], list[Happening]]:
        """What VM ``name`` is served now: (incarnation, events); switched off and on again after idling."""
        state = self._vm[name]
        happened: list[Happening] = []
        if state.last_poll is not None and not self.switched_on(name, now):
            self._restart_incarnation(name, now, self.scenario.fleet.initial_incarnation)
            happened.append(Happening(now, "reset", "", "", "", (name,)))
        state.last_poll = now
        return state.incarnation, state.view, happened

    def _after_delta(self, scenario_seconds: float) -> timedelta:
        return timedelta(seconds=scenario_seconds / self.speed)

    def approve(
        self, name: str, event_ids: list[str], now: datetime, source: str = "http"
    ) -> tuple[list[str], list[Happening]]:
        """Approve on behalf of VM ``name`` (``source``: "http" through its IMDS, "maintenance" through the
        Maintenance API); returns (ids this VM never saw, happenings)."""
        state = self._vm[name]
        unknown = [i for i in event_ids if i not in state.seen]
        happened: list[Happening] = []
        if unknown:
            return unknown, happened
        for event_id in event_ids:
            for e in self._events:
                if e.event_id == event_id:
                    happened.extend(self._approve_one(name, e, now, source))
        return [], happened

    def done(self) -> bool:
        """True once the scenario's end passed, or every event is gone and every reset has happened."""
        gone = all(e.state in GONE for e in self._events)
        return self._ended or (gone and len(self._resets_done) == len(self.scenario.resets))

    def history(self, name: str) -> list[Served]:
        """Every document VM ``name`` went through, oldest first."""
        return list(self._vm[name].history)

    def truth(self) -> list[dict[str, Any]]:
        """One row per (event, VM that saw it): what really happened, in the interface's shape."""
        return [
            truth_row(e, self.vms[name].view, self.vms[name].fault_set, self._down_at(e))
            for e in self._events
            if e.visible_at
            for name in e.recipients
        ]

    def _down_at(self, e: EventState) -> datetime | None:
        return None if e.started_at is None else self._after(e.started_at, e.spec.down_after_s)

    def downtime(self, now: datetime) -> list[DownSpan]:
        """Every stretch a VM was (or is) really down that began by ``now``: each affected VM of a Started event,
        ``down_after_s`` (scaled) after it started, for the event's ``down_s``, and the scenario's unannounced pauses.
        Downtime is wall seconds, never scaled by speed."""
        spans: list[DownSpan] = []
        for e in self._events:
            down = self._down_at(e)
            if down is None or e.spec.down_s <= 0:
                continue
            up = down + timedelta(seconds=e.spec.down_s)
            how = "pause" if e.spec.event_type == "Freeze" else "reboot"
            spans += [DownSpan(vm, e.event_id, e.spec.label, down, up, how) for vm in e.resources if vm in self.vms]
        for i, pause in enumerate(self.scenario.pauses):
            at = self._after(self.start, pause.at_s)
            end = at + timedelta(seconds=pause.down_s)
            spans += [DownSpan(vm, "", f"pause-{i}", at, end, "pause") for vm in pause.vms]
        last = now if self.end_at is None else min(now, self.end_at)
        return sorted((d for d in spans if d.began_at <= last), key=lambda d: (d.began_at, d.vm_name))

    def collector_faults(self, now: datetime) -> list[CollectorFault]:
        """The scenario's collector faults due by ``now`` (and before its end), one per VM, oldest first."""
        out = [
            CollectorFault(vm, cf.kind, self._after(self.start, cf.at_s))
            for cf in self.scenario.collector_faults
            for vm in (self.vms if "*" in cf.vms else cf.vms)
        ]
        last = now if self.end_at is None else min(now, self.end_at)
        return sorted((f for f in out if f.at <= last), key=lambda f: (f.at, f.vm_name))

    def down_until(self, name: str, now: datetime) -> datetime | None:
        """When VM ``name``, down at ``now``, runs again; None when it is running."""
        ends = [d.ended_at for d in self.downtime(now) if d.vm_name == name and d.began_at <= now < d.ended_at]
        return max(ends, default=None)

    def events_summary(self) -> dict[str, int]:
        """How many events are in each state."""
        counts: dict[str, int] = {}
        for e in self._events:
            counts[e.state] = counts.get(e.state, 0) + 1
        return counts
