"""Lifecycle cases of the transition engine, one documented IMDS behaviour (or oddity) per test."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

import pytest

from collector.model import GONE_MEMORY, Snapshot, Transition
from collector.transitions import diff, replay
from tests.collector_core.core_helpers import at, doc, event, started


def run(*docs_and_times: tuple[object, datetime], start: Snapshot | None = None) -> list[list[Transition]]:
    """Diff each (document, time) in turn from ``start``; the transitions of each step."""
    snapshot = start or Snapshot.empty()
    steps = []
    for d, moment in docs_and_times:
        snapshot, out = diff(snapshot, d, moment)  # type: ignore[arg-type]
        steps.append(list(out))
    return steps


def summary(ts: list[Transition]) -> list[tuple[str, str, int, str, str]]:
    """(kind, event_id, incarnation, status, prev_status) of each transition."""
    return [(t.kind, t.event_id, t.incarnation, t.status, t.prev_status) for t in ts]


def test_cancelled_event_disappears_from_scheduled() -> None:
    """Scheduled then gone is `disappeared` with prev_status Scheduled (cancelled)."""
    e = event()
    steps = run((doc(1, e), at(0)), (doc(2), at(60)))
    assert summary(steps[1]) == [("disappeared", "E1", 2, "", "Scheduled")]
    assert steps[1][0].prev_observed_at == at(0)
    assert steps[1][0].event == e


def test_host_failure_appears_started() -> None:
    """An event that bypasses Scheduled (host hardware failure) appears directly as Started."""
    e = event(event_type="Reboot", status="Started", not_before=None, duration_s=-1)
    steps = run((doc(1), at(0)), (doc(2, e), at(1)), (doc(3), at(300)))
    assert summary(steps[1]) == [("appeared", "E1", 2, "Started", "")]
    assert steps[1][0].prev_observed_at is None
    assert summary(steps[2]) == [("disappeared", "E1", 3, "", "Started")]
    assert steps[2][0].prev_observed_at == at(1)


def test_second_shorter_impact_while_started_is_updated() -> None:
    """DurationInSeconds changing while Started is `updated` with changed_fields, status kept."""
    s = started(event())
    steps = run((doc(3, s), at(0)), (doc(4, replace(s, duration_s=2)), at(5)))
    assert summary(steps[1]) == [("updated", "E1", 4, "Started", "Started")]
    assert steps[1][0].changed_fields == ("duration_s",)
    assert steps[1][0].prev_observed_at == at(0)


def test_started_back_to_scheduled_is_an_anomaly_and_the_lifecycle_continues() -> None:
    """Started -> Scheduled is not in the lifecycle: an anomaly; the next Started is a status change again."""
    e = event()
    steps = run((doc(1, e), at(0)), (doc(2, started(e)), at(10)), (doc(3, e), at(20)), (doc(4, started(e)), at(30)))
    assert summary(steps[2]) == [("anomaly", "E1", 3, "Scheduled", "Started")]
    assert "Started to Scheduled" in steps[2][0].anomaly
    assert steps[2][0].event == e
    assert summary(steps[3]) == [("status_changed", "E1", 4, "Started", "Scheduled")]
    assert steps[3][0].prev_observed_at == at(20)


def test_status_change_blanks_not_before_without_an_update() -> None:
    """Scheduled -> Started with NotBefore blanked is one status_changed with no changed fields."""
    e = event()
    steps = run((doc(2, e), at(0)), (doc(3, started(e)), at(42)))
    assert summary(steps[1]) == [("status_changed", "E1", 3, "Started", "Scheduled")]
    assert steps[1][0].changed_fields == ()
    assert steps[1][0].prev_observed_at == at(0)
    assert steps[1][0].event is not None and steps[1][0].event.not_before is None


def test_status_change_with_other_fields_lists_them() -> None:
    """Fields that change along with the status (other than NotBefore) are listed in changed_fields."""
    e = event()
    steps = run((doc(2, e), at(0)), (doc(3, started(e, duration_s=9)), at(42)))
    assert summary(steps[1]) == [("status_changed", "E1", 3, "Started", "Scheduled")]
    assert steps[1][0].changed_fields == ("duration_s",)


def test_not_before_moved_is_updated() -> None:
    """A Scheduled event whose NotBefore moves is `updated` with changed_fields ("not_before",)."""
    e = event()
    later = replace(e, not_before=datetime(2022, 4, 11, 23, 0, tzinfo=e.not_before.tzinfo))  # type: ignore[union-attr]
    steps = run((doc(1, e), at(0)), (doc(2, later), at(60)))
    assert summary(steps[1]) == [("updated", "E1", 2, "Scheduled", "Scheduled")]
    assert steps[1][0].changed_fields == ("not_before",)
    assert steps[1][0].event == later


def test_resources_and_description_changes_are_updated() -> None:
    """Resources and Description may change while the event lives; both are reported."""
    e = event()
    changed = replace(e, resources=("WestNO_0",), description="narrowed")
    steps = run((doc(1, e), at(0)), (doc(2, changed), at(1)))
    assert summary(steps[1]) == [("updated", "E1", 2, "Scheduled", "Scheduled")]
    assert steps[1][0].changed_fields == ("resources", "description")


def test_fixed_field_change_is_an_anomaly() -> None:
    """EventType changing under the same EventId is not a documented change: an anomaly naming the field."""
    e = event()
    steps = run((doc(1, e), at(0)), (doc(2, replace(e, event_type="Reboot")), at(1)))
    assert summary(steps[1]) == [("anomaly", "E1", 2, "Scheduled", "Scheduled")]
    assert steps[1][0].changed_fields == ("event_type",)
    assert "event_type" in steps[1][0].anomaly


def test_unknown_status_is_an_anomaly_and_its_disappearance_is_recorded() -> None:
    """A status IMDS does not document is recorded as an anomaly; the event vanishing is still `disappeared`."""
    odd = event(status="Completed")
    steps = run((doc(1, odd), at(0)), (doc(2), at(1)))
    assert summary(steps[0]) == [("anomaly", "E1", 1, "Completed", "")]
    assert "unknown status 'Completed'" in steps[0][0].anomaly
    assert summary(steps[1]) == [("disappeared", "E1", 2, "", "Completed")]


def test_same_incarnation_polled_again_yields_nothing_and_the_same_snapshot() -> None:
    """Polling the same document again yields no transitions and returns the snapshot object unchanged."""
    d = doc(2, event(), event("E2", status="Started", not_before=None))
    snapshot, first = diff(Snapshot.empty(), d, at(0))
    again, second = diff(snapshot, d, at(1))
    assert len(first) == 2
    assert second == ()
    assert again is snapshot


def test_reordered_events_under_same_incarnation_are_the_same_document() -> None:
    """The order of the Events array is not content: a reordered document yields nothing."""
    a, b = event("A"), event("B")
    snapshot, _ = diff(Snapshot.empty(), doc(5, a, b), at(0))
    _, out = diff(snapshot, doc(5, b, a), at(1))
    assert out == ()


def test_restarted_collector_emits_nothing_already_emitted() -> None:
    """A snapshot saved as JSON and loaded back diffs the same document to nothing."""
    d = doc(3, started(event()), event("E2"))
    snapshot, _ = diff(Snapshot.empty(), d, at(0))
    restored = Snapshot.from_json(snapshot.to_json())
    assert restored == snapshot
    assert diff(restored, d, at(9))[1] == ()


def test_several_events_in_one_document_keep_document_order() -> None:
    """Several events in one document each get a transition, in document order, disappearances last."""
    a, b, c = event("A"), event("B", event_type="Reboot"), event("C")
    steps = run((doc(1, a, c), at(0)), (doc(2, b, started(a)), at(1)))
    assert summary(steps[0]) == [("appeared", "A", 1, "Scheduled", ""), ("appeared", "C", 1, "Scheduled", "")]
    assert summary(steps[1]) == [
        ("appeared", "B", 2, "Scheduled", ""),
        ("status_changed", "A", 2, "Started", "Scheduled"),
        ("disappeared", "C", 2, "", "Scheduled"),
    ]


def test_incarnation_reset_is_an_anomaly_and_diffed_by_content() -> None:
    """Incarnation going backwards records one document anomaly; unchanged events emit nothing, others diff."""
    a, b, c = event("A"), started(event("B")), event("C")
    snapshot, _ = diff(Snapshot.empty(), doc(57, a, b), at(0))
    snapshot, out = diff(snapshot, doc(1, a, c), at(100))
    assert summary(list(out)) == [
        ("anomaly", "", 1, "", ""),
        ("appeared", "C", 1, "Scheduled", ""),
        ("disappeared", "B", 1, "", "Started"),
    ]
    assert out[0].anomaly == "incarnation went backwards from 57 to 1"
    assert out[0].event is None
    assert snapshot.incarnation == 1
    assert snapshot.by_id()["A"].since == at(0)
    # After the reset, the new numbering is trusted like any other: the next incarnation is normal.
    _, out = diff(snapshot, doc(2, a, started(c)), at(101))
    assert summary(list(out)) == [("status_changed", "C", 2, "Started", "Scheduled")]


def test_incarnation_reset_with_unchanged_content_re_emits_nothing() -> None:
    """A reset to a lower incarnation with the same events yields only the anomaly, then silence."""
    a = event("A")
    snapshot, _ = diff(Snapshot.empty(), doc(9, a), at(0))
    snapshot, out = diff(snapshot, doc(1, a), at(1))
    assert summary(list(out)) == [("anomaly", "", 1, "", "")]
    assert diff(snapshot, doc(1, a), at(2))[1] == ()


def test_content_changed_under_unchanged_incarnation_is_recorded_and_diffed() -> None:
    """A changed document under the same incarnation records a document anomaly, then the content diff."""
    a = event("A")
    snapshot, _ = diff(Snapshot.empty(), doc(4, a), at(0))
    _, out = diff(snapshot, doc(4, a, event("B")), at(1))
    assert summary(list(out)) == [("anomaly", "", 4, "", ""), ("appeared", "B", 4, "Scheduled", "")]
    assert out[0].anomaly == "content changed under unchanged incarnation 4"


def test_higher_incarnation_with_same_content_yields_nothing() -> None:
    """A skipped-ahead incarnation with unchanged events is not a transition; the snapshot takes the number."""
    a = event("A")
    snapshot, _ = diff(Snapshot.empty(), doc(4, a), at(0))
    after, out = diff(snapshot, doc(6, a), at(1))
    assert out == ()
    assert after.incarnation == 6
    assert after.events == snapshot.events


def test_first_document_makes_every_event_appear() -> None:
    """From an empty snapshot, every event of the first document appears, and no anomaly is recorded."""
    d = doc(40, event("A"), started(event("B")))
    _, out = diff(Snapshot.empty(), d, at(0))
    assert summary(list(out)) == [("appeared", "A", 40, "Scheduled", ""), ("appeared", "B", 40, "Started", "")]
    assert replay(out) == {"A": d.events[0], "B": d.events[1]}


def test_naive_observed_at_is_our_bug() -> None:
    """A naive timestamp is a caller bug: ValueError, not a record."""
    with pytest.raises(ValueError, match="timezone-aware"):
        diff(Snapshot.empty(), doc(1), datetime(2022, 1, 1))


def test_snapshot_from_json_rejects_garbage() -> None:
    """A corrupt saved snapshot raises ValueError rather than loading as something else."""
    for text in ["", "[]", "{}", '{"version": 99}', '{"version":1,"incarnation":"1","events":[],"observed_at":null}']:
        with pytest.raises(ValueError):
            Snapshot.from_json(text)


def test_snapshot_keeps_the_vm_it_was_recorded_as() -> None:
    """The VM id survives JSON and every diff; a snapshot saved before it was kept loads with none."""
    snapshot, _ = diff(Snapshot.empty(), doc(1, event()), at(0))
    snapshot = replace(snapshot, vm_id="vm-a")
    assert Snapshot.from_json(snapshot.to_json()) == snapshot
    assert diff(snapshot, doc(2), at(1))[0].vm_id == "vm-a"
    older = json.loads(snapshot.to_json())
    del older["vm_id"]
    assert Snapshot.from_json(json.dumps(older)).vm_id == ""
    with pytest.raises(ValueError, match="vm_id"):
        Snapshot.from_json(json.dumps({**older, "vm_id": 7}))


def test_event_coming_back_after_it_disappeared_is_an_anomaly() -> None:
    """An EventId that disappeared (so was reported completed) and comes back is recorded as an anomaly."""
    s = started(event())
    steps = run((doc(1, s), at(0)), (doc(2), at(1)), (doc(3, s), at(2)), (doc(4), at(3)))
    assert summary(steps[1]) == [("disappeared", "E1", 2, "", "Started")]
    assert summary(steps[2]) == [("anomaly", "E1", 3, "Started", "")]
    assert steps[2][0].anomaly == "reappeared after it had disappeared"
    assert summary(steps[3]) == [("disappeared", "E1", 4, "", "Started")]


def test_memory_of_disappeared_events_is_bounded() -> None:
    """The snapshot remembers only the most recent GONE_MEMORY disappeared EventIds, oldest dropped first."""
    snapshot = Snapshot.empty()
    for i in range(GONE_MEMORY + 5):
        snapshot, _ = diff(snapshot, doc(2 * i + 1, event(f"E{i}")), at(2 * i))
        snapshot, _ = diff(snapshot, doc(2 * i + 2), at(2 * i + 1))
    assert len(snapshot.gone) == GONE_MEMORY
    assert snapshot.gone[0] == "E5" and snapshot.gone[-1] == f"E{GONE_MEMORY + 4}"
    assert Snapshot.from_json(snapshot.to_json()) == snapshot
