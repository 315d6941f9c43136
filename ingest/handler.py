"""The ``deliver`` callback: decode -> rows -> insert (retried) -> return, so the source may acknowledge.

Poison records become dead letters in the same batch and never block their neighbours. A ClickHouse failure
is retried with backoff for as long as it takes; ``deliver`` returns only after ClickHouse confirmed, and
raises Interrupted (nothing stored, nothing to acknowledge) when shutdown is asked for meanwhile. A failure
that is about the rows, not the server (``ingest.clickhouse.about_the_data``: a value or constraint refused, a
block over too many partitions), is never retried as it is: the batch is halved until the refused row is alone
and dead-lettered (``refused_by_clickhouse``), and the rest stored. Records older than every table that would
keep them are counted as dropped (``retention``), never retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider

from ingest.decode import Limits, decode_noted
from ingest.decode_batch import decode_batch
from ingest.errors import Interrupted, InvalidRecord, RejectedRows, StoreError
from ingest.metrics import IngestMetrics
from ingest.rows import Batch
from ingest.source import Delivery
from ingest.writer import Writer
from sevents.retry import Backoff
from sevents.tracing import record_links, tracing

log = logging.getLogger(__name__)
tracer = trace.get_tracer("sevents.ingest")  # no-op unless an OTLP endpoint installed a provider

DEFAULT_BACKOFF = Backoff(initial=0.5, cap=30.0)
DEFAULT_LIMITS = Limits()


MADE_SAFE = "made_safe"  # the dead-letter reason of an original kept beside its repaired, stored row
RETENTION = "retention"  # the drop reason of a record older than every table that would keep it


def prepare(
    deliveries: Sequence[Delivery], *, source: str, limits: Limits, received_at: datetime
) -> tuple[Batch, dict[str, int]]:
    """The rows of one delivery and the dead-letter count by reason (pure).

    The batch decoder takes every record it can vouch for, column by column; the others go through the
    per-record decoder, which stores or rejects each with its reason. A record with a field made safe is stored
    repaired and its original kept in dead letters (reason ``made_safe``): the transition is never lost for one
    bad field, and nothing of what was sent is lost.
    """
    batch = Batch()
    rejected: dict[str, int] = {}
    decoded = decode_batch([d.payload for d in deliveries], [d.position for d in deliveries], limits)
    for table, (columns, indexes) in decoded.tables.items():
        batch.add_columns(
            table, columns, deliveries if len(indexes) == len(deliveries) else [deliveries[i] for i in indexes]
        )
    for index in decoded.doubtful:
        delivery = deliveries[index]
        try:
            record_type, row, notes = decode_noted(delivery.payload, delivery.position, limits)
        except InvalidRecord as error:
            rejected[error.reason] = rejected.get(error.reason, 0) + 1
            batch.add_dead_letter(delivery, error=str(error), source=source, received_at=received_at)
            continue
        if notes:
            rejected[MADE_SAFE] = rejected.get(MADE_SAFE, 0) + 1
            batch.add_dead_letter(delivery, error=f"{MADE_SAFE}: {notes}", source=source, received_at=received_at)
        batch.add_row(record_type, row, delivery)
    return batch, rejected


@dataclass
class Outcome:
    """What became of a batch's record rows that were not stored as they came, per table."""

    dropped: dict[str, int] = field(default_factory=dict)  # older than every table that would keep them
    refused: dict[str, int] = field(default_factory=dict)  # refused by ClickHouse, alone: dead-lettered


