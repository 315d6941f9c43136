"""The local Event Hubs endpoint in a process of its own, as the service is: the benchmark's threads do not share
its interpreter lock.

In one process with 64 collectors, the simulator and the store service (several hundred threads), the
endpoint's I/O thread waited its turn for the lock between every socket read and write, and that wait was
charged to the collectors' shipping (``observed->enqueued``) and to the workers' receiving. Here the endpoint
runs alone in a child process; the parent holds a view with what callers of ``EventHubsEndpoint`` read: host,
port, connection string and the store's name, partition ids and events (fetched over a pipe, for the
figures at the end). Stopping it stops the child.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import threading
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from tests.eventhubs.hub_store import StoredEvent

ROOT = Path(__file__).resolve().parents[2]
KEY_ENV = "SEVENTS_TEST_ENDPOINT_KEY"  # the pipe's key goes by the environment, never the command line


class StoreView:
    """The parts of ``HubStore`` the benchmark reads, from the endpoint's process."""

    def __init__(self, pipe: Connection, name: str, partition_ids: list[str]) -> None:
        self._pipe, self.name, self.partition_ids = pipe, name, partition_ids
        self._lock = threading.Lock()  # one request on the pipe at a time

    def events(self, partition_id: str) -> list[StoredEvent]:
        with self._lock:
            self._pipe.send(("events", partition_id))
            events: list[StoredEvent] = self._pipe.recv()
        return events


class EndpointProcess:
    """``EventHubsEndpoint`` in a child process; a context manager, like it."""

    def __init__(self) -> None:
        self.host, self.port = "127.0.0.1", 0
        self._connection_string = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._pipe: Connection | None = None
        self.store: StoreView | None = None

    def __enter__(self) -> EndpointProcess:
        key = secrets.token_bytes(16)
        with Listener(("127.0.0.1", 0), authkey=key) as listener:
            port = listener.address[1]
            env = {**os.environ, KEY_ENV: key.hex()}
            command = [sys.executable, "-m", "tests.eventhubs.endpoint_proc", str(port)]
            self._process = subprocess.Popen(command, cwd=ROOT, env=env)
            self._pipe = listener.accept()
        self.host, self.port, self._connection_string, name, partitions = self._pipe.recv()
        self.store = StoreView(self._pipe, name, partitions)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pipe is not None:
            with contextlib.suppress(OSError):  # the child is gone already
                self._pipe.send(("stop", None))
        if self._process is not None:
            try:
                self._process.wait(15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(5)

    def connection_string(self) -> str:
        return self._connection_string


def main(argv: list[str]) -> int:
    from tests.eventhubs.amqp_endpoint import EventHubsEndpoint

    pipe = Client(("127.0.0.1", int(argv[0])), authkey=bytes.fromhex(os.environ[KEY_ENV]))
    with EventHubsEndpoint() as endpoint:
        store = endpoint.store
        pipe.send((endpoint.host, endpoint.port, endpoint.connection_string(), store.name, store.partition_ids))
        while True:
            try:
                request, argument = pipe.recv()
            except EOFError:
                return 0
            if request == "stop":
                return 0
            answer: Any = store.events(argument) if request == "events" else None
            pipe.send(answer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
