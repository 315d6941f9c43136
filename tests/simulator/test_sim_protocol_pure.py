"""Property tests of the pure protocol functions: approval bodies and document rendering."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from simulator.protocol import SCHEDULED_EVENTS_VERSIONS, EventView, parse_start_requests, render_document, rfc1123

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=12,
)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_parse_or_are_rejected(body: bytes) -> None:
    """Any bytes as an approval body yield a non-empty list of ids or None, never an exception."""
    ids = parse_start_requests(body)
    assert ids is None or (ids and all(isinstance(i, str) and i for i in ids))


@given(st.dictionaries(st.sampled_from(["StartRequests", "DocumentIncarnation", "x"]), json_values))
def test_json_bodies_accepted_only_with_event_ids(doc: dict[str, object]) -> None:
    """A JSON body is accepted exactly when StartRequests is a non-empty list of objects with string EventIds."""
    requests = doc.get("StartRequests")
    valid = (
        isinstance(requests, list)
        and len(requests) > 0
        and all(isinstance(r, dict) and isinstance(r.get("EventId"), str) and r["EventId"] for r in requests)
    )
    ids = parse_start_requests(json.dumps(doc).encode())
    assert (ids is not None) == valid
    if valid:
        assert ids == [r["EventId"] for r in doc["StartRequests"]]  # type: ignore[index,union-attr]


events = st.builds(
    EventView,
    event_id=st.uuids().map(lambda u: str(u).upper()),
    event_type=st.sampled_from(["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"]),
    resources=st.lists(st.from_regex(r"[a-z]{1,5}-[0-9]", fullmatch=True), min_size=1, max_size=3).map(tuple),
    status=st.sampled_from(["Scheduled", "Started"]),
    not_before=st.none() | st.datetimes(timezones=st.just(UTC), min_value=datetime(2000, 1, 1)),
    description=st.text(max_size=20),
    event_source=st.sampled_from(["Platform", "User"]),
    duration_s=st.integers(min_value=-1, max_value=3600),
)


@given(
    st.sampled_from(SCHEDULED_EVENTS_VERSIONS), st.integers(min_value=1, max_value=2**31), st.lists(events, max_size=4)
)
def test_rendered_documents_are_json_with_version_fields(version: str, incarnation: int, evs: list[EventView]) -> None:
    """Every rendered document round-trips through JSON and carries only the fields its version knows."""
    doc = json.loads(json.dumps(render_document(version, incarnation, evs)))
    assert doc["DocumentIncarnation"] == incarnation
    shown = [e for e in evs if not (e.event_type == "Preempt" and version < "2017-11-01")]
    shown = [e for e in shown if not (e.event_type == "Terminate" and version < "2019-01-01")]
    assert [e["EventId"] for e in doc["Events"]] == [e.event_id for e in shown]
    for rendered, event in zip(doc["Events"], shown, strict=True):
        assert ("DurationInSeconds" in rendered) == (version >= "2020-07-01")
        assert ("EventSource" in rendered) == (version >= "2019-08-01")
        assert ("Description" in rendered) == (version >= "2019-04-01")
        expected = rfc1123(event.not_before) if event.not_before else ""
        assert rendered["NotBefore"] == expected
