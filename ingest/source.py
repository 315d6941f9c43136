"""The seam between where records come from and where they go: ``Delivery`` and the ``Source`` Protocol.

A source calls ``deliver(batch)``; ``deliver`` returns only once the batch is stored in ClickHouse (good
rows inserted, poison rows in ``dead_letters``). Only then may the source acknowledge it (remove outbox rows,
checkpoint). If ``deliver`` raises, the source must not acknowledge and must deliver the records again later.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

Deliver = Callable[[Sequence["Delivery"]], None]


@dataclass(frozen=True)
class Delivery:
    """One raw record and where it came from (``position`` names it for dead letters and logs)."""

    payload: bytes
    position: str
    properties: Mapping[str, str] = field(default_factory=dict)


class Source(Protocol):
    """Something that yields batches of records until ``stop`` is set (or, for drains, until idle)."""

    def run(self, deliver: Deliver, stop: threading.Event) -> None: ...
