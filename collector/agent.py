"""The collector glue: poll IMDS -> decode -> diff -> outbox (one transaction), heartbeats, shipping.

One ``Agent`` is one collector. It works in-process (the demo runs dozens as threads) or as the daemon
behind ``sevents-collector run``. The pure core (decode, diff, enrich) decides what happened; this module
only wires the edges to it and keeps the counters a heartbeat reports.

Errors::

    AgentError          the state directory is in use by another collector, or cannot be created or locked
    OutboxIOError       (from collector.outbox) disk trouble: propagates, the process stops loudly
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import requests
from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

import sevents
from collector.decode import DecodeError, decode_document
from collector.dhcp import resolve_base_url
from collector.enrich import heartbeat_record, transition_record
from collector.imds import ImdsClient, ImdsError, ImdsInterrupted
from collector.imds_policy import ImdsPolicy
from collector.instance import InstanceCache
from collector.metrics import CollectorMetrics
from collector.outbox import DROP_TRANSITIONS_DEFERRED, Outbox, OutboxFull
from collector.settings import CollectorSettings
from collector.ship import Shipper, Sink, make_sink
from collector.statedir import StateDirInUse, load_snapshot, lock_state_dir
from collector.transitions import diff
from sevents.retry import Backoff

log = logging.getLogger(__name__)

COLLECTOR_VERSION = sevents.__version__


class AgentError(Exception):
    """The agent cannot start (e.g. its state directory is locked by another collector)."""


def utc_now() -> datetime:
    """The real clock."""
    return datetime.now(UTC)


class Agent:
    """One collector: ``poll_once()`` for a single poll, ``run(stop)`` for the loop with heartbeats and shipping."""

    def __init__(
        self,
        settings: CollectorSettings,
        *,
        session: requests.Session | None = None,
        clock: Callable[[], datetime] = utc_now,
        meter_provider: MeterProvider | None = None,
        sink: Sink | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._monotonic = monotonic
        self._stop = threading.Event()
        try:
            settings.state_dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = lock_state_dir(settings.state_dir)
        except StateDirInUse as error:
            raise AgentError(str(error)) from error
        except OSError as error:
            raise AgentError(f"cannot use state directory {settings.state_dir}: {error.strerror or error}") from error
        with contextlib.ExitStack() as undo:
            # Should a later step fail (an unusable outbox, a sink that cannot be built), what was acquired is
            # released again: in-process callers (the demo) may retry, and a leaked lock would refuse them.
            undo.callback(os.close, self._lock_fd)
            self.metrics = CollectorMetrics(meter_provider or NoOpMeterProvider(), collector=str(settings.state_dir))
            self.outbox = Outbox(settings.outbox_path, max_bytes=settings.outbox_max_bytes)
            undo.callback(self.outbox.close)
            policy = ImdsPolicy(
                first_call_timeout_s=settings.first_call_timeout,
                read_timeout_s=settings.request_timeout,
                min_interval_s=settings.min_request_interval,
                deadline_s=settings.retry_deadline,
                backoff=Backoff(initial=0.5, cap=10.0),
            )
            self.client = ImdsClient(
                resolve_base_url(
                    settings.imds_url, discover=settings.discover_endpoint, globs=settings.dhcp_lease_globs
                ),
                api_version=settings.api_version,
                instance_api_version=settings.instance_api_version,
                session=session,
                policy=policy,
                on_error=self._request_failed,
                monotonic=monotonic,
            )
            undo.callback(self.client.close)
            self.instance = InstanceCache(self.client, refresh_s=settings.instance_refresh, store=self.outbox)
            self._snapshot = load_snapshot(self.outbox)
            self.sink = sink if sink is not None else make_sink(settings)
            self._shipper = None if self.sink is None else self._make_shipper(self.sink)
            self.started_at = clock()
            self.polls = 0
            self.poll_errors: Counter[str] = Counter()
            self.last_poll_ok = False
            self.last_poll_error = ""
            self._drops_at_start = self.outbox.drops()
            self._deferred: set[str] = set()  # record_ids refused by a full outbox at the last poll
            self._refresh_outbox_metrics()
            undo.pop_all()

    # -- one poll ----------------------------------------------------------------------------------------
    def poll_once(self, stop: threading.Event | None = None) -> list[dict[str, Any]]:
        """Poll once and commit what changed; the new records with their seq (empty when nothing changed).

        Raises ImdsError (after the client's retries) or DecodeError when the poll failed; both are counted.
        Setting ``stop`` (default: the event ``run`` was given) abandons the poll with ImdsInterrupted.
        """
        stop = self._stop if stop is None else stop
        vm = self.instance.get(stop)
        self.polls += 1
        try:
            response = self.client.scheduled_events(stop)
        except ImdsInterrupted:
            self.polls -= 1
            raise
        except ImdsError as error:
            self._poll_failed(error.kind, error)
            raise
        self.metrics.latency(response.latency_s, "scheduled_events")
        try:
            document = decode_document(response.body)
        except DecodeError as error:
            self._request_failed("decode")
            self._poll_failed("decode", error)
            raise
        snapshot, transitions = diff(self._snapshot, document, self._clock())
        self.last_poll_ok, self.last_poll_error = True, ""
        self.metrics.poll(ok=True)
        if snapshot is self._snapshot:
            return []
        records = [
            transition_record(t, vm, api_version=response.api_version, collector_version=COLLECTOR_VERSION)
            for t in transitions
        ]
        try:
            seqs = self.outbox.commit(records, snapshot.to_json())
        except OutboxFull as error:
            # The snapshot stays where it was, so these changes are found again once there is room. Count each
            # deferred transition once, not once per poll while the outbox stays full.
            ids = {str(r["record_id"]) for r in records}
            fresh = ids - self._deferred
            self._deferred = ids
            if fresh:
                self.outbox.count_drop(DROP_TRANSITIONS_DEFERRED, len(fresh))
            log.error("outbox full: transitions deferred", extra={"count": len(records), "error": str(error)})
            self._refresh_outbox_metrics()
            return []
        self._snapshot = snapshot
        self._deferred = set()
        for t in transitions:
            self.metrics.transition(t.kind)
        self._refresh_outbox_metrics()
        if self._shipper is not None:
            self._shipper.wake()
        for t in transitions:
            log.info(
                "transition",
                extra={"kind": t.kind, "event_id": t.event_id, "status": t.status, "incarnation": t.incarnation},
            )
        return [{**r, "seq": s} for r, s in zip(records, seqs, strict=True)]

    def heartbeat(self, *, final: bool = False) -> dict[str, Any] | None:
        """Commit one heartbeat record; it with its seq, or None if the full outbox refused it (counted).

        ``final``: the last heartbeat of a clean stop, so a silent VM can be told from one stopped on purpose.
        """
        current = self.outbox.drops()
        drops = {
            r: n - self._drops_at_start.get(r, 0) for r, n in current.items() if n > self._drops_at_start.get(r, 0)
        }
        record = heartbeat_record(
            self.instance.identity,
            observed_at=self._clock(),
            api_version=self.client.api_version,
            collector_version=COLLECTOR_VERSION,
            last_incarnation=self._snapshot.incarnation,
            last_poll_ok=self.last_poll_ok,
            last_poll_error=self.last_poll_error,
            polls=self.polls,
            poll_errors=dict(self.poll_errors),
            active_events=len(self._snapshot.events),
            outbox_depth=self.outbox.depth(),
            drops=drops,
            started_at=self.started_at,
            final=final,
        )
        seqs = self.outbox.commit([record], None)
        self._refresh_outbox_metrics()
        return {**record, "seq": seqs[0]} if seqs else None

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Poll every ``poll_interval`` with a heartbeat every ``heartbeat_interval`` until ``stop``; then drain."""
        self._stop = stop
        shipper_stop = threading.Event()
        shipper_thread, shipper_failure = self._start_shipper(shipper_stop, stop)
        log.info(
            "collector started",
            extra={
                "imds_url": self.client.base_url,
                "state_dir": str(self.settings.state_dir),
                "sink": self.settings.sink,
            },
        )
        next_heartbeat = self._monotonic()
        try:
            while not stop.is_set():
                tick = self._monotonic()
                try:
                    self.poll_once()
                except ImdsInterrupted:
                    break
                except (ImdsError, DecodeError):
                    pass  # counted and logged; the next tick polls again
                if self._monotonic() >= next_heartbeat:
                    self.heartbeat()
                    next_heartbeat = self._monotonic() + self.settings.heartbeat_interval
                stop.wait(max(0.0, tick + self.settings.poll_interval - self._monotonic()))
            if not shipper_failure:  # a clean stop (signal): say so before the drain below ships it
                self.heartbeat(final=True)
        finally:
            shipper_stop.set()
            if shipper_thread is not None and self._shipper is not None:
                shipper_thread.join()
                if not shipper_failure:
                    self._shipper.flush(self.settings.drain_timeout)
        if shipper_failure:
            raise shipper_failure[0]
        log.info("collector stopped", extra={"polls": self.polls, "outbox_depth": self.outbox.depth()})

    def _start_shipper(
        self, shipper_stop: threading.Event, stop: threading.Event
    ) -> tuple[threading.Thread | None, list[BaseException]]:
        failure: list[BaseException] = []
        shipper = self._shipper
        if shipper is None:
            return None, failure

        def work() -> None:
            try:
                shipper.run(shipper_stop)
            except BaseException as error:
                log.critical("shipper failed", exc_info=True)
                failure.append(error)
                stop.set()

        thread = threading.Thread(target=work, name="collector-shipper", daemon=True)
        thread.start()
        return thread, failure

    def flush(self, timeout: float) -> int:
        """Ship what is pending for up to ``timeout`` seconds (no-op for the local sink); rows left."""
        if self._shipper is not None:
            self._shipper.flush(timeout)
        return self.outbox.depth()

    def close(self) -> None:
        """Release the sink, the outbox, the HTTP session and the state-dir lock; say what was not shipped."""
        if self._shipper is not None:
            self._shipper.shutdown(0.0)
        self.client.close()
        self.outbox.close()
        os.close(self._lock_fd)

    def _make_shipper(self, sink: Sink) -> Shipper:
        return Shipper(
            self.outbox,
            sink,
            batch=self.settings.ship_batch,
            max_wait_s=self.settings.ship_max_wait,
            on_shipped=lambda n: self._refresh_outbox_metrics(),
        )

    # -- counters ----------------------------------------------------------------------------------------
    def _request_failed(self, kind: str) -> None:
        self.poll_errors[kind] += 1
        self.metrics.poll_error(kind)

    def _poll_failed(self, kind: str, error: Exception) -> None:
        self.last_poll_ok, self.last_poll_error = False, kind
        self.metrics.poll(ok=False)
        log.warning("poll failed", extra={"kind": kind, "error": str(error)})

    def _refresh_outbox_metrics(self) -> None:
        self.metrics.outbox(self.outbox.depth(), self.outbox.size_bytes(), self.outbox.drops())
