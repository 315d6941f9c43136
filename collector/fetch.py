"""One bounded HTTP request (a GET, or an approval's POST): a total deadline, a body cap, and a stop that ends it.

Theory of operation. A socket timeout applies to each read, so a server trickling one byte a second holds a
request forever. Here the request runs in a short-lived daemon thread on a connection taken from a small
keep-alive pool (``Connections``). It streams the body with ``read1`` (whatever has arrived, never waiting for
a full chunk), checks the deadline between reads and stops at ``max_bytes``; the caller waits on that thread,
on ``stop`` and on the deadline, whichever comes first. At the deadline (or on stop) the caller shuts the
request's socket, which ends a read blocked in the worker at once, whether it waits for the status line, the
headers or the body. Only an answer read whole, from a server that keeps the connection open, gives its
connection back to the pool; a connection the server closed while idle is noticed before reuse and replaced.

The client is the standard library's ``http.client`` and IMDS is plain HTTP: no proxy is ever consulted,
redirects are answers like any other, and nothing is decompressed (we ask for ``identity``). It is also what
keeps the collector small: an HTTP library on top (requests, urllib3) costs several MiB of resident memory.

Errors::

    FetchError (kind: "timeout" | "connection" | "too_large")
    └── FetchInterrupted    stop was set while waiting
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

# An IMDS document is a few KiB; anything far larger is hostile or broken, and must not cost memory.
DEFAULT_MAX_BYTES: Final = 256 * 1024
_STILL_WAITING_S: Final = 10.0
_READ_SIZE: Final = 64 * 1024
# Idle connections kept open: one each for the poll loop and the instance-metadata worker.
_KEEP_IDLE: Final = 2


class FetchError(Exception):
    """The GET did not produce a whole answer; ``kind`` says why (a metric label)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class FetchInterrupted(FetchError):
    """``stop`` was set while the GET was in progress."""

    def __init__(self) -> None:
        super().__init__("interrupted", "stopped while waiting for the answer")


@dataclass(frozen=True)
class Answer:
    """A whole HTTP answer of any status: status, body (at most the cap), headers and the URL asked.

    Header names are in lower case; a header sent more than once has its values joined with ", ".
    """

    status: int
    body: bytes
    headers: Mapping[str, str]
    url: str


