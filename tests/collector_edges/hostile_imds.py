"""A loopback IMDS that serves a fixed sequence of answers, hostile ones among good documents, one per request.

Each Scheduled Events request takes the next answer; once the sequence is spent, the last good document is
served. Instance metadata is always good except for a lone surrogate in the VM name. The answers come from
``answers(seed, count)``; ``expected_ids`` replays what a collector can know from them through the pure core.
``largest_document`` is the other extreme: a legal document as large as the collector reads.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from collector.decode import DecodeError, decode_document
from collector.enrich import transition_key
from collector.fetch import DEFAULT_MAX_BYTES
from collector.model import Snapshot
from collector.transitions import diff
from tests.collector_edges.fake_imds import INSTANCE
from tests.collector_edges.test_edges_crash import scenario

VM_ID = INSTANCE["compute"]["vmId"]
# The VM name carries an escaped lone surrogate: the identity must be made valid, not crash the collector.
INSTANCE_BODY = json.dumps(INSTANCE).replace('"web-0"', '"web-\\ud800"', 1).encode()
_HUGE = b'{"DocumentIncarnation": 1, "Events": [], "Pad": "' + b"x" * (5 * 2**20) + b'"}'


@dataclass(frozen=True)
class Answer:
    """One answer: what kind of trouble it is, its status and body, and how it is sent."""

    kind: str
    status: int = 200
    body: bytes = b""
    mode: str = "plain"  # plain | unframed (no Content-Length, close) | trickle | trickle_head | reset

    @property
    def readable(self) -> bool:
        """Whether the collector can receive this body whole (and so hands it to decode)."""
        return self.status == 200 and self.mode in ("plain", "unframed") and len(self.body) <= DEFAULT_MAX_BYTES


def document(incarnation: int, events: list[dict[str, Any]]) -> bytes:
    return json.dumps({"DocumentIncarnation": incarnation, "Events": events}).encode()


def largest_document(incarnation: int, status: str, count: int = 1_000) -> bytes:
    """``count`` events in ``status``, every field of 2020-07-01, in IMDS's compact JSON: 1,000 Scheduled
    events come to 255.7 KiB, just under the collector's body cap (every field does not leave room for
    descriptions). The same EventIds whatever the status, so a second document moves each event on."""
    rng = random.Random(count)
    events = []
    for i in range(count):
        kind = ("Reboot", "Freeze", "Redeploy")[i % 3]
        events.append(
            {
                "EventId": str(uuid.UUID(int=rng.getrandbits(128))),
                "EventType": kind,
                "ResourceType": "VirtualMachine",
                "Resources": [f"vm{i % 40}", f"vm{(i + 20) % 40}"][: 1 + (i % 4 == 0)],
                "EventStatus": status,
                "NotBefore": "" if status == "Started" else formatdate(1_790_000_000 + 60 * i, usegmt=True),
                "Description": "",
                "EventSource": "Platform",
                "DurationInSeconds": 9 if kind == "Freeze" else -1,
            }
        )
    body = json.dumps({"DocumentIncarnation": incarnation, "Events": events}, separators=(",", ":")).encode()
    assert len(body) <= DEFAULT_MAX_BYTES, f"{len(body)} bytes: over the collector's body cap"
    return body


def hostile(rng: random.Random, incarnation: int, events: list[dict[str, Any]]) -> Answer:
    """One hostile answer built around the current good document."""
    good = document(incarnation, events)
    kind = rng.choice(
        [
            "surrogate", "surrogate_id", "huge", "huge_unframed", "deep", "deep_object", "garbage", "truncated",
            "bad_utf8", "wrong_types", "big_numbers", "null_events", "server_error", "throttled",
            "bad_request_nested", "trickle", "trickle_head", "reset", "not_object", "duplicate_ids",
        ]
    )  # fmt: skip
    if kind == "surrogate" and events:
        field = rng.choice(["Description", "EventType", "EventSource", "ResourceType"])
        changed = [{**e, field: "placeholder"} for e in events]
        return Answer(kind, body=document(incarnation, changed).replace(b"placeholder", b"bad \\ud800 text"))
    if kind == "surrogate_id" and events:
        body = document(incarnation + 1, [{**events[0], "Resources": ["x"]}]).replace(b'"x"', b'"\\udfff"')
        return Answer(kind, body=body.replace(events[0]["EventId"].encode(), b"\\ud83d-lone"))
    if kind in ("huge", "huge_unframed"):
        return Answer(kind, body=_HUGE, mode="plain" if kind == "huge" else "unframed")
    if kind == "deep":
        return Answer(kind, body=b"[" * 200_000)
    if kind == "deep_object":
        return Answer(kind, body=b'{"DocumentIncarnation": 1, "Events": ' + b'{"a":' * 40_000 + b"1" + b"}" * 40_000)
    if kind == "garbage":
        return Answer(kind, body=rng.randbytes(rng.randint(0, 4096)))
    if kind == "truncated":
        return Answer(kind, body=good[: rng.randint(0, max(0, len(good) - 1))])
    if kind == "bad_utf8":
        return Answer(kind, body=good.replace(b'"Events"', b'"Ev\xff\xfents"'))
    if kind == "wrong_types":
        variant = rng.choice(
            [b'{"DocumentIncarnation": [1], "Events": []}', b'{"DocumentIncarnation": 1, "Events": {}}']
        )
        return Answer(kind, body=variant)
    if kind == "big_numbers":
        digits = b"9" * rng.choice([25, 4000, 5000])
        return Answer(kind, body=b'{"DocumentIncarnation": ' + digits + b', "Events": []}')
    if kind == "null_events":
        return Answer(kind, body=b'{"DocumentIncarnation": null, "Events": null}')
    if kind == "server_error":
        return Answer(kind, status=500, body=rng.randbytes(64))
    if kind == "throttled":
        return Answer(kind, status=429, body=b"slow down")
    if kind == "bad_request_nested":
        return Answer(kind, status=400, body=b'{"newest-versions": ' + b"[" * 100_000)
    if kind in ("trickle", "trickle_head", "reset"):
        return Answer(kind, body=good, mode=kind)
    if kind == "not_object":
        return Answer(kind, body=rng.choice([b"[]", b'"text"', b"42", b"null", b"1e999"]))
    dup = events[:1] * 2 if events else [{"EventId": "d", "EventStatus": "Scheduled"}] * 2
    return Answer("duplicate_ids", body=document(incarnation, dup))


def answers(seed: int, count: int) -> list[Answer]:
    """``count`` hostile answers, each after a good document of an evolving scenario."""
    rng = random.Random(seed)
    states = scenario(rng, count)
    out: list[Answer] = []
    for incarnation, events in states:
        out.append(Answer("good", body=document(incarnation, events)))
        out.append(hostile(rng, incarnation, events))
    out.append(Answer("good", body=document(*states[-1])))
    return out


def expected_ids(sequence: list[Answer]) -> list[str]:
    """The transition ids a collector records from the answers it can read, in order (pure core)."""
    snapshot = Snapshot.empty()
    ids: list[str] = []
    moment = datetime(2026, 1, 1, tzinfo=UTC)  # ids do not depend on the moment
    for answer in sequence:
        if not answer.readable:
            continue
        try:
            doc = decode_document(answer.body)
        except DecodeError:
            continue
        snapshot, transitions = diff(snapshot, doc, moment)
        ids += [transition_key(t, VM_ID) for t in transitions]
    return ids


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the collector hangs up on caps and deadlines, and resets reach the server: expected here


class HostileImds:
    """Serves ``sequence`` on 127.0.0.1:0; ``served`` counts Scheduled Events requests, ``gaps`` their spacing."""

    def __init__(self, sequence: list[Answer]) -> None:
        self.sequence = sequence
        self.served = 0
        self.arrivals: list[float] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                try:
                    server.handle(self)
                except OSError:
                    self.close_connection = True  # the collector hung up (a cap or a deadline): expected

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> HostileImds:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        if request.path.startswith("/metadata/instance"):
            return _send(request, 200, INSTANCE_BODY)
        with self.lock:
            index = self.served
            self.served += 1
            self.arrivals.append(time.monotonic())
        answer = self.sequence[index] if index < len(self.sequence) else self.sequence[-1]
        if answer.mode == "plain":
            return _send(request, answer.status, answer.body)
        if answer.mode == "unframed":
            request.close_connection = True
            request.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
            for start in range(0, len(answer.body), 65536):
                request.wfile.write(answer.body[start : start + 65536])
            return None
        if answer.mode == "reset":
            request.close_connection = True
            request.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            request.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
            request.connection.close()
            return None
        # Trickle one byte every 50 ms for up to 3 s: each read is quick, the whole answer never comes in time.
        request.close_connection = True
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(answer.body)}\r\n\r\n".encode()
        stream = head + answer.body if answer.mode == "trickle_head" else answer.body
        if answer.mode == "trickle":
            request.wfile.write(head)
        for byte in stream[:60]:
            request.wfile.write(bytes([byte]))
            request.wfile.flush()
            time.sleep(0.05)
        return None


def _send(request: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    request.send_response(status)
    request.send_header("Content-Type", "application/json; charset=utf-8")
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)
