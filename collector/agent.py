"""The collector glue: poll IMDS -> decode -> diff -> outbox (one transaction), heartbeats, shipping.

One ``Agent`` is one collector. It works in-process (the demo runs dozens as threads) or as the daemon
behind ``sevents-collector run``; ``collector.wiring.build_agent`` builds its parts from the settings. The
pure core (decode, versions, diff, enrich) decides what happened; this module only wires the edges to it.

Nothing IMDS sends and no state of the disk stops the loop: a failed fetch, an undecodable answer or a
commit the outbox refuses (full, or a full filesystem) costs that poll only. The snapshot then stays where
it was, so the next poll that can commit records what changed meanwhile.

Errors::

    AgentError          the state directory is in use by another collector, or cannot be created or locked
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from opentelemetry import trace

import sevents
from collector.approver import Approver
from collector.decode import DecodeError, decode_document
from collector.downtime import event_for, snapshot_before
from collector.enrich import heartbeat_record, impact_record, transition_record
from collector.health import PollHealth
from collector.imds import ImdsClient, ImdsError, ImdsInterrupted, ImdsResponse
from collector.instance import InstanceCache
from collector.liveness import AliveFile, Ticker
from collector.metrics import CollectorMetrics
from collector.model import Document, Downtime, Snapshot, Transition, VmIdentity
from collector.outbox import DROP_TRANSITIONS_DEFERRED, Outbox, OutboxError, OutboxFull
from collector.pending import Pending
from collector.settings import CollectorSettings
from collector.ship import Shipper, Sink
from collector.transitions import diff
from collector.versions import align, stamp
from collector.webhook import Webhook
from sevents.tracing import record_context, tracing

log = logging.getLogger(__name__)
# No-op unless an OTLP endpoint installed a provider (sevents.telemetry.install_tracer_provider).
tracer = trace.get_tracer("sevents.collector")

COLLECTOR_VERSION = sevents.__version__
DOWNTIMES_HELD = 256  # downtimes waiting for a poll to store them; beyond, the oldest are dropped (counted)
SNAPSHOTS_KEPT = 16  # recent committed snapshots, to tell which event was Started when a downtime began


class AgentError(Exception):
    """The agent cannot start (e.g. its state directory is locked by another collector)."""


def utc_now() -> datetime:
    """The real clock."""
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Parts:
    """What one collector runs with (built by ``collector.wiring``); the Agent owns and releases them."""

    settings: CollectorSettings
    lock_fd: int
    outbox: Outbox
    client: ImdsClient
    instance: InstanceCache
    snapshot: Snapshot
    sink: Sink | None
    shipper: Shipper | None
    metrics: CollectorMetrics
    clock: Callable[[], datetime] = utc_now
    monotonic: Callable[[], float] = time.monotonic
    ticker: Ticker | None = None  # measures pauses while ``run`` runs (collector.liveness)
    alive: AliveFile | None = None  # the last moment alive, kept fresh by the ticker
    rebooted: Downtime | None = None  # the downtime across a reboot since the previous run, to be stored
    webhook: Webhook | None = None  # POSTs chosen transitions as they are committed (collector.webhook)
    approver: Approver | None = None  # acts on the approval policy (None, or a policy off: approves nothing)


def _trace_commits(batch: Sequence[Mapping[str, Any]], seqs: Sequence[int], began_ns: int) -> None:
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
    """One collector: ``poll_once()`` for a single poll, ``run(stop)`` for the loop with heartbeats and shipping."""

    def __init__(self, parts: Parts) -> None:
        self.settings = parts.settings
        self.outbox, self.client, self.instance = parts.outbox, parts.client, parts.instance
        self.sink, self.metrics = parts.sink, parts.metrics
        self._parts = parts
        self._snapshot = parts.snapshot
        self._clock, self._monotonic = parts.clock, parts.monotonic
        self._stop = threading.Event()
        self.health = PollHealth(parts.metrics)
        self.client.on_error = self.health.fault
        if parts.webhook is not None:
            parts.webhook.on_drop = self.health.fault  # shown in the heartbeat's error counts
        if parts.approver is not None:
            parts.approver.on_fault = self.health.fault
        if parts.shipper is not None:
            parts.shipper.on_shipped = lambda n: self._refresh_outbox_metrics()
        self.started_at = self._clock()
        self._drops_at_start = self.outbox.drops()
        self._pending = Pending(parts.snapshot)  # while commits fail, self._snapshot runs ahead of the disk
        self._instance_worker: threading.Thread | None = None
        self._recorded_as = parts.instance.identity  # the identity of the last records committed
        self._identity_awaited = False  # the first poll waited for the identity (``_identity_for_poll``)
        self._downtimes_lock = threading.Lock()
        self._downtimes: list[Downtime] = [] if parts.rebooted is None else [parts.rebooted]
        # the snapshots of recent commits (committed at, snapshot): which events were Started when a downtime began
        origin = datetime.min.replace(tzinfo=timezone.utc)
        self._committed: deque[tuple[datetime, Snapshot]] = deque([(origin, parts.snapshot)], maxlen=SNAPSHOTS_KEPT)
        # Until the downtime across a reboot is stored, the previous boot's last moment alive is its only proof.
        self._alive_waiting = parts.alive if parts.rebooted is not None else None
        if parts.alive is not None and parts.rebooted is None:
            self._keep_alive(parts.alive)
        self._refresh_outbox_metrics()

    @property
    def polls(self) -> int:
        """Polls made since start."""
        return self.health.polls

    @property
    def last_poll_ok(self) -> bool:
        """Whether the last poll read a document and committed its changes."""
        return self.health.last_poll_ok

    # -- one poll ----------------------------------------------------------------------------------------
    def poll_once(self, stop: threading.Event | None = None) -> list[dict[str, Any]]:
        """Poll once and commit what changed; the new records with their seq (empty when nothing changed).

        Raises ImdsError (after the client's retries) or DecodeError when the poll failed; both are counted.
        Setting ``stop`` (default: the event ``run`` was given) abandons the poll with ImdsInterrupted.
        """
        stop = self._stop if stop is None else stop
        with tracer.start_as_current_span("sevents.collector.poll") as span:
            records = self._poll(stop)
            span.set_attribute("sevents.records", len(records))
            return records

    def _poll(self, stop: threading.Event) -> list[dict[str, Any]]:
        self._identity_for_poll(stop)
        vm = self.instance.identity  # one identity for the whole poll, whatever the refresh thread learns meanwhile
        response = self._fetch(stop)
        document = self._decode(response)
        base, farewell = self._baseline(vm)
        prev = align(base, document, response.api_version)
        snapshot, transitions = diff(prev, document, self._clock())
        snapshot = stamp(snapshot, response.api_version)
        if snapshot.vm_id != vm.vm_id:
            snapshot = dataclasses.replace(snapshot, vm_id=vm.vm_id)
        with self._downtimes_lock:
            downtimes = list(self._downtimes)
        if snapshot is self._snapshot and not self._pending.records and not downtimes:
            self.health.ok()
            self._approve(stop)
            return []
        committed = self._commit(snapshot, transitions, response.api_version, downtimes, vm, farewell)
        self._approve(stop)
        return committed

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
        approver = self._parts.approver
        if approver is not None and self._pending.committed is self._snapshot:
            approver.offer(self._snapshot, self.instance.identity, stop)

    def _identity_for_poll(self, stop: threading.Event) -> None:
        """Without the worker (``once``, harnesses): refresh when due. With it, before the first poll only: if
        the identity is not known yet, wait for it up to ``request_timeout`` (the worker retries within it), so
        that a VM whose instance metadata fails once, or answers slowly under load, does not record its first
        events as the stand-in. Events stay in the document for minutes, so the wait misses none; past it, the
        polls go on as the stand-in until the identity is known (see ``_baseline``)."""
        if self._instance_worker is None:
            self.instance.refresh_if_due(stop)
            return
        if self._identity_awaited or self.instance.known.is_set():
            return
        self._identity_awaited = True
        deadline = self._monotonic() + self.settings.request_timeout
        while not self.instance.known.wait(0.05) and not stop.is_set() and self._monotonic() < deadline:
            pass

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
        farewell: Sequence[dict[str, Any]] = (),
    ) -> list[dict[str, Any]]:
        """Store what earlier polls could not, then this poll's records, with the snapshot, in one transaction."""
        records = [*farewell]
        records += [
            transition_record(t, vm, api_version=api_version, collector_version=COLLECTOR_VERSION) for t in transitions
        ]
        records += self._impact_records(downtimes, snapshot, api_version, vm)
        with self._downtimes_lock:  # handed to the commit: stored now, or held with the deferred records
            self._downtimes = [d for d in self._downtimes if d not in downtimes]
        batch = self._pending.batch(records)
        began = time.time_ns()
        try:
            seqs = self.outbox.commit(batch, snapshot.to_json())
        except OutboxError as error:
            self._defer(snapshot, records, error)
            return []
        _trace_commits(batch, seqs, began)
        if self._pending.records:
            log.info("deferred transitions stored", extra={"count": len(self._pending.records)})
        self._snapshot = snapshot
        self._recorded_as = vm
        self._committed.append((self._clock(), snapshot))
        self._pending.stored(snapshot)
        if self._alive_waiting is not None:  # the reboot's downtime is stored: the alive file may move on
            self._keep_alive(self._alive_waiting)
            self._alive_waiting = None
        self.health.ok()
        self._refresh_outbox_metrics()
        if self._parts.shipper is not None:
            self._parts.shipper.wake()
        if self._parts.webhook is not None:
            self._parts.webhook.notify(batch)
        for t in transitions:
            self.metrics.transition(t.kind)
            log.info(
                "transition",
                extra={"kind": t.kind, "event_id": t.event_id, "status": t.status, "incarnation": t.incarnation},
            )
        assert len(batch) == len(seqs), "the outbox returns one seq per record"
        return [{**r, "seq": s} for r, s in zip(batch, seqs)]

    def _impact_records(
        self, downtimes: Sequence[Downtime], after: Snapshot, api_version: str, vm: VmIdentity
    ) -> list[dict[str, Any]]:
        """The records of measured downtimes, each with the event of this VM Started across it (or none)."""
        out = []
        for downtime in downtimes:
            before = snapshot_before(self._committed, downtime.began_at) or self._snapshot
            event = event_for(downtime, before, after, vm.vm_name)
            out.append(impact_record(downtime, event, vm, api_version=api_version, collector_version=COLLECTOR_VERSION))
            log.info(
                "downtime measured",
                extra={
                    "detected_by": downtime.detected_by,
                    "duration_ms": downtime.duration_ms,
                    "event_id": "" if event is None else event.event_id,
                },
            )
        return out

    def _downtime_seen(self, downtime: Downtime) -> None:
        """From the ticker's thread: hold a pause until the next poll stores it with its event."""
        with self._downtimes_lock:
            self._downtimes.append(downtime)
            dropped = self._downtimes[:-DOWNTIMES_HELD]
            del self._downtimes[:-DOWNTIMES_HELD]
        if dropped:  # only while no poll succeeds for hours of pauses; the log keeps what the outbox cannot
            self.health.fault("downtime_dropped")
            log.error("downtime dropped: too many waiting for a poll", extra={"began_at": str(dropped[0].began_at)})

    def _keep_alive(self, alive: AliveFile) -> None:
        ticker = self._parts.ticker
        if ticker is not None:
            ticker.keep_alive_file(alive)
        else:
            alive.beat(self._clock())

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
        self._refresh_outbox_metrics()

    def heartbeat(self, *, final: bool = False) -> dict[str, Any] | None:
        """Commit one heartbeat record; it with its seq, or None if the full outbox refused it (counted).

        ``final``: the last heartbeat of a clean stop, so a silent VM can be told from one stopped on purpose.
        """
        record = self._heartbeat_record(self.instance.identity, final=final)
        seqs = self.outbox.commit([record], None)
        self._refresh_outbox_metrics()
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

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Poll every ``poll_interval`` with a heartbeat every ``heartbeat_interval`` until ``stop``; then drain."""
        self._stop = stop
        shipper_stop = threading.Event()
        failure: list[BaseException] = []
        threads = self._start_workers(stop, shipper_stop, failure)
        log.info(
            "collector started",
            extra={
                "imds_url": self.client.base_url,
                "state_dir": str(self.settings.state_dir),
                "sink": self.settings.sink,
            },
        )
        try:
            self._loop(stop)
            if not failure:  # a clean stop (signal): say so before the drain below ships it
                self.heartbeat(final=True)
        finally:
            shipper_stop.set()
            if self._parts.approver is not None:
                self._parts.approver.wake()  # its thread sees stop now rather than at its next wait's end
            for thread in threads:
                thread.join(timeout=5.0)
            if self._parts.shipper is not None and not failure:
                self._parts.shipper.flush(self.settings.drain_timeout)
        if failure:
            raise failure[0]
        log.info("collector stopped", extra={"polls": self.health.polls, "outbox_depth": self.outbox.depth()})

    def _loop(self, stop: threading.Event) -> None:
        next_heartbeat = self._monotonic()
        while not stop.is_set():
            tick = self._monotonic()
            if not self._poll_guarded():
                return
            if self._monotonic() >= next_heartbeat:
                self._heartbeat_guarded()
                next_heartbeat = self._monotonic() + self.settings.heartbeat_interval
            stop.wait(max(0.0, tick + self.settings.poll_interval - self._monotonic()))

    def _poll_guarded(self) -> bool:
        """One poll whatever happens in it; False once shutdown interrupted it."""
        try:
            self.poll_once()
        except ImdsInterrupted:
            return False
        except (ImdsError, DecodeError):
            pass  # counted and logged; the next tick polls again
        except Exception as error:
            self.health.fault("internal")
            self.health.failed("internal", error)
            log.exception("poll failed unexpectedly")
        return True

    def _heartbeat_guarded(self) -> None:
        try:
            self.heartbeat()
        except OutboxError as error:
            self.health.fault("outbox_error")
            log.error("heartbeat not stored", extra={"error": str(error)})

    def _start_workers(
        self, stop: threading.Event, shipper_stop: threading.Event, failure: list[BaseException]
    ) -> list[threading.Thread]:
        self._instance_worker = threading.Thread(
            target=self.instance.run, args=(stop,), name="collector-instance", daemon=True
        )
        self._instance_worker.start()
        workers = [self._instance_worker]
        webhook = self._parts.webhook
        if webhook is not None:
            # stops with the shipper, after the last poll: what the last commits queued is still sent
            posting = threading.Thread(target=webhook.run, args=(shipper_stop,), name="collector-webhook", daemon=True)
            posting.start()
            workers.append(posting)
        approver = self._parts.approver
        if approver is not None and approver.policy.enabled:
            approving = threading.Thread(target=approver.run, args=(stop,), name="collector-approver", daemon=True)
            approving.start()
            workers.append(approving)
        ticker = self._parts.ticker
        if ticker is not None:
            ticker.on_pause = self._downtime_seen
            ticking = threading.Thread(target=ticker.run, args=(stop,), name="collector-ticker", daemon=True)
            ticking.start()
            workers.append(ticking)
        shipper = self._parts.shipper
        if shipper is None:
            return workers

        def ship() -> None:
            try:
                shipper.run(shipper_stop)
            except BaseException as error:
                log.critical("shipper failed", exc_info=True)
                failure.append(error)
                stop.set()

        shipping = threading.Thread(target=ship, name="collector-shipper", daemon=True)
        shipping.start()
        return [*workers, shipping]

    def flush(self, timeout: float) -> int:
        """Ship what is pending for up to ``timeout`` seconds (no-op for the local sink); rows left."""
        if self._parts.shipper is not None:
            self._parts.shipper.flush(timeout)
        return self.outbox.depth()

    def close(self) -> None:
        """Release the sink, the outbox, the HTTP connections and the state-dir lock; say what was not shipped."""
        if self._parts.shipper is not None:
            self._parts.shipper.shutdown(0.0)
        self.client.close()
        self.outbox.close()
        if self._parts.alive is not None:
            self._parts.alive.close()
        os.close(self._parts.lock_fd)

    def _refresh_outbox_metrics(self) -> None:
        self.metrics.active((t.event.event_type, t.event.status) for t in self._snapshot.events)
        try:
            self.metrics.outbox(self.outbox.depth(), self.outbox.size_bytes(), self.outbox.drops())
        except OutboxError as error:
            log.warning("cannot read the outbox figures", extra={"error": str(error)})
