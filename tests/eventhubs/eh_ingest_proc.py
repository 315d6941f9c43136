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
from collections.abc import Callable, Sequence
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

from ingest.source import Delivery
from ingest.source_eventhubs import EventHubsSource


class RemoteDeliver:
    """``deliver`` over a connection to a ``StoreService``; raises when the service did not store the batch."""

    def __init__(self, port: int, key: bytes) -> None:
        self.connection = Client(("127.0.0.1", port), authkey=key)
        self.lock = threading.Lock()  # receivers deliver concurrently; one request on the wire at a time

    def __call__(self, batch: Sequence[Delivery]) -> None:
        with self.lock:
            self.connection.send([(d.payload, d.position, dict(d.properties)) for d in batch])
            answer = self.connection.recv()
        if answer != "ok":
            raise RuntimeError(f"the store service did not store the batch: {answer}")


class StoreService:
    """Accepts workers' batches on 127.0.0.1 and hands each to ``deliver``; answers "ok" only once it returned."""

    def __init__(self, deliver: Callable[[Sequence[Delivery]], None], key: bytes) -> None:
        self.deliver = deliver
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
            while True:
                raw: Any = connection.recv()
                try:
                    self.deliver([Delivery(payload, position, properties) for payload, position, properties in raw])
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
    deliver = RemoteDeliver(port, os.environ["SEVENTS_TEST_STORE_KEY"].encode())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    source.run(deliver, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
