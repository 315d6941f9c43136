"""The poll step: IMDS -> decode -> diff -> outbox (one transaction), and the heartbeat record.

One ``Agent`` is one collector's poll step; ``collector.process.Collector`` drives it (the loop, the threads,
the drain) and ``collector.wiring.build_agent`` builds both from the settings. The pure core (decode, versions,
diff, enrich) decides what happened; this module only carries its answer between the edges.

Nothing IMDS sends and no state of the disk stops the polls: a failed fetch, an undecodable answer or a commit
the outbox refuses (full, or a full filesystem) costs that poll only. The snapshot then stays where it was, so
the next poll that can commit records what changed meanwhile (``collector.pending``).

Errors::

    AgentError          the state directory is in use by another collector, or cannot be created or locked
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from opentelemetry import trace

import sevents
from collector.approver import Approver
from collector.decode import DecodeError, decode_document
from collector.downtime_ledger import DowntimeLedger
from collector.enrich import heartbeat_record, transition_record
from collector.health import PollHealth
from collector.imds import ImdsClient, ImdsError, ImdsInterrupted, ImdsResponse
from collector.instance import InstanceCache
from collector.metrics import CollectorMetrics
from collector.model import Document, Downtime, Snapshot, Transition, VmIdentity
from collector.outbox import DROP_TRANSITIONS_DEFERRED, Outbox, OutboxError, OutboxFull
from collector.outbox_gauges import show_outbox
from collector.pending import Pending
from collector.settings import CollectorSettings
from collector.transitions import diff
from collector.versions import align, stamp
from sevents.tracing import record_context, tracing

log = logging.getLogger(__name__)
# No-op unless an OTLP endpoint installed a provider (sevents.telemetry.install_tracer_provider).
tracer = trace.get_tracer("sevents.collector")

COLLECTOR_VERSION = sevents.__version__

Records = Sequence[Mapping[str, Any]]


class AgentError(Exception):
    """The agent cannot start (e.g. its state directory is locked by another collector)."""


def utc_now() -> datetime:
    """The real clock."""
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Parts:
    """What the poll step works with (built by ``collector.wiring``); the process releases them."""

    settings: CollectorSettings
    outbox: Outbox
    client: ImdsClient
    instance: InstanceCache
    snapshot: Snapshot  # the one stored (the outbox's)
    metrics: CollectorMetrics
    health: PollHealth  # the counts a heartbeat reports; the client, webhook and approver count into it too
    ledger: DowntimeLedger  # downtimes measured and not yet stored
    clock: Callable[[], datetime] = utc_now
    approver: Approver | None = None  # acts on the approval policy (None, or a policy off: approves nothing)
    # who else hears of each commit, in order, with the records stored (the shipper, the webhook, ...)
    on_commit: Sequence[Callable[[Records], None]] = ()


def _trace_commits(batch: Records, seqs: Sequence[int], began_ns: int) -> None:
    """One span per committed record, in the record's own trace (its id is the trace id, see sevents.tracing), so
    that the commit on the VM, the shipping and the insert into ClickHouse of one transition line up."""
    if not tracing():
        return
    poll = trace.get_current_span().get_span_context()
    for record, seq in zip(batch, seqs):
        context = record_context(str(record.get("record_id", "")), seq)
        if context is None:
            continue
        span = tracer.start_span(
            "sevents.collector.commit",
            context=context,
            start_time=began_ns,
            links=[trace.Link(poll)] if poll.is_valid else (),
            attributes={"sevents.record_type": str(record.get("record_type")), "sevents.seq": seq},
        )
        span.end()


class Agent:
    """One collector's poll step: ``poll_once(stop)`` polls and commits what changed; ``heartbeat()``."""

    def __init__(self, parts: Parts) -> None:
        self.settings = parts.settings
        self.outbox, self.client, self.instance = parts.outbox, parts.client, parts.instance
        self.metrics, self.health = parts.metrics, parts.health
        self._ledger, self._approver, self._on_commit = parts.ledger, parts.approver, tuple(parts.on_commit)
        self._clock = parts.clock
        self._snapshot = parts.snapshot
        self.started_at = self._clock()
        self._drops_at_start = self.outbox.drops()
        self._pending = Pending(parts.snapshot)  # while commits fail, self._snapshot runs ahead of the disk
        self._recorded_as = parts.instance.identity  # the identity of the last records committed
        self._show_figures()

    @property
    def polls(self) -> int:
        """Polls made since start."""
        return self.health.polls

    @property
    def last_poll_ok(self) -> bool:
        """Whether the last poll read a document and committed its changes."""
        return self.health.last_poll_ok

    def poll_once(self, stop: threading.Event | None = None, *, refresh_identity: bool = True) -> list[dict[str, Any]]:
        """Poll once and commit what changed; the new records with their seq (empty when nothing changed).

        Raises ImdsError (after the client's retries) or DecodeError when the poll failed; both are counted.
        Setting ``stop`` abandons the poll with ImdsInterrupted. ``refresh_identity``: fetch the instance metadata
        first when due (``once``, harnesses); False when a worker keeps it fresh (``collector.process``).
        """
        stop = threading.Event() if stop is None else stop
        with tracer.start_as_current_span("sevents.collector.poll") as span:
            if refresh_identity:
                self.instance.refresh_if_due(stop)
            records = self._poll(stop)
            span.set_attribute("sevents.records", len(records))
            return records

    def _poll(self, stop: threading.Event) -> list[dict[str, Any]]:
        vm = self.instance.identity  # one identity for the whole poll, whatever the refresh thread learns meanwhile
        response = self._fetch(stop)
        document = self._decode(response)
        base, farewell = self._baseline(vm)
        prev = align(base, document, response.api_version)
        read_at = self._clock()
        snapshot, transitions = diff(prev, document, read_at)
        snapshot = stamp(snapshot, response.api_version)
        if snapshot.vm_id != vm.vm_id:
            snapshot = dataclasses.replace(snapshot, vm_id=vm.vm_id)
        downtimes = self._ledger.held()
        if snapshot is self._snapshot and not self._pending.records and not downtimes:
            self.health.ok()
            self._approve(stop)
            return []
        committed = self._commit(snapshot, transitions, response.api_version, downtimes, vm, read_at, farewell)
        self._approve(stop)
        return committed

    def downtimes_held(self) -> int:
        """How many measured downtimes wait for a poll to store them."""
        return len(self._ledger.held())

    def store_downtimes(self) -> list[dict[str, Any]]:
        """Commit the downtimes held without reading IMDS (a stop whose last poll could not): ``read_at`` null, the
        event Started across each told from the last committed snapshot alone. The records stored with their seq;
        empty when none were held or the outbox refused them (deferred, as a poll's)."""
        downtimes = self._ledger.held()
        if not downtimes:
            return []
        vm = self.instance.identity
        return self._commit(self._snapshot, (), self.client.api_version, downtimes, vm, None)

    def _baseline(self, vm: VmIdentity) -> tuple[Snapshot, list[dict[str, Any]]]:
        """The snapshot to diff against, and the records that close the previous identity's if it was another VM.

        Records made as another VM id (the stand-in before instance metadata first answered, or an identity kept
        in a state dir now on another VM) would leave that id's (event, VM) entries open: their events would never
        end there. That id says its last word (a final heartbeat: retired once silent), and this VM records every
        event it sees from now on, as a collector starting afresh does.
        """
        last = self._snapshot
        if not last.vm_id or last.vm_id == vm.vm_id:
            return last, []
        previous = self._recorded_as if self._recorded_as.vm_id == last.vm_id else VmIdentity(last.vm_id, vm_name="")
        log.warning(
            "VM identity changed: the previous one is closed, events are recorded afresh",
            extra={"previous_vm_id": previous.vm_id, "vm_id": vm.vm_id, "events": len(last.events)},
        )
        return Snapshot.empty(), [self._heartbeat_record(previous, final=True)]

    def _approve(self, stop: threading.Event) -> None:
        """Offer what is committed (never what the outbox refused) to the approval policy."""
        if self._approver is not None and self._pending.committed is self._snapshot:
            self._approver.offer(self._snapshot, self.instance.identity, stop)

    def _fetch(self, stop: threading.Event) -> ImdsResponse:
        self.health.polled()
        try:
            response = self.client.scheduled_events(stop)
        except ImdsInterrupted:
            self.health.unpolled()
            raise
        except ImdsError as error:
            self.health.failed(error.kind, error)
            raise
        self.metrics.latency(response.latency_s, "scheduled_events")
        return response

    def _decode(self, response: ImdsResponse) -> Document:
        try:
            document = decode_document(response.body)
        except DecodeError as error:
            self.health.fault("decode")
            self.health.failed("decode", error)
            raise
        self.health.decoded(document)  # fields made safe and entries left out: counted, logged
        return document

    def _commit(
        self,
        snapshot: Snapshot,
        transitions: Sequence[Transition],
        api_version: str,
        downtimes: Sequence[Downtime],
        vm: VmIdentity,
        read_at: datetime | None,
        farewell: Sequence[dict[str, Any]] = (),
    ) -> list[dict[str, Any]]:
        """Store what earlier polls could not, then this poll's records (read at ``read_at``; None: no read, only
        downtimes), with the snapshot, in one transaction; then tell who listens (``Parts.on_commit``)."""
        records = [*farewell]
        records += [
            transition_record(t, vm, api_version=api_version, collector_version=COLLECTOR_VERSION) for t in transitions
        ]
        # handed to the commit: stored now, or held with the deferred records
        records += self._ledger.take(
            downtimes, after=snapshot, fallback=self._snapshot, vm=vm, api_version=api_version, read_at=read_at
        )
        batch = self._pending.batch(records)
        began = time.time_ns()
        try:
            seqs = self.outbox.commit(batch, snapshot.to_json())
        except OutboxError as error:
            self._defer(snapshot, records, error)
            return []
        assert len(batch) == len(seqs), "the outbox returns one seq per record"
        _trace_commits(batch, seqs, began)
        self._stored(snapshot, vm)
        if read_at is not None:  # without a read, no poll succeeded: the heartbeat must not say one did
            self.health.ok()
        self._report(transitions)
        for listener in self._on_commit:
            listener(batch)
        return [{**r, "seq": s} for r, s in zip(batch, seqs)]

    def _stored(self, snapshot: Snapshot, vm: VmIdentity) -> None:
        """The commit succeeded: ``snapshot`` is the one on disk now, made as ``vm``; nothing is held any more."""
        if self._pending.records:
            log.info("deferred transitions stored", extra={"count": len(self._pending.records)})
        self._snapshot = snapshot
        self._recorded_as = vm
        self._ledger.committed(self._clock(), snapshot)
        self._pending.stored(snapshot)
        self._show_figures()

    def _report(self, transitions: Sequence[Transition]) -> None:
        """Count and log each transition stored."""
        for t in transitions:
            self.metrics.transition(t.kind)
            log.info(
                "transition",
                extra={"kind": t.kind, "event_id": t.event_id, "status": t.status, "incarnation": t.incarnation},
            )

    def _defer(self, snapshot: Snapshot, records: Sequence[dict[str, Any]], error: OutboxError) -> None:
        """The outbox refused the commit: hold the records (see ``collector.pending``), retry next poll."""
        kind = "outbox_full" if isinstance(error, OutboxFull) else "outbox_error"
        self.health.fault(kind)
        self.health.failed(kind, error)
        self._snapshot = snapshot
        if not self._pending.refused(records):
            self._snapshot = self._pending.committed
            log.error("too much deferred to hold in memory; diffing from the stored snapshot again")
        # On a full disk even the count cannot be written: the fault count above and the log say so.
        if records:
            with contextlib.suppress(OutboxError):
                self.outbox.count_drop(DROP_TRANSITIONS_DEFERRED, len(records))
        log.error(
            "outbox refused the commit: transitions deferred",
            extra={"pending": len(self._pending.records), "kind": kind, "error": str(error)},
        )
        self._show_figures()

    def heartbeat(self, *, final: bool = False) -> dict[str, Any] | None:
        """Commit one heartbeat record; it with its seq, or None if the full outbox refused it (counted).

        ``final``: the last heartbeat of a clean stop, so a silent VM can be told from one stopped on purpose.
        """
        record = self._heartbeat_record(self.instance.identity, final=final)
        seqs = self.outbox.commit([record], None)
        self._show_figures()
        return {**record, "seq": seqs[0]} if seqs else None

    def _heartbeat_record(self, vm: VmIdentity, *, final: bool) -> dict[str, Any]:
        current = self.outbox.drops()
        start = self._drops_at_start
        drops = {r: n - start.get(r, 0) for r, n in current.items() if n > start.get(r, 0)}
        return heartbeat_record(
            vm,
            observed_at=self._clock(),
            api_version=self.client.api_version,
            collector_version=COLLECTOR_VERSION,
            last_incarnation=self._snapshot.incarnation,
            last_poll_ok=self.health.last_poll_ok,
            last_poll_error=self.health.last_poll_error,
            polls=self.health.polls,
            poll_errors=self.health.faults(),
            active_events=len(self._snapshot.events),
            outbox_depth=self.outbox.depth(),
            drops=drops,
            started_at=self.started_at,
            final=final,
        )

    def _show_figures(self) -> None:
        """The events IMDS shows (as last diffed) and the outbox's figures, in the metrics."""
        self.metrics.active((t.event.event_type, t.event.status) for t in self._snapshot.events)
        show_outbox(self.metrics, self.outbox)
