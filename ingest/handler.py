"""The ``deliver`` callback: decode -> rows -> insert (retried) -> return, so the source may acknowledge.

Poison records become dead letters in the same batch and never block their neighbours. A ClickHouse failure
is retried with backoff for as long as it takes; ``deliver`` returns only after ClickHouse confirmed, and
raises Interrupted (nothing stored, nothing to acknowledge) when shutdown is asked for meanwhile. A failure
that is about the rows, not the server (``ingest.clickhouse.about_the_data``: a value or constraint refused, a
block over too many partitions), is never retried as it is: the batch is halved until the refused row is alone
and dead-lettered (``refused_by_clickhouse``), and the rest stored. Records older than every table that would
keep them are counted as dropped (``retention``), never retried.

Records a VM can prove (issue 29). A delivery from a source anyone with the shared sender identity can write
to (Event Hubs) carries its ``Provenance``; such a record is stored only if its ``vm_id`` is the partition key
it came under (the collector sends each record under its own vm_id: ``collector.ship_eventhubs``) and none
of its observation times (``PROVEN_TIMES``) is later than the hub's enqueued time plus ``clock_skew``;
otherwise it is dead-lettered (``not_its_partition_key``, ``future``). Old records are fine: a backlog is
legitimate. A trusted local source (the outbox) gives no provenance and is not checked.

Whatever the source, the first record of a key stays: before the insert, the batch's keys are looked up
(``Writer.stored_versions``, one read for all its tables), and a record whose key is stored, or came earlier in
the batch, with other content is dead-lettered as ``conflict`` instead of replacing it
(``ReplacingMergeTree(ingested_at)`` would keep the later). A redelivery of the same record is stored again as
before (idempotent).

With attestation (``ingest.attestation_gate``, the strong form), a ``gate`` runs first: it takes the
attestation events out of the batch (pinning the keys they prove) and dead-letters each record from Event Hubs
that its VM's pinned key did not sign; the rest go on as above.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider

from ingest.attestation_gate import UNCHECKED, Passed
from ingest.dead_letter_cap import CAP_REASON, DeadLetterCap
from ingest.decode import Limits, decode_noted
from ingest.decode_batch import decode_batch
from ingest.errors import Interrupted, InvalidRecord, RejectedRows, StoreError
from ingest.metrics import IngestMetrics
from ingest.rows import COLUMNS_OF, KEY_OF, TABLE_OF, Batch
from ingest.source import Delivery, Provenance
from ingest.writer import COMPARED, Writer, comparable
from sevents import contract, records
from sevents.retry import Backoff
from sevents.tracing import record_links, tracing

log = logging.getLogger(__name__)
tracer = trace.get_tracer("sevents.ingest")  # no-op unless an OTLP endpoint installed a provider

DEFAULT_BACKOFF = Backoff(initial=0.5, cap=30.0)
DEFAULT_LIMITS = Limits()


MADE_SAFE = "made_safe"  # the dead-letter reason of an original kept beside its repaired, stored row
# ... and of what a record's fields held before the collector made them safe (sevents.records.RECORD_ORIGINAL)
MADE_SAFE_BY_COLLECTOR = "made_safe_by_collector"
RETENTION = "retention"  # the drop reason of a record older than every table that would keep it
NOT_ITS_PARTITION_KEY = "not_its_partition_key"  # a record whose vm_id is not the partition key it came under
FUTURE = "future"  # a record observed later than the hub enqueued it, beyond the clock-skew bound
CONFLICT = "conflict"  # a record whose key is stored (or came earlier in the batch) with other content
DEFAULT_CLOCK_SKEW: Final = timedelta(seconds=300)

# The times a record says it observed: none can be later than the moment it was sent (the hub's enqueued time)
# by more than the VM's clock may be ahead. (not_before is the platform's announcement: it may lie ahead.)
PROVEN_TIMES: Final = {t.table: t.proven for t in contract.RECORD_TYPES}

T = TypeVar("T")


def vouch(
    table: str,
    vm_id: str,
    times: Sequence[datetime | None],
    provenance: Provenance,
    *,
    received_at: datetime,
    clock_skew: timedelta,
) -> InvalidRecord | None:
    """Why the record (its ``vm_id`` and ``PROVEN_TIMES[table]`` values) cannot be the sender's own, or None."""
    if vm_id != provenance.partition_key:
        return InvalidRecord(
            NOT_ITS_PARTITION_KEY,
            f"vm_id {vm_id!r} came under partition key {provenance.partition_key!r} "
            "(a VM sends its records under its own vm_id)",
        )
    enqueued = provenance.enqueued_at or received_at
    for name, value in zip(PROVEN_TIMES[table], times, strict=True):
        if value is not None and value > enqueued + clock_skew:
            return InvalidRecord(
                FUTURE,
                f"{name} {value.isoformat()} is later than the hub's enqueued time {enqueued.isoformat()} "
                f"plus the clock-skew bound ({clock_skew.total_seconds():g} s)",
            )
    return None


