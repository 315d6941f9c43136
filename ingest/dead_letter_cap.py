"""A cap on the dead letters one stream may store per hour: a flood of poison costs its own rows, not the disk.

Dead letters keep the payload verbatim (up to the hub's message size, 1 MB on Standard), for 90 days by default.
A sender that can write to the hub could fill the disk with them. So each stream (a source's partition: an Event
Hubs partition, or a local outbox) may store ``per_hour`` dead letters per clock hour; past that, a dead letter is
not stored but counted (``sevents.ingest.dropped{reason="dead_letter_cap"}``) and logged once per stream and
hour with its total. Valid records are never capped. The stream is the partition, not the VM a record claims to
be: a flood under made-up VM names would otherwise escape any per-VM cap. Pure: the caller passes the moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

CAP_REASON: Final = "dead_letter_cap"
DEFAULT_PER_HOUR: Final = 1000
_POSITION: Final = 3  # the place of ``position`` in a dead-letter row (ingest.rows.Batch.add_dead_letter)


def stream_of(position: str) -> str:
    """The stream a dead letter came by: its position without the record's place in it (the part after the last
    ``:`` or ``#``): ``eventhubs:3:1234`` -> ``eventhubs:3``, ``outbox:/var/lib/x/outbox.sqlite#12`` -> the outbox."""
    cut = max(position.rfind(":"), position.rfind("#"))
    return position[:cut] if cut > 0 else position


@dataclass
class DeadLetterCap:
    """Admits at most ``per_hour`` dead letters per stream and clock hour (``admit``)."""

    per_hour: int = DEFAULT_PER_HOUR
    _hour: datetime | None = None
    _seen: dict[str, int] = field(default_factory=dict)  # this hour's dead letters per stream, admitted or not

    def admit(self, rows: Sequence[tuple[Any, ...]], now: datetime) -> Admitted:
        """The dead-letter rows to store, in their order, and those left out per stream. A new clock hour (of the
        aware ``now``) starts every stream's count again."""
        hour = now.replace(minute=0, second=0, microsecond=0)
        if hour != self._hour:
            self._hour, self._seen = hour, {}
        admitted = Admitted()
        for row in rows:
            stream = stream_of(str(row[_POSITION]))
            seen = self._seen.get(stream, 0)
            self._seen[stream] = seen + 1
            if seen < self.per_hour:
                admitted.kept.append(row)
                continue
            admitted.dropped[stream] = admitted.dropped.get(stream, 0) + 1
            if seen == self.per_hour:
                admitted.newly_capped.append(stream)
        return admitted


@dataclass
class Admitted:
    """What ``DeadLetterCap.admit`` let through (``kept``), left out per stream (``dropped``), and the streams that
    reached their cap with this call (to be logged once an hour)."""

    kept: list[tuple[Any, ...]] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    newly_capped: list[str] = field(default_factory=list)
