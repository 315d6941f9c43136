"""The central Scheduled Events feed as a source: the ``deliver`` callback for the Event Hub Event Grid writes to.

Theory of operation. ``FeedHandler(deliveries)`` decodes each Event Hubs message (``ingest.feed_decode``: Event
Grid schema or CloudEvents 1.0, one event or an array), then stores, in this order, and returns only when
ClickHouse confirmed all of it (so the source checkpoints only then):

1. what could not be read, in ``dead_letters`` with its reason (``feed_not_json``, ``feed_other_event_type``...);
2. each event not delivered before, in ``azure_scheduled_events`` (migration 0014: one row per EventId and
   status, the very row ``sevents-ingest reconcile`` makes of the same event read from Azure Resource Graph), only
   when new or changed (content hash, as the reconciler writes), so the feed and ARG agree and neither rewrites
   what the other stored;
3. its Event Grid id in ``azure_feed_deliveries`` (migration 0016).

Event Grid delivers at least once: an id already in ``azure_feed_deliveries`` (or earlier in the same batch) is a
repeated delivery, counted and not stored again. A crash between 2 and 3 redelivers the batch, and 2 then finds
the rows stored with the same content and inserts nothing. A feed row's version (``reconciled_at``) is the time
Event Grid published it (never later than its arrival), so an older state delivered late never replaces a newer
one; ``first_seen_at`` is the earliest publication of that status, kept when the row changes.

Partition keys and the collectors' provenance checks (``ingest.handler.vouch``) do not apply here: Event Grid sends
under no VM's key. The feed's hub must therefore be its own, written only by the Event Grid subscription.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from ingest import lifecycle_store
from ingest import reconcile_rows as rr
from ingest.clickhouse import CLIENT_ERRORS
from ingest.errors import Interrupted, StoreError
from ingest.feed_decode import FeedEvent, Refused, decode
from ingest.rows import Batch
from ingest.source import Delivery
from ingest.writer import Writer
from sevents.retry import Backoff, RetryInterrupted, retry

log = logging.getLogger(__name__)

SOURCE: Final = "feed"  # dead_letters.source of the feed's refusals
DELIVERIES: Final = "azure_feed_deliveries"
DELIVERY_COLUMNS: Final = ("delivery_id", "event_id", "event_status", "published_at", "received_at", "position")


@dataclass(frozen=True)
class Tally:
    """What one batch did: events stored (new or changed rows), repeated deliveries skipped, refused by reason."""

    stored: int
    repeated: int
    refused: Mapping[str, int]


class FeedStore:
    """The feed's two tables in ``database``: which Event Grid ids were stored, and the rows of the new ones."""

    def __init__(self, client: Any, database: str, *, cluster: bool = False) -> None:
        self.client = client
        self.database = database
        self.settings: dict[str, Any] = {"async_insert": 0}
        if cluster:  # lookups after an insert must see it on every shard
            self.settings["distributed_foreground_insert"] = 1

    def delivered(self, ids: Sequence[str]) -> set[str]:
        """The Event Grid ids among ``ids`` stored before."""
        if not ids:
            return set()
        sql = (
            f"SELECT DISTINCT delivery_id FROM {self.database}.{DELIVERIES} "  # noqa: S608 -- our names; values bound
            "WHERE delivery_id IN {ids:Array(String)}"
        )
        return {str(row[0]) for row in self.client.query(sql, parameters={"ids": sorted(set(ids))}).result_rows}

    def write_events(self, events: Sequence[FeedEvent], received_at: datetime) -> int:
        """Store the new or changed rows of ``events`` (the latest publication of a key wins); how many."""
        table = rr.SCHEDULED_EVENTS
        latest: dict[tuple[Any, ...], tuple[datetime, Mapping[str, Any]]] = {}
        earliest: dict[tuple[Any, ...], datetime] = {}
        for event in events:
            key, at = table.key_of(event.row), _published(event, received_at)
            if key not in latest or at >= latest[key][0]:
                latest[key] = (at, event.row)
            earliest[key] = min(at, earliest.get(key, at))
        candidates = [(key, row, earliest[key], at) for key, (at, row) in latest.items()]
        out = rr.changed_rows(table, candidates, self._stored(list(latest)))
        if out:
            self.client.insert(
                f"{self.database}.{table.name}",
                out,
                column_names=[*table.columns, *rr.BOOKKEEPING],
                settings=self.settings,
            )
            lifecycle_store.refresh(self.client, self.database, rr.event_ids(table, out), self.settings)
        return len(out)

    def write_deliveries(self, events: Sequence[tuple[FeedEvent, str]], received_at: datetime) -> None:
        """Record the Event Grid ids of ``events`` (each with its position) as stored."""
        rows = [
            [e.delivery_id, e.row["event_id"], e.row["event_status"], e.published_at, received_at, position]
            for e, position in events
        ]
        if rows:
            self.client.insert(
                f"{self.database}.{DELIVERIES}", rows, column_names=list(DELIVERY_COLUMNS), settings=self.settings
            )

    def _stored(self, keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[int, datetime]]:
        if not keys:
            return {}
        sql = (
            f"SELECT event_id, event_status, argMax(row_hash, reconciled_at), min(first_seen_at) "  # noqa: S608 -- our names; values bound
            f"FROM {self.database}.{rr.SCHEDULED_EVENTS.name} "
            "WHERE event_id IN {ids:Array(String)} AND event_status IN {statuses:Array(String)} "
            "GROUP BY event_id, event_status"
        )
        params = {"ids": sorted({str(k[0]) for k in keys}), "statuses": sorted({str(k[1]) for k in keys})}
        rows = self.client.query(sql, parameters=params).result_rows
        return {(str(r[0]), str(r[1])): (int(r[2]), _aware(r[3])) for r in rows}


