"""The collector's health counters: polls, faults by kind, the last poll's outcome (what a heartbeat reports).

Thread-safe: the poll loop and the instance-metadata worker both count failed requests.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from collector.metrics import CollectorMetrics
from collector.model import Document

log = logging.getLogger("collector.agent")


class PollHealth:
    """Counts of polls and faults, mirrored into the metrics as they happen."""

    def __init__(self, metrics: CollectorMetrics) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()
        self.polls = 0
        self._faults: Counter[str] = Counter()
        self.last_poll_ok = False
        self.last_poll_error = ""

    def polled(self) -> None:
        """A poll began (a poll interrupted by shutdown is taken back with ``unpolled``)."""
        with self._lock:
            self.polls += 1

    def unpolled(self) -> None:
        with self._lock:
            self.polls -= 1

    def fault(self, kind: str) -> None:
        """One request, decode or commit failed with ``kind`` (or a value had to be repaired)."""
        with self._lock:
            self._faults[kind] += 1
        self._metrics.poll_error(kind)

    def decoded(self, document: Document) -> None:
        """What decode had to do to this poll's document: fields made safe (kind ``repaired``) and entries of
        Events left out (one ``event_dropped_<reason>`` per entry), counted and logged. IMDS sends the same
        document at every poll, so they count once per poll, as every other fault."""
        if document.repairs:
            # Stored with the safe values (U+FFFD, unknown), and counted, so the odd answer is visible.
            self.fault("repaired")
            log.warning("IMDS document had invalid values; repaired", extra={"repairs": list(document.repairs[:5])})
        for dropped in document.dropped:
            self.fault("event_dropped_" + dropped.reason)
        if document.dropped:
            details = [d.detail for d in document.dropped[:5]]
            log.warning("IMDS document had entries that are not events; left out", extra={"dropped": details})

    def ok(self) -> None:
        """The poll's document was read and its changes committed (or there were none)."""
        self.last_poll_ok, self.last_poll_error = True, ""
        self._metrics.poll(ok=True)

    def failed(self, kind: str, error: BaseException) -> None:
        """The poll failed with ``kind``: logged, reported by the next heartbeat."""
        self.last_poll_ok, self.last_poll_error = False, kind
        self._metrics.poll(ok=False)
        log.warning("poll failed", extra={"kind": kind, "error": str(error)})

    def faults(self) -> dict[str, int]:
        """Faults by kind since start."""
        with self._lock:
            return dict(self._faults)
