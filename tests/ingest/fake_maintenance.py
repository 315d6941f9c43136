"""A loopback Azure Maintenance API that speaks the scheduled events acknowledge, as shared/DESIGN.md records it.

``POST /subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/{type}/{name}/providers/
Microsoft.Maintenance/scheduledevents/{eventId}/acknowledge?api-version=...`` with a bearer token that ``tokens``
holds (the token endpoint of a ``FakeArg`` issues them) answers 200 ``{"value": "Successfully Approved"}``; no or
an unknown token 401 ``AuthenticationFailed``, another path 404, no api-version 400: the protocol of
simulator/maintenance.py, which the simulator also serves for its fleet. Every event is known here (no fleet).
``hold_first``: the first acknowledge waits (``held`` set) until ``release`` is set, so a test can kill the
coordinator that sent it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from simulator import maintenance
from simulator.protocol import Reply


@dataclass
class Ack:
    at: float  # time.time() when the request arrived
    event_id: str
    resource: str
    api_version: str
    user_agent: str
    status: int


@dataclass
class FakeMaintenance:
    tokens: set[str]
    hold_first: bool = False
    acks: list[Ack] = field(default_factory=list)  # every acknowledge request, valid or not
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> FakeMaintenance:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                fake._post(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def approved(self) -> list[Ack]:
        return [a for a in self.acks if a.status == 200]

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        arrived = time.time()
        parsed = urlparse(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        h.rfile.read(length)
        request = maintenance.parse(parsed.path, parse_qs(parsed.query), dict(h.headers.items()), self.tokens)
        reply = request if isinstance(request, Reply) else Reply(200, dict(maintenance.APPROVED))
        status, body = reply.status, reply.body
        match = maintenance.ACK.match(parsed.path)
        version = parse_qs(parsed.query).get("api-version", [""])[0]
        with self._lock:
            first = status == 200 and not any(a.status == 200 for a in self.acks)
            self.acks.append(
                Ack(
                    arrived,
                    match.group("event_id") if match else "",
                    match.group("resource") if match else parsed.path,
                    version,
                    h.headers.get("User-Agent", ""),
                    status,
                )
            )
        if first and self.hold_first:
            self.held.set()
            self.release.wait(120)
        data = json.dumps(body).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json; charset=utf-8")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except OSError:  # the client is gone (killed while it waited)
            pass
