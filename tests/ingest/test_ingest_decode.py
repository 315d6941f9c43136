"""Decode and validate: good records pass untouched, every kind of poison is rejected with a reason."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from demo import synthetic
from ingest.decode import TRANSITION_RULES, Limits
from ingest.errors import InvalidRecord
from sevents import records
from sevents.records import encode
from tests.ingest.decoding import record as decode


def test_synthetic_transition_and_heartbeat_decode_to_their_known_fields() -> None:
    """A valid record decodes to exactly the contract's fields (seq included), unchanged."""
    t = synthetic.transition()
    h = synthetic.heartbeat()
    assert decode(encode(t)) == t
    # The synthetic heartbeat is an older collector's: without the optional ``final``, which decodes to its default.
    assert "final" not in h
    assert decode(encode(h)) == {**h, "final": False}
    assert decode(encode({**h, "final": True}))["final"] is True
    assert set(t) == set(records.TRANSITION_FIELDS)
    assert set(h) | {"final"} == set(records.HEARTBEAT_FIELDS)


def test_unknown_extra_fields_are_accepted_and_dropped() -> None:
    """An optional field added by a newer collector does not make the record poison."""
    t = synthetic.transition()
    assert decode(encode({**t, "future_field": 1})) == t


def test_document_anomaly_key_uses_the_collector_convention() -> None:
    """A document-level anomaly (no EventId) is keyed by its reason, as the collector keys it."""
    t = synthetic.transition(event_id="", kind=records.KIND_ANOMALY)
    t["anomaly"] = "incarnation went backwards: 5 -> 1"
    key = records.transition_id(t["vm_id"], f"document: {t['anomaly']}", t["incarnation"], t["kind"])
    t["transition_id"] = t["record_id"] = key
    assert decode(encode(t))["transition_id"] == key


BAD: list[tuple[str, Any, str]] = [
    ("schema_version", 2, "schema_version"),
    ("schema_version", "1", "schema_version"),
    ("record_type", "gossip", "record_type"),
    ("incarnation", "7", "wrong_type"),
    ("incarnation", 7.0, "wrong_type"),
    ("affects_this_vm", 1, "wrong_type"),
    ("seq", 2**64, "wrong_type"),
    ("observed_at", "2026-11-21 12:00:00", "bad_time"),
    ("observed_at", "0001-01-01T00:00:00.000Z", "out_of_range"),
    ("resources", "vm-1", "wrong_type"),
    ("resources", [1, 2], "wrong_type"),
    ("vm_name", None, "wrong_type"),
    ("kind", "exploded", "bad_value"),
    ("transition_id", "0" * 32, "bad_key"),
]


# One bad field that is not the record's identity: the record is stored with the field made safe and a note.
MADE_SAFE: list[tuple[str, Any, Any]] = [
    ("fault_domain", -1, None),
    ("fault_domain", 70000, None),
    ("update_domain", 70000, None),
    ("seq", -1, 0),
    ("not_before", "Mon, 19 Sep 2016 18:29:47 GMT", None),
    ("description", "x" * 20000, "x" * Limits().max_text_chars),
    ("vm_name", "v" * 100_000, "v" * Limits().max_text_chars),
    ("duration_s", 2**70, None),
]


@pytest.mark.parametrize(("field", "value", "safe"), MADE_SAFE)
def test_a_bad_non_key_field_is_made_safe_and_noted(field: str, value: Any, safe: Any) -> None:
    """The record survives one bad field: the value made safe, the repair named in the anomaly column."""
    record = {**synthetic.transition(), field: value}
    out = decode(encode(record))
    assert out[field] == safe
    assert f"made safe: {field}: " in out["anomaly"]
    assert out["transition_id"] == record["transition_id"]


@pytest.mark.parametrize(("field", "value", "reason"), BAD)
def test_each_kind_of_bad_field_is_rejected_with_its_reason(field: str, value: Any, reason: str) -> None:
    """A record with one bad field is rejected, and the reason names what was wrong."""
    record = {**synthetic.transition(), field: value}
    with pytest.raises(InvalidRecord) as caught:
        decode(encode(record))
    assert caught.value.reason == reason


def test_missing_field_bad_json_non_object_and_oversize_payload_are_rejected() -> None:
    """Structural poison is rejected before any field is looked at."""
    t = synthetic.transition()
    del t["description"]
    cases = [
        (encode(t), "missing_field"),
        (b'{"schema_version": 1,', "bad_json"),
        (b"\xff\xfe\x00", "bad_json"),
        (b"[1, 2]", "not_an_object"),
        (b"[" * 100000 + b"]" * 100000, "too_large"),
        (b"[" * 5000 + b"]" * 5000, "bad_json"),
    ]
    for payload, reason in cases:
        with pytest.raises(InvalidRecord) as caught:
            decode(payload, Limits(max_payload_bytes=100_000))
        assert caught.value.reason == reason, payload[:30]


@given(st.binary(max_size=400))
def test_arbitrary_bytes_decode_or_raise_invalid_record(payload: bytes) -> None:
    """Any bytes either decode to a record or raise InvalidRecord, nothing else."""
    with contextlib.suppress(InvalidRecord):
        decode(payload)


@given(
    st.sampled_from(sorted(TRANSITION_RULES)),
    st.one_of(
        st.none(),
        st.integers(),
        st.text(),
        st.booleans(),
        st.floats(allow_nan=True),
        st.lists(st.integers(), max_size=3),
        st.dictionaries(st.text(), st.text()),
    ),
)
def test_any_value_in_any_field_decodes_or_raises_invalid_record(field: str, value: Any) -> None:
    """Replacing any field with any JSON value never raises anything but InvalidRecord."""
    payload = json.dumps({**synthetic.transition(), field: value}).encode()
    try:
        out = decode(payload)
    except InvalidRecord:
        return
    assert out[field] == value or f"made safe: {field}: " in out["anomaly"]
