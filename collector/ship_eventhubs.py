"""The Event Hubs sink: outbox rows become events on the VM's partition, in order, in batches up to 1 MB.

Theory of operation. ``send(rows)`` groups consecutive rows by partition key (the VM id read from each
record, so one VM's records stay in order on one partition), fills ``EventDataBatch`` objects up to the
limit the service announces, and calls ``send_batch`` for each in order. It returns only after every
``send_batch`` returned; the shipper removes rows from the outbox only then. Any SDK failure (unreachable,
throttled, auth refused, time-out) becomes ``SinkError``: the shipper backs off with jitter and sends the
same rows again, so the service may see a row twice (downstream deduplicates by ``record_id``), never
zero times. The SDK's own retries are kept short so that the shipper's policy is the one that counts.

Each event carries application properties ``schema_version``, ``record_type``, ``record_id`` and a W3C
``traceparent`` (sevents/tracing.py), and the content type ``application/json``.

One thread owns the producer: the shipper's. A lock makes a stray second caller wait, not interleave.
Credentials: managed identity (azure-identity) with a fully qualified namespace by default, a SAS
connection string from the environment or a file as the fallback. Neither is ever logged.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub.exceptions import EventHubError

from collector.outbox import OutboxRow
from collector.ship import SinkError
from sevents.records import CONTENT_TYPE, SCHEMA_VERSION
from sevents.tracing import TRACEPARENT, traceparent_for

if TYPE_CHECKING:
    from collector.settings import CollectorSettings

log = logging.getLogger(__name__)

ProducerFactory = Callable[[], EventHubProducerClient]


def partition_key(payload: bytes) -> str:
    """The VM id of a record (its partition key); records without one share the key ``unknown``."""
    try:
        record = json.loads(payload)
    except ValueError:
        return "unknown"
    vm_id = record.get("vm_id") if isinstance(record, dict) else None
    return vm_id if isinstance(vm_id, str) and vm_id else "unknown"


def runs_by_key(rows: Sequence[OutboxRow]) -> Iterator[tuple[str, list[OutboxRow]]]:
    """Consecutive rows with the same partition key, in outbox order."""
    current: list[OutboxRow] = []
    key = ""
    for row in rows:
        row_key = partition_key(row.payload)
        if current and row_key != key:
            yield key, current
            current = []
        key = row_key
        current.append(row)
    if current:
        yield key, current


def to_event(row: OutboxRow) -> EventData:
    """One outbox row as an event: the record's JSON bytes plus the properties the ingest reads."""
    event = EventData(row.payload)
    event.content_type = CONTENT_TYPE
    properties: dict[str | bytes, Any] = {"schema_version": str(SCHEMA_VERSION), "record_type": row.record_type}
    try:
        record_id = json.loads(row.payload).get("record_id", "")
    except (ValueError, AttributeError):
        record_id = ""
    if isinstance(record_id, str) and record_id:
        properties["record_id"] = record_id
        traceparent = traceparent_for(record_id, row.seq)
        if traceparent is not None:
            properties[TRACEPARENT] = traceparent
    event.properties = properties
    return event


class EventHubsSink:
    """``collector.ship.Sink`` over ``EventHubProducerClient``."""

    def __init__(self, factory: ProducerFactory, *, send_timeout: float = 30.0) -> None:
        self._factory = factory
        self._producer: EventHubProducerClient | None = None
        self._send_timeout = send_timeout
        self._lock = threading.Lock()
        self.batches_sent = 0
        self.events_sent = 0
        self.failures = 0

    @classmethod
    def from_connection_string(
        cls, connection_string: str, *, eventhub_name: str | None = None, send_timeout: float = 30.0, **client: Any
    ) -> EventHubsSink:
        """SAS (the fallback, and the local test endpoint)."""
        options = {"retry_total": 1, **client}
        return cls(
            lambda: EventHubProducerClient.from_connection_string(
                connection_string, eventhub_name=eventhub_name, **options
            ),
            send_timeout=send_timeout,
        )

    @classmethod
    def from_namespace(
        cls,
        namespace: str,
        eventhub_name: str,
        *,
        credential: Any = None,
        send_timeout: float = 30.0,
        **client: Any,
    ) -> EventHubsSink:
        """Managed identity (the default): ``namespace`` is fully qualified, e.g. ``ns.servicebus.windows.net``."""
        options = {"retry_total": 1, **client}

        def factory() -> EventHubProducerClient:
            from azure.identity import DefaultAzureCredential

            return EventHubProducerClient(namespace, eventhub_name, credential or DefaultAzureCredential(), **options)

        return cls(factory, send_timeout=send_timeout)

    @classmethod
    def from_settings(cls, settings: CollectorSettings) -> EventHubsSink:
        """The sink the collector's settings describe (connection string if one is given, else managed identity)."""
        connection_string = settings.connection_string()
        # One send must not outlast the shutdown drain (the shipper reports what is left when it ends).
        send_timeout = max(1.0, min(30.0, settings.drain_timeout))
        if connection_string:
            log.info(
                "event hubs sink: SAS connection string", extra={"eventhub": settings.eventhubs_name or "(from string)"}
            )
            return cls.from_connection_string(
                connection_string, eventhub_name=settings.eventhubs_name or None, send_timeout=send_timeout
            )
        log.info(
            "event hubs sink: managed identity",
            extra={"namespace": settings.eventhubs_namespace, "eventhub": settings.eventhubs_name},
        )
        return cls.from_namespace(settings.eventhubs_namespace, settings.eventhubs_name, send_timeout=send_timeout)

    def send(self, rows: Sequence[OutboxRow]) -> None:
        """Send every row, in order; raise SinkError (nothing is known to be sent) on any failure."""
        with self._lock:
            try:
                producer = self._producer = self._producer or self._factory()
                for key, run in runs_by_key(rows):
                    self._send_run(producer, key, run)
            except (EventHubError, OSError, TimeoutError) as error:
                self._reset()
                self.failures += 1
                raise SinkError(f"event hubs did not accept the batch: {type(error).__name__}: {error}") from error

    def _send_run(self, producer: EventHubProducerClient, key: str, run: Sequence[OutboxRow]) -> None:
        batch = producer.create_batch(partition_key=key)
        for row in run:
            event = to_event(row)
            try:
                batch.add(event)
                continue
            except ValueError:
                if len(batch) == 0:  # one record over the 1 MB limit cannot be sent at all
                    raise SinkError(
                        f"record seq={row.seq} is larger than an event may be ({len(row.payload)} bytes)"
                    ) from None
            self._send_batch(producer, batch)
            batch = producer.create_batch(partition_key=key)
            batch.add(event)
        if len(batch):
            self._send_batch(producer, batch)

    def _send_batch(self, producer: EventHubProducerClient, batch: Any) -> None:
        producer.send_batch(batch, timeout=self._send_timeout)
        self.batches_sent += 1
        self.events_sent += len(batch)

    def _reset(self) -> None:
        # A fresh client after a failure: the SDK's link may be in a state it does not recover from.
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close()
            except Exception:
                log.debug("closing the failed producer raised", exc_info=True)

    def close(self) -> None:
        with self._lock:
            self._reset()
