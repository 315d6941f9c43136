"""The Event Hubs source: one receiver per owned partition, ownership kept stable, checkpoint after the insert.

Theory of operation. ``run(deliver, stop)`` keeps two kinds of threads until ``stop`` is set:

- the balancer (the calling thread): every ``load_balancing_interval`` it lists the partition claims in the
  blob checkpoint store, decides with ``ingest.eh_balance.plan`` which partitions this worker holds (renew its
  own, claim free or expired ones up to its share, never take one from a live worker in steady state), claims
  them (etag-guarded, so two workers never both win one), and starts or stops receivers to match;
- one receiver per held partition (``ingest.eh_receiver``): the SDK's partition consumer on its own AMQP
  connection, started from the partition's checkpoint (all checkpoints are read in one listing when
  receivers start), all on one event loop (``ingest.eh_async``); ``deliver`` runs on a worker thread, so a
  slow partition or a slow insert never delays the others. A partition with no checkpoint starts at the
  beginning of retention, never at ``@latest``, so a new consumer group reads the backlog.

A worker started again under the same ``owner_id`` (a stable name per worker) finds its own claims and
resumes its partitions at once, while the hub's partition list (which only the balancing rounds need) is
still being read; a worker that died without coming back loses them when its claims expire
(``ownership_expiry``), to whoever has room. On a clean stop the claims are released for immediate takeover.

For each batch a receiver turns the events into ``Delivery`` objects (body bytes, position, application
properties as text, and the partition key and enqueued time the service reports: ``Provenance``), calls
``deliver`` inside a span linked to each event's W3C ``traceparent``, and only
after ``deliver`` returned checkpoints the partition at the batch's last event (written beside the receive
path, so the next batch need not wait for the blob). ``deliver`` is called from several receivers at once:
it must be thread-safe (``ingest.handler.Handler`` is).

If ``deliver`` raises, nothing is checkpointed: after a backoff the callback raises ``DeliverFailed``, that
partition's receiver ends, and the next balancing round starts it again from its checkpoint, so the batch
comes again (the other partitions carry on). A record that cannot be decoded is ``deliver``'s business: it goes to dead
letters like any poison record; this module never drops an event.

Errors::

    EventHubsSourceError    the consumer cannot start (raised from ``run``)
    └── DeliverFailed       deliver raised; the batch was not checkpointed and will be read again
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient
from opentelemetry import trace
from opentelemetry.trace import Link, TracerProvider

from ingest.eh_async import AsyncCredential, LoopThread
from ingest.eh_balance import Claim, plan
from ingest.eh_receiver import PartitionReceiver, start_position
from ingest.source import Deliver, Delivery, Provenance
from sevents.retry import Backoff
from sevents.tracing import TRACEPARENT, parse_traceparent

log = logging.getLogger(__name__)

ClientFactory = Callable[[], EventHubConsumerClient]  # the async client: one for all receivers, one to probe


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
    """One event as a ``Delivery``: position ``eventhubs:<partition>:<sequence number>``, properties as text, and
    its provenance: the partition key it was sent under and the service's enqueued time (the ingest stores the
    record only if it could be that VM's own: ``ingest.handler.vouch``)."""
    properties: Mapping[str | bytes, Any] = event.properties or {}
    key = event.partition_key
    return Delivery(
        payload=body_bytes(event),
        position=f"eventhubs:{partition_id}:{event.sequence_number}",
        properties={_text(k): _text(v) for k, v in properties.items()},
        provenance=Provenance(None if key is None else _text(key), event.enqueued_time),
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
    """``ingest.source.Source`` over one SDK partition consumer per owned partition (``ingest.eh_receiver``)."""

    def __init__(
        self,
        factory: ClientFactory,
        *,
        checkpoint_store: Any = None,
        owner_id: str = "",
        load_balancing_interval: float = 10.0,
        ownership_expiry: float = 60.0,
        max_batch_size: int = 500,
        max_wait_time: float = 1.0,
        backoff: Backoff | None = None,
        tracer_provider: TracerProvider | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._factory = factory
        self._store = checkpoint_store
        # A random id unless configured: a stable one lets a restarted worker resume its partitions at once.
        self.owner_id = owner_id or str(uuid.uuid4())
        self._interval = load_balancing_interval
        self._expiry = ownership_expiry
        self._max_batch_size = max_batch_size
        self._max_wait_time = max_wait_time
        self._backoff = backoff or Backoff(initial=0.5, cap=10.0)
        self._tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)
        self._clock = clock
        self._lock = threading.Lock()  # counters and backoff state, shared by the receivers
        self._failing: dict[str, int] = {}  # consecutive deliver failures per partition
        self._held: dict[str, Claim] = {}  # partition -> this worker's current claim
        self.delivered = 0
        self.failures = 0
        self.taken_from_live_owners = 0  # partitions taken from a live worker (only when workers join)

    @classmethod
    def from_connection_string(
        cls,
        connection_string: str,
        *,
        consumer_group: str = "$Default",
        eventhub_name: str | None = None,
        checkpoint_store: Any = None,
        **options: Any,
    ) -> EventHubsSource:
        """SAS credentials (the fallback, and the local test endpoint)."""
        client = _client_options()

        def factory() -> EventHubConsumerClient:
            return EventHubConsumerClient.from_connection_string(
                connection_string, consumer_group=consumer_group, eventhub_name=eventhub_name, **client
            )

        return cls(factory, checkpoint_store=checkpoint_store, **options)

    @classmethod
    def from_namespace(
        cls,
        namespace: str,
        eventhub_name: str,
        *,
        consumer_group: str = "$Default",
        credential: Any = None,
        checkpoint_store: Any = None,
        **options: Any,
    ) -> EventHubsSource:
        """Managed identity (the default): ``namespace`` fully qualified, ``credential`` a sync azure-identity one."""
        client = _client_options()

        def factory() -> EventHubConsumerClient:
            from azure.identity import DefaultAzureCredential

            token = AsyncCredential(credential or DefaultAzureCredential())
            return EventHubConsumerClient(namespace, eventhub_name, consumer_group, token, **client)

        return cls(factory, checkpoint_store=checkpoint_store, **options)

    def run(self, deliver: Deliver, stop: threading.Event) -> None:
        """Consume until ``stop`` is set; then stop the receivers and release this worker's claims."""
        loop = LoopThread("eventhubs-receivers")
        try:
            probe, client = self._factory(), self._factory()
        except Exception as error:
            loop.close()
            raise EventHubsSourceError(f"cannot create the Event Hubs client: {error!r}") from error
        # the names under which the checkpoint store keeps claims, as the SDK's own load balancer writes them
        scope = (client._address.hostname, client.eventhub_name, client._consumer_group)
        # Only the balancing rounds need the partition list; a restarted worker resumes its own claims meanwhile.
        described = loop.submit(_partition_ids(probe))
        receivers: dict[str, PartitionReceiver] = {}
        write = self._store.update_checkpoint if self._store is not None else None

        def follow(held: set[str]) -> None:
            for partition in [p for p in receivers if p not in held]:
                # not joined: it finishes the batch it is storing (then checkpoints it) while this thread renews
                # the other claims; an insert that keeps failing must not let them expire
                receivers.pop(partition).stop(join=False)
                log.info("partition released", extra={"partition": partition, "owner": self.owner_id})
            starting = sorted(p for p in held if p not in receivers or not receivers[p].alive())
            checkpoints = self._checkpoints(scope) if starting else {}
            if checkpoints is None:
                return  # the store did not answer: start them next round
            for partition in starting:
                names = dict(zip(_SCOPE_NAMES, scope, strict=True), partition_id=partition)
                receivers[partition] = PartitionReceiver(
                    client,
                    loop,
                    names,
                    start_position(checkpoints.get(partition)),
                    functools.partial(self.handle, partition, deliver=deliver, stop=stop),
                    write,
                    max_batch_size=self._max_batch_size,
                    max_wait_time=self._max_wait_time,
                )
                log.info("receiving partition", extra={"partition": partition, "owner": self.owner_id})

        try:
            follow(self._resume(scope))
            try:
                partitions = described.result(60)
            except Exception as error:
                raise EventHubsSourceError(f"cannot read the hub's partitions: {error!r}") from error
            while not stop.is_set():
                follow(self._balance(partitions, scope))
                stop.wait(self._interval * (1 + 0.1 * random.random()))
        finally:
            for receiver in receivers.values():
                receiver.stop(join=False)
            for receiver in receivers.values():
                receiver.join()
            with contextlib.suppress(Exception):
                loop.run(client.close(), 10)
            loop.close()
            self._release_all(scope)

    def _checkpoints(self, scope: tuple[str, str, str]) -> dict[str, Mapping[str, Any]] | None:
        """Every partition's checkpoint in one listing (None if the store failed; {} without a store)."""
        if self._store is None:
            return {}
        try:
            return {str(c["partition_id"]): c for c in self._store.list_checkpoints(*scope)}
        except Exception as error:  # noqa: BLE001 - the next round tries again
            log.warning("could not read the checkpoints", extra={"error": repr(error)})
            return None

    def _resume(self, scope: tuple[str, str, str]) -> set[str]:
        """Renew the claims this owner id still has (a quick restart) without waiting for a balancing round."""
        if self._store is None:
            return set()
        try:
            listed = [_claim(o) for o in self._store.list_ownership(*scope)]
            mine = [c for c in listed if c.owner_id == self.owner_id]
            won = self._store.claim_ownership([_ownership(c, self.owner_id, scope) for c in mine]) if mine else []
        except Exception as error:  # noqa: BLE001 - the balancing rounds claim them instead
            log.warning("could not resume earlier claims", extra={"error": repr(error)})
            return set()
        self._held = {o["partition_id"]: _claim(o) for o in won}
        return set(self._held)

    def _balance(self, partitions: list[str], scope: tuple[str, str, str]) -> set[str]:
        """One balancing round; the partitions this worker holds afterwards (all of them without a store)."""
        if self._store is None:
            return set(partitions)
        try:
            listed = self._store.list_ownership(*scope)
            claims = {o["partition_id"]: _claim(o) for o in listed}
            decided = plan(partitions, claims, self.owner_id, self._clock(), self._expiry)
            if decided.taken_from:
                self.taken_from_live_owners += 1
                log.info(
                    "taking a partition from a live worker holding more than its share (a worker joined)",
                    extra={"partition": decided.claim[-1].partition_id, "from": decided.taken_from},
                )
            wanted = [_ownership(c, self.owner_id, scope) for c in decided.claim]
            won = self._store.claim_ownership(wanted) if wanted else []
            if decided.release:
                self._store.claim_ownership([_ownership(c, "", scope) for c in decided.release])
        except Exception as error:  # noqa: BLE001 - keep what we hold; claims outlive a few failed rounds
            log.warning("partition balancing failed; keeping current partitions", extra={"error": repr(error)})
            return set(self._held)
        self._held = {o["partition_id"]: _claim(o) for o in won}
        return set(self._held)

    def _release_all(self, scope: tuple[str, str, str]) -> None:
        """Give the claims up (owner id ""), so other workers take the partitions at once, not after expiry."""
        if self._store is None or not self._held:
            return
        try:
            self._store.claim_ownership([_ownership(c, "", scope) for c in self._held.values()])
        except Exception as error:  # noqa: BLE001 - they expire anyway
            log.warning("could not release partitions; they expire instead", extra={"error": repr(error)})
        self._held = {}

    def handle(self, partition: str, events: list[EventData], *, deliver: Deliver, stop: threading.Event) -> None:
        """Deliver one batch of one partition (on a worker thread); DeliverFailed, after a backoff, if not stored."""
        batch = [to_delivery(partition, event) for event in events]
        with self._tracer.start_as_current_span(
            "sevents.ingest.eventhubs.batch",
            links=trace_links(batch),
            attributes={"messaging.destination.partition.id": partition, "messaging.batch.message_count": len(batch)},
        ) as span:
            try:
                deliver(batch)
            except Exception as error:
                with self._lock:
                    self.failures += 1
                    attempt = self._failing[partition] = self._failing.get(partition, 0) + 1
                span.record_exception(error)
                log.warning(
                    "deliver failed; the batch is not checkpointed and will be read again",
                    extra={"partition": partition, "events": len(batch), "error": repr(error)},
                )
                stop.wait(self._backoff.delay(min(attempt, 8)))
                raise DeliverFailed(f"partition {partition}: {error}") from error
        with self._lock:
            self._failing.pop(partition, None)
            self.delivered += len(batch)


async def _partition_ids(probe: EventHubConsumerClient) -> list[str]:
    async with probe:
        return list(await probe.get_partition_ids())


def _claim(ownership: Mapping[str, Any]) -> Claim:
    return Claim(
        partition_id=str(ownership["partition_id"]),
        owner_id=str(ownership.get("owner_id") or ""),
        last_modified=float(ownership.get("last_modified_time") or 0.0),
        etag=ownership.get("etag"),
    )


_SCOPE_NAMES = ("fully_qualified_namespace", "eventhub_name", "consumer_group")


def _ownership(claim: Claim, owner_id: str, scope: tuple[str, str, str]) -> dict[str, Any]:
    """The checkpoint store's ownership dict for ``claim`` under ``owner_id`` (etag-guarded)."""
    found: dict[str, Any] = dict(zip(_SCOPE_NAMES, scope, strict=True))
    found.update(partition_id=claim.partition_id, owner_id=owner_id, etag=claim.etag)
    return found


def _client_options() -> dict[str, Any]:
    # Checkpoints and ownership are this module's business (ingest.eh_receiver), not the client's.
    return {"retry_total": 3}