class Connections:
    """Keep-alive HTTP connections, each used by one request at a time; thread-safe."""

    def __init__(self, *, keep: int = _KEEP_IDLE) -> None:
        self._keep = keep
        self._idle: list[tuple[str, http.client.HTTPConnection]] = []
        self._lock = threading.Lock()
        self._closed = False

    def take(self, netloc: str, connect_timeout_s: float) -> http.client.HTTPConnection:
        """An idle connection to ``netloc`` that is still open, or a new one (connected by its first request)."""
        while True:
            with self._lock:
                index = next((i for i, (n, _) in enumerate(self._idle) if n == netloc), None)
                if index is None:
                    break
                _, connection = self._idle.pop(index)
            if not _dropped(connection):
                return connection
            connection.close()
        return http.client.HTTPConnection(netloc, timeout=connect_timeout_s)

    def give_back(self, netloc: str, connection: http.client.HTTPConnection) -> None:
        """Keep ``connection`` for the next request to ``netloc`` (closed instead when enough are kept)."""
        with self._lock:
            if not self._closed and len(self._idle) < self._keep:
                self._idle.append((netloc, connection))
                return
        connection.close()

    def close(self) -> None:
        """Close the idle connections; connections given back later are closed at once."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for _, connection in idle:
            connection.close()


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle connection can no longer carry a request: closed, or readable (EOF or unasked-for bytes)."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        if not hasattr(select, "poll"):  # Windows: select() takes sockets there, and a collector has few
            return bool(select.select([sock], [], [], 0)[0])
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class _Exchange:
    """The socket of one worker's request, for the caller to shut when it stops waiting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._abandoned = False

    def attach(self, sock: socket.socket) -> bool:
        """The worker's socket is ready; False if the caller has stopped waiting already."""
        with self._lock:
            self._sock = sock
            return not self._abandoned

    def detach(self) -> bool:
        """The worker is done with the socket; whether it may be reused (never once the caller cut it)."""
        with self._lock:
            self._sock = None
            return not self._abandoned

    def abandon(self) -> None:
        """Shut the socket under a worker still reading, so an abandoned request ends now, not at the server's will."""
        with self._lock:
            self._abandoned = True
            sock = self._sock
        if sock is not None:
            # Best effort: the worker may have closed it a moment ago.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def bounded_get(
    connections: Connections,
    url: str,
    *,
    headers: Mapping[str, str],
    connect_timeout_s: float,
    total_s: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    stop: threading.Event,
    monotonic: Callable[[], float] = time.monotonic,
    on_send: Callable[[], None] = lambda: None,
    logger: logging.Logger = log,
    method: str = "GET",
    body: bytes | None = None,
) -> Answer:
    """GET ``url`` (plain HTTP): the whole answer within ``total_s`` seconds and ``max_bytes`` bytes, or FetchError.

    ``on_send`` is called in the request's thread just before the request leaves (pacing counts from then).
    ``method`` and ``body`` make it another request under the same bounds (the approval's POST).
    """
    deadline = time.monotonic() + total_s  # the real clock: the deadline is enforced by real waits
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # identity: a compressed body could expand far beyond the cap we count on the wire.
    wanted = {**headers, "Accept-Encoding": "identity"}
    sending = body
    if body is not None:
        wanted["Content-Type"] = "application/json"
    outcome: list[Answer | BaseException] = []
    sent: list[bool] = []
    exchange = _Exchange()
    done = threading.Event()

    def work() -> None:
        try:
            on_send()
            connection = connections.take(parts.netloc, connect_timeout_s)
            try:
                if connection.sock is None:
                    connection.connect()
                sock = connection.sock
                if sock is None or not exchange.attach(sock):
                    raise FetchInterrupted()  # the caller has gone: nobody waits for this answer
                sock.settimeout(total_s)  # each read; the caller enforces the total
                connection.request(method, target, body=sending, headers=wanted)
                sent.append(True)
                response = connection.getresponse()
                try:
                    body = _read_capped(response, max_bytes, deadline)
                finally:
                    response.close()
                answer = Answer(response.status, body, _headers(response), url)
            except BaseException:
                connection.close()
                raise
            if exchange.detach() and not response.will_close:
                connections.give_back(parts.netloc, connection)
            else:
                connection.close()
            outcome.append(answer)
        except BaseException as error:  # noqa: BLE001 -- handed to the waiting thread, which translates it
            outcome.append(error)
        finally:
            done.set()

    threading.Thread(target=work, name="imds-request", daemon=True).start()
    started = monotonic()
    next_note = started + _STILL_WAITING_S
    while not done.wait(max(0.0, min(0.1, deadline - time.monotonic()))):
        if stop.is_set():
            exchange.abandon()
            raise FetchInterrupted()
        if time.monotonic() >= deadline:
            exchange.abandon()
            raise FetchError("timeout", f"no whole answer from {url} within {total_s:g} s")
        now = monotonic()
        if now >= next_note:
            # A slow request (the first call may take 2 minutes) is logged now and then, never a silent wait.
            logger.info(
                "still waiting for IMDS", extra={"url": url, "waited_s": round(now - started), "limit_s": total_s}
            )
            next_note = now + _STILL_WAITING_S
    result = outcome[0]
    if isinstance(result, Answer):
        return result
    if isinstance(result, FetchError):
        raise result
    if isinstance(result, TimeoutError):  # socket.timeout: connecting, or one read, took the whole deadline
        raise FetchError("timeout", f"no answer from {url} in time: {result}") from result
    if isinstance(result, (http.client.HTTPException, OSError)):
        # Refused or unreachable before the request left; a malformed, short or reset answer after it.
        detail = _reason(result)
        if sent:
            raise FetchError("connection", f"answer from {url} broken off: {detail}") from result
        raise FetchError("connection", f"cannot reach {url}: {detail}") from result
    raise result


def _read_capped(response: http.client.HTTPResponse, max_bytes: int, deadline: float) -> bytes:
    declared = response.length  # Content-Length as http.client read it; None when chunked or unframed
    if declared is not None and declared > max_bytes:
        raise FetchError("too_large", f"answer of {declared} bytes is over the {max_bytes}-byte cap")
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() >= deadline:
            raise FetchError("timeout", "the answer's body did not arrive in time")
        chunk = response.read1(_READ_SIZE)
        if not chunk:
            if response.length:  # bytes still owed by the Content-Length: the server hung up early
                raise FetchError("connection", f"answer broken off {response.length} bytes short of its length")
            return b"".join(chunks)  # one chunk (an IMDS document) is returned as it is, not copied
        size += len(chunk)
        if size > max_bytes:
            raise FetchError("too_large", f"answer is over the {max_bytes}-byte cap")
        chunks.append(chunk)


def _headers(response: http.client.HTTPResponse) -> dict[str, str]:
    joined: dict[str, str] = {}
    for name, value in response.getheaders():
        key = name.lower()
        joined[key] = f"{joined[key]}, {value}" if key in joined else value
    return joined


def _reason(error: BaseException) -> str:
    """A readable message for errors whose str() may be empty (RemoteDisconnected, IncompleteRead)."""
    return str(error) or type(error).__name__
