"""Salvage per event and per field: one bad field in one event costs neither that event nor the others.

A field IMDS sends in a shape it never uses is made safe (unknown: None, "" or left out) and noted in the
``anomaly`` of that event's record; an entry of Events that cannot be an event (not an object, no usable EventId,
an EventId already read) is left out with a reason. The rest of the document is recorded as if the bad part were
not there.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.decode import (
    DROP_BAD_ID,
    DROP_DUPLICATE_ID,
    DROP_NO_ID,
    DROP_NOT_OBJECT,
    DecodeError,
    decode_document,
    parse_not_before,
)
from collector.enrich import transition_record
from collector.model import Document, Event, Snapshot, VmIdentity
from collector.transitions import diff
from sevents.records import KIND_ANOMALY, KIND_APPEARED, KIND_UPDATED, encode

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
VM = VmIdentity("vm-id", "vm0")
# JSON cannot say infinity; 1e999 is a number literal that Python reads as one. Written in place of this marker.
INF = "__1e999__"


def good(event_id: str, **fields: Any) -> dict[str, Any]:
    """A well-formed 2020-07-01 event."""
    return {
        "EventId": event_id,
        "EventStatus": "Scheduled",
        "EventType": "Freeze",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm0", "vm1"],
        "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
        "Description": "Virtual machine is being paused.",
        "EventSource": "Platform",
        "DurationInSeconds": 5,
        **fields,
    }


def body(events: list[Any], incarnation: int = 3) -> bytes:
    raw = json.dumps({"DocumentIncarnation": incarnation, "Events": events})
    return raw.replace(json.dumps(INF), "1e999").encode()


def records_of(document: Document, prev: Snapshot | None = None) -> tuple[Snapshot, list[dict[str, Any]]]:
    """The snapshot and wire records a collector stores for ``document`` (each one encodes)."""
    snapshot, transitions = diff(prev or Snapshot.empty(), document, NOW if prev is None else LATER)
    out = [transition_record(t, VM, api_version="2020-07-01", collector_version="1") for t in transitions]
    for record in out:
        encode(record)
    return snapshot, out


# Each bad value the issue names, and others of the same kinds: (field, value as sent, the safe value, its name).
BAD_FIELDS: list[tuple[str, Any, str, Any]] = [
    ("DurationInSeconds", INF, "duration_s", None),
    ("DurationInSeconds", 1.5, "duration_s", None),
    ("DurationInSeconds", "abc", "duration_s", None),
    ("DurationInSeconds", True, "duration_s", None),
    ("DurationInSeconds", 2**40, "duration_s", None),
    ("DurationInSeconds", [5], "duration_s", None),
    ("NotBefore", "tomorrow", "not_before", None),
    ("NotBefore", "2016-02-30T00:00:00Z", "not_before", None),
    ("NotBefore", 1_650_000_000, "not_before", None),
    ("NotBefore", INF, "not_before", None),
    ("Description", 42, "description", None),
    ("Description", {"text": "x"}, "description", None),
    ("EventSource", ["Platform"], "event_source", None),
    ("EventType", 5, "event_type", ""),
    ("ResourceType", False, "resource_type", ""),
    ("Resources", "vm0", "resources", ()),
    ("Resources", {"vm0": 1}, "resources", ()),
    ("Resources", ["vm0", 7, None, "vm1"], "resources", ("vm0", "vm1")),
    ("EventStatus", None, "status", ""),
    ("EventStatus", 1, "status", ""),
]


@pytest.mark.parametrize(("key", "value", "attribute", "safe"), BAD_FIELDS)
def test_one_bad_field_in_one_event_records_every_event_and_the_safe_version(
    key: str, value: Any, attribute: str, safe: Any
) -> None:
    """The document of the issue: three events, the middle one with one bad field. All three are recorded, the
    other two exactly as without it, the middle one with the field made safe and noted in its anomaly."""
    events = [good("A"), good("B", **{key: value}), good("C")]
    document = decode_document(body(events))
    clean = decode_document(body([good("A"), good("B"), good("C")]))

    assert [e.event_id for e in document.events] == ["A", "B", "C"]
    assert document.events[0] == clean.events[0] and document.events[2] == clean.events[2]
    assert document.events[1] == replace(clean.events[1], **{attribute: safe})
    assert document.events[0].repairs == () == document.events[2].repairs
    (note,) = document.events[1].repairs
    assert note.startswith(key)
    assert document.repairs == (f"Events[1].{note}",)
    assert document.dropped == ()

    _, records = records_of(document)
    assert [r["event_id"] for r in records] == ["A", "B", "C"]
    assert [r["anomaly"] for r in records[::2]] == ["", ""]
    assert records[1]["anomaly"].endswith(f"made safe: {note}")
    # The kind is what the lifecycle says; only a status the engine cannot know makes it an anomaly.
    expected = KIND_ANOMALY if key == "EventStatus" else KIND_APPEARED
    assert [r["kind"] for r in records] == [KIND_APPEARED, expected, KIND_APPEARED]


def test_the_note_says_which_value_was_wrong() -> None:
    """The anomaly names the field, the value as sent (shortened) and what became of it."""
    (event,) = decode_document(body([good("A", DurationInSeconds=1.5, Description=42)])).events
    assert event.repairs == (
        "Description 42 is a JSON int, not a string: made unknown",
        "DurationInSeconds 1.5 is not an integer: made unknown",
    )


def test_a_salvaged_document_polled_again_records_nothing_and_its_repair_records_the_change() -> None:
    """The same damaged document again is no change (the note is not part of the event); once IMDS sends the
    field well, the event is updated with that field, with no note."""
    damaged = decode_document(body([good("A"), good("B", NotBefore="soon")]))
    snapshot, _ = records_of(damaged)
    again, transitions = diff(snapshot, decode_document(body([good("A"), good("B", NotBefore="soon")])), LATER)
    assert transitions == () and again is snapshot

    _, records = records_of(decode_document(body([good("A"), good("B")], incarnation=4)), snapshot)
    (record,) = records
    assert (record["event_id"], record["kind"], record["changed_fields"], record["anomaly"]) == (
        "B",
        KIND_UPDATED,
        ["not_before"],
        "",
    )


def test_a_snapshot_of_salvaged_events_round_trips() -> None:
    """The snapshot keeps the safe values; the notes stay with the records, so what it reads back is equal."""
    snapshot, _ = records_of(decode_document(body([good("A", DurationInSeconds="abc", Resources=[1])])))
    assert Snapshot.from_json(snapshot.to_json()) == snapshot


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("not an event", DROP_NOT_OBJECT),
        (None, DROP_NOT_OBJECT),
        ([good("X")], DROP_NOT_OBJECT),
        ({k: v for k, v in good("X").items() if k != "EventId"}, DROP_NO_ID),
        (good("X", EventId=None), DROP_NO_ID),
        (good("X", EventId=""), DROP_NO_ID),
        (good("X", EventId=17), DROP_BAD_ID),
        (good("X", EventId=["A"]), DROP_BAD_ID),
    ],
)
def test_an_entry_that_cannot_be_an_event_drops_only_itself_with_a_reason(entry: Any, reason: str) -> None:
    """Without a usable EventId nothing can say which event an entry is: it alone is left out, and why."""
    document = decode_document(body([good("A"), entry, good("C")]))
    assert [e.event_id for e in document.events] == ["A", "C"]
    assert all(e.repairs == () for e in document.events)
    (dropped,) = document.dropped
    assert dropped.reason == reason and dropped.detail.startswith("Events[1]")
    _, records = records_of(document)
    assert [(r["event_id"], r["kind"], r["anomaly"]) for r in records] == [
        ("A", KIND_APPEARED, ""),
        ("C", KIND_APPEARED, ""),
    ]


def test_an_event_id_twice_keeps_the_first_noted_and_drops_the_second() -> None:
    """Dropping both copies would read as the event's end; the first is kept, noted, the second counted."""
    document = decode_document(body([good("A"), good("B"), good("A", EventStatus="Started", NotBefore="")]))
    assert [(e.event_id, e.status) for e in document.events] == [("A", "Scheduled"), ("B", "Scheduled")]
    assert [d.reason for d in document.dropped] == [DROP_DUPLICATE_ID]
    _, records = records_of(document)
    assert records[0]["anomaly"] == "made safe: EventId appears more than once in the document: the first kept"
    assert records[1]["anomaly"] == ""


