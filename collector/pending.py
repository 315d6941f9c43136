"""Records the outbox refused (full, or a full disk), held in memory in order until a commit succeeds.

Polling goes on against the newest snapshot meanwhile, so a state that comes and goes while the disk is full
is still recorded once there is room: the history then equals an unharmed collector's. Past ``max_bytes``
the records are let go and the diff falls back to the snapshot on disk: nothing is lost for good, but states
that came and went meanwhile merge. A crash loses only this memory: the restart diffs the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from collector.model import Snapshot
from sevents.records import encode

MAX_PENDING_BYTES: Final = 4 * 2**20


class Pending:
    """The records not yet stored, and the stored snapshot to fall back to."""

    def __init__(self, committed: Snapshot, *, max_bytes: int = MAX_PENDING_BYTES) -> None:
        self.committed = committed
        self.records: list[Mapping[str, Any]] = []
        self._bytes = 0
        self._max_bytes = max_bytes

    def batch(self, records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """What the next commit stores: everything held, then ``records``."""
        return [*self.records, *records]

    def stored(self, snapshot: Snapshot) -> None:
        """A commit of ``batch`` with ``snapshot`` succeeded."""
        self.committed = snapshot
        self.records, self._bytes = [], 0

    def refused(self, records: Sequence[Mapping[str, Any]]) -> bool:
        """Hold ``records`` too; False when that was too much and everything held was let go."""
        self.records.extend(records)
        self._bytes += sum(len(encode(r)) for r in records)
        if self._bytes <= self._max_bytes:
            return True
        self.records, self._bytes = [], 0
        return False
