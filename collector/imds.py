"""The IMDS HTTP edge: GET Scheduled Events and instance metadata, POST approvals; no proxy, a written retry policy.

Theory of operation. Each request is one ``collector.fetch.bounded_get``: a total deadline (the read timeout
bounds the whole answer, not each read), a body cap, and ``stop`` ending the wait at once, so the first call
may take the documented two minutes yet shutdown returns at once, and a trickling server holds no poll. Requests carry
``Metadata: true``, never ``X-Forwarded-For``, go straight to IMDS whatever the proxy settings of the
environment (the standard library's HTTP client consults none), and never follow redirects. Requests from one
client are spaced by ``min_interval_s`` so the collector stays well below the ~5 requests/s that IMDS allows
per VM across all agents. An approval (``approve``) is a POST under the same rules: approving an event twice
is harmless (IMDS answers 200), so it is retried like a poll. What is retried, for how long, and which
api-version comes next is decided by the pure policy in ``collector.imds_policy``.

Errors::

    ImdsError (kind: str, status: int | None)
    └── ImdsInterrupted    stop was set while waiting; not a failure of IMDS
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final

import sevents
from collector.fetch import Answer, Connections, FetchError, FetchInterrupted, bounded_get
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
from sevents.retry import RetryInterrupted, RetryNote, retry

log = logging.getLogger(__name__)

DEFAULT_BASE_URL: Final = "http://169.254.169.254"


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


def approval_body(event_ids: Sequence[str], api_version: str, incarnation: int | None) -> bytes:
    """The documented approval document: ``{"StartRequests": [{"EventId": ...}]}``.

    The 2017 api-versions' documents (and Microsoft's samples for them) also send the DocumentIncarnation the
    event was seen in, as a string; newer versions take StartRequests alone.
    """
    document: dict[str, object] = {"StartRequests": [{"EventId": e} for e in event_ids]}
    if api_version < "2019-01-01" and incarnation is not None:
        document = {"DocumentIncarnation": str(incarnation), **document}
    return json.dumps(document, separators=(",", ":")).encode()


def attested_url(base_url: str, api_version: str, nonce: str) -> str:
    """The attested data URL under ``base_url``, asking IMDS to sign ``nonce`` (collector.attestation)."""
    return f"{base_url.rstrip('/')}/metadata/attested/document?api-version={api_version}&nonce={nonce}"


def instance_url(base_url: str, api_version: str) -> str:
    """The instance metadata URL under ``base_url``."""
    return f"{base_url.rstrip('/')}/metadata/instance?api-version={api_version}"


def request_headers() -> dict[str, str]:
    """The headers of every IMDS request: ``Metadata: true`` (IMDS refuses requests without it), and who asks."""
    return {"Metadata": "true", "User-Agent": f"sevents-collector/{sevents.__version__}", "Accept": "*/*"}


class ImdsClient:
    """Fetches Scheduled Events and instance metadata from one IMDS base URL."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_version: str = DEFAULT_API_VERSION,
        instance_api_version: str = DEFAULT_INSTANCE_API_VERSION,
        connections: Connections | None = None,
        policy: ImdsPolicy | None = None,
        on_error: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url
        self.api_version = api_version
        self.instance_api_version = instance_api_version
        self.policy = policy or ImdsPolicy()
        self._connections = connections if connections is not None else Connections()
        self._headers = request_headers()
        self.on_error = on_error or (lambda kind: None)  # the agent counts every failed request
        self._monotonic = monotonic
        self._warm = False  # becomes True at the first HTTP response: IMDS is past its slow first call
        self._last_request = -float("inf")
        self._pace = threading.Lock()  # the poll loop and the instance-metadata worker share the spacing
        self._preferred = api_version  # after a downgrade, tried again from time to time
        self._upward_at = float("inf")

    def close(self) -> None:
        """Release pooled connections."""
        self._connections.close()

    def scheduled_events(self, stop: threading.Event) -> ImdsResponse:
        """GET the Scheduled Events document (negotiating the api-version if IMDS refuses ours)."""
        version = self.api_version
        if version != self._preferred and self._monotonic() >= self._upward_at:
            # IMDS may have been updated since it refused the newer version: ask again, now and then.
            log.info("trying the newer api-version again", extra={"current": version, "trying": self._preferred})
            version = self._preferred
        response = self._fetch(stop, "scheduled_events", SCHEDULED_EVENTS_VERSIONS, None, version)
        self.api_version = response.api_version
        now = self._monotonic()
        if response.api_version == self._preferred:
            self._upward_at = float("inf")
        elif now >= self._upward_at or self._upward_at == float("inf"):
            self._upward_at = now + self.policy.retry_newer_after_s
        return response

    def instance(self, stop: threading.Event, *, deadline_s: float | None = None) -> ImdsResponse:
        """GET instance metadata (any api-version IMDS offers will do: every field we read is optional).

        ``deadline_s`` overrides the policy's retry deadline (0: a single try).
        """
        response = self._fetch(stop, "instance", (), deadline_s, self.instance_api_version)
        self.instance_api_version = response.api_version
        return response

    def attested(self, stop: threading.Event, api_version: str, nonce: str) -> ImdsResponse:
        """GET the attested document signed over ``nonce`` (collector.attestation), under the same rules."""
        return self._fetch(
            stop, "attested", (), None, api_version, url=lambda version: attested_url(self.base_url, version, nonce)
        )

    def approve(
        self,
        stop: threading.Event,
        event_ids: Sequence[str],
        incarnation: int | None,
        *,
        deadline_s: float | None = None,
    ) -> ImdsResponse:
        """POST StartRequests for ``event_ids`` (at the api-version polling uses); the answer, or ImdsError.

        ``incarnation`` is the DocumentIncarnation the events were seen in (sent to the 2017 api-versions).
        """

        def body(version: str) -> bytes:
            return approval_body(event_ids, version, incarnation)

        return self._fetch(stop, "approve", SCHEDULED_EVENTS_VERSIONS, deadline_s, self.api_version, body)

    def _fetch(
        self,
        stop: threading.Event,
        what: str,
        supported: Sequence[str],
        deadline_s: float | None,
        version: str,
        post: Callable[[str], bytes] | None = None,
        url: Callable[[str], str] | None = None,
    ) -> ImdsResponse:
        deadline = self.policy.deadline_s if deadline_s is None else deadline_s
        tried = {version}
        attempts = 0

        def attempt() -> ImdsResponse:
            # One try, and at once another with a version IMDS names after a 400 that names newest-versions.
            nonlocal version, attempts
            while True:
                attempts += 1
                where = url(version) if url is not None else None
                where = where or (instance_url if what == "instance" else scheduled_events_url)(self.base_url, version)
                try:
                    body, latency = self._attempt(where, stop, None if post is None else post(version))
                    return ImdsResponse(body=body, api_version=version, latency_s=latency, attempts=attempts)
                except ImdsInterrupted:
                    raise
                except ImdsError as error:
                    self.on_error(error.kind)
                    choice = None
                    if error.kind == "version":
                        choice = choose_version(error.offered, supported or error.offered, tried)
                    if choice is None:
                        raise
                    log.warning(
                        "IMDS refused api-version; switching",
                        extra={"endpoint": what, "refused": version, "chosen": choice},
                    )
                    version = choice
                    tried.add(choice)

        def retrying(note: RetryNote) -> None:
            # Say what failed, when the next try comes and when this fetch gives up: a person running
            # `sevents-collector once` against an unreachable IMDS must not face a silent wait.
            error = note.error
            log.info(
                "IMDS request failed; retrying",
                extra={
                    "endpoint": what,
                    "kind": getattr(error, "kind", ""),
                    "attempt": note.attempt,
                    "delay_s": round(note.delay, 3),
                    "gives_up_in_s": round(max(0.0, deadline - note.elapsed), 1),
                    "error": str(error),
                },
            )

        try:
            return retry(
                attempt,
                backoff=dataclasses.replace(self.policy.backoff, deadline=deadline),
                stop=stop,
                retryable=lambda error: isinstance(error, ImdsError) and error.kind in RETRYABLE_KINDS,
                retry_after=lambda error: getattr(error, "retry_after", None),
                on_retry=retrying,
                monotonic=self._monotonic,
            )
        except RetryInterrupted as interrupted:
            raise ImdsInterrupted() from interrupted
        except ImdsInterrupted:
            raise
        except ImdsError as error:
            log.warning(
                "IMDS request failed" + ("; giving up this fetch" if error.kind in RETRYABLE_KINDS else ""),
                extra={"endpoint": what, "kind": error.kind, "attempts": attempts, "error": str(error)},
            )
            raise

    def _attempt(self, url: str, stop: threading.Event, post: bytes | None = None) -> tuple[bytes, float]:
        """One paced GET (POST of ``post`` when given) under a total deadline and a body cap; the body on 200."""
        with self._pace:
            # Claim the next free moment, so the two threads that share this client never send together.
            slot = max(self._monotonic(), self._last_request + self.policy.min_interval_s)
            self._last_request = slot
        wait = slot - self._monotonic()
        if wait > 0 and stop.wait(wait):
            raise ImdsInterrupted()
        begun = self._monotonic()
        total = self.policy.read_timeout_s if self._warm else self.policy.first_call_timeout_s
        try:
            answer = bounded_get(
                self._connections,
                url,
                headers=self._headers,
                connect_timeout_s=self.policy.connect_timeout_s,
                total_s=total,
                max_bytes=self.policy.max_body_bytes,
                stop=stop,
                monotonic=self._monotonic,
                on_send=self._sent,
                logger=log,
                method="GET" if post is None else "POST",
                body=post,
            )
        except FetchInterrupted as error:
            raise ImdsInterrupted() from error
        except FetchError as error:
            raise ImdsError(error.kind, f"IMDS {url}: {error}") from error
        latency = self._monotonic() - begun
        self._warm = True
        if answer.status == 200:
            return answer.body, latency
        raise _http_error(answer)

    def _sent(self) -> None:
        # Pacing counts from the moment a request leaves, not from when its thread was asked to send it:
        # the two differ by thread start-up, which a loaded machine stretches.
        with self._pace:
            self._last_request = max(self._last_request, self._monotonic())


def _http_error(answer: Answer) -> ImdsError:
    status = answer.status
    kind = classify(status)
    detail = answer.body[:300].decode("utf-8", "replace")
    if status == 400:
        offered = newest_versions(answer.body)
        if offered is not None:
            return ImdsError("version", f"IMDS refused the api-version: {detail}", status, offered=offered)
    retry_after = parse_retry_after(answer.headers.get("retry-after"), datetime.now(timezone.utc))
    return ImdsError(kind, f"IMDS answered {status} for {answer.url}: {detail}", status, retry_after=retry_after)
