"""The decoder's fast path (msgspec) and its precise path (orjson, field by field) agree on every payload."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from demo import synthetic
from ingest.decode import HEARTBEAT_RULES, TRANSITION_RULES, Limits, decode_reference
from ingest.errors import InvalidRecord
from sevents.records import encode
from tests.ingest.decoding import values as decode_values
from tests.tiers import examples

FIELDS = sorted(set(TRANSITION_RULES) | set(HEARTBEAT_RULES) | {"future_field"})
TIMES = [
    "2026-11-21T12:00:00.000Z",
    "2026-11-21T12:00:00Z",
    "2026-11-21 12:00:00.000Z",
    "0001-01-01T00:00:00.000Z",
    "2026-13-21T12:00:00.000Z",
    "2026-11-21T12:00:00,000Z",
]
EDGES: list[Any] = [  # just inside and just outside the rules, where the two paths could part
    *(b + d for b in (0, 2**16, 2**32, 2**63, 2**64, -(2**63)) for d in (-1, 0, 1)),
    1.0,
    True,
    "",
    [],
    ["a", 1],
    ["a", "b"],
    {"a": 2**64 - 1},
    {"a": 2**64},
    {"a": -1},
    {"a": True},
]
VALUES = st.one_of(
    st.sampled_from(EDGES),
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from([*TIMES, "appeared", "transition", "heartbeat"]),
    st.lists(st.one_of(st.text(max_size=4), st.integers()), max_size=3),
    st.dictionaries(st.text(max_size=4), st.one_of(st.integers(min_value=-1, max_value=2**65), st.text()), max_size=3),
)
LIMITS = [Limits(), Limits(max_text_chars=300), Limits(max_list_items=1, max_map_items=0)]


def outcome(decoder: Any, payload: bytes, limits: Limits) -> tuple[str, Any]:
    try:
        return "stored", decoder(payload, limits)
    except InvalidRecord as error:
        return "dead_letter", error.reason


@settings(max_examples=examples(1000))
@given(
    st.booleans(),
    st.lists(st.tuples(st.sampled_from(FIELDS), VALUES), max_size=3),
    st.sampled_from(["canonical", "spaced", "duplicate_key", "missing_field"]),
    st.sampled_from(LIMITS),
)
def test_fast_and_precise_paths_store_the_same_values_or_reject_for_the_same_reason(
    heartbeat: bool, changes: list[tuple[str, Any]], form: str, limits: Limits
) -> None:
    """Any mutated record (bad types, ranges, timestamps, keys, extra, missing or repeated fields) ends alike."""
    record = synthetic.heartbeat() if heartbeat else synthetic.transition(prev_status="Scheduled")
    record.update(changes)
    payload = json.dumps(record).encode() if form == "spaced" else encode(record)
    if form == "duplicate_key" and changes:  # JSON's last value wins, in both parsers
        name, value = changes[0]
        payload = payload[:-1] + b"," + json.dumps({name: value}).encode()[1:]
    if form == "missing_field" and changes:
        record.pop(changes[0][0])
        payload = encode(record)
    assert outcome(decode_values, payload, limits) == outcome(decode_reference, payload, limits)


def test_every_field_with_every_edge_value_ends_alike_on_both_paths() -> None:
    """Each field of each record type set to each edge value (and each odd timestamp) ends alike both ways."""
    for record in (synthetic.transition(prev_status="Scheduled"), synthetic.heartbeat()):
        for name in record:
            for value in [*EDGES, *TIMES, None]:
                for limits in LIMITS:
                    payload = encode({**record, name: value})
                    got = outcome(decode_values, payload, limits)
                    assert got == outcome(decode_reference, payload, limits), (name, value, limits)


def test_good_records_decode_alike_on_both_paths() -> None:
    """Unmodified transitions and heartbeats give identical rows either way."""
    for record in [*synthetic.lifecycle("E-9", 3), synthetic.heartbeat(vm_index=4)]:
        payload = encode(record)
        assert decode_values(payload) == decode_reference(payload)
