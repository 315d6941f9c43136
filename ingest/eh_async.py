"""The async Event Hubs client's surroundings: its event loop on a thread, and sync store and credential as async.

The source receives every partition with the SDK's async client on one event loop (``LoopThread``): a
partition waiting for events costs nothing, where the sync client's processor loop spins while it opens a
partition and serves its partitions one after another. The credential the ingest already has is
synchronous; ``AsyncCredential`` runs its calls on worker threads so the loop never blocks on them (and no
async HTTP stack is needed). The blob checkpoint store stays synchronous: ``ingest.eh_receiver`` calls it on
worker threads itself.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running on its own daemon thread until ``close``."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coroutine`` on the loop (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result."""
        return self.submit(coroutine).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class AsyncCredential:
    """A synchronous token credential (azure-identity) as the async token credential the async client needs."""

    def __init__(self, credential: Any) -> None:
        self.credential = credential

    async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.credential.get_token, *scopes, **kwargs)

    async def close(self) -> None:
        close = getattr(self.credential, "close", None)
        if close is not None:
            await asyncio.to_thread(close)

    async def __aenter__(self) -> AsyncCredential:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
