"""The seam between where records come from and where they go: ``Delivery`` and the ``Source`` Protocol.

A source calls ``deliver(batch)``; ``deliver`` returns only once the batch is stored in ClickHouse (good
rows inserted, poison rows in ``dead_letters``). Only then may the source acknowledge it (remove outbox rows,
checkpoint). If ``deliver`` raises, the source must not acknowledge and must deliver the records again later.

A source that anyone holding the shared sender identity can write to (Event Hubs) gives each delivery its
``Provenance``: what the service, not the sender, says about it. The ingest then stores a record only if it
could be the sending VM's own (``ingest.handler.vouch``). A local source (the outbox) gives none: trusted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

Deliver = Callable[[Sequence["Delivery"]], None]


@dataclass(frozen=True)
class Provenance:
    """What the transport vouches for: the partition key the event was sent under (None: sent without one)
    and when the service enqueued it (None: not said; the ingest's receive time stands in)."""

    partition_key: str | None
    enqueued_at: datetime | None


@dataclass(frozen=True)
class Delivery:
    """One raw record and where it came from (``position`` names it for dead letters and logs).

    ``provenance``: None for a trusted local source; set by sources whose senders must prove the record theirs.
    """

    payload: bytes
    position: str
    properties: Mapping[str, str] = field(default_factory=dict)
    provenance: Provenance | None = None


class Source(Protocol):
    """Something that yields batches of records until ``stop`` is set (or, for drains, until idle)."""

    def run(self, deliver: Deliver, stop: threading.Event) -> None: ...
