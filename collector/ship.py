"""The sink edge: move outbox rows to a destination, removing them only after it durably accepted them.

Theory of operation. ``Shipper.run(stop)`` first lets a sink that can (``Connects``) open its connection, then
loops ``pending -> sink.send -> remove``, woken by each commit (``wake``). A row leaves the outbox
only after ``send`` returned, so a crash at any point ships a row again at worst (the wire carries a
deterministic record_id; downstream deduplicates). ``SinkError`` is retried with jittered backoff, waiting
with ``stop.wait`` so shutdown interrupts it. Whether to ship now or let a batch fill is ``ship_now``, a pure
function. With the default "local" sink nothing is shipped: ``sevents-ingest`` reads and removes the rows.

Errors::

    SinkError   the destination did not accept the rows (retryable; nothing was removed)
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from opentelemetry import trace

from collector.outbox import Outbox, OutboxRow
from collector.sink import Connects, Sink, SinkError
from sevents.records import record_id_of
from sevents.retry import Backoff, RetryInterrupted, retry
from sevents.tracing import record_links, tracing

if TYPE_CHECKING:
    from collector.settings import CollectorSettings

log = logging.getLogger(__name__)
tracer = trace.get_tracer("sevents.collector")  # no-op unless an OTLP endpoint installed a provider


def make_sink(settings: CollectorSettings) -> Sink | None:
    """The sink the settings name; None for "local" (the rows stay for ``sevents-ingest``)."""
    if settings.sink == "local":
        return None
    if settings.sink == "eventhubs":
        # Imported only when asked for: it pulls in the Azure SDK (memory a local collector need not pay).
        from collector.ship_eventhubs import EventHubsSink

        return EventHubsSink.from_settings(settings)
    raise ValueError(f"unknown sink {settings.sink!r}")


def ship_now(pending: int, waited_s: float, *, batch: int, max_wait_s: float, draining: bool) -> bool:
    """Whether to send what is pending now: a full batch, a batch that waited long enough, or a drain."""
    if pending <= 0:
        return False
    return draining or pending >= batch or waited_s >= max_wait_s


class Shipper:
    """The worker that empties an outbox into a sink: ``run(stop)``, ``flush(timeout)``, ``shutdown(timeout)``."""

    def __init__(
        self,
        outbox: Outbox,
        sink: Sink,
        *,
        batch: int = 500,
        max_wait_s: float = 1.0,
        idle_s: float = 0.2,
        backoff: Backoff | None = None,
        on_shipped: Callable[[int], None] | None = None,
        on_sent: Callable[[int], None] | None = None,
        on_failed: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._outbox = outbox
        self._sink = sink
        self._batch = batch
        self._max_wait_s = max_wait_s
        self._idle_s = idle_s
        self._backoff = backoff or Backoff(initial=0.5, cap=30.0)
        self.on_shipped = on_shipped or (lambda n: None)
        self._on_sent = on_sent or (lambda n: None)  # the sink accepted a send of n rows (metrics)
        self._on_failed = on_failed or (lambda reason: None)  # a send failed, ``failure_reason`` (metrics)
        self._monotonic = monotonic
        self._wake = threading.Event()
        self.shipped = 0
        self.failures = 0

    def wake(self) -> None:
        """New rows were committed: look at the outbox now instead of at the next idle tick."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Ship until ``stop`` is set (then return; call ``shutdown`` to drain)."""
        if isinstance(self._sink, Connects):
            self._sink.connect()  # the link open before the first record is committed, not by its send
        first_seen: float | None = None
        while not stop.is_set():
            self._wake.clear()  # before reading: a commit after the read sets it again, and the wait sees it
            rows = self._outbox.pending(self._batch)
            now = self._monotonic()
            if rows and first_seen is None:
                first_seen = now
            waited = 0.0 if first_seen is None else now - first_seen
            if not ship_now(len(rows), waited, batch=self._batch, max_wait_s=self._max_wait_s, draining=False):
                self._wake.wait(self._idle_s if not rows else max(0.0, self._max_wait_s - waited))
                continue
            try:
                retry(functools.partial(self._send, rows), backoff=self._backoff, stop=stop, retryable=_sink_refused)
            except RetryInterrupted:
                return
            first_seen = None

    def flush(self, timeout: float) -> bool:
        """Ship everything pending now, retrying until ``timeout``; whether the outbox is empty."""
        try:
            retry(
                self._send_all,
                backoff=dataclasses.replace(self._backoff, deadline=timeout),
                stop=threading.Event(),  # a drain is bounded by its timeout, not by shutdown
                retryable=_sink_refused,
                monotonic=self._monotonic,
            )
        except SinkError:
            return False
        return True

    def shutdown(self, timeout: float) -> int:
        """Drain for up to ``timeout`` seconds, close the sink, and report how many rows are left pending."""
        if timeout > 0:
            # No send at all when there is no time: a send to a sink that is down blocks for its own timeout, and
            # the process manager's stop timeout (systemd TimeoutStopSec) counts on drain_timeout being the limit.
            self.flush(timeout)
        left = self._outbox.depth()
        self._sink.close()
        if left:
            log.warning("shipper stopped with rows left in the outbox (shipped on next start)", extra={"left": left})
        return left

    def _send_all(self) -> None:
        while rows := self._outbox.pending(self._batch):
            self._send(rows)

    def _send(self, rows: Sequence[OutboxRow]) -> None:
        """Send one batch and remove it from the outbox; SinkError (counted, logged) if the sink refused it."""
        links = record_links((record_id_of(row.payload), row.seq) for row in rows) if tracing() else []
        try:
            with tracer.start_as_current_span("sevents.collector.ship", links=links) as span:
                span.set_attribute("sevents.records", len(rows))
                self._sink.send(rows)
        except SinkError as error:
            self.failures += 1
            reason = failure_reason(error)
            self._on_failed(reason)  # counted before it is logged: a log line seen means a figure shown
            log.warning(
                "sink refused a batch; will retry", extra={"rows": len(rows), "reason": reason, "error": str(error)}
            )
            raise
        self._on_sent(len(rows))
        self._outbox.remove(row.seq for row in rows)
        self.shipped += len(rows)
        self.on_shipped(len(rows))


# What made a send fail, by the class of the error under the SinkError (matched along its MRO, by name, so that
# the Azure SDK is not imported here): a few reasons an alert can tell apart, never an unbounded label.
_REASONS = {
    "AuthenticationError": "auth",  # azure.eventhub: the SAS key or token was refused
    "ClientAuthenticationError": "auth",  # azure.core / azure.identity: no token for the managed identity
    "OperationTimeoutError": "timeout",
    "TimeoutError": "timeout",
    "ConnectError": "connection",  # refused, unresolvable, TLS
    "ConnectionLostError": "connection",
    "ClientClosedError": "connection",
    "OSError": "connection",
    "EventDataSendError": "refused",  # the service answered no (quota, throttling, entity missing)
    "EventDataError": "refused",
    "OutboxError": "outbox",  # a dead-lettered record could not be counted
}


def failure_reason(error: SinkError) -> str:
    """``connection``, ``timeout``, ``auth``, ``refused``, ``outbox`` or ``other``: why a send failed."""
    cause = error.__cause__
    if cause is None:
        return "refused"  # the sink itself said no
    for kind in type(cause).__mro__:
        reason = _REASONS.get(kind.__name__)
        if reason is not None:
            return reason
    return "other"


def _sink_refused(error: Exception) -> bool:
    return isinstance(error, SinkError)


__all__ = ["Shipper", "Sink", "SinkError", "failure_reason", "make_sink", "ship_now"]
