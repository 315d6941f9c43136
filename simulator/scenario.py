"""The scenario schema: frozen dataclasses for a fleet, its events, scripted approvals, faults and resets.

A scenario is a fleet (groups of VMs), a list of events (when each appears, whom it affects, how it runs),
scripted approvals, injected faults and Scheduled Events resets. All times are *scenario seconds*, i.e.
Azure's real timing; the speed factor compresses them into wall time. See docs in ``simulator/README.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

EVENT_TYPES: Final = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
GROUP_KINDS: Final = ("availability-set", "scale-set", "standalone")
FAULT_KINDS: Final = ("429", "410", "500", "timeout", "slow", "malformed", "truncated", "reset")
FAULT_PATHS: Final = ("scheduledevents", "instance", "any")
# What can happen to a VM's collector process while its VM runs on (done by sevents-demo, see CollectorFaultSpec).
COLLECTOR_FAULT_KINDS: Final = ("kill", "stop")
# Upper bounds of a fault's numbers: beyond them a wait overflows the platform's timeout (and no game day needs more).
FAULT_LIMITS: Final = {"count": 1_000_000, "retry_after": 86_400, "seconds": 3_600.0}
# Minimum notice per event type (seeds: Freeze/Reboot 15 min, Redeploy 10, Terminate 5-15, Preempt ~30 s).
DEFAULT_NOTICE_S: Final = {"Freeze": 900, "Reboot": 900, "Redeploy": 600, "Terminate": 300, "Preempt": 30}
DEFAULT_DURATION_S: Final = {"Freeze": 7, "Reboot": -1, "Redeploy": -1, "Terminate": -1, "Preempt": -1}
DEFAULT_DESCRIPTION: Final = {
    "Freeze": "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
    "Reboot": "Virtual machine is going to be restarted as requested by authorized user.",
    "Redeploy": "Virtual machine is going to be redeployed to a different host.",
    "Preempt": "Spot virtual machine is being evicted.",
    "Terminate": "Virtual machine is being deleted from the scale set.",
}
DEFAULT_STARTED_FOR_S: Final = 600.0  # Started to gone: about 10 minutes
# How long each affected VM is really down once its event started, in *wall* seconds (never scaled by speed: a
# real collector measures it). None: a Freeze's own DurationInSeconds. Preempt and Terminate end the VM.
DEFAULT_DOWN_S: Final = {"Freeze": None, "Reboot": 5.0, "Redeploy": 8.0, "Preempt": 0.0, "Terminate": 0.0}


@dataclass(frozen=True)
class GroupSpec:
    """VMs sharing an availability set or scale set (events reach all of them) or standalone VMs."""

    name: str
    kind: str
    size: int
    fault_domains: int
    update_domains: int
    zone: str
    vm_size: str


@dataclass(frozen=True)
class FleetSpec:
    """Where the VMs live and how their Scheduled Events service behaves."""

    location: str
    subscription_id: str
    resource_group: str
    groups: tuple[GroupSpec, ...]
    initial_incarnation: int
    idle_off_s: float | None  # switched off after this long without a poll (Azure: 24 h); None = never
    rate_limit: float  # requests per wall second per VM before 429 (IMDS allows about 5); 0 = no limit
    first_call_delay: float  # wall seconds the call that switches Scheduled Events on takes; 0 = none
    downtime: bool = False  # events take their VMs down for their type's typical time (DEFAULT_DOWN_S)


@dataclass(frozen=True)
class EventSpec:
    """One maintenance event and its script."""

    label: str
    wave: str  # label of the wave that generated it, "" otherwise
    group: str
    vms: tuple[str, ...]  # affected VMs; empty = the whole group (or its fault_domain)
    fault_domain: int | None
    at_s: float | None  # visible this long after the start ...
    after: str  # ... or this long (gap_s) after the event labelled ``after`` ended
    gap_s: float
    event_type: str
    source: str
    description: str
    duration_s: int
    notice_s: float
    started_for_s: float
    initial_status: str  # "Scheduled", or "Started" for host hardware failure
    cancel_after_s: float | None
    second_impact_after_s: float | None
    second_impact_duration_s: int
    approval: str  # "any": one approval releases all Resources; "each": every affected VM must approve
    start_delay_s: float
    event_id: str  # "" = a fresh GUID per run
    # wall seconds each affected VM is down from Started on (not scaled by speed; 0: it keeps running): the event's
    # ``down``, else with ``fleet.downtime`` its type's typical time
    down_s: float
    down_after_s: float = 0.0  # scenario seconds from Started until the VM goes down (Azure: within the Started window)


@dataclass(frozen=True)
class ApprovalSpec:
    """A scripted approval: ``by`` ("first", "all" or a VM name) approves ``delay_s`` after seeing it."""

    event: str  # label, wave label, or "*"
    by: str
    delay_s: float


@dataclass(frozen=True)
class FaultSpec:
    """Faults injected into the next ``count`` requests of some VMs, from ``at_s`` on."""

    vms: tuple[str, ...]  # names or ("*",)
    kind: str
    count: int
    at_s: float
    path: str
    retry_after_s: int
    seconds: float  # wall seconds for "slow" and "timeout" (client timeouts are wall-clock too)


@dataclass(frozen=True)
class ResetSpec:
    """Scheduled Events switched off and on again for some VMs: the incarnation starts over."""

    at_s: float
    group: str  # "" = every VM
    incarnation: int


@dataclass(frozen=True)
class PauseSpec:
    """A pause no event announces: ``vms`` stop running ``at_s`` into the scenario for ``down_s`` wall seconds."""

    vms: tuple[str, ...]
    at_s: float
    down_s: float


@dataclass(frozen=True)
class CollectorFaultSpec:
    """Something done to the collector processes of ``vms`` at ``at_s``, their VMs running on: ``kill`` (SIGKILL, a
    crash: it stays dead, with no last word) or ``stop`` (SIGTERM, a clean stop: its final heartbeat). The simulator
    only schedules them (``Engine.collector_faults``); ``demo.processes`` does them to real collectors."""

    vms: tuple[str, ...]  # names or ("*",)
    kind: str
    at_s: float


@dataclass(frozen=True)
class Scenario:
    """A whole game day."""

    name: str
    description: str
    speed: float  # default speed factor: scenario seconds per wall second
    fleet: FleetSpec
    events: tuple[EventSpec, ...]
    approvals: tuple[ApprovalSpec, ...]
    faults: tuple[FaultSpec, ...]
    resets: tuple[ResetSpec, ...]
    pauses: tuple[PauseSpec, ...] = ()
    # The [approval] table the scenario's collectors run with (``[collector_approval]``; "{python}" in a hook's
    # argv is the running interpreter). The simulator does nothing with it: demo.fleetrun hands it to the collectors.
    collector_approval: Mapping[str, Any] | None = None
    collector_faults: tuple[CollectorFaultSpec, ...] = ()
    # The scenario ends here (scenario seconds) whatever is still pending or Scheduled: nothing happens after it.
    # None: it ends once every event is gone.
    end_s: float | None = None