def test_a_started_event_that_loses_its_status_is_not_taken_for_gone() -> None:
    """An event whose EventStatus turns unreadable stays (status "", an anomaly); it does not disappear."""
    snapshot, _ = records_of(decode_document(body([good("A", EventStatus="Started", NotBefore="")])))
    _, records = records_of(decode_document(body([good("A", EventStatus=None, NotBefore="")], 4)), snapshot)
    (record,) = records
    assert (record["kind"], record["status"], record["prev_status"]) == (KIND_ANOMALY, "", "Started")
    assert "made safe: EventStatus is missing" in record["anomaly"]


# -- properties ------------------------------------------------------------------------------------------------
_names = st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=8)
_times = st.sampled_from(["", "Mon, 11 Apr 2022 22:26:58 GMT", "2022-04-11T22:26:58Z", "2022-04-11T22:26:58"])


@st.composite
def good_events(draw: st.DrawFn) -> list[dict[str, Any]]:
    """1-6 well-formed events with distinct EventIds, optional fields present or absent."""
    ids = draw(st.lists(_names, min_size=1, max_size=6, unique=True))
    out = []
    for event_id in ids:
        e: dict[str, Any] = {
            "EventId": event_id,
            "EventStatus": draw(st.sampled_from(["Scheduled", "Started"])),
            "EventType": draw(st.sampled_from(["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"])),
            "ResourceType": "VirtualMachine",
            "Resources": draw(st.lists(_names, max_size=3)),
            "NotBefore": draw(_times),
            "Description": draw(st.none() | _names),
            "EventSource": draw(st.sampled_from([None, "Platform", "User"])),
            "DurationInSeconds": draw(st.none() | st.integers(-1, 3600) | st.integers(-1, 3600).map(str)),
        }
        for key in draw(st.lists(st.sampled_from(["Description", "EventSource", "DurationInSeconds"]), unique=True)):
            del e[key]  # older API versions do not send them
        out.append(e)
    return out


