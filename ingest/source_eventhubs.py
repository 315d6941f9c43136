"""The Event Hubs source: consume a hub's partitions in batches, shared with other workers, checkpoint last.

Theory of operation. ``run(deliver, stop)`` runs ``EventHubConsumerClient.receive_batch`` in a thread
until ``stop`` is set. With a blob checkpoint store, every worker in one consumer group claims a share of
the partitions and takes over those whose owner stopped renewing its claim (``ownership_expiry``). A
partition with no checkpoint starts at the beginning of retention (``starting_position="-1"``), never at
``@latest``, so a new consumer group reads the backlog. For each batch:

1. the events become ``Delivery`` objects (body bytes, position, application properties as text);
2. ``deliver`` is called inside a span linked to each event's W3C ``traceparent``;
3. only after ``deliver`` returned is the partition checkpointed at the batch's last event.

If ``deliver`` raises, nothing is checkpointed: after a backoff the callback raises ``DeliverFailed``, the
SDK closes that partition's consumer and claims it again from its last checkpoint, so the batch comes
again (the other partitions carry on). A record that cannot be decoded is ``deliver``'s business: it goes
to dead letters like any poison record; this module never drops an event.

Errors::

    EventHubsSourceError    the consumer stopped on its own (raised from ``run``)
    └── DeliverFailed       deliver raised; the batch was not checkpointed and will be read again
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from azure.eventhub import EventData, EventHubConsumerClient
from opentelemetry import trace
from opentelemetry.trace import Link, TracerProvider

from ingest.source import Deliver, Delivery
from sevents.retry import Backoff
from sevents.tracing import TRACEPARENT, parse_traceparent

log = logging.getLogger(__name__)

ClientFactory = Callable[[], EventHubConsumerClient]


class EventHubsSourceError(Exception):
    """Base of this module's errors."""


class DeliverFailed(EventHubsSourceError):
    """``deliver`` raised; the batch stays unacknowledged and the partition is read again from its checkpoint."""


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def body_bytes(event: EventData) -> bytes:
    """The event's body as bytes, whatever AMQP body type the producer chose."""
    body: Any = event.body
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    try:
        return b"".join(part if isinstance(part, bytes) else str(part).encode() for part in body)
    except TypeError:  # a scalar AMQP value
        return str(body).encode()


def to_delivery(partition_id: str, event: EventData) -> Delivery:
    """One event as a ``Delivery``: position ``eventhubs:<partition>:<sequence number>``, properties as text."""
    properties: Mapping[str | bytes, Any] = event.properties or {}
    return Delivery(
        payload=body_bytes(event),
        position=f"eventhubs:{partition_id}:{event.sequence_number}",
        properties={_text(k): _text(v) for k, v in properties.items()},
    )


def trace_links(deliveries: Sequence[Delivery]) -> list[Link]:
    """A span link to each delivery's ``traceparent`` that parses."""
    links = []
    for delivery in deliveries:
        context = parse_traceparent(delivery.properties.get(TRACEPARENT))
        if context is not None:
            links.append(Link(context, {"sevents.position": delivery.position}))
    return links


