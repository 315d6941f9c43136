"""The Event Hubs sink: outbox rows become events on the VM's partition, in order, in batches up to 1 MB.

Theory of operation. ``send(rows)`` groups consecutive rows by partition key (the VM id read from each
record, so one VM's records stay in order on one partition), fills ``EventDataBatch`` objects up to the
limit the service announces, and sends each in order. It returns only after every batch was accepted; the
shipper removes rows from the outbox only then. Any SDK failure (unreachable, throttled, auth refused,
time-out) becomes ``SinkError``: the shipper backs off with jitter and sends the same rows again, so the
service may see a row twice (downstream deduplicates by ``record_id``), never zero times.

The SDK retries nothing and sleeps nothing (``retry_total`` 0, ``retry_backoff_factor`` 0: it slept 0.8 s even
before giving up), so that the shipper's policy is the one that counts, with one exception: a link that was
open when a send began and turns out lost (the service or the network dropped the connection while it was
idle) costs one immediate send on a new connection, not a backoff. The link is kept warm: ``connect`` opens it
(and sends the attestation) when the shipper starts, before the first record; every link is opened without
the SDK's 50 ms sleeps and sent on without its slow rebuild after a failure (``collector.ship_link``). So a
record committed to the outbox goes out in one round trip, and in two after a dropped connection (1.3 s on
loopback with the SDK's own handling, 0.02 s now).

A record larger than one event may be (1 MB) can never be sent; retrying it would block that VM's outbox
forever. It is dead-lettered instead: logged (seq, type, record_id, size; never the payload), counted under
the drop reason ``eventhubs_oversize`` through ``on_drop`` (the outbox's persisted drops, which heartbeats
report), and left out of the send, so the shipper removes it with the rest once ``send`` returned. The drop
is counted only after every other row of the call was accepted: a send that fails counts nothing.

Each event carries application properties ``schema_version``, ``record_type``, ``record_id`` and a W3C
``traceparent`` (sevents/tracing.py), and the content type ``application/json``. With attestation on
(``collector.attestation``), each also carries the VM key's signature of its body, and the first events a
producer sends are the VM's attestation (again every ``ATTEST_EVERY_S``, best effort); before the first one,
nothing is sent.

One thread owns the producer: the shipper's. A lock makes a stray second caller wait, not interleave.
Credentials: managed identity (azure-identity) with a fully qualified namespace by default, a SAS
connection string from the environment or a file as the fallback. Neither is ever logged.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from azure.eventhub import EventData, EventHubProducerClient

from collector.outbox import Outbox, OutboxRow
from collector.ship_link import open_promptly, send_on_link
from collector.sink import SinkError
from sevents.contract import PROPERTY_KEY_ID, PROPERTY_SIGNATURE, RECORD_ATTESTATION
from sevents.records import CONTENT_TYPE, SCHEMA_VERSION, record_id_of
from sevents.tracing import TRACEPARENT, traceparent_for

if TYPE_CHECKING:
    from collector.attestation import Attester, Signer
    from collector.settings import CollectorSettings

log = logging.getLogger(__name__)

ProducerFactory = Callable[[], EventHubProducerClient]
DropCounter = Callable[[str, int], None]  # (reason, count), e.g. Outbox.count_drop

DROP_OVERSIZE: Final = "eventhubs_oversize"  # a record larger than one event may be: dead-lettered
ATTEST_EVERY_S: Final = 6 * 3600.0  # the attestation goes again this often (an ingest that missed it pins it)
ATTEST_RETRY_S: Final = 300.0  # a refresh IMDS did not answer is tried again after this long


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


# What tells that the connection or link a send went on is gone (matched along the error's MRO by name, as
# ``collector.ship.failure_reason`` does). Not a time-out (sending again at once would double a send's time,
# which the shutdown drain counts on), nor a refused token (an AuthenticationError is a ConnectError too).
_LINK_LOST: Final = frozenset({"ConnectionLostError", "ConnectError"})
_NOT_LOST: Final = frozenset({"AuthenticationError", "ClientAuthenticationError"})


def link_lost(error: BaseException) -> bool:
    """Whether ``error`` says the connection or link was lost (the SDK's ConnectionLostError or ConnectError)."""
    kinds = {kind.__name__ for kind in type(error).__mro__}
    return bool(kinds & _LINK_LOST) and not kinds & _NOT_LOST


def outbox_drop_counter(path: Path) -> DropCounter:
    """Count drops in the outbox at ``path`` (a second connection: the outbox allows one per user)."""

    def count(reason: str, n: int) -> None:
        with Outbox(path) as outbox:
            outbox.count_drop(reason, n)

    return count


def to_event(row: OutboxRow, signer: Signer | None = None) -> EventData:
    """One outbox row as an event: the record's JSON bytes plus the properties the ingest reads (and, with a
    ``signer``, the signature of those exact bytes)."""
    event = EventData(row.payload)
    event.content_type = CONTENT_TYPE
    properties: dict[str | bytes, Any] = {"schema_version": str(SCHEMA_VERSION), "record_type": row.record_type}
    if signer is not None:
        properties[PROPERTY_SIGNATURE] = signer.sign(row.payload)
        properties[PROPERTY_KEY_ID] = signer.key_id
    record_id = record_id_of(row.payload)
    if record_id:
        properties["record_id"] = record_id
        traceparent = traceparent_for(record_id, row.seq)
        if traceparent is not None:
            properties[TRACEPARENT] = traceparent
    event.properties = properties
    return event


class EventHubsSink:
    """``collector.sink.Sink`` over ``EventHubProducerClient``."""

    def __init__(
        self,
        factory: ProducerFactory,
        *,
        send_timeout: float = 30.0,
        on_drop: DropCounter | None = None,
        attester: Attester | None = None,
    ) -> None:
        self._factory = factory
        self.attester = attester  # attestation on: sign every event, send the attestation first
        self._attested_at: float | None = None  # monotonic time the current producer sent the attestation
        self._producer: EventHubProducerClient | None = None
        self._linked = False  # the producer's link opened or carried a send (it may have been lost since)
        self._send_timeout = send_timeout
        self._on_drop = on_drop or (lambda reason, count: None)
        self._lock = threading.Lock()
        self.batches_sent = 0
        self.events_sent = 0
        self.failures = 0
        self.dropped = 0

    @classmethod
    def from_connection_string(
        cls,
        connection_string: str,
        *,
        eventhub_name: str | None = None,
        send_timeout: float = 30.0,
        on_drop: DropCounter | None = None,
        attester: Attester | None = None,
        **client: Any,
    ) -> EventHubsSink:
        """SAS (the fallback, and the local test endpoint)."""
        options = {"retry_total": 0, "retry_backoff_factor": 0.0, **client}
        return cls(
            lambda: EventHubProducerClient.from_connection_string(
                connection_string, eventhub_name=eventhub_name, **options
            ),
            send_timeout=send_timeout,
            on_drop=on_drop,
            attester=attester,
        )

    @classmethod
    def from_namespace(
        cls,
        namespace: str,
        eventhub_name: str,
        *,
        credential: Any = None,
        send_timeout: float = 30.0,
        on_drop: DropCounter | None = None,
        attester: Attester | None = None,
        **client: Any,
    ) -> EventHubsSink:
        """Managed identity (the default): ``namespace`` is fully qualified, e.g. ``ns.servicebus.windows.net``."""
        options = {"retry_total": 0, "retry_backoff_factor": 0.0, **client}

        def factory() -> EventHubProducerClient:
            from azure.identity import DefaultAzureCredential

            return EventHubProducerClient(namespace, eventhub_name, credential or DefaultAzureCredential(), **options)

        return cls(factory, send_timeout=send_timeout, on_drop=on_drop, attester=attester)

    @classmethod
    def from_settings(cls, settings: CollectorSettings) -> EventHubsSink:
        """The sink the collector's settings describe (connection string if one is given, else managed identity).

        Dead-lettered records are counted in the collector's own outbox (``settings.outbox_path``).
        """
        connection_string = settings.connection_string()
        # One send must not outlast the shutdown drain (the shipper reports what is left when it ends).
        send_timeout = max(1.0, min(30.0, settings.drain_timeout))
        on_drop = outbox_drop_counter(settings.outbox_path)
        attester = None
        if settings.attestation:
            from collector.attestation import Attester

            attester = Attester.from_settings(settings)
            log.info("attestation on: events are signed", extra={"key_id": attester.signer.key_id})
        return cls._from_settings(settings, connection_string, send_timeout, on_drop, attester)

    @classmethod
    def _from_settings(
        cls,
        settings: CollectorSettings,
        connection_string: str | None,
        send_timeout: float,
        on_drop: DropCounter,
        attester: Attester | None,
    ) -> EventHubsSink:
        if connection_string:
            log.info(
                "event hubs sink: SAS connection string", extra={"eventhub": settings.eventhubs_name or "(from string)"}
            )
            return cls.from_connection_string(
                connection_string,
                eventhub_name=settings.eventhubs_name or None,
                send_timeout=send_timeout,
                on_drop=on_drop,
                attester=attester,
            )
        log.info(
            "event hubs sink: managed identity",
            extra={"namespace": settings.eventhubs_namespace, "eventhub": settings.eventhubs_name},
        )
        return cls.from_namespace(
            settings.eventhubs_namespace,
            settings.eventhubs_name,
            send_timeout=send_timeout,
            on_drop=on_drop,
            attester=attester,
        )

    def connect(self) -> None:
        """Open the link now (and send the attestation, with attestation on), so the first record need not wait
        for either; best effort: a failure is logged, and the next send opens the link again and reports it."""
        with self._lock:
            try:
                producer = self._open()
            except Exception as error:  # noqa: BLE001 - best effort: the next send opens it and reports why not
                self._reset()
                log.info("could not open the Event Hubs link ahead of a send", extra={"error": repr(error)})
                return
            try:
                self._attest(producer)
            except Exception as error:  # noqa: BLE001 - best effort: the next send attests first or fails
                log.info("could not send the attestation ahead of a send", extra={"error": repr(error)})

    def send(self, rows: Sequence[OutboxRow]) -> None:
        """Send every row in order, dead-lettering (counting) any too large to send; SinkError on any failure."""
        with self._lock:
            oversize = self._send_rows(rows)
            if oversize:
                self._dead_letter(oversize)

    def _send_rows(self, rows: Sequence[OutboxRow]) -> list[OutboxRow]:
        """Send ``rows`` (the oversize ones left out and returned); once more at once, on a new connection, if the
        link that was open when the call began turned out lost (the service or the network dropped it meanwhile)."""
        reconnect = self._linked
        while True:
            try:
                return self._attempt(rows)
            except Exception as error:
                # Every failure of the SDK, its transport or the credential (not all of which derive from
                # EventHubError) must reach the shipper as SinkError: anything else would end its thread.
                self._reset()
                if reconnect and link_lost(error):
                    reconnect = False
                    log.info("the Event Hubs link was lost; sending again on a new one", extra={"error": repr(error)})
                    continue
                self.failures += 1
                raise SinkError(f"event hubs did not accept the batch: {type(error).__name__}: {error}") from error

    def _attempt(self, rows: Sequence[OutboxRow]) -> list[OutboxRow]:
        oversize: list[OutboxRow] = []
        producer = self._open()
        self._attest(producer)
        for key, run in runs_by_key(rows):
            self._send_run(producer, key, run, oversize)
        self._linked = True
        return oversize

    def _open(self) -> EventHubProducerClient:
        """The producer, a new one with its link opened (promptly: ``collector.ship_link``) if there is none."""
        if self._producer is None:
            self._producer = self._factory()
            self._linked = open_promptly(self._producer, self._send_timeout)
        return self._producer

    def _send_run(
        self, producer: EventHubProducerClient, key: str, run: Sequence[OutboxRow], oversize: list[OutboxRow]
    ) -> None:
        batch = producer.create_batch(partition_key=key)
        signer = self.attester.signer if self.attester is not None else None
        for row in run:
            event = to_event(row, signer)
            try:
                batch.add(event)
                continue
            except ValueError:
                if len(batch) == 0:  # alone in an empty batch and still too large: it can never be sent
                    oversize.append(row)
                    continue
            self._send_batch(producer, batch)
            batch = producer.create_batch(partition_key=key)
            try:
                batch.add(event)
            except ValueError:  # too large for an empty batch
                oversize.append(row)
        if len(batch):
            self._send_batch(producer, batch)

    def _attest(self, producer: EventHubProducerClient) -> None:
        """Send the VM's attestation before anything else on a new producer (and again every ATTEST_EVERY_S),
        under its vm_id: the records that follow share its ordered partition. Raises if IMDS gave none."""
        if self.attester is None:
            return
        from collector.attestation import AttestationError

        now = time.monotonic()
        if self._attested_at is not None and now - self._attested_at < ATTEST_EVERY_S:
            return
        try:
            attestation = self.attester.attestation()
        except AttestationError as error:
            if self._attested_at is None:
                raise  # nothing goes before the first attestation
            # Refreshing is a courtesy to an ingest that missed it: records go on under the one sent.
            log.warning("could not send the attestation again; trying later", extra={"error": str(error)})
            self._attested_at = now - ATTEST_EVERY_S + ATTEST_RETRY_S
            return
        row = OutboxRow(0, RECORD_ATTESTATION, attestation.body)
        batch = producer.create_batch(partition_key=attestation.vm_id)
        batch.add(to_event(row, self.attester.signer))
        self._send_batch(producer, batch)
        self._attested_at = now

    def _dead_letter(self, rows: Sequence[OutboxRow]) -> None:
        """Count and log records no event can carry; the shipper removes them with the rows that were sent."""
        try:
            self._on_drop(DROP_OVERSIZE, len(rows))
        except Exception as error:
            # Not counted means not dropped: keep them (and the sent rows, which go again and are deduplicated).
            self.failures += 1
            raise SinkError(f"could not count {len(rows)} dead-lettered records: {error}") from error
        self.dropped += len(rows)
        for row in rows:
            log.error(
                "record larger than an event may be: dead-lettered (dropped, counted)",
                extra={
                    "seq": row.seq,
                    "record_type": row.record_type,
                    "record_id": record_id_of(row.payload),
                    "bytes": len(row.payload),
                    "reason": DROP_OVERSIZE,
                },
            )

    def _send_batch(self, producer: EventHubProducerClient, batch: Any) -> None:
        send_on_link(producer, batch, self._send_timeout)
        self.batches_sent += 1
        self.events_sent += len(batch)

    def _reset(self) -> None:
        # A fresh client after a failure: the SDK's link may be in a state it does not recover from.
        producer, self._producer = self._producer, None
        self._linked = False
        self._attested_at = None  # a new producer sends the attestation first again
        if producer is not None:
            try:
                producer.close()
            except Exception:
                log.debug("closing the failed producer raised", exc_info=True)

    def close(self) -> None:
        if self.attester is not None:
            self.attester.close()  # ends a fetch in progress before the lock is taken
        with self._lock:
            self._reset()
