"""A per-VM webhook: the collector POSTs the transitions of the event types it is told to, as they are committed.

For teams without a central pipeline, and for Preempt and Terminate, whose 30 s to a few minutes of notice a
central path with a 30 s alert evaluation cannot page in time. Polling never waits for it: records go to a
bounded queue that a thread of its own sends, each retried with backoff for a bounded time; what cannot be
queued or sent is dropped, counted and logged (the outbox keeps every record regardless).

Payload: one POST per transition, ``Content-Type: application/json``, in the ``webhook_format`` the receiver
takes (``body``):
- ``json`` (default): the wire record itself (``sevents/contract.schema.json``: ``record_type`` "transition",
  ``event_id``, ``event_type``, ``status``, ``kind``, ``not_before``, ``vm_name``, ...), for a receiver of one's own;
- ``slack``: ``{"text": ...}``, what a Slack incoming webhook (and Mattermost, Rocket.Chat) accepts;
- ``teams``: a message with one Adaptive Card, what a Microsoft Teams Workflows webhook accepts.
Chat tools reject a body that is not their own shape, so the raw record never reaches them. The URL is a secret
for most chat tools (it holds a token): it is never logged, only its host.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Final, Optional
from urllib.parse import urlsplit

from sevents.retry import Backoff

log = logging.getLogger(__name__)

QUEUE_MAX: Final = 256  # records waiting to be sent; beyond, the newest is dropped (counted)
SEND_FOR_S: Final = 60.0  # how long one record is retried before it is dropped
KINDS: Final = ("appeared", "status_changed", "updated")  # an event that appears, starts or moves its NotBefore
FORMATS: Final = ("json", "slack", "teams")


def summary(record: Mapping[str, Any]) -> str:
    """One line a person reads in a chat: what, to which VM, when."""
    what = {"appeared": "scheduled", "status_changed": "now " + str(record.get("status") or "changed")}.get(
        str(record.get("kind")), "moved its NotBefore"
    )
    line = f"{record.get('event_type') or 'Event'} {what} on {record.get('vm_name') or record.get('vm_id') or '?'}"
    if record.get("not_before"):
        line += f", NotBefore {record['not_before']}"
    source = f", source {record['event_source']}" if record.get("event_source") else ""
    return f"{line} (event {record.get('event_id') or '?'}{source})"


def body(record: Mapping[str, Any], fmt: str = "json") -> dict[str, Any]:
    """What one POST carries for ``record`` in the format ``fmt`` (one of ``FORMATS``)."""
    if fmt == "slack":
        return {"text": summary(record)}
    if fmt == "teams":
        facts = [
            {"title": title, "value": str(record[key])}
            for title, key in (
                ("VM", "vm_name"),
                ("Status", "status"),
                ("NotBefore", "not_before"),
                ("EventId", "event_id"),
            )
            if record.get(key)
        ]
        card = {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.4",
            "body": [
                {"type": "TextBlock", "text": summary(record), "wrap": True, "weight": "Bolder"},
                {"type": "FactSet", "facts": facts},
            ],
        }
        return {
            "type": "message",
            "attachments": [
                {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
            ],
        }
    return dict(record)


class Webhook:
    """Sends the transitions of ``event_types`` to ``url`` from a thread of its own (``run``)."""

    def __init__(
        self,
        url: str,
        event_types: Sequence[str],
        *,
        timeout_s: float = 5.0,
        backoff: Optional[Backoff] = None,
        fmt: str = "json",
        on_drop: Callable[[str], None] = lambda reason: None,
        on_post: Callable[[bool, str], None] = lambda ok, reason: None,
    ) -> None:
        self.url, self.event_types, self.timeout_s, self.fmt = url, tuple(event_types), timeout_s, fmt
        self.backoff = backoff or Backoff(initial=0.5, cap=10.0)
        self.host = urlsplit(url).hostname or "?"
        self._queue: queue.Queue[Mapping[str, Any]] = queue.Queue(QUEUE_MAX)
        self.on_drop = on_drop  # each record dropped, with its reason: counted with the poll faults
        self.on_post = on_post  # each POST attempt: (accepted, reason of a failure); the metrics count them
        self.sent = 0

    def notify(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Queue the records it is for (never blocks: a full queue drops the record, counted)."""
        for record in records:
            if record.get("record_type") != "transition" or record.get("kind") not in KINDS:
                continue
            if record.get("event_type") not in self.event_types:
                continue
            try:
                self._queue.put_nowait(record)
            except queue.Full:
                self._drop("webhook_queue_full", record)

    def run(self, stop: threading.Event) -> None:
        """Send what is queued until ``stop``."""
        while not stop.is_set():
            try:
                record = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            self._send(record, stop)

    def _send(self, record: Mapping[str, Any], stop: threading.Event) -> None:
        data = json.dumps(body(record, self.fmt), sort_keys=True, separators=(",", ":")).encode()
        deadline = time.monotonic() + SEND_FOR_S
        for attempt in range(1, 1000):
            request = urllib.request.Request(  # noqa: S310 -- the configured http(s) URL (validated at start)
                self.url, data=data, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                    response.read(1024)
                self.sent += 1
                self.on_post(True, "")
                return
            except (urllib.error.URLError, OSError, ValueError) as error:
                self.on_post(False, post_failure(error))
                wait = self.backoff.delay(attempt)
                if time.monotonic() + wait > deadline or stop.wait(wait):
                    self._drop("webhook_failed", record, error)
                    return
                log.warning("webhook not delivered; retrying", extra={"host": self.host, "error": _reason(error)})

    def _drop(self, reason: str, record: Mapping[str, Any], error: Optional[BaseException] = None) -> None:
        self.on_drop(reason)
        log.error(
            "webhook record dropped",
            extra={"reason": reason, "host": self.host, "event_id": record.get("event_id"), "error": _reason(error)},
        )


def post_failure(error: BaseException) -> str:
    """A failed POST's reason for the metrics: ``http_NNN``, ``timeout``, ``connection`` or ``invalid``."""
    if isinstance(error, urllib.error.HTTPError):
        return f"http_{error.code}"
    cause = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(cause, TimeoutError):  # socket.timeout is TimeoutError since Python 3.10
        return "timeout"
    if isinstance(cause, OSError) and "timed out" in str(cause):  # socket.timeout on 3.9
        return "timeout"
    if isinstance(cause, OSError):
        return "connection"
    return "invalid"


def _reason(error: Optional[BaseException]) -> str:
    # an HTTPError's text can echo the URL: keep its status only
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code}"
    return "" if error is None else type(error).__name__
