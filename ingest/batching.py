"""When to deliver a batch (pure): big enough, or old enough; sources call it, tests call it without threads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchPolicy:
    """Deliver at ``max_records`` or ``max_bytes``, or when the oldest waiting record is ``max_wait_s`` old.

    ClickHouse prefers few large inserts (about one a second of 1k-100k rows); a quiet fleet still gets its
    rows within ``max_wait_s``.
    """

    max_records: int = 10_000
    max_bytes: int = 8 * 2**20
    max_wait_s: float = 1.0

    def full(self, records: int, size: int) -> bool:
        """No more records fit."""
        return records >= self.max_records or size >= self.max_bytes

    def due(self, records: int, size: int, age_s: float) -> bool:
        """Deliver now: there is something, and it is full or has waited long enough."""
        return records > 0 and (self.full(records, size) or age_s >= self.max_wait_s)

    def problems(self) -> list[str]:
        found = []
        if self.max_records < 1:
            found.append("batch_max_records must be at least 1")
        if self.max_bytes < 1024:
            found.append("batch_max_bytes must be at least 1024")
        if self.max_wait_s < 0:
            found.append("batch_max_wait_s must not be negative")
        return found
