"""The IMDS HTTP edge: GET Scheduled Events and instance metadata, never via a proxy, under a written retry policy.

Theory of operation. Each request runs in a short-lived daemon thread while the caller waits on it and on
``stop``, so the first call may take the documented two minutes yet shutdown returns at once. Requests carry
``Metadata: true``, never ``X-Forwarded-For``, ignore every proxy setting (``trust_env=False`` and explicit
empty ``proxies``), and never follow redirects. Requests from one client are spaced by ``min_interval_s`` so
the collector stays well below the ~5 requests/s that IMDS allows per VM across all agents. What is retried,
for how long, and which api-version comes next is decided by the pure policy in ``collector.imds_policy``.

Errors::

    ImdsError (kind: str, status: int | None)
    └── ImdsInterrupted    stop was set while waiting; not a failure of IMDS
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import requests

import sevents
from collector.imds_policy import (
    DEFAULT_API_VERSION,
    DEFAULT_INSTANCE_API_VERSION,
    RETRYABLE_KINDS,
    SCHEDULED_EVENTS_VERSIONS,
    ImdsPolicy,
    choose_version,
    classify,
    newest_versions,
    parse_retry_after,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL: Final = "http://169.254.169.254"

# Empty strings, not None: requests drops None entries when merging, "" survives and means "no proxy".
_NO_PROXY: Final = {"http": "", "https": "", "all": "", "no": ""}
_STILL_WAITING_S: Final = 10.0


class ImdsError(Exception):
    """A fetch from IMDS failed; ``kind`` names why (a metric label), ``status`` the HTTP status if any."""

    def __init__(
        self,
        kind: str,
        message: str,
        status: int | None = None,
        *,
        retry_after: float | None = None,
        offered: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after  # seconds, from a 429's Retry-After
        self.offered = tuple(offered)  # api-versions a 400 named in newest-versions


class ImdsInterrupted(ImdsError):
    """Shutdown was requested while a request or a backoff was in progress."""

    def __init__(self) -> None:
        super().__init__("interrupted", "stopped while waiting for IMDS")


@dataclass(frozen=True)
class ImdsResponse:
    """A successful fetch: the body, the api-version that produced it, and the last attempt's latency."""

    body: bytes
    api_version: str
    latency_s: float
    attempts: int


def scheduled_events_url(base_url: str, api_version: str) -> str:
    """The Scheduled Events URL under ``base_url``; the 2017-03-01 preview used the ``latest`` path."""
    path = "/metadata/latest/scheduledevents" if api_version == "2017-03-01" else "/metadata/scheduledevents"
    return f"{base_url.rstrip('/')}{path}?api-version={api_version}"


def instance_url(base_url: str, api_version: str) -> str:
    """The instance metadata URL under ``base_url``."""
    return f"{base_url.rstrip('/')}/metadata/instance?api-version={api_version}"


def new_session() -> requests.Session:
    """A session that can only talk to IMDS directly: no proxies from the environment, no netrc."""
    session = requests.Session()
    return harden(session)


def harden(session: requests.Session) -> requests.Session:
    """Make any session safe for IMDS (also one passed in by a caller)."""
    session.trust_env = False
    session.proxies = dict(_NO_PROXY)
    session.headers.pop("X-Forwarded-For", None)
    session.headers["User-Agent"] = f"sevents-collector/{sevents.__version__}"
    return session