def _published(event: FeedEvent, received_at: datetime) -> datetime:
    """When Event Grid published the event, never later than it arrived (a sender's clock is not ours)."""
    return received_at if event.published_at is None else min(event.published_at, received_at)


def _aware(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.now(UTC)


def read(
    deliveries: Iterable[Delivery], max_bytes: int
) -> tuple[list[tuple[FeedEvent, str]], list[tuple[Delivery, Refused]]]:
    """Pure: the events of a batch (each with the position of its message; ``#n``: the n-th of an array) and the
    refusals (each with the delivery to dead-letter: the refused event alone when its message held several)."""
    events: list[tuple[FeedEvent, str]] = []
    refused: list[tuple[Delivery, Refused]] = []
    for delivery in deliveries:
        found, bad = decode(delivery.payload, delivery.properties, max_bytes=max_bytes)
        many = len(found) + len(bad) > 1
        events.extend((e, f"{delivery.position}#{e.index}" if many else delivery.position) for e in found)
        for refusal in bad:
            position = f"{delivery.position}#{refusal.index}" if many else delivery.position
            refused.append((Delivery(refusal.payload, position, delivery.properties), refusal))
    return events, refused


def first_deliveries(events: Sequence[tuple[FeedEvent, str]], stored: set[str]) -> list[tuple[FeedEvent, str]]:
    """Pure: the events whose Event Grid id is not in ``stored`` nor earlier in ``events`` (the first stays)."""
    seen = set(stored)
    out = []
    for event, position in events:
        if event.delivery_id in seen:
            continue
        seen.add(event.delivery_id)
        out.append((event, position))
    return out


class FeedHandler:
    """The ``deliver`` callable of the feed's Event Hubs source; thread-safe (partitions deliver concurrently)."""

    def __init__(
        self,
        client: Any,
        database: str,
        *,
        stop: threading.Event,
        cluster: bool = False,
        backoff: Backoff | None = None,
        max_payload_bytes: int = 256 * 1024,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = FeedStore(client, database, cluster=cluster)
        self.writer = Writer(client, database, cluster=cluster)
        self.stop = stop
        self.backoff = backoff or Backoff(initial=0.5, cap=30.0)
        self.max_payload_bytes = max_payload_bytes
        self.now = now
        self._lock = threading.Lock()
        # one batch at a time from lookup to insert: two partitions holding copies of one delivery (Event Grid sends
        # under no partition key) must not both find it new; the feed is a few events per maintenance, never a flood
        self._storing = threading.Lock()
        self.stored = 0  # rows of azure_scheduled_events inserted
        self.repeated = 0  # deliveries of an Event Grid id stored before
        self.dead_letters = 0

    def __call__(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        received_at = self.now()
        events, refused = read(deliveries, self.max_payload_bytes)
        try:
            tally = retry(
                lambda: self._store(events, refused, received_at),
                backoff=self.backoff,
                stop=self.stop,
                retryable=lambda error: isinstance(error, (StoreError, *CLIENT_ERRORS)),
                on_retry=lambda note: log.warning(
                    "feed insert failed; retrying",
                    extra={"error": str(note.error), "attempt": note.attempt, "retry_in_s": round(note.delay, 2)},
                ),
            )
        except RetryInterrupted as error:
            raise Interrupted(f"stopped with {len(events)} feed events unstored (not acknowledged)") from error
        for reason, count in tally.refused.items():
            log.warning("dead letters", extra={"reason": reason, "count": count, "source": SOURCE})
        if tally.repeated:
            log.info("repeated Event Grid deliveries not stored again", extra={"count": tally.repeated})
        with self._lock:
            self.stored += tally.stored
            self.repeated += tally.repeated
            self.dead_letters += sum(tally.refused.values())

    def _store(
        self, events: list[tuple[FeedEvent, str]], refused: list[tuple[Delivery, Refused]], at: datetime
    ) -> Tally:
        with self._storing:
            return self._store_alone(events, refused, at)

    def _store_alone(
        self, events: list[tuple[FeedEvent, str]], refused: list[tuple[Delivery, Refused]], at: datetime
    ) -> Tally:
        counts: dict[str, int] = {}
        if refused:
            batch = Batch()
            for delivery, refusal in refused:
                counts[refusal.reason] = counts.get(refusal.reason, 0) + 1
                batch.add_dead_letter(
                    delivery, error=f"{refusal.reason}: {refusal.detail}", source=SOURCE, received_at=at
                )
            self.writer.store(batch)
        fresh = first_deliveries(events, self.store.delivered([e.delivery_id for e, _ in events]))
        stored = self.store.write_events([e for e, _ in fresh], at)
        self.store.write_deliveries(fresh, at)
        return Tally(stored, len(events) - len(fresh), counts)
