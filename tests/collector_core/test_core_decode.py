"""The decoder: every API version's quirks read correctly, and nothing but DecodeError escapes for any input."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.decode import DecodeError, decode_document, parse_not_before, valid_text
from collector.enrich import transition_record
from collector.model import Document, Snapshot, VmIdentity
from collector.transitions import diff
from sevents.records import encode

FULL_EVENT: dict[str, Any] = {
    "EventId": "E1",
    "EventStatus": "Scheduled",
    "EventType": "Freeze",
    "ResourceType": "VirtualMachine",
    "Resources": ["vm0"],
    "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
    "Description": "d",
    "EventSource": "Platform",
    "DurationInSeconds": 5,
}


def body(incarnation: Any = 1, events: Any = None, **extra: Any) -> bytes:
    """A document body with the given parts."""
    return json.dumps(
        {"DocumentIncarnation": incarnation, "Events": [] if events is None else events, **extra}
    ).encode()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mon, 19 Sep 2016 18:29:47 GMT", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)),
        ("2016-09-19T18:29:47Z", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)),
        ("2016-09-19T18:29:47", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)),
        ("2016-09-19T20:29:47+02:00", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)),
        ("2016-09-19T18:29:47.1234567Z", datetime(2016, 9, 19, 18, 29, 47, 123456, tzinfo=UTC)),
        ("", None),
        ("   ", None),
        (None, None),
    ],
)
def test_not_before_formats(text: str | None, expected: datetime | None) -> None:
    """NotBefore is read as RFC 1123, ISO 8601 (zone-less means UTC) or blank."""
    assert parse_not_before(text) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        (b"[]", "not an object"),
        (b'{"Events": []}', "no DocumentIncarnation"),
        (body(None), "null or blank"),
        (body(True), "boolean"),
        (body(1.5), "not an integer"),
        (body("five"), "not an integer"),
        (body(1, {}), "not a list"),
        (b'{"DocumentIncarnation": 1}', "Events is missing"),
        (b'{"DocumentIncarnation": NaN, "Events": []}', "NaN"),
    ],
)
def test_malformed_documents_raise_decode_error_saying_what(raw: bytes, message: str) -> None:
    """Each kind of malformed document raises DecodeError naming the problem and where it is."""
    with pytest.raises(DecodeError, match=message):
        decode_document(raw)


@pytest.mark.parametrize(
    ("entry", "note"),
    [
        ({**FULL_EVENT, "EventStatus": None}, "EventStatus is missing"),
        ({**FULL_EVENT, "Resources": "vm0"}, "Resources"),
        ({**FULL_EVENT, "NotBefore": "tomorrow"}, "not a time in RFC 1123 or ISO 8601 form"),
        ({**FULL_EVENT, "NotBefore": "Fri, 31 Dec 9999 23:59:59 -2359"}, "not a time"),
        ({**FULL_EVENT, "NotBefore": "0001-01-01T00:00:00+01:00"}, "not a time"),
        ({**FULL_EVENT, "NotBefore": "2016-02-30T00:00:00Z"}, "not a time"),
        ({**FULL_EVENT, "NotBefore": 5}, "NotBefore is a JSON int"),
        ({**FULL_EVENT, "DurationInSeconds": "long"}, "DurationInSeconds"),
        ({**FULL_EVENT, "Description": 3}, "Description"),
    ],
)
def test_a_malformed_field_is_made_safe_and_noted_saying_what(entry: dict[str, Any], note: str) -> None:
    """A field in a shape IMDS never sends no longer fails the document: the event decodes with the field made
    safe, and the note names the field and what was wrong (test_core_salvage.py has the rest)."""
    (event,) = decode_document(body(1, [entry])).events
    assert event.event_id == "E1"
    assert any(note in n for n in event.repairs), event.repairs


@pytest.mark.parametrize(
    ("events", "reason"),
    [
        ([1], "not_an_object"),
        ([{**FULL_EVENT, "EventId": ""}], "no_event_id"),
        ([{**FULL_EVENT, "EventId": 7}], "bad_event_id"),
        ([FULL_EVENT, FULL_EVENT], "duplicate_event_id"),
    ],
)
def test_an_entry_that_is_no_event_is_dropped_with_a_reason(events: list[Any], reason: str) -> None:
    """An entry of Events without a usable EventId is left out and says why; the document still decodes."""
    document = decode_document(body(1, events))
    assert [d.reason for d in document.dropped] == [reason]
    assert len(document.events) == len(events) - 1


def test_decode_error_is_a_value_error() -> None:
    """DecodeError is a ValueError, as the interface promises."""
    assert issubclass(DecodeError, ValueError)


def test_string_and_integral_incarnations_and_absent_optional_fields() -> None:
    """String and integral-float incarnations are integers; absent and null optional fields are None."""
    minimal = {k: FULL_EVENT[k] for k in ("EventId", "EventStatus", "EventType", "ResourceType", "Resources")}
    assert decode_document(body(" 17 ", [minimal])).incarnation == 17
    assert decode_document(body(3.0)).incarnation == 3
    e = decode_document(body(1, [{**minimal, "Description": None, "DurationInSeconds": "-1"}])).events[0]
    assert (e.not_before, e.description, e.event_source, e.duration_s) == (None, None, None, -1)


def test_unknown_fields_and_status_are_kept_for_the_engine() -> None:
    """Fields a newer API version may add are ignored; an undocumented status decodes (the engine judges it)."""
    e = decode_document(body(1, [{**FULL_EVENT, "EventStatus": "Completed", "NewField": [1]}], Extra=1)).events[0]
    assert e.status == "Completed"


def test_only_one_leading_underscore_is_removed() -> None:
    """The 2017-03-01 underscore prefix is one character; names are otherwise left as sent."""
    e = decode_document(body(1, [{**FULL_EVENT, "Resources": ["_vm_0", "__x", "vm_1"]}])).events[0]
    assert e.resources == ("vm_0", "_x", "vm_1")


def _decodes_or_raises_decode_error(raw: bytes) -> None:
    try:
        result = decode_document(raw)
    except DecodeError:
        return
    assert isinstance(result, Document)
    # What decodes can be stored: every record built from it encodes (no lone surrogate survives decode).
    snapshot, transitions = diff(Snapshot.empty(), result, datetime(2026, 1, 1, tzinfo=UTC))
    snapshot.to_json().encode()
    for t in transitions:
        encode(transition_record(t, VmIdentity("vm", "vm"), api_version="2020-07-01", collector_version="1"))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_or_raise_decode_error(raw: bytes) -> None:
    """Arbitrary bytes from IMDS either decode or raise DecodeError, nothing else."""
    _decodes_or_raises_decode_error(raw)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_arbitrary_json_values_decode_or_raise_decode_error(value: Any) -> None:
    """Any JSON value either decodes or raises DecodeError, nothing else."""
    _decodes_or_raises_decode_error(json.dumps(value).encode())


_field_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["", "Scheduled", "Started", "Mon, 19 Sep 2016 18:29:47 GMT", "2016-09-19T18:29:47Z", "9"]),
    st.sampled_from(
        ["Mon, 99 Sep 2016 18:29:47 GMT", "9999-99-99", "2016-02-30T00:00:00Z", "Fri, 31 Dec 9999 23:59:59 -2359"]
    ),
    st.lists(st.text(max_size=6), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def near_valid(draw: st.DrawFn) -> bytes:
    """A valid document with some fields replaced, removed or mistyped."""
    events = []
    for i in range(draw(st.integers(0, 3))):
        e: dict[str, Any] = {**FULL_EVENT, "EventId": f"E{i}"}
        for key in draw(st.lists(st.sampled_from(sorted(FULL_EVENT)), max_size=3)):
            if draw(st.booleans()):
                e[key] = draw(_field_values)
            else:
                e.pop(key, None)
        events.append(e)
    doc: dict[str, Any] = {"DocumentIncarnation": draw(_field_values | st.integers(0, 9)), "Events": events}
    if draw(st.integers(0, 9)) == 0:
        doc.pop(draw(st.sampled_from(["DocumentIncarnation", "Events"])))
    return json.dumps(doc).encode()


@settings(max_examples=400, deadline=None)
@given(near_valid())
def test_near_valid_documents_decode_or_raise_decode_error(raw: bytes) -> None:
    """Documents with mistyped, missing or odd fields either decode or raise DecodeError, nothing else."""
    _decodes_or_raises_decode_error(raw)


def test_deeply_nested_json_is_a_decode_error() -> None:
    """JSON nested deeper than the parser's recursion limit is a DecodeError, not a RecursionError."""
    with pytest.raises(DecodeError):
        decode_document(b"[" * 100_000)


