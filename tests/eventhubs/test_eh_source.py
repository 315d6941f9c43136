"""EventHubsSource over the real SDK, the local endpoint and Azurite checkpoints: sharing, checkpoints, redelivery."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from azure.eventhub import EventData, EventHubProducerClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ingest.source import Delivery
from ingest.source_eventhubs import EventHubsSource
from sevents.retry import Backoff
from sevents.tracing import traceparent_for
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.helpers import eventually

# Expiry well above the renewal interval: a busy two-core machine must not make owners look dead.
FAST = {"load_balancing_interval": 0.5, "ownership_expiry": 8.0, "max_wait_time": 0.2}


class Recorder:
    """A ``deliver`` that keeps what it was given; ``fail_on`` makes it raise for payloads containing a marker."""

    def __init__(self, fail_times: int = 0, fail_marker: bytes = b"") -> None:
        self.deliveries: list[Delivery] = []
        self.fail_times, self.fail_marker = fail_times, fail_marker
        self.lock = threading.Lock()

    def __call__(self, batch: Sequence[Delivery]) -> None:
        with self.lock:
            if self.fail_times and any(self.fail_marker in d.payload for d in batch):
                self.fail_times -= 1
                raise RuntimeError("clickhouse said no")
            self.deliveries.extend(batch)

    def numbers(self) -> list[int]:
        with self.lock:
            return [json.loads(d.payload)["n"] for d in self.deliveries]


def _send(endpoint: EventHubsEndpoint, numbers: range, keys: int = 8, **props: str) -> None:
    with EventHubProducerClient.from_connection_string(endpoint.connection_string()) as producer:
        for k in range(keys):
            batch = producer.create_batch(partition_key=f"vm-{k}")
            for n in numbers:
                if n % keys == k:
                    event = EventData(json.dumps({"n": n}).encode())
                    event.properties = dict(props)
                    batch.add(event)
            if len(batch):
                producer.send_batch(batch)


def _worker(
    source: EventHubsSource, deliver: Callable[[Sequence[Delivery]], None]
) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=source.run, args=(deliver, stop), daemon=True)
    thread.start()
    return stop, thread


def _source(endpoint: EventHubsEndpoint, store: Any = None, group: str = "$Default", **extra: Any) -> EventHubsSource:
    return EventHubsSource.from_connection_string(
        endpoint.connection_string(), consumer_group=group, checkpoint_store=store, **{**FAST, **extra}
    )


def test_new_consumer_group_reads_the_backlog_and_restart_resumes_from_checkpoints(
    endpoint: EventHubsEndpoint, checkpoint_store: Callable[[], Any]
) -> None:
    """A first start reads from the beginning; after a restart only newer events arrive; a new group reads all."""
    _send(endpoint, range(40))
    first = Recorder()
    stop, thread = _worker(_source(endpoint, checkpoint_store()), first)
    assert eventually(lambda: len(first.numbers()) >= 40, 30)
    stop.set()
    thread.join(30)
    assert sorted(first.numbers()) == list(range(40))
    _send(endpoint, range(40, 60))
    second = Recorder()
    stop, thread = _worker(_source(endpoint, checkpoint_store()), second)
    assert eventually(lambda: len(second.numbers()) >= 20, 30)
    stop.set()
    thread.join(30)
    assert sorted(second.numbers()) == list(range(40, 60))
    audit = Recorder()
    stop, thread = _worker(_source(endpoint, checkpoint_store(), group="audit"), audit)
    assert eventually(lambda: len(audit.numbers()) >= 60, 30)
    stop.set()
    thread.join(30)
    assert sorted(audit.numbers()) == list(range(60)), "a new consumer group reads all of retention"


def test_a_failed_deliver_is_not_checkpointed_and_comes_again(
    endpoint: EventHubsEndpoint, checkpoint_store: Callable[[], Any]
) -> None:
    """When deliver raises, the batch is read again from the checkpoint while other partitions carry on."""
    _send(endpoint, range(32))
    recorder = Recorder(fail_times=2, fail_marker=b'"n": 5}')
    source = _source(endpoint, checkpoint_store(), backoff=Backoff(initial=0.1, cap=0.2))
    stop, thread = _worker(source, recorder)
    assert eventually(lambda: set(recorder.numbers()) >= set(range(32)), 60)
    stop.set()
    thread.join(30)
    assert recorder.fail_times == 0
    assert recorder.numbers().count(5) == 1


def test_two_workers_share_the_partitions(endpoint: EventHubsEndpoint, checkpoint_store: Callable[[], Any]) -> None:
    """Two workers in one consumer group split the four partitions between them and read each event once."""
    a, b = Recorder(), Recorder()
    stop_a, thread_a = _worker(_source(endpoint, checkpoint_store()), a)
    stop_b, thread_b = _worker(_source(endpoint, checkpoint_store()), b)
    store = checkpoint_store()

    def owners() -> dict[str, str]:
        found = store.list_ownership(f"{endpoint.host}:{endpoint.port}", "hub", "$Default")
        return {o["partition_id"]: o["owner_id"] for o in found}

    def balanced() -> bool:
        now = list(owners().values())
        return len(now) == 4 and len(set(now)) == 2 and max(now.count(x) for x in now) == 2

    settled: list[dict[str, str]] = []

    def settled_balance() -> bool:
        # The same 2/2 split over several balancing rounds: a split seen once may be mid-move (a steal still
        # under way), after which a partition changes hands and is read again from its checkpoint.
        settled.append(owners() if balanced() else {})
        return len(settled) >= 6 and all(o and o == settled[-1] for o in settled[-6:])

    assert eventually(settled_balance, 40, interval=0.5)
    _send(endpoint, range(80), keys=16)
    assert all(endpoint.store.events(p) for p in endpoint.store.partition_ids), "every partition gets events"
    assert eventually(lambda: len(a.numbers()) + len(b.numbers()) >= 80, 30)
    stop_a.set()
    stop_b.set()
    thread_a.join(30)
    thread_b.join(30)
    assert sorted(a.numbers() + b.numbers()) == list(range(80))
    assert a.numbers() and b.numbers()
    partitions_a = {d.position.split(":")[1] for d in a.deliveries}
    partitions_b = {d.position.split(":")[1] for d in b.deliveries}
    assert not partitions_a & partitions_b


def test_batch_span_links_to_each_traceparent(endpoint: EventHubsEndpoint) -> None:
    """The ingest span of a batch carries a link to the collector's trace context of every event in it."""
    record_id = "0123456789abcdef0123456789abcdef"
    _send(endpoint, range(1), keys=1, traceparent=str(traceparent_for(record_id, 7)), record_type="transition")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    recorder = Recorder()
    stop, thread = _worker(_source(endpoint, tracer_provider=provider), recorder)
    assert eventually(lambda: len(recorder.numbers()) == 1, 20)
    stop.set()
    thread.join(30)
    assert recorder.deliveries[0].properties["record_type"] == "transition"
    spans = [s for s in exporter.get_finished_spans() if s.name == "sevents.ingest.eventhubs.batch"]
    linked = {f"{link.context.trace_id:032x}" for span in spans for link in span.links}
    assert record_id in linked
