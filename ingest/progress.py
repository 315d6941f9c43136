"""Progress of long ingest work: at most one log line every ``progress_interval`` seconds while records are stored.

``ProgressMeter`` is the pure bookkeeping (totals and a clock reading in, a ``Progress`` out when a line is due);
``ProgressSource`` is the edge: it wraps a Source, reads the handler's counters after each delivery (and, for the
outbox source, the rows still waiting), logs a due line, and logs a summary when the source's ``run`` ends. A line
is due only when records were stored since the previous one, so an idle ingest logs nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ingest.handler import Handler
from ingest.source import Deliver, Delivery, Source

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0


@dataclass(frozen=True)
class Progress:
    """What one progress line says; ``rate_per_s`` is records per second since the previous line (or start)."""

    stored: int  # records stored since start (dead letters not counted)
    since_last: int  # records stored since the previous line
    rate_per_s: float
    dead_letters: int  # since start
    dead_letters_since_last: int
    elapsed_s: float  # since start

    def fields(self) -> dict[str, Any]:
        return {
            "stored": self.stored,
            "since_last": self.since_last,
            "rate_per_s": round(self.rate_per_s, 1),
            "dead_letters": self.dead_letters,
            "dead_letters_since_last": self.dead_letters_since_last,
            "elapsed_s": round(self.elapsed_s, 1),
        }


class ProgressMeter:
    """Pure: fed running totals with the time they were read, says when a line is due and what it says."""

    def __init__(self, interval_s: float, start: float) -> None:
        if not interval_s > 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self.start = start
        self._stored = 0
        self._dead = 0
        self._line_at = start
        self._line_stored = 0
        self._line_dead = 0

    def update(self, now: float, stored: int, dead_letters: int) -> Progress | None:
        """Take the totals so far; a ``Progress`` when the interval has passed since the last line and records
        or dead letters were stored since it (that line is then the last one), else None."""
        self._stored = max(self._stored, stored)
        self._dead = max(self._dead, dead_letters)
        if now - self._line_at < self.interval_s:
            return None
        if self._stored == self._line_stored and self._dead == self._line_dead:
            return None  # idle: nothing to say
        line = self._progress(now, self._line_at)
        self._line_at, self._line_stored, self._line_dead = now, self._stored, self._dead
        return line

    def summary(self, now: float) -> Progress:
        """The whole run: since_last and the rate cover everything since start."""
        return Progress(
            stored=self._stored,
            since_last=self._stored,
            rate_per_s=_rate(self._stored, now - self.start),
            dead_letters=self._dead,
            dead_letters_since_last=self._dead,
            elapsed_s=max(0.0, now - self.start),
        )

    def _progress(self, now: float, since: float) -> Progress:
        since_last = self._stored - self._line_stored
        return Progress(
            stored=self._stored,
            since_last=since_last,
            rate_per_s=_rate(since_last, now - since),
            dead_letters=self._dead,
            dead_letters_since_last=self._dead - self._line_dead,
            elapsed_s=max(0.0, now - self.start),
        )


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


class ProgressSource:
    """A Source that logs the progress of the one it wraps (every other attribute is the wrapped source's).

    ``backlog(delivered)`` (optional) returns the records still waiting at the source, given how many the
    current delivery holds (stored but not yet acknowledged); it runs on the thread that delivered.
    """

    def __init__(
        self,
        source: Source,
        handler: Handler,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        backlog: Callable[[int], int | None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.handler = handler
        self.interval_s = interval_s
        self.backlog = backlog
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._meter = ProgressMeter(interval_s, monotonic())
        self._base = (0, 0)  # the handler's totals when this run began (a reused handler counts from there)

    def __getattr__(self, name: str) -> Any:
        if name == "source":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.source, name)

    def run(self, deliver: Deliver, stop: threading.Event) -> None:
        with self._lock:
            self._base = (0, 0)
            self._base = self._totals()
            self._meter = ProgressMeter(self.interval_s, self._monotonic())

        def delivering(deliveries: Sequence[Delivery]) -> None:
            deliver(deliveries)
            self._after(len(deliveries))

        try:
            self.source.run(delivering, stop)
        finally:
            with self._lock:
                now = self._monotonic()
                self._meter.update(now, *self._totals())
                summary = self._meter.summary(now)
            fields = summary.fields()
            del fields["since_last"], fields["dead_letters_since_last"]  # the whole run: the totals say it
            log.info("ingest summary", extra=fields)

    def _totals(self) -> tuple[int, int]:
        dead = self.handler.dead_letters
        stored = self.handler.stored - dead
        return stored - self._base[0], dead - self._base[1]

    def _after(self, delivered: int) -> None:
        with self._lock:
            stored, dead = self._totals()
            line = self._meter.update(self._monotonic(), stored, dead)
        if line is None:
            return
        fields = line.fields()
        if self.backlog is not None:
            try:
                waiting = self.backlog(delivered)
            except Exception as error:  # noqa: BLE001 - progress must never fail a delivery
                log.debug("could not count the backlog", extra={"error": repr(error)})
                waiting = None
            if waiting is not None:
                fields["backlog"] = waiting
        log.info("ingest progress", extra=fields)