# Any code point, lone surrogates included: JSON can escape them ("\\ud800") and Python's json decodes them.
_any_text = st.text(st.characters(codec=None, categories=None), max_size=12)


@st.composite
def with_any_text(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A valid document whose string fields hold any code points; and whether a lone surrogate is among them."""
    events = []
    texts: list[str] = []
    for i in range(draw(st.integers(1, 3))):
        e: dict[str, Any] = {**FULL_EVENT, "EventId": f"E{i}"}
        for key in draw(
            st.lists(st.sampled_from(["EventId", "EventType", "Description", "EventSource"]), max_size=3, unique=True)
        ):
            e[key] = draw(_any_text.filter(str.strip)) + str(i) if key == "EventId" else draw(_any_text)
            texts.append(e[key])
        e["Resources"] = draw(st.lists(_any_text, max_size=2))
        texts += e["Resources"]
        events.append(e)
    # As IMDS's JSON reaches us: an escaped high+low pair decodes as one character, only lone ones stay.
    received = json.loads(json.dumps(texts))
    surrogate = any(0xD800 <= ord(c) <= 0xDFFF for text in received for c in text)
    return json.dumps({"DocumentIncarnation": 1, "Events": events}).encode(), surrogate


@settings(max_examples=300, deadline=None)
@given(with_any_text())
def test_lone_surrogates_are_replaced_and_flagged(case: tuple[bytes, bool]) -> None:
    """Any string IMDS sends comes out valid UTF-8 text; a lone surrogate is replaced and flagged in repairs."""
    raw, surrogate = case
    try:
        document = decode_document(raw)
    except DecodeError:
        return  # not reached for these documents: a bad event or field is salvaged, never a DecodeError
    _decodes_or_raises_decode_error(raw)
    assert bool(document.repairs) == surrogate


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(codec=None, categories=None), max_size=40))
def test_valid_text_changes_only_lone_surrogates(text: str) -> None:
    """valid_text keeps every other code point and leaves a string that encodes as UTF-8."""
    fixed, repaired = valid_text(text)
    fixed.encode()
    assert repaired == (fixed != text)
    assert len(fixed) == len(text)
    assert all(a == b or (0xD800 <= ord(a) <= 0xDFFF and b == "\ufffd") for a, b in zip(text, fixed, strict=True))


@pytest.mark.parametrize("depth", [1_000, 100_000, 250_000])
@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
def test_any_nesting_depth_is_a_decode_error_or_a_document(depth: int, opener: bytes) -> None:
    """Nesting up to the body cap never escapes as RecursionError or MemoryError."""
    _decodes_or_raises_decode_error(opener * depth)
