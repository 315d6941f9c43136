"""The HTTP edge: one request handler that routes ``/vm/<name>/metadata/...`` and ``/_sim/...`` to the fleet.

The handler holds no state; it calls into the ``Fleet`` facade the server carries (see server.py) and turns
``Reply`` values and injected faults into bytes on the socket.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from simulator.attested import PATH as ATTESTED_PATH
from simulator.faults import Fault
from simulator.maintenance import ARM_PREFIX
from simulator.protocol import Reply

MAX_BODY = 64 * 1024
MALFORMED_BODY = b'{"DocumentIncarnation": 7, "Events": [{"EventId": "5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7", '


class Fleet(Protocol):
    """What the handler needs from the simulator."""

    default_vm: str

    def has_vm(self, name: str) -> bool: ...
    def take_fault(self, vm: str, path: str) -> Fault | None: ...
    def wait(self, seconds: float) -> bool: ...
    def check(self, path: str, headers: dict[str, str], query: dict[str, list[str]]) -> Reply | str: ...
    def answer(self, vm: str, method: str, path: str, version: str, body: bytes) -> Reply: ...
    def control(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> Reply: ...
    def acknowledge(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> Reply: ...
    def attested(self, vm: str, headers: dict[str, str], query: dict[str, list[str]]) -> Reply: ...


def route(path: str, default_vm: str) -> tuple[str, str]:
    """(VM name, metadata path) for ``/vm/<name>/metadata/...``; plain ``/metadata/...`` means the first VM."""
    if path.startswith("/vm/"):
        name, _, rest = path[len("/vm/") :].partition("/")
        return unquote(name), "/" + rest
    return default_vm, path


def resource_of(path: str) -> str:
    """ "scheduledevents", "instance" or "" for the metadata path of a request."""
    if path.rstrip("/") in ("/metadata/scheduledevents", "/metadata/latest/scheduledevents"):
        return "scheduledevents"
    if path.rstrip("/") == "/metadata/instance":
        return "instance"
    return ""


class Handler(BaseHTTPRequestHandler):
    """Serves one connection; keep-alive like IMDS, so a client's session reuses it."""

    protocol_version = "HTTP/1.1"
    server_version = "sevents-imds-sim"
    sys_version = ""

    @property
    def fleet(self) -> Fleet:
        fleet: Fleet = self.server.fleet  # type: ignore[attr-defined]  # set by SimServer on its HTTP server
        return fleet

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without NODELAY, Nagle and delayed ACKs add ~40 ms a poll.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # stdlib signature
        """Requests are not logged one by one: a fleet polling every second would drown the event log."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._send(Reply(405, {"error": "Method not allowed"}))

    do_DELETE = do_PUT
    do_PATCH = do_PUT

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True  # the body cannot be skipped reliably
            self._send(Reply(400, {"error": "Bad request. Invalid Content-Length."}))
            return
        body = self.rfile.read(length) if length else b""
        if parts.path.startswith("/_sim/"):
            self._send(self.fleet.control(method, parts.path, query, body))
            return
        if parts.path.startswith(ARM_PREFIX):  # the Maintenance API's acknowledge (simulator/maintenance.py)
            self._send(self.fleet.acknowledge(method, parts.path, query, dict(self.headers.items())))
            return
        vm, path = route(parts.path, self.fleet.default_vm)
        if path.rstrip("/") == ATTESTED_PATH and self.fleet.has_vm(vm):  # attested data (simulator/attested.py)
            self._send(self.fleet.attested(vm, dict(self.headers.items()), query))
            return
        resource = resource_of(path)
        if not self.fleet.has_vm(vm) or not resource:
            self._send(Reply(404, {"error": "Not found"}))
            return
        checked = self.fleet.check(path, dict(self.headers.items()), query)
        if isinstance(checked, Reply):
            self._send(checked)
            return
        fault = self.fleet.take_fault(vm, resource)
        if fault is None:
            self._send(self.fleet.answer(vm, method, path, checked, body))
        else:
            self._inject(fault, (vm, method, path, checked, body))

    def _inject(self, fault: Fault, request: tuple[str, str, str, str, bytes]) -> None:
        """Fail this request as ``fault`` says; faults that answer at all answer after the real work."""
        kind = fault.kind
        if kind == "429":
            self._send(Reply(429, {"error": "Too many requests"}, (("Retry-After", str(fault.retry_after_s)),)))
        elif kind == "410":
            self._send(Reply(410, {"error": "Gone. IMDS is being updated."}))
        elif kind == "500":
            self._send(Reply(500, {"error": "Internal server error"}))
        elif kind == "slow":
            self.fleet.wait(fault.seconds)
            # The answer reflects the moment it is sent, as a slow real first call would.
            self._send(self.fleet.answer(*request))
        elif kind == "timeout":
            self.fleet.wait(fault.seconds)
            self.close_connection = True
        elif kind == "malformed":
            self._raw(200, MALFORMED_BODY, len(MALFORMED_BODY))
        elif kind == "truncated":
            reply = self.fleet.answer(*request)
            data = json.dumps(reply.body).encode()
            self._raw(reply.status, data[: len(data) // 2], len(data))
        elif kind == "reset":
            # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True

    def _raw(self, status: int, data: bytes, announced: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(announced))
        # Say so: a client that does not know would send its next request on a connection being closed.
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _send(self, reply: Reply) -> None:
        data = b"" if reply.body is None else json.dumps(reply.body, separators=(",", ":")).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def finish(self) -> None:
        # The client (or an injected reset) may have closed the socket first.
        with contextlib.suppress(OSError):
            super().finish()