def _unproven(
    table: str, columns: pa.Table, origin: Sequence[Delivery], *, received_at: datetime, clock_skew: timedelta
) -> dict[int, InvalidRecord]:
    """The rows of a batch decoder's table that ``vouch`` refuses, by place. The common case (every vm_id its
    partition key, every time before the earliest enqueued time plus the bound) costs one comparison of two
    lists and a maximum per time column."""
    vms = columns.column("vm_id").to_pylist()
    proofs = [d.provenance for d in origin]
    keys = [vm if p is None else p.partition_key for p, vm in zip(proofs, vms, strict=True)]
    suspects = set() if keys == vms else {i for i, (k, vm) in enumerate(zip(keys, vms, strict=True)) if k != vm}
    enqueued = [p.enqueued_at or received_at for p in proofs if p is not None]
    limit = min(enqueued, default=received_at) + clock_skew
    for name in PROVEN_TIMES[table]:
        times = columns.column(name)
        latest = pc.max(times).as_py()
        if latest is not None and latest > limit:
            later = pc.fill_null(pc.greater(times, pa.scalar(limit, times.type)), False).to_pylist()
            suspects.update(i for i, yes in enumerate(later) if yes)
    refused = {}
    for i in sorted(suspects):
        proof = proofs[i]
        if proof is None:
            continue
        times_of = [columns.column(name)[i].as_py() for name in PROVEN_TIMES[table]]
        error = vouch(table, vms[i], times_of, proof, received_at=received_at, clock_skew=clock_skew)
        if error is not None:
            refused[i] = error
    return refused


def _unproven_row(
    table: str, row: tuple[Any, ...], delivery: Delivery, *, received_at: datetime, clock_skew: timedelta
) -> InvalidRecord | None:
    if delivery.provenance is None:
        return None
    names = COLUMNS_OF[table]
    times = [row[names.index(name)] for name in PROVEN_TIMES[table]]
    return vouch(
        table,
        row[names.index("vm_id")],
        times,
        delivery.provenance,
        received_at=received_at,
        clock_skew=clock_skew,
    )


def conflicts(
    table: str, batch: Batch, keys: Sequence[str], stored: Mapping[str, list[tuple[Any, ...]]]
) -> dict[int, str]:
    """The rows of ``table`` (places in origin order; ``keys`` their keys) whose key is stored (``stored``:
    ``Writer.stored_versions``) or came earlier in the batch with other content, and why. The common case, no
    key stored and none repeated, costs one set of the keys."""
    repeated = len(set(keys)) != len(keys)
    if not stored and not repeated:
        return {}
    counts = Counter(keys) if repeated else None
    names = COMPARED[table]
    standing = {key: list(versions) for key, versions in stored.items()}  # the versions a newcomer must match
    clashes = {}
    for index, key in enumerate(keys):
        if key not in stored and (counts is None or counts[key] < 2):
            continue
        row = batch.row(table, index)
        content = tuple(comparable(row[name]) for name in names)
        versions = standing.get(key)
        if versions is None:
            standing[key] = [content]  # the first of the batch stands
        elif content not in versions:
            first = versions[0]
            differ = [name for name, a, b in zip(names, first, content, strict=True) if a != b]
            where = "is stored" if key in stored else "came earlier in this batch"
            clashes[index] = f"{KEY_OF[table]} {key} {where} with other {', '.join(differ)}; the first record stays"
    return clashes