class Handler:
    """Callable given to a Source as ``deliver``; thread-safe, so partitions may deliver concurrently."""

    def __init__(
        self,
        writer: Writer,
        *,
        source: str,
        stop: threading.Event,
        backoff: Backoff = DEFAULT_BACKOFF,
        limits: Limits = DEFAULT_LIMITS,
        metrics: IngestMetrics | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_stored: Callable[[Batch], None] | None = None,
    ) -> None:
        self.writer = writer
        self.source = source
        self.stop = stop
        self.backoff = backoff
        self.limits = limits
        self.metrics = metrics or IngestMetrics.create(NoOpMeterProvider())
        self.now = now
        self.on_stored = on_stored
        self.stored = 0  # records and dead letters confirmed, for logs and tests
        self.dead_letters = 0  # of which dead letters (ingest.progress reports both)
        self.dropped = 0  # records not stored on purpose (older than their tables' retention); not in ``stored``
        self._lock = threading.Lock()

    def __call__(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        batch, rejected = prepare(deliveries, source=self.source, limits=self.limits, received_at=self.now())
        for reason, count in rejected.items():
            log.warning("dead letters", extra={"reason": reason, "count": count, "source": self.source})
        # linked to the trace of each record (its record_id and seq: sevents.tracing), up to the SDK's link limit
        with tracer.start_as_current_span(
            "sevents.ingest.insert", links=record_links(_keys(batch)) if tracing() else []
        ) as span:
            span.set_attribute("sevents.records", batch.records())
            span.set_attribute("sevents.dead_letters", len(batch.dead_letters))
            outcome = Outcome()
            self._store_isolating(batch, rejected, outcome)
        for table, count in outcome.dropped.items():
            log.warning(
                "records older than every table's retention: dropped",
                extra={"record_type": table.rstrip("s"), "count": count, "reason": RETENTION, "source": self.source},
            )
        self._account(batch, rejected, outcome)
        if self.on_stored is not None:
            self.on_stored(batch)

    def _store_isolating(self, batch: Batch, rejected: dict[str, int], outcome: Outcome) -> None:
        """Store; if ClickHouse refuses the rows themselves, halve until the refused row is alone, dead-letter it.

        Halving ends: each half has fewer records, and one record alone is stored or dead-lettered. A block
        refused only for spanning too many partitions fits once halved enough, and nothing of it is lost.
        ``outcome`` gathers, per table, the rows dropped for retention and the rows refused (dead-lettered).
        """
        try:
            for table, count in self._store(batch).items():
                outcome.dropped[table] = outcome.dropped.get(table, 0) + count
            return
        except RejectedRows as error:
            only = batch.only_record()
            if batch.records() == 0:
                raise StoreError(f"ClickHouse refused dead letters: {error}") from error
            if only is None:
                log.info(
                    "ClickHouse refused a batch's rows; halving it to find the refused one",
                    extra={"rows": len(batch), "error": str(error)},
                )
                for half in batch.split():
                    self._store_isolating(half, rejected, outcome)
                return
            log.warning("ClickHouse refused a record", extra={"position": only.position, "error": str(error)})
            rejected["refused_by_clickhouse"] = rejected.get("refused_by_clickhouse", 0) + 1
            table = next(name for name, origins in batch.origins.items() if origins)
            outcome.refused[table] = outcome.refused.get(table, 0) + 1
            alone = Batch(dead_letters=list(batch.dead_letters))
            alone.add_dead_letter(
                only, error=f"refused_by_clickhouse: {error}", source=self.source, received_at=self.now()
            )
            self._store(alone)

    def _store(self, batch: Batch) -> dict[str, int]:
        """Store ``batch``, retrying server faults for as long as it takes; the rows dropped for retention."""
        attempt = 0
        first_failure = 0.0
        while True:
            started = time.monotonic()
            try:
                dropped = self.writer.store(batch, retry=attempt > 0)
            except RejectedRows:
                raise
            except StoreError as error:
                attempt += 1
                first_failure = first_failure or started
                self.metrics.insert_failures.add(1)
                delay = self.backoff.delay(attempt)
                log.warning(
                    "insert failed; retrying",
                    extra={
                        "error": str(error),
                        "attempt": attempt,
                        "retry_in_s": round(delay, 2),
                        "failing_for_s": round(time.monotonic() - first_failure, 1),
                        "rows": len(batch),
                    },
                )
                if self.stop.wait(delay):
                    raise Interrupted(f"stopped with {len(batch)} rows unstored (not acknowledged)") from error
                continue
            self.metrics.insert_duration.record(time.monotonic() - started)
            if attempt:
                log.info("insert succeeded after retries", extra={"attempts": attempt + 1, "rows": len(batch)})
            return dropped or {}

    def _account(self, batch: Batch, rejected: dict[str, int], outcome: Outcome) -> None:
        m = self.metrics
        m.batches.add(1)
        oldest: datetime | None = None
        for table, origins in batch.origins.items():
            gone = outcome.dropped.get(table, 0)
            stored = len(origins) - gone - outcome.refused.get(table, 0)  # the refused: counted as dead letters
            if stored > 0:
                m.records.add(stored, {"record_type": table.rstrip("s"), "outcome": "stored"})
            if gone:
                m.records.add(gone, {"record_type": table.rstrip("s"), "outcome": "dropped"})
                m.dropped.add(gone, {"record_type": table.rstrip("s"), "reason": RETENTION})
            if origins:
                first = batch.earliest(table, "observed_at")
                oldest = first if oldest is None else min(oldest, first)
        for reason, count in rejected.items():
            if reason == MADE_SAFE:  # stored (repaired) and counted above; the original copy is the dead letter
                m.records.add(count, {"outcome": "made_safe"})
            else:
                m.records.add(count, {"outcome": "dead_letter"})
            m.dead_letters.add(count, {"reason": reason})
        if oldest is not None:
            m.lag.record(max(0.0, (self.now() - oldest).total_seconds()))
        dropped, refused = sum(outcome.dropped.values()), sum(outcome.refused.values())
        with self._lock:
            self.stored += len(batch) - dropped  # a refused record's row counts once: as its dead letter
            self.dead_letters += len(batch.dead_letters) + refused
            self.dropped += dropped


def _keys(batch: Batch) -> Iterator[tuple[str, int]]:
    """(record_id, seq) of every record row of ``batch``."""
    for table in batch.origins:
        yield from zip(batch.values(table, "record_id"), batch.values(table, "seq"), strict=True)
