"""Decode the next batch while ClickHouse stores the one before: one batch in flight, acknowledged in order.

Theory of operation. Decoding and validating is Python work that holds the GIL; an insert is ClickHouse
work that releases it (the embedded engine and the HTTP client both). One source thread calling ``deliver``
would leave one of them idle at a time. ``Overlap.submit(deliveries, acknowledge)`` prepares the batch in the
caller's thread, then waits for the batch in flight, calls *its* ``acknowledge`` (still in the caller's thread,
so the source's own objects are only touched by it), and starts storing the new one on the store thread.

Guarantees, as with a plain ``deliver``: ``acknowledge`` runs only after its batch was stored, batches are
stored and acknowledged in submission order, and when storing fails the failure is raised by the next
``submit`` or ``wait`` and nothing of that batch is acknowledged (the source delivers it again later).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from ingest.source import Deliver, Delivery

Acknowledge = Callable[[], None]


@runtime_checkable
class Staged(Protocol):
    """A ``deliver`` in two steps (``ingest.handler.Handler``): prepare holds the GIL, store mostly waits."""

    def prepare(self, deliveries: Sequence[Delivery], /) -> Any: ...

    def store(self, prepared: Any, /) -> None: ...


class _Whole:
    """A plain ``deliver`` as a Staged one: everything happens in ``store`` (no overlap, same guarantees)."""

    def __init__(self, deliver: Deliver) -> None:
        self.deliver = deliver

    def prepare(self, deliveries: Sequence[Delivery]) -> Sequence[Delivery]:
        return deliveries

    def store(self, prepared: Sequence[Delivery]) -> None:
        self.deliver(prepared)


class Overlap:
    """One batch stored in the background while the caller prepares the next."""

    def __init__(self, deliver: Deliver | Staged) -> None:
        self.handler: Staged = deliver if isinstance(deliver, Staged) else _Whole(deliver)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ingest-store")
        self._in_flight: tuple[Future[None], Acknowledge] | None = None

    def submit(self, deliveries: Sequence[Delivery], acknowledge: Acknowledge) -> None:
        """Prepare ``deliveries``, finish the batch in flight, then start storing these.

        If the batch in flight failed, its error is raised and ``deliveries`` were not taken: the caller
        delivers both again.
        """
        prepared = self.handler.prepare(deliveries)
        self.wait()
        self._in_flight = (self._pool.submit(self.handler.store, prepared), acknowledge)

    def wait(self) -> None:
        """Until the batch in flight (if any) is stored and acknowledged; raises what storing it raised."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return
        future, acknowledge = in_flight
        future.result()
        acknowledge()

    @property
    def busy(self) -> bool:
        """A batch is in flight (stored or not yet: ``wait`` tells)."""
        return self._in_flight is not None

    def close(self) -> None:
        """Stop the store thread once the batch in flight ended (it is not acknowledged: call ``wait`` first)."""
        self._pool.shutdown(wait=True)
