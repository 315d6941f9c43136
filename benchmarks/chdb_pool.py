"""A client of the embedded engine that runs calls from several threads at once, as a ClickHouse server does.

A clickhouse-connect chdb client holds one engine connection and serialises the calls made on it with a lock;
a client of a ClickHouse server sends each thread's call over a connection of its own, and the server runs them
side by side. A harness that stands the embedded engine in for a server (``bench_eventhubs.py``: every worker's
partitions, and the lifecycle refresher's timer, store at the same time) lends each call an idle connection of
the same directory, opening another only when every one is busy.
"""

from __future__ import annotations

import threading
from typing import Any

from ingest.clickhouse import connect


class PooledClient:
    """``query``, ``command``, ``insert`` and ``insert_arrow`` on whichever connection of ``target`` is idle."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._idle: list[Any] = [connect(target)]
        self._every = list(self._idle)
        self.database = self._idle[0].database

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            client = self._idle.pop() if self._idle else None
        if client is None:
            client = connect(self._target)
            client.database = self.database
            with self._lock:
                self._every.append(client)
        try:
            return getattr(client, method)(*args, **kwargs)
        finally:
            with self._lock:
                self._idle.append(client)

    def query(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("query", *args, **kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("command", *args, **kwargs)

    def insert(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("insert", *args, **kwargs)

    def insert_arrow(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("insert_arrow", *args, **kwargs)

    @property
    def busy(self) -> int:
        """How many connections are lent to a call now."""
        with self._lock:
            return len(self._every) - len(self._idle)

    @property
    def connections(self) -> int:
        """How many engine connections the calls so far needed at once, at most."""
        return len(self._every)

    def close(self) -> None:
        with self._lock:
            every, self._every, self._idle = self._every, [], []
        for client in every:
            client.close()
