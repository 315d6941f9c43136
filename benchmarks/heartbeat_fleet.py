"""A fleet's wire records over time, cheaply: one heartbeat a minute per VM and a few events' lifecycles.

VM ``i`` of ``vms`` heartbeats at the same offset into every minute (``i * 60,000 // vms`` ms), so the fleet's
minute of heartbeats is spread evenly over the minute, as collectors started at random moments send them; its
``seq`` is the minute's number. Every ``EVENT_EVERY_S`` seconds an event begins on ``vms_per_event`` VMs (about
91 of 100,000, which makes the issue's 500 events and 137,000 transitions a day); its VMs see it one after the
other, evenly over those seconds, each going through ``synthetic.lifecycle`` (Scheduled, Started 5 min later,
gone 30 s after that). So transitions arrive at an even 1.5 a second at 100,000 VMs and nearly every batch of a
real-time ingest touches an event: the harsh case for the stored-lifecycle refresh each such batch triggers.

A heartbeat's payload is ``sevents.records.encode(synthetic.heartbeat(...))`` byte for byte, made from a
template of that very payload (``HeartbeatTemplate``: about a tenth of the cost, so that building 144 million of
them does not outweigh their ingest); ``same_as_synthetic`` compares the two, and the benchmark checks it first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from demo import synthetic
from sevents import records

EVENT_EVERY_S: Final = 180  # a new event every 3 minutes: 480 a day
EVENT_VMS_PER_100K: Final = 91  # VMs per event at 100,000 VMs: 3 x 91 x 480 = 131,040 transitions a day
LIFECYCLE_S: Final = 330  # from an event's appearance on a VM to its disappearance (synthetic.lifecycle)
MINUTE_MS: Final = 60_000

# the fields of a heartbeat that change with its VM or its minute, made placeholders of the template
_VARYING: Final = (
    "fault_domain",
    "heartbeat_id",
    "observed_at",
    "record_id",
    "resource_id",
    "seq",
    "started_at",
    "update_domain",
    "vm_id",
    "vm_name",
)
_NUMBERS: Final = frozenset({"fault_domain", "seq", "update_domain"})
_RESOURCE: Final = "/subscriptions/x/resourceGroups/fleet/providers/Microsoft.Compute/"


class HeartbeatTemplate:
    """``encode(synthetic.heartbeat(...))`` as a %-template, each varying field a placeholder (in ``_VARYING``'s
    order, which is the payload's: its keys are sorted)."""

    def __init__(self) -> None:
        record = synthetic.heartbeat()
        for name in _VARYING:
            record[name] = f"@@{name}@@"
        text = records.encode(record).decode().replace("%", "%%")
        places = [text.index(f'"@@{name}@@"') for name in _VARYING]
        if places != sorted(places):
            raise ValueError("the heartbeat's varying fields are not in the payload's order")
        for name in _VARYING:
            text = text.replace(f'"@@{name}@@"', "%d" if name in _NUMBERS else '"%s"')
        self.text = text

    def payload(self, vm_index: int, stamp: str, started: str, seq: int) -> bytes:
        """The heartbeat of VM ``vm_index`` observed at ``stamp`` (a wire time), started at ``started``."""
        # the identity synthetic.vm(vm_index) gives, made here without its dict (same_as_synthetic checks it)
        vm_id = f"00000000-0000-4000-8000-{vm_index:012d}"
        name = f"vm-{vm_index:03d}"
        hid = hashlib.sha256(f"h\x1f{vm_id}\x1f{stamp}".encode()).hexdigest()[:32]  # records.heartbeat_id
        values = (vm_index % 3, hid, stamp, hid, _RESOURCE + name, seq, started, vm_index % 5, vm_id, name)
        return (self.text % values).encode()


@dataclass
class Fleet:
    """The records of ``vms`` VMs from ``start`` (a whole minute, UTC) on, by time (ms since ``start``)."""

    vms: int
    start: datetime
    vms_per_event: int = 0  # 0: EVENT_VMS_PER_100K per 100,000 VMs, at least 1
    template: HeartbeatTemplate = field(default_factory=HeartbeatTemplate)
    made: dict[str, int] = field(default_factory=lambda: {"heartbeats": 0, "transitions": 0})  # handed out
    _events: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    _prefixes: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.vms < 1:
            raise ValueError("a fleet has at least one VM")
        if self.start.second or self.start.microsecond:
            raise ValueError("a fleet starts on a whole minute")
        if self.vms_per_event < 1:
            self.vms_per_event = max(1, round(self.vms * EVENT_VMS_PER_100K / 100_000))

    def records_between(self, begin_ms: int, end_ms: int) -> list[tuple[int, bytes]]:
        """Every record observed in [begin_ms, end_ms) as (observed ms since start, payload), by time."""
        beats, changes = list(self._heartbeats(begin_ms, end_ms)), self.transitions_between(begin_ms, end_ms)
        self.made["heartbeats"] += len(beats)
        self.made["transitions"] += len(changes)
        beats.extend(changes)
        beats.sort(key=lambda item: item[0])
        return beats

    def _heartbeats(self, begin_ms: int, end_ms: int) -> Iterator[tuple[int, bytes]]:
        payload, vms = self.template.payload, self.vms
        for minute in range(max(0, begin_ms) // MINUTE_MS, (end_ms + MINUTE_MS - 1) // MINUTE_MS):
            base = minute * MINUTE_MS
            low, high = max(begin_ms - base, 0), min(end_ms - base, MINUTE_MS)
            if low >= high:
                continue
            prefix, started_prefix = self._prefix(minute), self._prefix(minute - 5)
            # offset(i) = i * 60,000 // vms >= low exactly when i >= low * vms / 60,000
            for i in range(-(-low * vms // MINUTE_MS), -(-high * vms // MINUTE_MS)):
                second, milli = divmod(i * MINUTE_MS // vms, 1000)
                suffix = f"{second:02d}.{milli:03d}Z"
                yield base + second * 1000 + milli, payload(i, prefix + suffix, started_prefix + suffix, minute + 1)

    def _prefix(self, minute: int) -> str:
        """``YYYY-MM-DDTHH:MM:`` of minute number ``minute`` (the wire form up to the seconds)."""
        prefix = self._prefixes.get(minute)
        if prefix is None:
            prefix = records.format_time(self.start + timedelta(minutes=minute))[:17]
            if len(self._prefixes) > 64:
                self._prefixes.clear()
            self._prefixes[minute] = prefix
        return prefix

    def _event_span(self, begin_ms: int, end_ms: int) -> range:
        """The events that have a record in [begin_ms, end_ms)."""
        every = EVENT_EVERY_S * 1000
        first = max(0, (begin_ms - (EVENT_EVERY_S + LIFECYCLE_S) * 1000) // every)
        return range(first, max(first, (end_ms - 1) // every + 1))

    def _lifecycle_plan(self, event: int) -> Iterator[tuple[int, int, int]]:
        """(appearance ms, VM, place) of each VM of ``event``: evenly over EVENT_EVERY_S from its start."""
        k = self.vms_per_event
        for place in range(k):
            at = event * EVENT_EVERY_S * 1000 + place * EVENT_EVERY_S * 1000 // k
            yield at, (event * k + place) % self.vms, place

    def transitions_between(self, begin_ms: int, end_ms: int) -> list[tuple[int, bytes]]:
        """The transitions of ``records_between`` alone (not counted in ``made``)."""
        return list(self._transitions(begin_ms, end_ms))

    def _transitions(self, begin_ms: int, end_ms: int) -> Iterator[tuple[int, bytes]]:
        span = self._event_span(begin_ms, end_ms)
        for done in [e for e in self._events if e < span.start]:
            del self._events[done]  # no record of it is ahead
        for event in span:
            built = self._events.get(event)
            if built is None:
                built = self._events[event] = self._lifecycle_records(event)
            yield from ((at, payload) for at, payload in built if begin_ms <= at < end_ms)

    def _lifecycle_records(self, event: int) -> list[tuple[int, bytes]]:
        built = []
        for at, vm, _place in self._lifecycle_plan(event):
            start = self.start + timedelta(milliseconds=at)
            for record in synthetic.lifecycle(f"HB-{event:06d}", vm, start=start):
                observed = records.parse_time(record["observed_at"])
                built.append(((observed - self.start) // timedelta(milliseconds=1), records.encode(record)))
        return built


def same_as_synthetic(fleet: Fleet, samples: list[tuple[int, int]]) -> bool:
    """Whether the fleet's heartbeat of each (VM, minute) in ``samples`` is ``synthetic.heartbeat``'s payload."""
    for vm, minute in samples:
        at = minute * MINUTE_MS + vm * MINUTE_MS // fleet.vms
        observed = fleet.start + timedelta(milliseconds=at)
        expected = records.encode(synthetic.heartbeat(vm_index=vm, observed_at=observed, seq=minute + 1))
        made = [payload for _at, payload in fleet._heartbeats(at, at + 1) if _vm_of(payload) == vm]
        if made != [expected]:
            return False
    return True


def _vm_of(payload: bytes) -> int:
    """The VM number of a heartbeat payload (its vm_id's last twelve digits)."""
    marker = b'"vm_id":"00000000-0000-4000-8000-'
    at = payload.index(marker) + len(marker)
    return int(payload[at : at + 12])
