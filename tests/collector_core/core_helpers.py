"""Shared helpers of the collector core tests: recorded fixtures, an event builder, hypothesis strategies."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from collector.model import Document, Event

FIXTURES = Path(__file__).parent / "fixtures"
T0 = datetime(2022, 4, 11, 22, 10, 0, 123000, tzinfo=UTC)


def fixture(name: str) -> bytes:
    """The bytes of a recorded IMDS document under fixtures/."""
    return (FIXTURES / name).read_bytes()


def at(seconds: float) -> datetime:
    """A moment ``seconds`` after T0."""
    return T0 + timedelta(seconds=seconds)


def event(event_id: str = "E1", **changes: Any) -> Event:
    """A 2020-07-01 style Scheduled Freeze event for WestNO_0 and WestNO_1, with ``changes`` applied."""
    base = Event(
        event_id=event_id,
        event_type="Freeze",
        resource_type="VirtualMachine",
        resources=("WestNO_0", "WestNO_1"),
        status="Scheduled",
        not_before=datetime(2022, 4, 11, 22, 26, 58, tzinfo=UTC),
        description="Virtual machine is being paused because of a memory-preserving Live Migration operation.",
        event_source="Platform",
        duration_s=5,
    )
    return replace(base, **changes)


def started(e: Event, **changes: Any) -> Event:
    """The same event as IMDS shows it once Started: NotBefore blanked."""
    return replace(e, status="Started", not_before=None, **changes)


def doc(incarnation: int, *events: Event) -> Document:
    """A document from its parts."""
    return Document(incarnation=incarnation, events=tuple(events))


# Strategies: a small id pool so that events recur across documents and every lifecycle path is hit.
_times = st.one_of(st.none(), st.integers(0, 10).map(lambda m: datetime(2022, 4, 11, 22, m, tzinfo=UTC)))
strategy_event = st.builds(
    Event,
    event_id=st.sampled_from(["A", "B", "C", "D"]),
    event_type=st.sampled_from(["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"]),
    resource_type=st.just("VirtualMachine"),
    resources=st.lists(st.sampled_from(["vm0", "VM1", "vm2"]), max_size=3, unique=True).map(tuple),
    status=st.sampled_from(["Scheduled", "Started", "Scheduled", "Started", "Completed", ""]),
    not_before=_times,
    description=st.one_of(st.none(), st.sampled_from(["maintenance", "live migration"])),
    event_source=st.one_of(st.none(), st.sampled_from(["Platform", "User"])),
    duration_s=st.one_of(st.none(), st.integers(-1, 30)),
)
strategy_events = st.lists(strategy_event, max_size=4, unique_by=lambda e: e.event_id).map(tuple)
