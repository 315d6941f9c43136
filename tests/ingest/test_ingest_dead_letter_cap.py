"""Issue 29: dead letters have a cap. One stream (an Event Hubs partition, an outbox) stores at most so many per
clock hour; the rest are counted as dropped, and the valid records beside them are all stored (real chDB)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from demo import synthetic
from ingest.dead_letter_cap import CAP_REASON, DeadLetterCap, stream_of
from ingest.handler import Handler
from ingest.metrics import IngestMetrics
from ingest.source import Delivery
from ingest.writer import Writer
from sevents.records import encode
from sevents.retry import Backoff
from sevents.telemetry import make_meter_provider
from tests.tiers import examples

from .conftest import scalar
from .test_ingest_poison_batches import sums

HOUR = datetime(2026, 11, 26, 13, tzinfo=UTC)


def row(position: str) -> tuple[Any, ...]:
    """A dead-letter row as Batch.add_dead_letter makes it (only the position matters to the cap)."""
    return ("id-" + position, HOUR, "test", position, "not_json: ...", b"x", 1, {})


def test_a_stream_is_its_position_without_the_records_place() -> None:
    """Event Hubs: the partition; an outbox: its file, whatever colons its path holds."""
    assert stream_of("eventhubs:3:1234") == "eventhubs:3"
    assert stream_of("outbox:/var/lib/a:b/outbox.sqlite#12") == "outbox:/var/lib/a:b/outbox.sqlite"
    assert stream_of("test#7") == "test"


@settings(max_examples=examples(200), deadline=None)
@given(
    per_hour=st.integers(1, 5),
    arrivals=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["eventhubs:0", "eventhubs:1"])), max_size=40),
)
def test_each_stream_keeps_at_most_its_cap_per_hour(per_hour: int, arrivals: list[tuple[int, str]]) -> None:
    """Whatever the order: each stream keeps its first ``per_hour`` dead letters of each hour, in order; every
    other one is counted as dropped; a stream is reported capped once per hour it reaches the cap."""
    cap = DeadLetterCap(per_hour)
    kept: list[str] = []
    dropped = 0
    capped: list[tuple[int, str]] = []
    ordered = sorted(enumerate(arrivals), key=lambda item: item[1][0])  # hours never go back
    for index, (hour, stream) in ordered:
        admitted = cap.admit([row(f"{stream}:{index}")], HOUR + timedelta(hours=hour, minutes=index % 60))
        kept += [r[3] for r in admitted.kept]
        dropped += sum(admitted.dropped.values())
        capped += [(hour, s) for s in admitted.newly_capped]
    expected: list[str] = []
    per: dict[tuple[int, str], int] = {}
    for index, (hour, stream) in ordered:
        per[hour, stream] = per.get((hour, stream), 0) + 1
        if per[hour, stream] <= per_hour:
            expected.append(f"{stream}:{index}")
    assert kept == expected
    assert dropped == len(arrivals) - len(expected)
    assert sorted(capped) == sorted(key for key, n in per.items() if n > per_hour)


def test_a_flood_of_poison_stores_the_cap_and_every_valid_record(ch: Any, db: str) -> None:
    """A partition sends 30 poison deliveries among valid records with a cap of 10 an hour: 10 dead letters are
    stored, 20 counted as dropped (dead_letter_cap), every valid record stored; another partition's dead letters
    have their own cap."""
    reader = InMemoryMetricReader()
    metrics = IngestMetrics.create(make_meter_provider("test", readers=[reader], env={}))
    handler = Handler(
        Writer(ch, db),
        source="test",
        stop=threading.Event(),
        backoff=Backoff(initial=0.01, cap=0.05),
        metrics=metrics,
        now=lambda: HOUR + timedelta(minutes=5),
        dead_letter_cap=DeadLetterCap(10),
    )
    records = synthetic.lifecycle("e-flood", 0, start=HOUR - timedelta(hours=1))
    poison = [Delivery(b"not json %d" % i, f"eventhubs:0:{i}") for i in range(30)]
    valid = [Delivery(encode(r), f"eventhubs:0:{100 + i}") for i, r in enumerate(records)]
    handler(poison[:15] + valid + poison[15:])
    handler([Delivery(b"not json either", "eventhubs:1:7")])
    assert scalar(ch, f"SELECT count() FROM {db}.transitions") == len(records)
    stored = ch.query(f"SELECT position FROM {db}.dead_letters ORDER BY position").result_rows
    assert [p for (p,) in stored] == sorted([f"eventhubs:0:{i}" for i in range(10)] + ["eventhubs:1:7"])
    assert handler.dropped == 20
    assert sums(reader, "sevents.ingest.dropped") == {(("reason", CAP_REASON), ("record_type", "dead_letter")): 20}