_not_text = st.one_of(
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just(INF),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_not_integer = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    st.just(INF),
    st.integers().filter(lambda i: not -(2**31) <= i < 2**31),
    st.text(max_size=8).filter(lambda t: t.strip() != "" and not t.strip().lstrip("+-").isdigit()),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _unreadable_time(text: str) -> bool:
    try:
        parse_not_before(text)
    except DecodeError:
        return True
    return False


_not_a_time = st.one_of(_not_text, st.text(max_size=16).filter(_unreadable_time))
# field -> (strategy of values in a shape IMDS never sends, the Event attribute, the safe value)
_BAD: dict[str, tuple[st.SearchStrategy[Any], str, Any]] = {
    "DurationInSeconds": (_not_integer, "duration_s", None),
    "NotBefore": (_not_a_time, "not_before", None),
    "Description": (_not_text, "description", None),
    "EventSource": (_not_text, "event_source", None),
    "EventType": (_not_text, "event_type", ""),
    "ResourceType": (_not_text, "resource_type", ""),
    "Resources": (_not_text.filter(lambda v: not isinstance(v, list)), "resources", ()),
    "EventStatus": (st.none() | _not_text, "status", ""),
}


@st.composite
def one_bad_field(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, str, Any]:
    """Good events, which one to damage, which field, and the bad value."""
    events = draw(good_events())
    index = draw(st.integers(0, len(events) - 1))
    key = draw(st.sampled_from(sorted(_BAD)))
    return events, index, key, draw(_BAD[key][0])


@settings(max_examples=400, deadline=None)
@given(one_bad_field())
def test_any_bad_field_in_any_event_costs_only_that_field(case: tuple[list[dict[str, Any]], int, str, Any]) -> None:
    """For any document and any one field of one event sent in a wrong shape: every event decodes, the others
    exactly as in the undamaged document, that one with the field at its safe value, noted; every event is
    recorded, the damaged one with the note in its anomaly."""
    events, index, key, value = case
    damaged = [dict(e) for e in events]
    damaged[index][key] = value
    clean = decode_document(body(events))
    document = decode_document(body(damaged))
    _, attribute, safe = _BAD[key]

    assert document.dropped == ()
    assert len(document.events) == len(clean.events)
    for i, (got, want) in enumerate(zip(document.events, clean.events, strict=True)):
        if i != index:
            assert got == want and got.repairs == ()
    assert document.events[index] == replace(clean.events[index], **{attribute: safe})
    (note,) = document.events[index].repairs
    assert note.startswith(key)

    _, records = records_of(document)
    assert [r["event_id"] for r in records] == [e["EventId"] for e in events]
    for i, record in enumerate(records):
        assert (f"made safe: {note}" in record["anomaly"]) == (i == index)


@st.composite
def one_bad_entry(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, Any]:
    """Good events, where to insert an entry that cannot be an event, and that entry: no object, no usable
    EventId, or a second entry (with another status) of an event already read."""
    events = draw(good_events())
    if draw(st.booleans()):
        original = draw(st.integers(0, len(events) - 1))
        entry = {**events[original], "EventStatus": "Other", "DurationInSeconds": 99}
        return events, draw(st.integers(original + 1, len(events))), entry
    entry = draw(
        st.one_of(
            _not_text,
            st.none(),
            st.text(max_size=5),
            st.builds(dict),
            st.sampled_from(events).map(lambda e: {**e, "EventId": None}),
            st.sampled_from(events).map(lambda e: {**e, "EventId": ""}),
            st.tuples(st.sampled_from(events), _not_text).map(lambda p: {**p[0], "EventId": p[1]}),
        )
    )
    return events, draw(st.integers(0, len(events))), entry


@settings(max_examples=300, deadline=None)
@given(one_bad_entry())
def test_an_entry_that_is_not_an_event_costs_no_other_event(case: tuple[list[dict[str, Any]], int, Any]) -> None:
    """For any document, one entry inserted anywhere that has no usable EventId, or repeats one already read, is
    left out with a reason; every event of the document is still there as it was, and recorded."""
    events, position, entry = case
    damaged = [*events[:position], entry, *events[position:]]
    clean = decode_document(body(events))
    document = decode_document(body(damaged))

    (dropped,) = document.dropped
    repeated = isinstance(entry, dict) and any(entry.get("EventId") == e["EventId"] for e in events)
    assert (dropped.reason == DROP_DUPLICATE_ID) == repeated
    assert dropped.detail.startswith(f"Events[{position}]")
    assert list(document.events) == list(clean.events)
    assert [bool(e.repairs) for e in document.events] == [repeated and e["EventId"] == entry["EventId"] for e in events]
    _, records = records_of(document)
    assert [r["event_id"] for r in records] == [e["EventId"] for e in events]


def test_good_events_decode_without_notes() -> None:
    """The undamaged documents of the properties carry no note (so the properties test what they say)."""
    document = decode_document(body([good("A"), good("B", Resources=[], NotBefore="")]))
    assert document.repairs == () and document.dropped == ()
    assert all(isinstance(e, Event) and e.repairs == () for e in document.events)
