"""The downtimes a collector measured and has not stored yet, and what tells which event each belongs to.

A downtime is measured apart from the polls: a reboot at start (``collector.downtime.reboot``), a pause by the
ticker's thread (``collector.liveness``). The ledger holds each until a poll commits it as an impact record with
the event of this VM Started across it (``collector.downtime.event_for``); to tell that event, it keeps the
snapshots of the last commits. ``RebootProof`` keeps the alive file still until the reboot's downtime is stored.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from collector.downtime import event_for, snapshot_before
from collector.enrich import impact_record
from collector.liveness import AliveFile
from collector.model import Downtime, Snapshot, VmIdentity

# The collector's log lines keep the one logger name they always had (collector.health does the same).
log = logging.getLogger("collector.agent")

DOWNTIMES_HELD = 256  # downtimes waiting for a poll to store them; beyond, the oldest are dropped (counted)
SNAPSHOTS_KEPT = 16  # recent committed snapshots, to tell which event was Started when a downtime began


class DowntimeLedger:
    """Downtimes held until stored (thread-safe: the ticker adds, the poll takes), and recent committed snapshots."""

    def __init__(
        self,
        stored: Snapshot,
        *,
        rebooted: Downtime | None,
        collector_version: str,
        on_fault: Callable[[str], None],
    ) -> None:
        self._version = collector_version
        self._on_fault = on_fault  # counted with the poll faults (a downtime dropped)
        self._lock = threading.Lock()
        self._held: list[Downtime] = [] if rebooted is None else [rebooted]
        # (committed at, snapshot) of recent commits; the one loaded at start counts as committed at the origin
        origin = datetime.min.replace(tzinfo=timezone.utc)
        self._committed: deque[tuple[datetime, Snapshot]] = deque([(origin, stored)], maxlen=SNAPSHOTS_KEPT)

    def seen(self, downtime: Downtime) -> None:
        """From the ticker's thread: hold a pause until the next poll stores it with its event."""
        with self._lock:
            self._held.append(downtime)
            dropped = self._held[:-DOWNTIMES_HELD]
            del self._held[:-DOWNTIMES_HELD]
        if dropped:  # only while no poll succeeds for hours of pauses; the log keeps what the outbox cannot
            self._on_fault("downtime_dropped")
            log.error("downtime dropped: too many waiting for a poll", extra={"began_at": str(dropped[0].began_at)})

    def held(self) -> list[Downtime]:
        """The downtimes waiting to be stored, oldest first."""
        with self._lock:
            return list(self._held)

    def take(
        self,
        downtimes: Sequence[Downtime],
        *,
        after: Snapshot,
        fallback: Snapshot,
        vm: VmIdentity,
        api_version: str,
        read_at: datetime | None,
    ) -> list[dict[str, Any]]:
        """The impact records of ``downtimes`` (handed to a commit: no longer held), each with the event of this VM
        Started across it (or none); ``after`` is the snapshot diffed after them (IMDS read at ``read_at``; None: no
        read after them, ``after`` is the last one committed), ``fallback`` the one to compare with when no commit
        is known from before one began."""
        with self._lock:
            self._held = [d for d in self._held if d not in downtimes]
        out = []
        for downtime in downtimes:
            before = snapshot_before(self._committed, downtime.began_at) or fallback
            event = event_for(downtime, before, after, vm.vm_name)
            record = impact_record(
                downtime, event, vm, read_at=read_at, api_version=api_version, collector_version=self._version
            )
            out.append(record)
            log.info(
                "downtime measured",
                extra={
                    "detected_by": downtime.detected_by,
                    "duration_ms": downtime.duration_ms,
                    "event_id": "" if event is None else event.event_id,
                },
            )
        return out

    def committed(self, at: datetime, snapshot: Snapshot) -> None:
        """A poll committed ``snapshot`` at ``at`` (from the poll's thread only)."""
        self._committed.append((at, snapshot))


class RebootProof:
    """Until the downtime across a reboot is stored, the previous boot's last moment alive (the alive file) is its
    only proof: the file is kept fresh (``keep_alive``) from the first commit on, or at once without a reboot."""

    def __init__(self, alive: AliveFile, keep_alive: Callable[[AliveFile], None], *, rebooted: bool) -> None:
        self._keep_alive = keep_alive
        self._waiting: AliveFile | None = alive if rebooted else None
        if not rebooted:
            keep_alive(alive)

    def stored(self) -> None:
        """A commit succeeded: whatever it held, the reboot's downtime is stored by now."""
        if self._waiting is not None:
            self._keep_alive(self._waiting)
            self._waiting = None