class ImdsClient:
    """Fetches Scheduled Events and instance metadata from one IMDS base URL."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_version: str = DEFAULT_API_VERSION,
        instance_api_version: str = DEFAULT_INSTANCE_API_VERSION,
        session: requests.Session | None = None,
        policy: ImdsPolicy | None = None,
        on_error: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url
        self.api_version = api_version
        self.instance_api_version = instance_api_version
        self.policy = policy or ImdsPolicy()
        self._session = harden(session) if session is not None else new_session()
        self._on_error = on_error or (lambda kind: None)
        self._monotonic = monotonic
        self._warm = False  # becomes True at the first HTTP response: IMDS is past its slow first call
        self._last_request = -float("inf")

    def close(self) -> None:
        """Release pooled connections."""
        self._session.close()

    def scheduled_events(self, stop: threading.Event) -> ImdsResponse:
        """GET the Scheduled Events document (negotiating the api-version if IMDS refuses ours)."""
        response = self._fetch(stop, "scheduled_events", SCHEDULED_EVENTS_VERSIONS)
        self.api_version = response.api_version
        return response

    def instance(self, stop: threading.Event, *, deadline_s: float | None = None) -> ImdsResponse:
        """GET instance metadata (any api-version IMDS offers will do: every field we read is optional).

        ``deadline_s`` overrides the policy's retry deadline (0: a single try).
        """
        response = self._fetch(stop, "instance", (), deadline_s)
        self.instance_api_version = response.api_version
        return response

    def _fetch(
        self, stop: threading.Event, what: str, supported: Sequence[str], deadline_s: float | None = None
    ) -> ImdsResponse:
        deadline = self.policy.deadline_s if deadline_s is None else deadline_s
        version = self.api_version if what == "scheduled_events" else self.instance_api_version
        tried = {version}
        started = self._monotonic()
        attempt = 0
        while True:
            attempt += 1
            url = (scheduled_events_url if what == "scheduled_events" else instance_url)(self.base_url, version)
            try:
                body, latency = self._attempt(url, stop)
                return ImdsResponse(body=body, api_version=version, latency_s=latency, attempts=attempt)
            except ImdsInterrupted:
                raise
            except ImdsError as error:
                self._on_error(error.kind)
                if error.kind == "version":
                    choice = choose_version(error.offered, supported or error.offered, tried)
                    if choice is not None:
                        log.warning(
                            "IMDS refused api-version; switching",
                            extra={"endpoint": what, "refused": version, "chosen": choice},
                        )
                        version = choice
                        tried.add(choice)
                        continue
                if error.kind not in RETRYABLE_KINDS:
                    log.warning(
                        "IMDS request failed", extra={"endpoint": what, "kind": error.kind, "error": str(error)}
                    )
                    raise
                delay = self.policy.backoff.delay(attempt, error.retry_after)
                elapsed = self._monotonic() - started
                if elapsed + delay > deadline:
                    log.warning(
                        "IMDS request failed; giving up this fetch",
                        extra={"endpoint": what, "kind": error.kind, "attempts": attempt, "error": str(error)},
                    )
                    raise
                # Say what failed, when the next try comes and when this fetch gives up: a person running
                # `sevents-collector once` against an unreachable IMDS must not face a silent wait.
                log.info(
                    "IMDS request failed; retrying",
                    extra={
                        "endpoint": what,
                        "kind": error.kind,
                        "attempt": attempt,
                        "delay_s": round(delay, 3),
                        "gives_up_in_s": round(max(0.0, deadline - elapsed), 1),
                        "error": str(error),
                    },
                )
                if stop.wait(delay):
                    raise ImdsInterrupted() from error

    def _attempt(self, url: str, stop: threading.Event) -> tuple[bytes, float]:
        """One paced GET; the body and latency on 200, an ImdsError otherwise."""
        wait = self._last_request + self.policy.min_interval_s - self._monotonic()
        if wait > 0 and stop.wait(wait):
            raise ImdsInterrupted()
        self._last_request = self._monotonic()
        read_timeout = self.policy.read_timeout_s if self._warm else self.policy.first_call_timeout_s
        response = self._send(url, (self.policy.connect_timeout_s, read_timeout), stop)
        latency = self._monotonic() - self._last_request
        self._warm = True
        if response.status_code == 200:
            return response.content, latency
        raise _http_error(response)

    def _send(self, url: str, timeout: tuple[float, float], stop: threading.Event) -> requests.Response:
        outcome: list[requests.Response | BaseException] = []
        done = threading.Event()

        def work() -> None:
            try:
                response = self._session.get(
                    url,
                    headers={"Metadata": "true"},
                    timeout=timeout,
                    allow_redirects=False,
                    proxies=_NO_PROXY,
                )
                _ = response.content  # read the body here, so the waiting side never blocks on it
                outcome.append(response)
            except BaseException as error:  # noqa: BLE001 -- handed to the waiting thread, which translates it
                outcome.append(error)
            finally:
                done.set()

        threading.Thread(target=work, name="imds-request", daemon=True).start()
        # Wait for the request or for shutdown, whichever comes first; an abandoned request ends by its timeout.
        # A slow request (the first call may take 2 minutes) is logged now and then, so a wait is never silent.
        started = self._monotonic()
        next_note = started + _STILL_WAITING_S
        while not done.wait(0.1):
            if stop.is_set():
                raise ImdsInterrupted()
            now = self._monotonic()
            if now >= next_note:
                log.info(
                    "still waiting for IMDS",
                    extra={"url": url, "waited_s": round(now - started), "read_timeout_s": timeout[1]},
                )
                next_note = now + _STILL_WAITING_S
        result = outcome[0]
        if isinstance(result, requests.Response):
            return result
        if isinstance(result, requests.Timeout):
            raise ImdsError("timeout", f"IMDS did not answer {url} in time: {_reason(result)}") from result
        if isinstance(result, requests.RequestException):
            raise ImdsError("connection", f"cannot reach IMDS at {url}: {_reason(result)}") from result
        raise result


def _http_error(response: requests.Response) -> ImdsError:
    status = response.status_code
    kind = classify(status)
    detail = response.text[:300]
    if status == 400:
        offered = newest_versions(response.content)
        if offered is not None:
            return ImdsError("version", f"IMDS refused the api-version: {detail}", status, offered=offered)
    retry_after = parse_retry_after(response.headers.get("Retry-After"), datetime.now(UTC))
    return ImdsError(kind, f"IMDS answered {status} for {response.url}: {detail}", status, retry_after=retry_after)


def _reason(error: BaseException) -> str:
    """The innermost useful message of a requests/urllib3 error (they nest MaxRetryError(reason=...))."""
    inner = error.args[0] if error.args else error
    return str(getattr(inner, "reason", inner))
