"""A killable Event Hubs ingest worker whose ``deliver`` stores through a ClickHouse owned by another process.

chdb admits one process per data directory, so the process that owns ClickHouse runs ``StoreService`` and
this worker sends it each batch and waits for the answer, as a worker would wait for a ClickHouse server:
``deliver`` returns only once the batch is stored, and the partition is checkpointed only then.
Credentials and the service's key come from the environment (``SEVENTS_TEST_HUB``,
``SEVENTS_TEST_CHECKPOINTS``, ``SEVENTS_TEST_STORE_KEY``), never from the command line.
Usage: python -m tests.eventhubs.eh_ingest_proc CONTAINER OWNER_ID STORE_PORT EXPIRY_S
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, Listener

from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

from ingest.source import Delivery
from ingest.source_eventhubs import EventHubsSource


class RemoteDeliver:
    """``deliver`` over connections to a ``StoreService``; raises when the service did not store the batch.

    One connection per concurrent call (kept for reuse): the receivers of a worker's partitions insert at the
    same time, as they do into a ClickHouse server (``ingest.clickhouse.connect`` uses no session for that).
    """

    def __init__(self, port: int, key: bytes, owner_id: str = "") -> None:
        self.port, self.key, self.owner_id = port, key, owner_id
        self.lock = threading.Lock()  # guards ``idle``
        self.idle: list[Connection] = [self._connect()]

    def _connect(self) -> Connection:
        connection = Client(("127.0.0.1", self.port), authkey=self.key)
        connection.send((self.owner_id, os.getpid()))  # which worker process stores: see StoreService
        return connection

    def __call__(self, batch: Sequence[Delivery]) -> None:
        called_at = time.time()  # the receiver handed the batch over (the benchmark's stage timings)
        rows = [(d.payload, d.position, dict(d.properties)) for d in batch]
        with self.lock:
            connection = self.idle.pop() if self.idle else None
        connection = connection or self._connect()
        connection.send((called_at, time.time(), rows))
        answer = connection.recv()
        with self.lock:
            self.idle.append(connection)
        if answer != "ok":
            raise RuntimeError(f"the store service did not store the batch: {answer}")


@dataclass(frozen=True)
class BatchTiming:
    """When one batch passed each point between a worker's receiver and ClickHouse (``time.time()``)."""

    positions: tuple[str, ...]
    called_at: float  # the worker's deliver was called (the SDK handed the batch over)
    sent_at: float  # the worker's connection was free and the batch went out
    arrived_at: float  # this service read it
    stored_at: float  # deliver returned (stored)


Deliver = Callable[[Sequence[Delivery]], None]


class StoreService:
    """Accepts workers' batches on 127.0.0.1 and hands each to ``deliver``; answers "ok" only once it returned.

    ``deliver_for(owner_id, pid)``, when given, chooses the ``deliver`` of each worker process (a worker stores
    through an ingest handler of its own, whose state, such as its verify window, starts with the process).
    """

    def __init__(
        self, deliver: Deliver, key: bytes, *, deliver_for: Callable[[str, int], Deliver] | None = None
    ) -> None:
        self.deliver = deliver
        self.deliver_for = deliver_for
        self.timings: list[BatchTiming] = []  # stored batches, in the order they were stored
        self.listener = Listener(("127.0.0.1", 0), authkey=key)
        self.port = int(self.listener.address[1])
        threading.Thread(target=self._accept, name="store-service", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: Connection) -> None:
        try:
            owner_id, pid = connection.recv()
            deliver = self.deliver_for(owner_id, pid) if self.deliver_for is not None else self.deliver
            while True:
                called_at, sent_at, raw = connection.recv()
                arrived_at = time.time()
                try:
                    deliver([Delivery(payload, position, properties) for payload, position, properties in raw])
                    positions = tuple(position for _, position, _ in raw)
                    self.timings.append(BatchTiming(positions, called_at, sent_at, arrived_at, time.time()))
                    connection.send("ok")
                except Exception as error:  # answered, so the worker does not checkpoint
                    connection.send(repr(error))
        except (EOFError, OSError):
            return  # the worker went away (killed or stopped)

    def close(self) -> None:
        self.listener.close()


def main(argv: list[str]) -> int:
    container, owner_id, port, expiry = argv[0], argv[1], int(argv[2]), float(argv[3])
    logging.basicConfig(level=logging.WARNING, format="%(relativeCreated)6d ms %(name)s %(message)s")
    logging.getLogger("ingest").setLevel(logging.INFO)
    store = BlobCheckpointStore.from_connection_string(os.environ["SEVENTS_TEST_CHECKPOINTS"], container)
    source = EventHubsSource.from_connection_string(
        os.environ["SEVENTS_TEST_HUB"],
        checkpoint_store=store,
        owner_id=owner_id,
        load_balancing_interval=0.5,
        ownership_expiry=expiry,
        max_wait_time=0.1,
    )
    deliver = RemoteDeliver(port, os.environ["SEVENTS_TEST_STORE_KEY"].encode(), owner_id)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    source.run(deliver, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
