"""The local source: read collector outboxes (SQLite) directly, deliver in batches, remove what was stored.

Safe while collectors keep writing: the outbox is WAL-mode SQLite made for a second process that reads and
removes, and rows leave it only after ``deliver`` returned (the batch is in ClickHouse). A crash between
the two redelivers the batch; ClickHouse deduplicates it.
"""

from __future__ import annotations

import glob
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from collector.outbox import Outbox, OutboxError, OutboxRow
from ingest.batching import BatchPolicy
from ingest.errors import Interrupted
from ingest.source import Deliver, Delivery
from sevents.retry import Backoff

log = logging.getLogger(__name__)
# --until-idle waits for an outbox that failed this many times before calling the source idle.
UNTIL_IDLE_TRIES = 5

OUTBOX_FILE = "outbox.sqlite"
DEFAULT_POLICY = BatchPolicy()
DEFAULT_BACKOFF = Backoff(initial=0.5, cap=10.0)


def resolve(specs: Sequence[str]) -> list[Path]:
    """Outbox files named by ``specs``: state dirs, outbox files, or globs of either (existing ones only)."""
    found: dict[Path, None] = {}
    for spec in specs:
        matches = sorted(glob.glob(spec)) if glob.has_magic(spec) else [spec]
        for match in matches:
            path = Path(match)
            candidate = path / OUTBOX_FILE if path.is_dir() else path
            if candidate.is_file():
                found[candidate.resolve()] = None
    return list(found)


class OutboxSource:
    """Deliver the rows of every matching outbox, oldest first per outbox; ``until_idle`` drains and returns."""

    def __init__(
        self,
        specs: Sequence[str],
        *,
        policy: BatchPolicy = DEFAULT_POLICY,
        poll_interval_s: float = 0.2,
        rescan_interval_s: float = 10.0,
        until_idle: bool = False,
        backoff: Backoff = DEFAULT_BACKOFF,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.specs = list(specs)
        self.policy = policy
        self.poll_interval_s = poll_interval_s
        self.rescan_interval_s = rescan_interval_s
        self.until_idle = until_idle
        self.backoff = backoff
        self._monotonic = monotonic
        self._outboxes: dict[Path, Outbox] = {}
        self._scanned_at = float("-inf")
        # An outbox that failed (e.g. it cannot be changed on a full disk) rests until its time comes.
        self._failures: dict[Path, int] = {}
        self._resume_at: dict[Path, float] = {}
        self.delivered = 0  # rows delivered and removed, for logs and tests

    def run(self, deliver: Deliver, stop: threading.Event) -> None:
        """Deliver batches until ``stop`` (or, with ``until_idle``, until every outbox is empty)."""
        failures = 0
        try:
            while not stop.is_set():
                self._rescan()
                rows = self._collect(stop)
                if not rows:
                    if self.until_idle:
                        resting = self._resting_s()
                        if resting is None:
                            return
                        # not idle while an outbox rests after a failure: its records are still to come
                        stop.wait(resting)
                        continue
                    stop.wait(self.poll_interval_s)
                    continue
                try:
                    deliver([_delivery(path, row) for path, row in rows])
                except Interrupted:
                    return
                except Exception:  # never acknowledge, never die: back off and redeliver
                    failures += 1
                    log.exception("delivery failed; will redeliver", extra={"records": len(rows)})
                    stop.wait(self.backoff.delay(failures))
                    continue
                failures = 0
                self._acknowledge(rows)
        finally:
            self.close()

    def _resting_s(self) -> float | None:
        """Seconds until the first resting outbox is tried again; None when none rests (or all gave up)."""
        waits = [
            at - self._monotonic()
            for path, at in self._resume_at.items()
            if self._failures.get(path, 0) < UNTIL_IDLE_TRIES
        ]
        return max(0.0, min(waits)) if waits else None

    def close(self) -> None:
        for outbox in self._outboxes.values():
            outbox.close()
        self._outboxes.clear()

    def _rescan(self) -> None:
        now = self._monotonic()
        rested = any(at <= now for at in self._resume_at.values())
        if now - self._scanned_at < self.rescan_interval_s and not rested:
            return
        self._scanned_at = now
        for path in resolve(self.specs):
            if self._resume_at.get(path, now) > now:
                continue  # still backing off
            if path not in self._outboxes:
                try:
                    self._outboxes[path] = Outbox(path)
                except OutboxError as error:
                    log.error("cannot open outbox", extra={"outbox": str(path), "error": str(error)})
                    continue
                log.info("reading outbox", extra={"outbox": str(path)})
        if not self._outboxes:
            log.warning("no outbox matches the source", extra={"specs": self.specs})

    def _collect(self, stop: threading.Event) -> list[tuple[Path, OutboxRow]]:
        """Gather one batch: as much as there is, waiting up to ``max_wait_s`` for a fuller one."""
        rows: list[tuple[Path, OutboxRow]] = []
        cursors = dict.fromkeys(self._outboxes, 0)
        size = 0
        started = self._monotonic()
        while True:
            found = 0
            for path, outbox in list(self._outboxes.items()):
                room = self.policy.max_records - len(rows)
                if room <= 0:
                    break
                try:
                    pending = outbox.pending(limit=room, after_seq=cursors[path])
                except OutboxError as error:
                    self._drop(path, "cannot read outbox; backing off", error)
                    continue
                for row in pending:
                    rows.append((path, row))
                    size += len(row.payload)
                if pending:
                    cursors[path] = pending[-1].seq
                    found += len(pending)
            age = self._monotonic() - started
            # a drain does not wait for stragglers; a live source waits up to max_wait_s for them
            if not rows or self.policy.due(len(rows), size, age) or (self.until_idle and not found):
                return rows
            if stop.wait(min(self.poll_interval_s, max(0.0, self.policy.max_wait_s - age))):
                return rows

    def _acknowledge(self, rows: Sequence[tuple[Path, OutboxRow]]) -> None:
        by_outbox: dict[Path, list[int]] = {}
        for path, row in rows:
            by_outbox.setdefault(path, []).append(row.seq)
        for path, seqs in by_outbox.items():
            outbox = self._outboxes.get(path)
            if outbox is None:
                continue
            try:
                outbox.remove(seqs)
            except OutboxError as error:
                # Stored but not removed: they come again and ClickHouse deduplicates them.
                self._drop(path, "cannot remove delivered rows; backing off", error)
                continue
            self._failures.pop(path, None)
            self._resume_at.pop(path, None)
        self.delivered += len(rows)

    def _drop(self, path: Path, message: str, error: Exception) -> None:
        """Close a failing outbox and leave it alone for the next backoff delay (logged once per delay)."""
        failures = self._failures.get(path, 0) + 1
        self._failures[path] = failures
        delay = self.backoff.delay(failures)
        self._resume_at[path] = self._monotonic() + delay
        log.error(
            message,
            extra={"outbox": str(path), "error": str(error), "failures": failures, "retry_in_s": round(delay, 1)},
        )
        outbox = self._outboxes.pop(path, None)
        if outbox is not None:
            outbox.close()


def _delivery(path: Path, row: OutboxRow) -> Delivery:
    return Delivery(row.payload, f"outbox:{path}#{row.seq}", {"record_type": row.record_type})
