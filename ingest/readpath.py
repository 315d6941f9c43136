"""Reading an embedded ClickHouse that a running ingest holds: the ingest answers read-only queries for others.

The embedded engine (chDB) lets one process open its directory. While ``sevents-ingest run`` holds it, the ingest
serves queries on a Unix socket in that directory (``read.sock``, mode 0600: the ingest's user only), and
``audit`` and ``report`` ask it there instead of failing with "Cannot lock file". Each query runs with
``readonly=1``, its parameters bound by ClickHouse as ever; one JSON request per connection, one JSON answer.
Only a single SELECT is answered, and never one with ``INTO OUTFILE``: the engine runs in the ingest's process,
so ``readonly`` alone would let an asker write a file as the ingest's user.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

SOCKET_FILE: Final = "read.sock"
MAX_REQUEST: Final = 1 << 20  # bytes of one request (SQL and parameters)


def socket_path(directory: Path) -> Path:
    """Where the ingest holding ``directory`` answers queries."""
    return directory / SOCKET_FILE


class ReadServer:
    """Answers read-only queries with ``client`` (a client of its own on the engine the ingest holds) on the
    directory's socket, one at a time, until ``close``."""

    def __init__(self, directory: Path, client: Any) -> None:
        self.path = socket_path(directory)
        self.path.unlink(missing_ok=True)  # left by a process that died: the engine's lock says we own it now
        server = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                request = self.rfile.read(MAX_REQUEST)
                if not request:
                    # ``answering`` connects and hangs up to see whether an ingest is here: nothing to answer
                    log.debug("a connection closed without a query (a probe)")
                    return
                try:
                    self.wfile.write(server.answer(request))
                except (BrokenPipeError, ConnectionResetError):
                    # the asker gave up (killed, timed out, Ctrl-C): normal, and nothing to tell the operator
                    log.debug("the asker closed its connection before the answer")

        old = os.umask(0o177)
        try:
            self._server = _Server(str(self.path), Handler)
        finally:
            os.umask(old)
        self._server.daemon_threads = True
        self._client = client
        self._lock = threading.Lock()  # the client's database is per asker: one query at a time
        self._closed = False
        self._thread = threading.Thread(target=self._server.serve_forever, name="ingest-read", daemon=True)
        self._thread.start()
        log.info("answering read-only queries", extra={"socket": str(self.path)})

    def answer(self, request: bytes) -> bytes:
        try:
            asked = json.loads(request)
            with self._lock:
                if self._closed:
                    raise ReadError("the ingest is stopping: ask again once it has stopped")
                # the asker's database: audit queries name their tables without one
                self._client.database = asked.get("database") or "default"
                _refuse_writes(self._client, asked["sql"])
                result = self._client.query(
                    asked["sql"], parameters=asked.get("parameters") or {}, settings={"readonly": 1}
                )
            answer: dict[str, Any] = {
                "columns": list(result.column_names),
                "rows": [[_out(v) for v in r] for r in result.result_rows],
            }
        except Exception as error:  # noqa: BLE001 -- any failure goes back to the asker, never kills the ingest
            answer = {"error": str(error).strip().splitlines()[0][:500] if str(error).strip() else repr(error)}
        return json.dumps(answer).encode()

    def close(self) -> None:
        """Stop listening, and wait for an answer in flight: none runs after this returns, so the ingest may then
        close the client."""
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)
        with self._lock:
            self._closed = True


def _refuse_writes(client: Any, sql: str) -> None:
    """Raise ReadError unless ``sql`` is one SELECT that writes nothing (ClickHouse's own parser decides)."""
    formatted = client.query("SELECT formatQuerySingleLine({sql:String})", parameters={"sql": sql}).result_rows
    text = str(formatted[0][0]).upper()
    if not text.startswith(("SELECT", "WITH", "(")):
        raise ReadError("the read socket answers SELECT queries only")
    if "INTO OUTFILE" in text:
        raise ReadError("INTO OUTFILE is refused: the read socket answers queries, it does not write files")


class _Server(socketserver.ThreadingUnixStreamServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line in the ingest's format, never socketserver's raw traceback on stderr (a query's own
        failure goes back to the asker; this is only for the connection itself)."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            log.debug("a read query connection ended early", extra={"error": repr(error)})
        else:
            log.warning("a read query connection failed", extra={"error": repr(error)})


@dataclass
class Answer:
    """What ``ReadClient.query`` returns: the two attributes of a clickhouse-connect result the readers use."""

    column_names: tuple[str, ...]
    result_rows: list[tuple[Any, ...]] = field(default_factory=list)


class ReadClient:
    """Asks the ingest holding ``directory`` (the clickhouse-connect calls ``audit`` and ``report`` make)."""

    def __init__(self, directory: Path) -> None:
        self.path = socket_path(directory)
        self.database = ""

    def query(self, sql: str, parameters: Mapping[str, Any] | None = None, **_: Any) -> Answer:
        request = json.dumps({"sql": sql, "parameters": dict(parameters or {}), "database": self.database}).encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(300)
            conn.connect(str(self.path))
            conn.sendall(request)
            conn.shutdown(socket.SHUT_WR)
            answer = json.loads(b"".join(iter(lambda: conn.recv(1 << 16), b"")))
        if "error" in answer:
            raise ReadError(answer["error"])
        return Answer(tuple(answer["columns"]), [tuple(_in(v) for v in row) for row in answer["rows"]])

    def close(self) -> None:
        pass


class ReadError(Exception):
    """The ingest could not answer the query (its message says why)."""


def _out(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$t": value.isoformat()}
    if isinstance(value, date):
        return {"$d": value.isoformat()}
    if isinstance(value, (list, tuple)):
        return [_out(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)  # UUIDs, decimals: as text


def _in(value: Any) -> Any:
    if isinstance(value, dict) and "$t" in value:
        return datetime.fromisoformat(value["$t"])
    if isinstance(value, dict) and "$d" in value:
        return date.fromisoformat(value["$d"])
    if isinstance(value, list):
        return [_in(v) for v in value]
    return value


def answering(directory: Path) -> bool:
    """Whether an ingest answers queries for ``directory`` (its socket accepts a connection)."""
    path = socket_path(directory)
    if not path.exists():
        return False
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(2)
        conn.connect(str(path))
        return True
    return False
