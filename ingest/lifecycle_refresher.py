"""When the ingest computes the lifecycles of the events its batches touched: at once, or at most every ``every``.

A refresh (``ingest.lifecycle_store.refresh``) costs about as much as inserting a 10,000-record batch, nearly all
of it ClickHouse planning the evidence view, whatever the number of events. Refreshing after every batch halved
the ingest's throughput under load, so while batches keep coming the events are gathered and refreshed together:
at most every ``every`` seconds, and never more than ``share`` of the time (a refresh that took 0.1 s waits 5 s
for the next at 2%), but never more than ``longest`` seconds apart. The first batch after a quiet spell is
refreshed at once, so a lone change shows as soon as it did before; while batches keep coming the lifecycles
trail the stored rows by seconds, less than the alert rules' evaluation interval (30 s).

Nothing is lost when the process dies in between: the INSERT that stores a row naming an event also marks the
event (``event_refresh_queue``, materialized views of migration 0018), so the mark is stored before the batch is
acknowledged. ``sweep`` refreshes every marked event whose stored lifecycle is older than its mark; the writer
sweeps when it starts and every ``sweep_every`` seconds, so a worker that never comes back is covered by the
others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final

from ingest.clickhouse import CLIENT_ERRORS

log = logging.getLogger(__name__)

DEFAULT_EVERY: Final = 1.0  # seconds between refreshes while batches keep coming (what the ingest runs with)
DEFAULT_SHARE: Final = 0.02  # of the ingest's time, at most, spent refreshing while batches keep coming
DEFAULT_LONGEST: Final = 10.0  # seconds: the longest a refresh is put off, however costly it has become
DEFAULT_SWEEP_EVERY: Final = 60.0


class Refresher:
    """Gathers the events touched by stored batches and refreshes them at once or within ``every`` seconds.

    ``refresh(ids)`` computes and stores the lifecycles; ``stale()`` lists the marked events whose lifecycle is
    older than their mark. Each raises what its client raises. ``every=0`` refreshes with every batch (tools and
    tests that read at once).
    """

    def __init__(
        self,
        refresh: Callable[[list[str]], object],
        stale: Callable[[], list[str]],
        *,
        every: float = DEFAULT_EVERY,
        share: float = DEFAULT_SHARE,
        longest: float = DEFAULT_LONGEST,
        sweep_every: float = DEFAULT_SWEEP_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._refresh, self._stale = refresh, stale
        self.every = every
        self.share = share
        self.longest = longest
        self._gap = every  # the wait after the last refresh: every, or longer when refreshes grow costly
        self.sweep_every = sweep_every
        self.clock = clock
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._last: float | None = None  # when the last refresh began
        self._swept: float | None = None  # when the last sweep began (None: not since the start)
        self._timer: threading.Timer | None = None  # armed and not yet begun
        self._timers: list[threading.Timer] = []  # every timer started and perhaps still refreshing
        self._closed = False

    def touched(self, event_ids: Iterable[str]) -> None:
        """The events a batch just stored evidence of (and so marked); returns once they are refreshed or put off.

        Call before the batch is acknowledged. Raises what the client raises (the batch is then stored again).
        """
        ids = {i for i in event_ids if i}
        if ids:
            self._take(ids)
        self._sweep_if_due()  # after: this batch's events are refreshed or put off by now, not stale to it

    def _take(self, ids: set[str]) -> None:
        now = self.clock()
        with self._lock:
            due = self.every <= 0 or self._closed or self._last is None or now - self._last >= self._gap
            if due:
                ids |= self._pending
                self._pending.clear()
                self._last = now
        if due:
            self._run(sorted(ids))
            return
        with self._lock:  # marked with the rows: a crash before the refresh leaves them to the sweep
            self._pending |= ids
            self._arm(self._last + self._gap - now if self._last is not None else 0.0)

    def flush(self) -> None:
        """Refresh whatever is put off, now."""
        with self._lock:
            ids = sorted(self._pending)
            self._pending.clear()
            self._last = self.clock()
        if ids:
            self._run(ids)

    def close(self) -> None:
        """Stop the timer, wait for a refresh it began, and refresh what is put off; a failure is logged (the
        marks keep it for the sweep). Nothing refreshes after it returns, so the client may then be closed."""
        with self._lock:
            self._closed = True
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join()
        self._flush_logged()

    def sweep(self) -> int:
        """Refresh every marked event whose stored lifecycle is older than its mark; returns how many."""
        ids = self._stale()
        if ids:
            self._run(ids)
            with self._lock:
                self._pending.difference_update(ids)
            log.info("event lifecycles refreshed from their marks", extra={"events": len(ids)})
        return len(ids)

    def _sweep_if_due(self) -> None:
        now = self.clock()
        with self._lock:
            due = self._swept is None or now - self._swept >= self.sweep_every
            if due:
                self._swept = now
        if due:
            try:
                self.sweep()
            except BaseException:
                with self._lock:
                    self._swept = None  # try again with the next batch
                raise

    def _run(self, ids: list[str]) -> None:
        began = self.clock()
        try:
            self._refresh(ids)
        except BaseException:
            with self._lock:
                self._pending.update(ids)  # still marked, or still in an unacknowledged batch
                self._last = None  # so the next batch tries at once
            raise
        took = self.clock() - began
        with self._lock:
            self._gap = max(self.every, min(took / self.share, self.longest)) if self.share > 0 else self.every

    def _arm(self, delay: float) -> None:
        # under self._lock
        if self._timer is not None or self._closed:
            return
        self._timer = threading.Timer(max(0.0, delay), self._timed)
        self._timer.daemon = True
        self._timers = [t for t in self._timers if t.is_alive()] + [self._timer]
        self._timer.start()

    def _timed(self) -> None:
        with self._lock:
            self._timer = None
        self._flush_logged()

    def _flush_logged(self) -> None:
        try:
            self.flush()
        except CLIENT_ERRORS as error:  # the timer's thread has no caller: the marks keep the events for the sweep
            log.warning("event lifecycles not refreshed; their marks keep them", extra={"error": repr(error)[:300]})
            with self._lock:
                if self._pending and not self._closed:
                    self._arm(self._gap)
