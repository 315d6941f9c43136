"""The central feed's decoder (ingest.feed_decode): both schemas, arrays, and anything else refused, never raised."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import feed_decode as fd
from ingest import reconcile_rows as rr
from ingest.feed import first_deliveries, read
from ingest.source import Delivery
from tests.ingest.feed_events import EVENT_TYPE, cloud_event, event_grid, resource_info
from tests.tiers import examples

STATUSES = ("Scheduled", "Started", "Completed", "Canceled")
REASONS = {fd.NOT_JSON, fd.NOT_AN_EVENT, fd.OTHER_TYPE, fd.NO_EVENT_ID, fd.TOO_LARGE, fd.BAD_VALUE}
names = st.text(
    st.characters(min_codepoint=33, max_codepoint=0x2FFF, exclude_characters="/\\"), min_size=1, max_size=20
).filter(str.strip)  # a blank id is refused (NO_EVENT_ID)
times = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))


@st.composite
def feed_events(draw: st.DrawFn) -> tuple[dict, dict]:
    """(the event in a drawn schema, its resourceInfo)."""
    info = resource_info(
        draw(names),
        draw(st.sampled_from(STATUSES)),
        draw(st.lists(names, max_size=5)),
        parent=draw(st.sampled_from(["virtualMachines/a", "virtualMachineScaleSets/ss", "availabilitySets/as"])),
        event_type=draw(st.sampled_from(["Reboot", "Redeploy", "Freeze", "Preempt", "Terminate"])),
        duration_s=draw(st.integers(-1, 10**6)),
    )
    make = draw(st.sampled_from([event_grid, cloud_event]))
    return make(draw(names), info, draw(times)), info


def _arg_row(info: dict) -> dict:
    """What the reconciler stores for the same event read from Resource Graph."""
    parts = info["id"].split("/")
    return rr.event_row(
        {
            "id": info["id"],
            "name": info["name"],
            "subscriptionId": parts[2],
            "resourceGroup": parts[4].lower(),
            "properties": info["properties"],
        }
    )


@settings(max_examples=examples(300), deadline=None)
@given(feed_events())
def test_an_event_of_either_schema_is_the_row_resource_graph_gives(drawn: tuple[dict, dict]) -> None:
    """Any ScheduledEventEmitted, Event Grid schema or CloudEvent, decodes to the reconciler's row of that event."""
    event, info = drawn
    found, refused = fd.decode(json.dumps(event).encode())
    assert refused == []
    assert [(e.delivery_id, dict(e.row)) for e in found] == [(event["id"], _arg_row(info))]
    assert found[0].published_at is not None and found[0].published_at.tzinfo is not None


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(feed_events(), min_size=1, max_size=6))
def test_an_array_is_its_events_in_order(drawn: list[tuple[dict, dict]]) -> None:
    """A body holding an array gives each event as it would alone, in order, each with its place."""
    body = json.dumps([event for event, _ in drawn]).encode()
    found, refused = fd.decode(body)
    alone = [fd.decode(json.dumps(event).encode())[0][0] for event, _ in drawn]
    assert refused == []
    assert [(e.delivery_id, dict(e.row), e.index) for e in found] == [
        (a.delivery_id, dict(a.row), i) for i, a in enumerate(alone)
    ]


@settings(max_examples=examples(500), deadline=None)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(),
            lambda c: st.lists(c) | st.dictionaries(st.text(), c),
            max_leaves=10,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_anything_else_is_refused_with_a_reason_never_raised(payload: bytes) -> None:
    """Arbitrary bytes or JSON either decode or are refused with one of the known reasons; nothing raises."""
    found, refused = fd.decode(payload)
    assert all(r.reason in REASONS for r in refused)
    assert found or refused