def prepare(
    deliveries: Sequence[Delivery],
    *,
    source: str,
    limits: Limits,
    received_at: datetime,
    clock_skew: timedelta = DEFAULT_CLOCK_SKEW,
) -> tuple[Batch, dict[str, int]]:
    """The rows of one delivery and the dead-letter count by reason (pure).

    The batch decoder takes every record it can vouch for, column by column; the others go through the
    per-record decoder, which stores or rejects each with its reason. A record with a field made safe is stored
    repaired and its original kept in dead letters (reason ``made_safe``): the transition is never lost for one
    bad field, and nothing of what was sent is lost. What the collector itself made safe arrives as a row of its
    own (record_type property ``original``) and is kept in dead letters whole (``made_safe_by_collector``). A
    delivery with provenance is stored only if ``vouch`` finds it the sender's own.
    """
    batch = Batch()
    rejected: dict[str, int] = {}

    def refuse(delivery: Delivery, error: InvalidRecord) -> None:
        rejected[error.reason] = rejected.get(error.reason, 0) + 1
        batch.add_dead_letter(delivery, error=str(error), source=source, received_at=received_at)

    originals = [d for d in deliveries if d.properties.get("record_type") == records.RECORD_ORIGINAL]
    if originals:  # what fields the collector made safe held: kept whole beside the record it stored
        for delivery in originals:
            rejected[MADE_SAFE_BY_COLLECTOR] = rejected.get(MADE_SAFE_BY_COLLECTOR, 0) + 1
            batch.add_dead_letter(delivery, error=MADE_SAFE_BY_COLLECTOR, source=source, received_at=received_at)
        deliveries = [d for d in deliveries if d.properties.get("record_type") != records.RECORD_ORIGINAL]
    proven = any(d.provenance is not None for d in deliveries)
    decoded = decode_batch([d.payload for d in deliveries], [d.position for d in deliveries], limits)
    for table, (columns, indexes) in decoded.tables.items():
        origin = deliveries if len(indexes) == len(deliveries) else [deliveries[i] for i in indexes]
        if proven:
            refused = _unproven(table, columns, origin, received_at=received_at, clock_skew=clock_skew)
            if refused:
                for i, error in refused.items():
                    refuse(origin[i], error)
                keep = [i for i in range(len(origin)) if i not in refused]
                if not keep:
                    continue
                columns, origin = columns.take(pa.array(keep, pa.int64())), [origin[i] for i in keep]
        batch.add_columns(table, columns, origin)
    for index in decoded.doubtful:
        delivery = deliveries[index]
        try:
            record_type, row, notes = decode_noted(delivery.payload, delivery.position, limits)
        except InvalidRecord as error:
            refuse(delivery, error)
            continue
        unproven = _unproven_row(TABLE_OF[record_type], row, delivery, received_at=received_at, clock_skew=clock_skew)
        if unproven is not None:
            refuse(delivery, unproven)
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
        clock_skew: timedelta = DEFAULT_CLOCK_SKEW,
        gate: Callable[[Sequence[Delivery]], Passed] | None = None,
        dead_letter_cap: DeadLetterCap | None = None,
    ) -> None:
        self.writer = writer
        self.gate = gate  # attestation: pins proven keys, refuses records their VM's key did not sign
        self.clock_skew = clock_skew  # how far a VM's clock may run ahead of the hub's enqueued time
        self.source = source
        self.stop = stop
        self.backoff = backoff
        self.limits = limits
        self.metrics = metrics or IngestMetrics.create(NoOpMeterProvider())
        self.now = now
        self.on_stored = on_stored
        self.stored = 0  # records and dead letters confirmed, for logs and tests
        self.dead_letters = 0  # of which dead letters (ingest.progress reports both)
        self.dropped = 0  # not stored on purpose (older than their tables' retention, over the dead-letter cap)
        self.pinned = 0  # attested keys pinned (the gate's attestations are not records)
        self.dead_letter_cap = dead_letter_cap
        self.failing_since: float | None = None  # monotonic: when ClickHouse began refusing (None: it is not)
        self._lock = threading.Lock()

    def __call__(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        received_at = self.now()
        passed = Passed(kept=list(deliveries))
        if self.gate is not None:
            gate = self.gate
            passed = self._retrying(lambda _: gate(deliveries), len(deliveries), what="attestation check")
        batch, rejected = prepare(
            passed.kept, source=self.source, limits=self.limits, received_at=received_at, clock_skew=self.clock_skew
        )
        for delivery, error in passed.refused:
            rejected[error.reason] = rejected.get(error.reason, 0) + 1
            batch.add_dead_letter(delivery, error=str(error), source=self.source, received_at=received_at)
        if passed.unchecked:
            self.metrics.dropped.add(passed.unchecked, {"record_type": "attestation", "reason": UNCHECKED})
            log.info("attestations not checked (no attestation_ca_file): dropped", extra={"count": passed.unchecked})
        self._retrying(lambda _: self._refuse_conflicts(batch, rejected, received_at), len(batch), what="key lookup")
        for reason, count in rejected.items():
            log.warning("dead letters", extra={"reason": reason, "count": count, "source": self.source})
        self._cap_dead_letters(batch, received_at)
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
        with self._lock:
            self.dropped += passed.unchecked
            self.pinned += passed.pinned
        if self.on_stored is not None:
            self.on_stored(batch)

    def close(self) -> None:
        """After the source stopped: the lifecycles put off are computed (``Writer.close``)."""
        self.writer.close()

    def store_problem(self, max_age_s: float) -> str:
        """Why the ingest is not ready (/readyz): ClickHouse has refused its writes for over ``max_age_s``; ""."""
        since = self.failing_since
        if since is None or time.monotonic() - since <= max_age_s:
            return ""
        return f"ClickHouse has refused writes for {time.monotonic() - since:.0f} s (retrying)"

    def _cap_dead_letters(self, batch: Batch, now: datetime) -> None:
        """Leave out the dead letters past their stream's hourly cap (``ingest.dead_letter_cap``): counted as
        dropped, and logged when a stream reaches it."""
        if self.dead_letter_cap is None or not batch.dead_letters:
            return
        with self._lock:
            admitted = self.dead_letter_cap.admit(batch.dead_letters, now)
            self.dropped += sum(admitted.dropped.values())
        batch.dead_letters = admitted.kept
        for stream in admitted.newly_capped:
            log.warning(
                "dead letters over the hourly cap: the rest of this hour's are counted, not stored",
                extra={"stream": stream, "per_hour": self.dead_letter_cap.per_hour, "reason": CAP_REASON},
            )
        if admitted.dropped:
            count = sum(admitted.dropped.values())
            self.metrics.dropped.add(count, {"record_type": "dead_letter", "reason": CAP_REASON})

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

    def _refuse_conflicts(self, batch: Batch, rejected: dict[str, int], received_at: datetime) -> None:
        """Dead-letter (``conflict``) each record whose key is stored, or came earlier in the batch, with other
        content; the first stays. All tables are looked up before any row moves, so a failed read (StoreError,
        retried) leaves the batch as it was."""
        for table, stored in self.writer.stored_versions(batch).items():
            if not stored and not batch.repeats(table, KEY_OF[table]):
                continue  # the common case: no key stored, none twice in the batch
            keys = [str(k) for k in batch.values(table, KEY_OF[table])]
            clashes = conflicts(table, batch, keys, stored)
            if not clashes:
                continue
            for index, detail in clashes.items():
                log.warning(
                    "a record conflicts with the one stored under its key: the first stays",
                    extra={"table": table, "key": keys[index], "position": batch.origins[table][index].position},
                )
                rejected[CONFLICT] = rejected.get(CONFLICT, 0) + 1
                batch.add_dead_letter(
                    batch.origins[table][index],
                    error=f"{CONFLICT}: {detail}",
                    source=self.source,
                    received_at=received_at,
                )
            batch.remove(table, set(clashes))

    def _store(self, batch: Batch) -> dict[str, int]:
        """Store ``batch``, retrying server faults for as long as it takes; the rows dropped for retention."""
        return self._retrying(lambda attempt: self.writer.store(batch, retry=attempt > 0) or {}, len(batch))

    def _retrying(self, action: Callable[[int], T], rows: int, *, what: str = "insert") -> T:
        """``action(failed attempts so far)``, retried with backoff on StoreError for as long as it takes
        (RejectedRows passes through); Interrupted when shutdown is asked for meanwhile."""
        attempt = 0
        first_failure = 0.0
        while True:
            started = time.monotonic()
            try:
                result = action(attempt)
            except RejectedRows:
                raise
            except StoreError as error:
                attempt += 1
                first_failure = first_failure or started
                self.failing_since = self.failing_since or first_failure
                self.metrics.insert_failures.add(1)
                delay = self.backoff.delay(attempt)
                log.warning(
                    f"{what} failed; retrying",
                    extra={
                        "error": str(error),
                        "attempt": attempt,
                        "retry_in_s": round(delay, 2),
                        "failing_for_s": round(time.monotonic() - first_failure, 1),
                        "rows": rows,
                    },
                )
                if self.stop.wait(delay):
                    raise Interrupted(f"stopped with {rows} rows unstored (not acknowledged)") from error
                continue
            self.failing_since = None
            if what == "insert":
                self.metrics.insert_duration.record(time.monotonic() - started)
            if attempt:
                log.info(f"{what} succeeded after retries", extra={"attempts": attempt + 1, "rows": rows})
            return result

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
            elif reason != MADE_SAFE_BY_COLLECTOR:  # that one is no record: what a stored record's fields held
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
