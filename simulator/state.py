"""The simulator's state records: events and VMs as the engine mutates them, what it logs, and ground truth."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from simulator.protocol import EventView, VmView
from simulator.scenario import EventSpec

GONE = ("completed", "cancelled")


@dataclass(frozen=True)
class Happening:
    """Something the simulator did, for logs: kind is scheduled|started|updated|ended|cancelled|approved|reset."""

    at: datetime
    kind: str
    label: str
    event_id: str
    event_type: str
    vms: tuple[str, ...]  # who sees it (for "approved": who approved; for "reset": whose incarnation restarted)
    resources: tuple[str, ...] = ()  # affected VMs
    not_before: datetime | None = None


@dataclass(frozen=True)
class Served:
    """One document a VM's view went through: from ``at`` on, ``incarnation`` with ``events``."""

    at: datetime
    incarnation: int
    events: tuple[EventView, ...]


@dataclass(frozen=True)
class DownSpan:
    """A VM really down (not running, not answering) from ``began_at`` to ``ended_at``: its event's doing, or a pause
    no event announced (``event_id`` "")."""

    vm_name: str
    event_id: str
    label: str
    began_at: datetime
    ended_at: datetime
    how: str  # "pause" (the VM stops, its memory kept: a Freeze) or "reboot" (it restarts: Reboot, Redeploy)

    @property
    def down_s(self) -> float:
        return (self.ended_at - self.began_at).total_seconds()


@dataclass(frozen=True)
class CollectorFault:
    """The collector of ``vm_name`` killed (``kill``) or stopped cleanly (``stop``) at ``at``, its VM running on."""

    vm_name: str
    kind: str
    at: datetime


@dataclass
class EventState:
    spec: EventSpec
    event_id: str
    resources: tuple[str, ...]  # affected VMs (the document's Resources)
    recipients: tuple[str, ...]  # VMs whose document shows the event
    state: str = "pending"
    visible_at: datetime | None = None
    not_before: datetime | None = None  # exact; the document shows it truncated to the second
    approvals: dict[str, datetime] = field(default_factory=dict)
    approved_at: datetime | None = None
    approved_by: str = ""
    start_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    second_impact_at: datetime | None = None
    duration_s: int = -1


@dataclass
class VmState:
    incarnation: int
    view: tuple[EventView, ...] = ()
    seen: set[str] = field(default_factory=set)
    last_poll: datetime | None = None
    history: list[Served] = field(default_factory=list)


def truth_row(e: EventState, vm: VmView, fault_set: str, down_at: datetime | None = None) -> dict[str, Any]:
    """What really happened to event ``e`` as VM ``vm`` saw it (the interface's truth shape plus extras);
    ``fault_set``: the set its fault domain belongs to (a standalone VM's own name); ``down_at``: when the event's
    VMs went down (the engine knows the speed that places it)."""
    hit = vm.name in e.resources and e.started_at is not None and e.spec.down_s > 0
    return {
        "event_id": e.event_id,
        "label": e.spec.label,
        "vm_name": vm.name,
        "vm_id": vm.vm_id,
        "fault_domain": vm.fault_domain,
        "update_domain": vm.update_domain,
        "fault_set": fault_set,
        "affected": vm.name in e.resources,
        "event_type": e.spec.event_type,
        "event_source": e.spec.source,
        "description": e.spec.description,
        "duration_s": e.spec.duration_s,
        "resources": list(e.resources),
        "first_visible_at": e.visible_at,
        "not_before": e.not_before.replace(microsecond=0) if e.not_before else None,
        "approved_at": e.approved_at,
        "approved_by": e.approved_by,
        "vm_approved_at": e.approvals.get(vm.name),
        "started_at": e.started_at,
        "second_impact_at": e.second_impact_at,
        "ended_at": e.ended_at,
        "outcome": e.state if e.state in GONE else "active",
        # what the VM really went through: down from Started on, for the event's down_s wall seconds
        "down_at": down_at if hit else None,
        "down_s": e.spec.down_s if hit else None,
    }
