"""Typed value objects of the collector core: IMDS events and documents, the carried snapshot, transitions.

Everything here is frozen and validated once, at the boundary where raw JSON becomes a typed object
(``collector.decode`` for IMDS bodies, ``Snapshot.from_json`` for the state saved in the outbox).
Datetimes are timezone-aware UTC throughout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from sevents import isotime

# Event statuses IMDS documents (there is no "Completed": a finished event disappears).
STATUS_SCHEDULED: Final = "Scheduled"
STATUS_STARTED: Final = "Started"

# Bumped when the snapshot JSON changes shape; from_json refuses versions it does not know.
SNAPSHOT_VERSION: Final = 1
# How many disappeared EventIds a snapshot remembers (a few KB of JSON; events are rare).
GONE_MEMORY: Final = 256
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Event:
    """One entry of a Scheduled Events document, as IMDS sent it (absent optional fields are None).

    ``repairs`` says which fields decode made safe (a value in a shape IMDS never sends became unknown); it goes
    into the ``anomaly`` of the event's records. It is not part of the event's value (equality, the snapshot):
    an event whose fields read the same is the same event, however its answer was damaged.
    """

    event_id: str
    event_type: str
    resource_type: str
    resources: tuple[str, ...]
    status: str
    not_before: datetime | None
    description: str | None
    event_source: str | None
    duration_s: int | None
    repairs: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Dropped:
    """An entry of a document's Events that is not an event (``collector.decode``): left out, the others kept."""

    reason: str  # a short code, the label it is counted under (decode.DROP_*)
    detail: str  # where it was and what was wrong, for the log


@dataclass(frozen=True)
class Document:
    """A decoded Scheduled Events document: its incarnation and its events in document order."""

    incarnation: int
    events: tuple[Event, ...]
    # where decode made a value safe (a lone surrogate, an absurd number, a field of the wrong type), each as
    # ``Events[i].Field ...``; the same notes, without the index, are in that event's ``repairs``
    repairs: tuple[str, ...] = ()
    dropped: tuple[Dropped, ...] = ()  # entries of Events left out, in document order


@dataclass(frozen=True)
class Tracked:
    """An event as the snapshot remembers it, with the moment it was first observed in its current status."""

    event: Event
    since: datetime


@dataclass(frozen=True)
class Snapshot:
    """State carried between polls; persisted by the outbox in the same transaction as the records it produced.

    ``incarnation`` is None until the first document was diffed. ``events`` keeps document order.
    ``observed_at`` is when the snapshot last changed. ``gone`` remembers the EventIds of the most recently
    disappeared events (oldest first, at most ``GONE_MEMORY``), so that one coming back is noticed.
    ``vm_id`` is the VM its records were made as, so that a change of identity is noticed.
    """

    incarnation: int | None
    events: tuple[Tracked, ...]
    observed_at: datetime | None = None
    gone: tuple[str, ...] = ()
    api_version: str = ""  # the Scheduled Events api-version of the last document diffed ("" before any)
    vm_id: str = ""  # "" before any record, and in snapshots written before it was kept

    @staticmethod
    def empty() -> Snapshot:
        """The state of a collector that never saw a document."""
        return Snapshot(incarnation=None, events=(), observed_at=None, gone=(), api_version="")

    def by_id(self) -> dict[str, Tracked]:
        """The tracked events keyed by EventId."""
        return {t.event.event_id: t for t in self.events}

    def to_json(self) -> str:
        """Canonical JSON; ``Snapshot.from_json(s.to_json()) == s`` exactly (microseconds kept)."""
        body = {
            "version": SNAPSHOT_VERSION,
            "incarnation": self.incarnation,
            "observed_at": _time_out(self.observed_at),
            "events": [],
            "gone": list(self.gone),
            "api_version": self.api_version,
            "vm_id": self.vm_id,
        }
        # The events are encoded one at a time: the json encoder holds every piece of its text until the end, MiBs
        # for 1,000 events. Same text as encoding it whole: '"events":[]' cannot occur inside an encoded string.
        head, tail = _CANONICAL.encode(body).split('"events":[]', 1)
        events = ",".join(_CANONICAL.encode({"since": _time_out(t.since), **_event_out(t.event)}) for t in self.events)
        return f'{head}"events":[{events}]{tail}'

    @staticmethod
    def from_json(text: str) -> Snapshot:
        """Inverse of ``to_json``; raises ValueError if the text is not a snapshot this version wrote."""
        try:
            body = json.loads(text)
            if type(body["version"]) is not int or body["version"] != SNAPSHOT_VERSION:
                raise ValueError(f"unknown snapshot version {body['version']!r}")
            incarnation = body["incarnation"]
            if incarnation is not None and (type(incarnation) is not int):
                raise ValueError(f"bad incarnation {incarnation!r}")
            events = tuple(Tracked(event=_event_in(e), since=_time_in_required(e["since"])) for e in body["events"])
            gone = tuple(body.get("gone", ()))
            if not all(isinstance(g, str) for g in gone):
                raise ValueError(f"bad gone list {gone!r}")
            api_version = body.get("api_version", "")  # absent in snapshots written before it was kept
            if not isinstance(api_version, str):
                raise ValueError(f"bad api_version {api_version!r}")
            vm_id = body.get("vm_id", "")
            if not isinstance(vm_id, str):
                raise ValueError(f"bad vm_id {vm_id!r}")
            return Snapshot(
                incarnation=incarnation,
                events=events,
                observed_at=_time_in(body["observed_at"]),
                gone=gone,
                api_version=api_version,
                vm_id=vm_id,
            )
        except (KeyError, TypeError, AttributeError, RecursionError) as e:
            raise ValueError(f"not a snapshot: {e!r}") from e


