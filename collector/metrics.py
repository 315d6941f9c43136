"""The collector's OpenTelemetry instruments: polls, poll errors, IMDS latency, transitions, outbox, drops, events.

Counters are updated where things happen; the outbox figures (depth, bytes, drops by reason) are
observable instruments that report the last values the agent read from the outbox, so an export never
touches SQLite from the exporter's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

import sevents

METER_NAME = "sevents.collector"
# IMDS answers in milliseconds and may take up to two minutes on a VM's first call (the SDK's default buckets
# are for milliseconds).
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 130.0)


class CollectorMetrics:
    """All instruments of one collector; ``vm`` labels every figure so in-process collectors stay apart."""

    def __init__(self, provider: MeterProvider, *, collector: str = "") -> None:
        meter = provider.get_meter(METER_NAME, sevents.__version__)
        self._labels = {"collector": collector} if collector else {}
        self._lock = threading.Lock()
        self._depth = 0
        self._bytes = 0
        self._drops: dict[str, int] = {}
        self._active: dict[tuple[str, str], int] = {}
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

    def poll(self, ok: bool) -> None:
        """One poll finished (successfully or not)."""
        self.polls.add(1, {**self._labels, "ok": ok})

    def poll_error(self, kind: str) -> None:
        """One IMDS request or decode failed with ``kind``."""
        self.poll_errors.add(1, {**self._labels, "kind": kind})

    def latency(self, seconds: float, endpoint: str) -> None:
        """Latency of a successful IMDS request."""
        self.imds_latency.record(seconds, {**self._labels, "endpoint": endpoint})

    def transition(self, kind: str, count: int = 1) -> None:
        """Transitions of ``kind`` committed to the outbox."""
        self.transitions.add(count, {**self._labels, "kind": kind})

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

    def _observe_depth(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(self._depth, self._labels)]

    def _observe_bytes(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(self._bytes, self._labels)]

    def _observe_drops(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(n, {**self._labels, "reason": r}) for r, n in self._drops.items()]
