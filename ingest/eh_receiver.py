"""One partition's receive loop on the SDK's partition consumer: hand each batch over, then checkpoint it.

Why not ``EventHubConsumerClient.receive_batch(partition_id=...)``: that wraps the partition consumer in the
SDK's ``EventProcessor``, which reads the hub's partition ids over a management link of its own (a whole
AMQP connection: SASL, open, begin, claims-based auth, two link attaches, the request; half a second here)
and lists every checkpoint again, each time a partition is opened. The source already knows both, and a
worker restarted after a crash waits for all of it before the first batch. So the receiver creates the
partition consumer the ``EventProcessor`` would have made, with the same arguments (owner level 0, as the
SDK sets with a checkpoint store; the checkpoint's offset, exclusive, else the beginning of retention), and
runs its batch receive. ``EventHubConsumerClient._create_consumer`` is the SDK internal this relies on
(unchanged since azure-eventhub 5.0); ``ingest.eh_open`` opens the link without the SDK's 50 ms sleeps, and
falls back to the SDK's own opening if its internals ever differ.

Checkpoints are written by a task of their own, strictly after the batch was handed over and stored: the
next batch no longer waits behind a blob write. Only the newest stored position is written (an older one
never after a newer), and a stopping receiver waits for the batch it is delivering and for that write.

Receiving ends on the first error (a failed deliver, a lost link): the source's balancer starts a new
receiver from the stored checkpoint at its next round if the partition is still this worker's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient

from ingest.eh_async import LoopThread
from ingest.eh_open import open_promptly

log = logging.getLogger(__name__)

Handle = Callable[[list[EventData]], None]  # deliver one batch (on a worker thread); raises if not stored
Checkpoint = Callable[[dict[str, Any]], None]  # the checkpoint store's update_checkpoint (synchronous)

START_OF_RETENTION = "-1"  # no checkpoint: read the backlog, never from @latest


def start_position(checkpoint: Mapping[str, Any] | None) -> str:
    """Where a partition resumes: after the checkpoint's offset, else at the beginning of retention."""
    offset = checkpoint.get("offset") if checkpoint else None
    return str(offset) if offset else START_OF_RETENTION


class CheckpointWriter:
    """Writes the newest stored position of one partition, one write at a time, off the receive path."""

    def __init__(self, write: Checkpoint, scope: Mapping[str, str]) -> None:
        self._write, self._scope = write, dict(scope)
        self._newest: EventData | None = None
        self._writing = False
        self._wake = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    def stored(self, event: EventData) -> None:
        """``event`` and everything before it on the partition is stored: checkpoint it (soon)."""
        self._newest = event
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            event, self._newest = self._newest, None
            if event is None:
                continue
            checkpoint = {**self._scope, "offset": event.offset, "sequence_number": event.sequence_number}
            self._writing = True
            try:
                await asyncio.to_thread(self._write, checkpoint)
            except Exception as error:  # noqa: BLE001 - the next batch's checkpoint covers this one
                partition = self._scope["partition_id"]
                log.warning("checkpoint write failed", extra={"partition": partition, "error": repr(error)})
            finally:
                self._writing = False

    async def close(self, timeout: float = 10.0) -> None:
        """Write what is pending (the next owner starts from it), then stop."""
        deadline = asyncio.get_running_loop().time() + timeout
        while (self._newest is not None or self._writing) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class PartitionReceiver:
    """Receives one partition on ``loop`` from ``position`` until stopped or until receiving fails."""

    def __init__(
        self,
        client: EventHubConsumerClient,
        loop: LoopThread,
        scope: Mapping[str, str],
        position: str,
        handle: Handle,
        checkpoint: Checkpoint | None,
        *,
        max_batch_size: int,
        max_wait_time: float,
    ) -> None:
        self.partition = scope["partition_id"]
        self._client, self._scope, self._position = client, scope, position
        self._handle, self._checkpoint = handle, checkpoint
        self._max_batch_size, self._max_wait_time = max_batch_size, max_wait_time
        self._loop = loop
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._done: Future[None] = loop.submit(self._run())

    async def _run(self) -> None:
        self._task = asyncio.current_task()
        if self._closed:  # stopped before it started
            return
        scope, handle = self._scope, self._handle
        writer = CheckpointWriter(self._checkpoint, scope) if self._checkpoint is not None else None
        inflight: list[tuple[asyncio.Future[None], EventData]] = []

        async def on_batch(events: list[EventData] | None) -> None:
            if events:
                delivering: asyncio.Future[None] = asyncio.ensure_future(asyncio.to_thread(handle, events))
                inflight[:] = [(delivering, events[-1])]
                await asyncio.shield(delivering)  # a stop waits for the batch rather than abandon it mid-insert
                inflight.clear()
                if writer is not None:
                    writer.stored(events[-1])  # strictly after deliver returned: stored (or dead-lettered)

        consumer = self._client._create_consumer(  # an SDK internal: see the module docstring
            scope["consumer_group"],
            self.partition,
            self._position,
            on_batch,  # type: ignore[arg-type]  # called with the batch alone, as the SDK's own processor binds it
            event_position_inclusive=False,
            owner_level=0,
        )
        try:
            await open_promptly(consumer)  # else receive() opens it, 50 ms per handshake frame
            await consumer.receive(True, self._max_batch_size, self._max_wait_time)
        except asyncio.CancelledError:
            pass  # stopped
        except Exception as error:  # noqa: BLE001 - the balancer starts a new receiver next round
            log.warning("partition receiver stopped", extra={"partition": self.partition, "error": repr(error)})
        finally:
            await _settle(inflight, writer)
            await consumer.close()

    def alive(self) -> bool:
        return not self._done.done() and not self._closed

    def stop(self, *, join: bool = True) -> None:
        if not self._closed:
            self._closed = True
            self._loop.loop.call_soon_threadsafe(self._cancel)
        if join:
            self.join()

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def join(self) -> None:
        try:
            self._done.result(30)
        except Exception:
            log.debug("partition receiver ended with an error", exc_info=True)


async def _settle(inflight: list[tuple[asyncio.Future[None], EventData]], writer: CheckpointWriter | None) -> None:
    """Let a batch being delivered finish (checkpointed only if it was stored), then write the last checkpoint."""
    for delivering, last in inflight:
        try:
            await asyncio.wait_for(asyncio.shield(delivering), 30)
        except (Exception, asyncio.CancelledError) as error:  # noqa: BLE001 - not stored: not checkpointed, read again
            log.debug("the batch being delivered at the stop was not stored", extra={"error": repr(error)})
            continue
        if writer is not None:
            writer.stored(last)
    if writer is not None:
        await writer.close()
