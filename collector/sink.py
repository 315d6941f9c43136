"""The sink seam: what a destination of outbox rows promises, and its one error.

Kept apart from ``collector.ship`` (the worker) so that sinks import this and the worker imports sinks,
never each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from collector.outbox import OutboxRow


class SinkError(Exception):
    """The destination did not durably accept a batch; the rows stay in the outbox and are sent again."""


class Sink(Protocol):
    """Where outbox rows go when they leave the VM."""

    def send(self, rows: Sequence[OutboxRow]) -> None:
        """Return only once the destination durably accepted every row; raise SinkError otherwise."""

    def close(self) -> None:
        """Release connections."""


@runtime_checkable
class Connects(Protocol):
    """A sink that can open its connection ahead of the first send (the shipper asks when it starts)."""

    def connect(self) -> None:
        """Open the connection now; best effort, never raises (the next send reports a failure)."""
