"""The collector's OpenTelemetry instruments: polls, poll errors, IMDS latency, transitions, outbox, drops, events,
sink sends, webhook posts, approval decisions, hook runs, the last successful poll and the build.

Counters are updated where things happen; the outbox figures (depth, bytes, drops by reason) are
observable instruments that report the last values the agent read from the outbox, so an export never
touches SQLite from the exporter's thread. ``collector/README.md`` lists the Prometheus families.

No label names the collector: the scrape's target labels (``instance``, ``pod``, ``node``) tell VMs and pods
apart. ``collector`` is only for several collectors sharing one MeterProvider in one process.
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

import sevents

METER_NAME = "sevents.collector"
# IMDS answers in milliseconds and may take up to two minutes on a VM's first call (the SDK's default buckets
# are for milliseconds).
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 130.0)


class CollectorMetrics:
    """All instruments of one collector; ``collector`` (if given) labels every figure so that collectors sharing
    one provider in one process stay apart. ``wall`` is the Unix clock of the last-successful-poll gauge."""

    def __init__(self, provider: MeterProvider, *, collector: str = "", wall: Callable[[], float] = time.time) -> None:
        meter = provider.get_meter(METER_NAME, sevents.__version__)
        self._labels = {"collector": collector} if collector else {}
        self._lock = threading.Lock()
        self._depth = 0
        self._bytes = 0
        self._drops: dict[str, int] = {}
        self._active: dict[tuple[str, str], int] = {}
        self._wall = wall
        self._last_ok = 0.0  # Unix time of the last successful poll; 0 until the first
        self._version: Callable[[], str] = lambda: sevents.__version__
        self._api_version: Callable[[], str] = lambda: ""
        self._version_read = ""
        self.polls = meter.create_counter("sevents.collector.polls", unit="{poll}", description="Polls made")
        self.poll_errors = meter.create_counter(
            "sevents.collector.poll_errors", unit="{error}", description="Failed IMDS requests by kind"
        )
        self.imds_latency = meter.create_histogram(
            "sevents.collector.imds_latency",
            unit="s",
            description="Latency of successful IMDS requests",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
        )
        self.transitions = meter.create_counter(
            "sevents.collector.transitions", unit="{transition}", description="Transitions committed by kind"
        )
        meter.create_observable_gauge(
            "sevents.collector.outbox_depth", [self._observe_depth], unit="{record}", description="Records waiting"
        )
        meter.create_observable_gauge(
            "sevents.collector.outbox_bytes", [self._observe_bytes], unit="By", description="Outbox payload bytes"
        )
        meter.create_observable_counter(
            "sevents.collector.drops", [self._observe_drops], unit="{record}", description="Drops by reason"
        )
        meter.create_observable_gauge(
            "sevents.collector.active_events",
            [self._observe_active],
            unit="{event}",
            description="Events in the last document diffed, by type and status",
        )
        self.sink_sends = meter.create_counter(
            "sevents.collector.sink_sends",
            unit="{send}",
            description="Batches sent to the sink, by sink, result (ok, failed) and reason of a failure",
        )
        self.sink_records = meter.create_counter(
            "sevents.collector.sink_records", unit="{record}", description="Records the sink accepted, by sink"
        )
        self.webhook_posts = meter.create_counter(
            "sevents.collector.webhook_posts",
            unit="{post}",
            description="Webhook POST attempts, by result (ok, failed) and reason of a failure",
        )
        self.approval_decisions = meter.create_counter(
            "sevents.collector.approval_decisions", unit="{decision}", description="Approval decisions by decision"
        )
        self.hook_runs = meter.create_counter(
            "sevents.collector.hook_runs", unit="{run}", description="Hook runs by phase (pre, post) and outcome"
        )
        meter.create_observable_gauge(
            "sevents.collector.last_successful_poll_timestamp",
            [self._observe_last_ok],
            unit="s",
            description="Unix time of the last poll that read a document and committed its changes (0: none yet)",
        )
        meter.create_observable_gauge(
            "sevents.collector.build_info",
            [self._observe_build],
            description="Always 1: the collector's version, its Python and the Scheduled Events api-version in use",
        )

    def poll(self, ok: bool) -> None:
        """One poll finished (successfully or not)."""
        self.polls.add(1, {**self._labels, "ok": ok})
        if ok:
            with self._lock:
                self._last_ok = self._wall()

    def last_successful_poll(self) -> float:
        """Unix time of the last successful poll, 0 until the first (the gauge's value; /readyz reads it)."""
        with self._lock:
            return self._last_ok

    def poll_error(self, kind: str) -> None:
        """One IMDS request or decode failed with ``kind``."""
        self.poll_errors.add(1, {**self._labels, "kind": kind})

    def latency(self, seconds: float, endpoint: str) -> None:
        """Latency of a successful IMDS request."""
        self.imds_latency.record(seconds, {**self._labels, "endpoint": endpoint})

    def transition(self, kind: str, count: int = 1) -> None:
        """Transitions of ``kind`` committed to the outbox."""
        self.transitions.add(count, {**self._labels, "kind": kind})

    def sink_ready(self, sink: str) -> None:
        """Show ``sink``'s families at 0 before its first send (so that a rate over them has a start)."""
        self.sink_sends.add(0, {**self._labels, "sink": sink, "result": "ok"})
        self.sink_records.add(0, {**self._labels, "sink": sink})

    def sink_sent(self, sink: str, records: int) -> None:
        """``sink`` accepted one send of ``records`` records."""
        self.sink_sends.add(1, {**self._labels, "sink": sink, "result": "ok"})
        self.sink_records.add(records, {**self._labels, "sink": sink})

    def sink_failed(self, sink: str, reason: str) -> None:
        """One send to ``sink`` failed with ``reason`` (connection, timeout, auth, refused, ...)."""
        self.sink_sends.add(1, {**self._labels, "sink": sink, "result": "failed", "reason": reason})

    def webhook_ready(self) -> None:
        """Show the webhook family at 0 before the first POST."""
        self.webhook_posts.add(0, {**self._labels, "result": "ok"})

    def webhook_post(self, ok: bool, reason: str = "") -> None:
        """One webhook POST attempt ended: accepted, or failed with ``reason`` (http_NNN, timeout, connection)."""
        labels = {"result": "ok"} if ok else {"result": "failed", "reason": reason}
        self.webhook_posts.add(1, {**self._labels, **labels})

    def approval_decision(self, decision: str) -> None:
        """One approval decision (``approved``, ``not_covered``, ``hook_failed``, ...) was made."""
        self.approval_decisions.add(1, {**self._labels, "decision": decision})

    def hook_run(self, phase: str, outcome: str) -> None:
        """One hook of ``phase`` (pre, post) ended with ``outcome`` (ok, failed, timeout)."""
        self.hook_runs.add(1, {**self._labels, "phase": phase, "outcome": outcome})

    def build(self, *, version: Callable[[], str], api_version: Callable[[], str]) -> None:
        """Where build_info reads the version (once, at the first export) and the api-version in use (each export)."""
        with self._lock:
            self._version, self._api_version, self._version_read = version, api_version, ""

    def outbox(self, depth: int, size: int, drops: Mapping[str, int]) -> None:
        """The outbox figures as last read."""
        with self._lock:
            self._depth, self._bytes, self._drops = depth, size, dict(drops)

    def active(self, events: Iterable[tuple[str, str]]) -> None:
        """The (event type, status) of each event IMDS currently shows; a pair seen before and gone reads 0."""
        seen: dict[tuple[str, str], int] = {}
        for pair in events:
            seen[pair] = seen.get(pair, 0) + 1
        with self._lock:
            self._active = {**dict.fromkeys(self._active, 0), **seen}

    def _observe_active(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            labels = self._labels
            return [Observation(n, {**labels, "event_type": t, "status": s}) for (t, s), n in self._active.items()]

    def _observe_last_ok(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(self._last_ok, self._labels)]

    def _observe_build(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            if not self._version_read:
                self._version_read = self._version()
            labels = {
                **self._labels,
                "version": self._version_read,
                "python_version": platform.python_version(),
                "api_version": self._api_version(),
            }
            return [Observation(1, labels)]

    def _observe_depth(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(self._depth, self._labels)]

    def _observe_bytes(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(self._bytes, self._labels)]

    def _observe_drops(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(n, {**self._labels, "reason": r}) for r, n in self._drops.items()]
