"""A scriptable IMDS on 127.0.0.1:0 speaking the real protocol (headers, api-versions, paths, errors)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.helpers import eventually

SE_VERSIONS = ("2017-03-01", "2017-08-01", "2017-11-01", "2019-01-01", "2019-04-01", "2019-08-01", "2020-07-01")

INSTANCE = {
    "compute": {
        "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
        "name": "web-0",
        "location": "westeurope",
        "subscriptionId": "8d10da13-8125-4ba9-a717-bf7490507b3d",
        "resourceGroupName": "rg-web",
        "resourceId": "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourceGroups/rg-web/providers/"
        "Microsoft.Compute/virtualMachines/web-0",
        "zone": "2",
        "platformFaultDomain": "1",
        "platformUpdateDomain": "4",
        "vmScaleSetName": "",
    }
}


def event(
    event_id: str,
    status: str = "Scheduled",
    event_type: str = "Reboot",
    not_before: str = "Mon, 19 Sep 2016 18:29:47 GMT",
) -> dict[str, Any]:
    """One event as IMDS 2020-07-01 sends it."""
    return {
        "EventId": event_id,
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": ["web-0"],
        "EventStatus": status,
        "NotBefore": "" if status == "Started" else not_before,
        "Description": "Host server is undergoing maintenance.",
        "EventSource": "Platform",
        "DurationInSeconds": 7,
    }


@dataclass
class Seen:
    """One request the server received."""

    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    at: float
    incarnation: int | None = None
    peer: tuple[str, int] = ("", 0)  # the client's address and port: one per TCP connection


@dataclass
class Scripted:
    """A response to give instead of the document, once."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class FakeImds:
    """IMDS for one VM: ``document`` and ``instance`` are served; ``script`` queues one-off responses."""

    def __init__(self, *, versions: tuple[str, ...] = SE_VERSIONS) -> None:
        self.versions = versions
        self.document: dict[str, Any] = {"DocumentIncarnation": 0, "Events": []}
        self.instance: dict[str, Any] = json.loads(json.dumps(INSTANCE))
        self.script: deque[Scripted] = deque()
        self.instance_status = 200  # e.g. 500: instance metadata down
        self.instance_delay = 0.0  # seconds before instance metadata answers
        self.instance_failures = 0  # the next this many instance metadata requests fail with 500
        self.seen: list[Seen] = []
        self.posts: list[tuple[float, dict[str, Any]]] = []  # approvals received: (monotonic time, JSON body)
        self.lock = threading.Lock()
        self.open_connections: set[socket.socket] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server.lock:
                    server.open_connections.add(self.connection)

            def finish(self) -> None:
                with server.lock:
                    server.open_connections.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:
                server.handle(self)

            def do_POST(self) -> None:
                server.handle_post(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakeImds:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def set_document(self, incarnation: int, events: list[dict[str, Any]]) -> None:
        with self.lock:
            self.document = {"DocumentIncarnation": incarnation, "Events": events}

    def hang_up_idle(self) -> None:
        """Close every kept-alive connection, as IMDS may do with one left idle; wait until they are gone."""
        with self.lock:
            connections = list(self.open_connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        eventually(lambda: not self.open_connections, 5, interval=0.01)

    def scheduled(self) -> list[Seen]:
        """The Scheduled Events requests received so far."""
        with self.lock:
            return [s for s in self.seen if s.path.endswith("scheduledevents")]

    def handle_post(self, request: BaseHTTPRequestHandler) -> None:
        _approval(self, request)

    def approved(self) -> list[str]:
        """The EventIds of every StartRequests POST received so far, in order."""
        with self.lock:
            return [r["EventId"] for _, body in self.posts for r in body.get("StartRequests", [])]

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        query = parse_qs(url.query)
        seen = Seen(url.path, query, dict(request.headers.items()), time.monotonic(), peer=request.client_address)
        with self.lock:
            self.seen.append(seen)
            scripted = self.script.popleft() if self.script and url.path.endswith("scheduledevents") else None
            document = self.document
        if scripted is not None:
            time.sleep(scripted.delay)
            return _reply(request, scripted.status, scripted.body, scripted.headers)
        if request.headers.get("Metadata") != "true":
            return _reply(request, 400, json.dumps({"error": "Bad request. Required metadata header not specified"}))
        if "X-Forwarded-For" in request.headers:
            return _reply(request, 400, json.dumps({"error": "Bad request. X-Forwarded-For header is not allowed"}))
        version = query.get("api-version", [""])[0]
        if url.path in ("/metadata/scheduledevents", "/metadata/latest/scheduledevents"):
            if version not in self.versions or (
                url.path.endswith("latest/scheduledevents") != (version == "2017-03-01")
            ):
                body = {
                    "error": "Bad request. api-version is invalid",
                    "newest-versions": sorted(self.versions)[::-1][:3],
                }
                return _reply(request, 400, json.dumps(body))
            seen.incarnation = document["DocumentIncarnation"]
            return _reply(request, 200, json.dumps(document))
        if url.path == "/metadata/instance":
            time.sleep(self.instance_delay)
            with self.lock:
                failing, self.instance_failures = self.instance_failures > 0, max(0, self.instance_failures - 1)
            if failing:
                return _reply(request, 500, json.dumps({"error": "unavailable"}))
            if self.instance_status != 200:
                return _reply(request, self.instance_status, json.dumps({"error": "unavailable"}))
            return _reply(request, 200, json.dumps(self.instance))
        return _reply(request, 404, json.dumps({"error": "Not found"}))


def _approval(server: FakeImds, request: BaseHTTPRequestHandler) -> None:
    """A StartRequests POST: recorded, answered 200 with an empty body as IMDS does."""
    length = int(request.headers.get("Content-Length") or 0)
    body = request.rfile.read(length)
    if request.headers.get("Metadata") != "true":
        return _reply(request, 400, json.dumps({"error": "Bad request. Required metadata header not specified"}))
    with server.lock:
        server.posts.append((time.monotonic(), json.loads(body or b"{}")))
    return _reply(request, 200, b"")


def _reply(
    request: BaseHTTPRequestHandler, status: int, body: bytes | str, headers: dict[str, str] | None = None
) -> None:
    data = body.encode() if isinstance(body, str) else body
    try:
        request.send_response(status)
        request.send_header("Content-Type", "application/json; charset=utf-8")
        request.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