def test_other_event_types_and_missing_ids_are_refused_apart_from_their_neighbours() -> None:
    """One bad event of an array is refused alone (its own bytes kept); the good ones decode."""
    at = datetime(2026, 11, 23, 18, tzinfo=UTC)
    good = event_grid("g-1", resource_info("E-1", "Scheduled", ["vm-000"]), at)
    other = {**good, "id": "g-2", "eventType": "Microsoft.Resources.ResourceWriteSuccess"}
    no_id = cloud_event("", resource_info("E-3", "Started", ["vm-000"]), at)
    no_event = {**good, "id": "g-4", "data": {"resourceInfo": {"properties": {}}}}
    found, refused = fd.decode(json.dumps([good, other, no_id, no_event]).encode())
    assert [e.delivery_id for e in found] == ["g-1"]
    assert [(r.index, r.reason) for r in refused] == [(1, fd.OTHER_TYPE), (2, fd.NO_EVENT_ID), (3, fd.NO_EVENT_ID)]
    assert json.loads(refused[0].payload)["id"] == "g-2"
    assert fd.decode(b"\xff\x00")[1][0].reason == fd.NOT_JSON
    assert fd.decode(b"[]")[1][0].reason == fd.NOT_AN_EVENT
    assert fd.decode(b"x" * 2000, max_bytes=1024)[1][0].reason == fd.TOO_LARGE
    far = resource_info("E-5", "Scheduled", ["vm-000"], not_before="2299-01-01T00:00:00Z")
    huge = {**resource_info("E-6", "Started", ["vm-000"]), "properties": {"EventId": "E-6", "DurationInSeconds": 2**70}}
    found, refused = fd.decode(json.dumps([event_grid("g-5", far, at), event_grid("g-6", huge, at)]).encode())
    assert found == [] and [r.reason for r in refused] == [fd.BAD_VALUE, fd.BAD_VALUE]


def test_the_type_is_matched_by_prefix_and_binary_cloud_events_read_their_properties() -> None:
    """ScheduledEventEmitted under another last word is taken (the docs disagree); a binary-mode CloudEvent's envelope
    comes from its cloudEvents:* application properties."""
    at = datetime(2026, 11, 23, 18, tzinfo=UTC)
    info = resource_info("E-9", "Completed", ["ss_3"], parent="virtualMachineScaleSets/ss")
    renamed = {**event_grid("g-9", info, at), "eventType": EVENT_TYPE.replace("Emitted", "Created").upper()}
    assert [e.row["event_status"] for e in fd.decode(json.dumps(renamed).encode())[0]] == ["Completed"]
    properties = {
        "cloudEvents:specversion": "1.0",
        "cloudEvents:id": "b-1",
        "cloudEvents:type": EVENT_TYPE,
        "cloudEvents:time": "2026-11-23T18:00:00Z",
    }
    found, refused = fd.decode(json.dumps({"resourceInfo": info}).encode(), properties)
    assert refused == [] and [(e.delivery_id, e.row["resources"], e.published_at) for e in found] == [
        ("b-1", ["ss_3"], at)
    ]


def test_a_batch_keeps_the_first_delivery_of_each_id() -> None:
    """Event Grid's repeated deliveries (the same id) in one batch or stored before are kept once."""
    at = datetime(2026, 11, 23, 18, tzinfo=UTC)
    one = json.dumps(event_grid("g-1", resource_info("E-1", "Scheduled", ["vm-000"]), at)).encode()
    two = json.dumps(event_grid("g-2", resource_info("E-1", "Started", ["vm-000"]), at + timedelta(minutes=5)))
    batch = [Delivery(one, "eventhubs:0:1"), Delivery(one, "eventhubs:0:2"), Delivery(two.encode(), "eventhubs:1:1")]
    events, refused = read(batch, 1 << 20)
    assert refused == []
    assert [p for _, p in first_deliveries(events, set())] == ["eventhubs:0:1", "eventhubs:1:1"]
    assert [p for _, p in first_deliveries(events, {"g-2"})] == ["eventhubs:0:1"]
