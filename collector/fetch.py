"""One bounded HTTP GET: a total deadline (not a per-read timeout), a cap on the body, and a stop that ends it.

Theory of operation. requests' ``timeout`` applies to each socket read, so a server trickling one byte a
second holds a request forever. Here the request runs in a short-lived daemon thread that streams the body
with ``read1`` (whatever has arrived, never waiting for a full chunk), checks the deadline between reads and
stops at ``max_bytes``; the caller waits on that thread, on ``stop`` and on the deadline, whichever comes
first. At the deadline (or on stop) the caller shuts the response's socket, which ends a read blocked in the
worker at once. A server that trickles the status line or the headers cannot be cut that way (requests
exposes no socket before the headers are in): the caller still returns at the deadline, and the abandoned
thread ends at the first pause longer than the per-read timeout or when the server gives up.

Errors::

    FetchError (kind: "timeout" | "connection" | "too_large")
    └── FetchInterrupted    stop was set while waiting
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import requests
import urllib3
from requests.structures import CaseInsensitiveDict

log = logging.getLogger(__name__)

# An IMDS document is a few KiB; anything far larger is hostile or broken, and must not cost memory.
DEFAULT_MAX_BYTES: Final = 256 * 1024
# Empty strings, not None: requests drops None entries when merging, "" survives and means "no proxy".
NO_PROXY: Final = {"http": "", "https": "", "all": "", "no": ""}
_STILL_WAITING_S: Final = 10.0
_READ_SIZE: Final = 64 * 1024


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
    """A whole HTTP answer of any status: status, body (at most the cap), headers and the URL asked."""

    status: int
    body: bytes
    headers: Mapping[str, str]
    url: str


def bounded_get(
    session: requests.Session,
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
) -> Answer:
    """GET ``url``: the whole answer within ``total_s`` seconds and ``max_bytes`` bytes, or FetchError.

    ``on_send`` is called in the request's thread just before the request leaves (pacing counts from then).
    """
    deadline = time.monotonic() + total_s  # the real clock: the deadline is enforced by real waits
    outcome: list[Answer | BaseException] = []
    responses: list[requests.Response] = []
    done = threading.Event()
    # identity: a compressed body could expand far beyond the cap we count on the wire.
    wanted = {**headers, "Accept-Encoding": "identity"}

    def work() -> None:
        try:
            on_send()
            response = session.get(
                url,
                headers=wanted,
                timeout=(connect_timeout_s, total_s),
                allow_redirects=False,
                proxies=NO_PROXY,
                stream=True,
            )
            responses.append(response)
            try:
                body = _read_capped(response, max_bytes, deadline)
            finally:
                response.close()
            outcome.append(Answer(response.status_code, body, CaseInsensitiveDict(response.headers), url))
        except BaseException as error:  # noqa: BLE001 -- handed to the waiting thread, which translates it
            outcome.append(error)
        finally:
            done.set()

    threading.Thread(target=work, name="imds-request", daemon=True).start()
    started = monotonic()
    next_note = started + _STILL_WAITING_S
    while not done.wait(max(0.0, min(0.1, deadline - time.monotonic()))):
        if stop.is_set():
            _cut(responses)
            raise FetchInterrupted()
        if time.monotonic() >= deadline:
            _cut(responses)
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
    # While streaming the body, urllib3 raises its own errors (a short body, a read timeout), not requests'.
    if isinstance(result, urllib3.exceptions.TimeoutError):
        raise FetchError("timeout", f"no answer from {url} in time: {result}") from result
    if isinstance(result, urllib3.exceptions.HTTPError):
        raise FetchError("connection", f"answer from {url} broken off: {result}") from result
    if isinstance(result, requests.Timeout):
        raise FetchError("timeout", f"no answer from {url} in time: {_reason(result)}") from result
    if isinstance(result, requests.RequestException):
        raise FetchError("connection", f"cannot reach {url}: {_reason(result)}") from result
    if isinstance(result, OSError):  # a socket shut under a read, or reset by the peer
        raise FetchError("connection", f"connection to {url} failed: {result}") from result
    raise result


def _read_capped(response: requests.Response, max_bytes: int, deadline: float) -> bytes:
    declared = response.headers.get("Content-Length", "")
    if declared.isdecimal() and int(declared) > max_bytes:
        raise FetchError("too_large", f"answer of {declared} bytes is over the {max_bytes}-byte cap")
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() >= deadline:
            raise FetchError("timeout", "the answer's body did not arrive in time")
        chunk = response.raw.read1(_READ_SIZE, decode_content=False)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise FetchError("too_large", f"answer is over the {max_bytes}-byte cap")
        chunks.append(chunk)


def _cut(responses: list[requests.Response]) -> None:
    """Shut the socket under a worker still reading, so an abandoned request ends now, not at the server's will."""
    for response in responses:
        # Best effort: the worker may have closed it a moment ago.
        with contextlib.suppress(Exception):
            response.raw.shutdown()


def _reason(error: BaseException) -> str:
    """The innermost useful message of a requests/urllib3 error (they nest MaxRetryError(reason=...))."""
    inner = error.args[0] if error.args else error
    return str(getattr(inner, "reason", inner))
