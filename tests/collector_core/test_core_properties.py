"""Invariants of the transition engine over arbitrary document sequences (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.enrich import transition_key
from collector.model import Document, Event, Snapshot, Transition
from collector.transitions import diff, replay
from tests.collector_core.core_helpers import at, strategy_events
from tests.tiers import examples


def _snapshot_like() -> st.SearchStrategy[str]:
    """JSON close to a saved snapshot, with values replaced by arbitrary JSON scalars and lists."""
    value = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2))
    good = Snapshot.empty().to_json()
    event: dict[str, Any] = {"since": "2022-01-01T00:00:00+00:00", "event_id": "A", "event_type": "Freeze"}
    event |= {"resource_type": "VM", "resources": [], "status": "Scheduled", "not_before": None}
    event |= {"description": None, "event_source": None, "duration_s": None}
    keys = ["version", "incarnation", "observed_at", "events", "gone", "api_version", "vm_id"]
    return st.builds(
        lambda k, v, ek, ev: json.dumps({**json.loads(good), "events": [{**event, ek: ev}], k: v}),
        st.sampled_from(keys),
        value,
        st.sampled_from(sorted(event)),
        value,
    )


# Incarnations that mostly go up but also repeat and go backwards, as a misbehaving IMDS might.
_any_incarnations = st.lists(st.integers(0, 6), min_size=1, max_size=8)


def _run(incarnations: list[int], contents: list[tuple[Event, ...]]) -> tuple[Snapshot, list[Transition]]:
    snapshot = Snapshot.empty()
    transitions: list[Transition] = []
    for i, (inc, events) in enumerate(zip(incarnations, contents, strict=False)):
        snapshot, out = diff(snapshot, Document(incarnation=inc, events=events), at(i))
        transitions += out
    return snapshot, transitions


@settings(max_examples=examples(200), deadline=None)
@given(_any_incarnations, st.lists(strategy_events, min_size=8, max_size=8))
def test_replaying_transitions_reconstructs_the_final_snapshot(
    incarnations: list[int], contents: list[tuple[Event, ...]]
) -> None:
    """Applying every transition in order to an empty state gives exactly the final snapshot's events."""
    snapshot, transitions = _run(incarnations, contents)
    assert replay(transitions) == {t.event.event_id: t.event for t in snapshot.events}


@settings(max_examples=examples(200), deadline=None)
@given(_any_incarnations, st.lists(strategy_events, min_size=8, max_size=8))
def test_diffing_the_same_document_again_is_empty(incarnations: list[int], contents: list[tuple[Event, ...]]) -> None:
    """After any history, the last document diffed again yields nothing and the same snapshot."""
    snapshot, _ = _run(incarnations, contents)
    last = Document(incarnation=incarnations[-1], events=contents[len(incarnations) - 1])
    again, out = diff(snapshot, last, at(99))
    assert out == ()
    assert again is snapshot


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=8), st.lists(strategy_events, min_size=8, max_size=8))
def test_transition_ids_are_unique_with_increasing_incarnations(
    steps: list[int], contents: list[tuple[Event, ...]]
) -> None:
    """With increasing incarnations, no two transitions of a run share a transition id."""
    incarnations = [sum(steps[: i + 1]) for i in range(len(steps))]
    _, transitions = _run(incarnations, contents)
    keys = [transition_key(t, "vm-1") for t in transitions]
    assert len(keys) == len(set(keys))


@settings(max_examples=examples(200), deadline=None)
@given(_any_incarnations, st.lists(strategy_events, min_size=8, max_size=8))
def test_snapshot_round_trips_exactly_through_json(incarnations: list[int], contents: list[tuple[Event, ...]]) -> None:
    """Every snapshot the engine produces survives to_json/from_json unchanged, and diffs the same afterwards."""
    snapshot = Snapshot.empty()
    for i, (inc, events) in enumerate(zip(incarnations, contents, strict=False)):
        restored = Snapshot.from_json(snapshot.to_json())
        assert restored == snapshot
        document = Document(incarnation=inc, events=events)
        snapshot, out = diff(snapshot, document, at(i))
        assert diff(restored, document, at(i))[1] == out


@settings(max_examples=examples(200), deadline=None)
@given(_any_incarnations, st.lists(strategy_events, min_size=8, max_size=8))
def test_at_most_one_transition_per_event_per_document(
    incarnations: list[int], contents: list[tuple[Event, ...]]
) -> None:
    """Each diff says at most one thing per EventId, and at most one thing about the document."""
    snapshot = Snapshot.empty()
    for i, (inc, events) in enumerate(zip(incarnations, contents, strict=False)):
        snapshot, out = diff(snapshot, Document(incarnation=inc, events=events), at(i))
        ids = [t.event_id for t in out]
        assert len(ids) == len(set(ids))


@settings(max_examples=examples(200), deadline=None)
@given(st.one_of(st.text(max_size=60), _snapshot_like()))
def test_any_text_loads_as_a_snapshot_or_raises_value_error(text: str) -> None:
    """Damaged saved state either loads as a Snapshot or raises ValueError, nothing else."""
    try:
        loaded = Snapshot.from_json(text)
    except ValueError:
        return
    assert isinstance(loaded, Snapshot)