@dataclass(frozen=True)
class Transition:
    """One change of one event (or of the document, when ``event_id`` is "") seen between two polls.

    ``event`` is the event's new state, or its last known state for ``disappeared``; None only for
    document-level anomalies. ``prev_observed_at`` is when the event was first observed in ``prev_status``.
    """

    kind: str
    event_id: str
    incarnation: int
    status: str
    prev_status: str
    observed_at: datetime
    prev_observed_at: datetime | None
    event: Event | None
    changed_fields: tuple[str, ...] = ()
    anomaly: str = ""


@dataclass(frozen=True)
class VmIdentity:
    """The observing VM's identity and topology, from instance metadata ("" / None where unknown)."""

    vm_id: str
    vm_name: str
    location: str = ""
    subscription_id: str = ""
    resource_group: str = ""
    resource_id: str = ""
    zone: str = ""
    fault_domain: int | None = None
    update_domain: int | None = None
    scale_set: str = ""

    @staticmethod
    def unknown() -> VmIdentity:
        """The identity to use before instance metadata could be read."""
        return VmIdentity(vm_id="", vm_name="")


def _time_out(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(timezone.utc).isoformat()


def _time_in(text: Any) -> datetime | None:
    if text is None:
        return None
    return _time_in_required(text)


def _time_in_required(text: Any) -> datetime:
    if not isinstance(text, str):
        raise ValueError(f"bad timestamp {text!r}")
    moment = isotime.parse(text)
    if moment.tzinfo is None:
        raise ValueError(f"naive timestamp {text!r}")
    return moment.astimezone(timezone.utc)


def _event_out(e: Event) -> dict[str, Any]:
    return {
        "event_id": e.event_id,
        "event_type": e.event_type,
        "resource_type": e.resource_type,
        "resources": list(e.resources),
        "status": e.status,
        "not_before": _time_out(e.not_before),
        "description": e.description,
        "event_source": e.event_source,
        "duration_s": e.duration_s,
    }


def _event_in(d: dict[str, Any]) -> Event:
    strs = ("event_id", "event_type", "resource_type", "status")
    if not all(isinstance(d[k], str) for k in strs):
        raise ValueError(f"bad event {d!r}")
    if not all(isinstance(r, str) for r in d["resources"]):
        raise ValueError(f"bad resources {d['resources']!r}")
    for k in ("description", "event_source"):
        if d[k] is not None and not isinstance(d[k], str):
            raise ValueError(f"bad {k} {d[k]!r}")
    if d["duration_s"] is not None and type(d["duration_s"]) is not int:
        raise ValueError(f"bad duration_s {d['duration_s']!r}")
    return Event(
        event_id=d["event_id"],
        event_type=d["event_type"],
        resource_type=d["resource_type"],
        resources=tuple(d["resources"]),
        status=d["status"],
        not_before=_time_in(d["not_before"]),
        description=d["description"],
        event_source=d["event_source"],
        duration_s=d["duration_s"],
    )


def event_to_json(e: Event) -> dict[str, Any]:
    """An event as the JSON the state store keeps (the snapshot's form)."""
    return _event_out(e)


def event_from_json(d: dict[str, Any]) -> Event:
    """Inverse of ``event_to_json``; ValueError (or KeyError, TypeError) on anything else."""
    return _event_in(d)


@dataclass(frozen=True)
class Downtime:
    """A stretch of time the VM did not run (``collector.downtime``): from ``began_at``, the last moment it was
    known running, to ``ended_at``; ``detected_by`` is "pause" or "reboot"."""

    detected_by: str
    began_at: datetime
    ended_at: datetime

    @property
    def duration_ms(self) -> int:
        return max(0, round((self.ended_at - self.began_at) / timedelta(milliseconds=1)))


@dataclass(frozen=True)
class Alive:
    """The last moment the collector knew its VM running, in which boot (kept in the state dir)."""

    boot_id: str
    at: datetime


@dataclass(frozen=True)
class ApprovalOutcome:
    """What the approval policy did about one event (``collector.approver``): the decision and its evidence."""

    decision: str  # one of sevents.records.DECISIONS
    rule: str
    approver: str
    decided_at: datetime
    hook_exit: int | None = None  # None: no hook ran
    hook_ms: int | None = None
    http_status: int | None = None  # None: no approval was sent (or no answer came)