class EventHubsSource:
    """``ingest.source.Source`` over ``EventHubConsumerClient.receive_batch``."""

    def __init__(
        self,
        factory: ClientFactory,
        *,
        max_batch_size: int = 500,
        max_wait_time: float = 1.0,
        backoff: Backoff | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self._factory = factory
        self._max_batch_size = max_batch_size
        self._max_wait_time = max_wait_time
        self._backoff = backoff or Backoff(initial=0.5, cap=10.0)
        self._tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)
        self._client: EventHubConsumerClient | None = None
        # The SDK calls on_event_batch from one thread per partition: counters are shared, backoff is not.
        self._lock = threading.Lock()
        self._failing: dict[str, int] = {}  # consecutive deliver failures per partition
        self.delivered = 0
        self.failures = 0

    @classmethod
    def from_connection_string(
        cls,
        connection_string: str,
        *,
        consumer_group: str = "$Default",
        eventhub_name: str | None = None,
        checkpoint_store: Any = None,
        load_balancing_interval: float = 10.0,
        ownership_expiry: float = 60.0,
        **options: Any,
    ) -> EventHubsSource:
        """SAS credentials (the fallback, and the local test endpoint)."""
        client = _client_options(checkpoint_store, load_balancing_interval, ownership_expiry)

        def factory() -> EventHubConsumerClient:
            return EventHubConsumerClient.from_connection_string(
                connection_string, consumer_group=consumer_group, eventhub_name=eventhub_name, **client
            )

        return cls(factory, **options)

    @classmethod
    def from_namespace(
        cls,
        namespace: str,
        eventhub_name: str,
        *,
        consumer_group: str = "$Default",
        credential: Any = None,
        checkpoint_store: Any = None,
        load_balancing_interval: float = 10.0,
        ownership_expiry: float = 60.0,
        **options: Any,
    ) -> EventHubsSource:
        """Managed identity (the default): ``namespace`` is fully qualified."""
        client = _client_options(checkpoint_store, load_balancing_interval, ownership_expiry)

        def factory() -> EventHubConsumerClient:
            from azure.identity import DefaultAzureCredential

            return EventHubConsumerClient(
                namespace, eventhub_name, consumer_group, credential or DefaultAzureCredential(), **client
            )

        return cls(factory, **options)

    def run(self, deliver: Deliver, stop: threading.Event) -> None:
        """Consume until ``stop`` is set; then close the client (which releases this worker's partitions)."""
        client = self._client = self._factory()

        def on_batch(context: Any, events: list[EventData]) -> None:
            if events:
                self._handle(context, events, deliver, stop)

        def on_error(context: Any, error: Exception) -> None:
            partition = getattr(context, "partition_id", None)
            log.warning("event hubs receive error", extra={"partition": partition, "error": repr(error)})

        failure: list[BaseException] = []

        def receive() -> None:
            try:
                client.receive_batch(
                    on_event_batch=on_batch,
                    on_error=on_error,
                    starting_position="-1",  # no checkpoint: the beginning of retention, not @latest
                    max_batch_size=self._max_batch_size,
                    max_wait_time=self._max_wait_time,
                )
            except Exception as error:  # noqa: BLE001 - handed to run(), which raises it in the caller's thread
                failure.append(error)

        receiver = threading.Thread(target=receive, name="eventhubs-source", daemon=True)
        receiver.start()
        while not stop.wait(0.5) and receiver.is_alive():
            pass
        client.close()
        receiver.join(30)
        if failure and not stop.is_set():
            raise EventHubsSourceError(f"the Event Hubs consumer stopped: {failure[0]!r}") from failure[0]

    def _handle(self, context: Any, events: list[EventData], deliver: Deliver, stop: threading.Event) -> None:
        batch = [to_delivery(context.partition_id, event) for event in events]
        with self._tracer.start_as_current_span(
            "sevents.ingest.eventhubs.batch",
            links=trace_links(batch),
            attributes={
                "messaging.destination.partition.id": context.partition_id,
                "messaging.batch.message_count": len(batch),
            },
        ) as span:
            try:
                deliver(batch)
            except Exception as error:
                with self._lock:
                    self.failures += 1
                    attempt = self._failing[context.partition_id] = self._failing.get(context.partition_id, 0) + 1
                span.record_exception(error)
                log.warning(
                    "deliver failed; the batch is not checkpointed and will be read again",
                    extra={"partition": context.partition_id, "events": len(batch), "error": repr(error)},
                )
                stop.wait(self._backoff.delay(min(attempt, 8)))
                raise DeliverFailed(f"partition {context.partition_id}: {error}") from error
            # Checkpoint strictly after deliver returned: the batch is stored (or dead-lettered) by now.
            context.update_checkpoint(events[-1])
            with self._lock:
                self._failing.pop(context.partition_id, None)
                self.delivered += len(batch)


def _client_options(checkpoint_store: Any, load_balancing_interval: float, ownership_expiry: float) -> dict[str, Any]:
    options: dict[str, Any] = {
        "load_balancing_interval": load_balancing_interval,
        "partition_ownership_expiration_interval": ownership_expiry,
        "retry_total": 3,
    }
    if checkpoint_store is not None:
        options["checkpoint_store"] = checkpoint_store
    return options
