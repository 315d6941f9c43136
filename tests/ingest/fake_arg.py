"""A loopback Azure Resource Graph and a managed-identity token endpoint, speaking the real protocols.

ARG: ``POST /providers/Microsoft.ResourceGraph/resources?api-version=...`` with a bearer token this server issued,
body ``{subscriptions, query, options: {$top, $skipToken, resultFormat}}``. ``resultFormat`` must be
``objectArray`` (the table format is not spoken here: a client that leaves it out gets a 400); ``$top`` at most
1,000; a ``$skipToken`` only for queries that project ``id``, and it must come back with the same query. Every
answer carries ``x-ms-user-quota-remaining`` / ``x-ms-user-quota-resets-after``; ``throttle`` names the request
numbers (1-based, every ARG request counts) answered 429 ``RateLimiting`` with the quota spent instead. The table
a query reads is its first word (``Resources``, ``ComputeResources``, ``HealthResourceChanges``,
``maintenanceresources``); its rows are those of ``tables`` whose ``subscriptionId`` is among the request's.

Token: the App Service managed-identity protocol azure-identity speaks when ``IDENTITY_ENDPOINT`` and
``IDENTITY_HEADER`` are set: ``GET /msi/token?api-version=2019-08-01&resource=...`` with header
``X-IDENTITY-HEADER``; answers ``{access_token, expires_on, resource, token_type}``.

``hold_request``: the ARG request number that waits (after ``held`` is set) until ``release`` is set, so a test can
kill a client between two pages.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

ARG_PATH = "/providers/Microsoft.ResourceGraph/resources"
TOKEN_PATH = "/msi/token"
QUOTA = 15  # queries per window, as ARG's example


@dataclass
class ArgLog:
    """What the server saw, for assertions."""

    requests: list[dict[str, Any]] = field(default_factory=list)  # {n, at, table, top, skip_token, status}
    tokens_issued: int = 0
    unauthorized: int = 0


class FakeArg:
    """The server; ``start()`` then ``url``, ``identity_env``; ``close()``."""

    def __init__(
        self,
        tables: Mapping[str, Sequence[dict[str, Any]]],
        *,
        throttle: Sequence[int] = (),
        resets_after: str = "00:00:01",
        quota_spent_after: Sequence[int] = (),
        hold_request: int | None = None,
    ) -> None:
        self.tables = {name.lower(): list(rows) for name, rows in tables.items()}
        self.throttle = set(throttle)
        self.resets_after = resets_after
        self.quota_spent_after = set(quota_spent_after)  # answers that leave the quota at 0 (200 all the same)
        self.hold_request = hold_request
        self.held = threading.Event()
        self.release = threading.Event()
        self.log = ArgLog()
        self.secret = secrets.token_hex(8)
        self.tokens: set[str] = set()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle
    def start(self) -> FakeArg:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._token(self)

            def do_POST(self) -> None:
                fake._query(self)

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

    @property
    def identity_env(self) -> dict[str, str]:
        """The environment of an App Service managed identity whose endpoint is this server."""
        return {"IDENTITY_ENDPOINT": self.url + TOKEN_PATH, "IDENTITY_HEADER": self.secret}

    def arg_requests(self, status: int | None = None) -> list[dict[str, Any]]:
        return [r for r in self.log.requests if status is None or r["status"] == status]

    # -- protocol
    def _token(self, h: BaseHTTPRequestHandler) -> None:
        parsed = urlparse(h.path)
        params = parse_qs(parsed.query)
        if parsed.path != TOKEN_PATH:
            return _send(h, 404, {"error": "not found"})
        if h.headers.get("X-IDENTITY-HEADER") != self.secret:
            return _send(h, 401, {"error": "invalid_request", "error_description": "X-IDENTITY-HEADER missing"})
        if params.get("api-version") != ["2019-08-01"] or not params.get("resource"):
            return _send(h, 400, {"error": "invalid_request", "error_description": "api-version and resource"})
        token = "tok-" + secrets.token_hex(12)
        with self._lock:
            self.tokens.add(token)
            self.log.tokens_issued += 1
        expires = int(time.time()) + 3600
        body = {
            "access_token": token,
            "expires_on": str(expires),
            "resource": params["resource"][0],
            "token_type": "Bearer",
            "client_id": "00000000-0000-0000-0000-00000000c1d0",
        }
        return _send(h, 200, body)

    def _query(self, h: BaseHTTPRequestHandler) -> None:
        parsed = urlparse(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length)
        if parsed.path != ARG_PATH or not parse_qs(parsed.query).get("api-version"):
            return _send(h, 404, _error("InvalidResourceType", f"no such path {parsed.path}"))
        auth = h.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth.removeprefix("Bearer ") not in self.tokens:
            with self._lock:
                self.log.unauthorized += 1
            return _send(h, 401, _error("AuthenticationFailed", "bearer token missing or unknown"))
        try:
            body = json.loads(raw)
            query = str(body["query"])
            subscriptions = {str(s).lower() for s in body.get("subscriptions") or []}
            options = body.get("options") or {}
        except (ValueError, KeyError, TypeError):
            return _send(h, 400, _error("BadRequest", "body is not a query request"))
        with self._lock:
            n = len(self.log.requests) + 1
            entry = {
                "n": n,
                "at": time.monotonic(),
                "table": query.split(None, 1)[0].lower(),
                "top": options.get("$top"),
                "skip_token": options.get("$skipToken"),
                "status": 0,
            }
            self.log.requests.append(entry)
        if n == self.hold_request:
            self.held.set()
            self.release.wait(60)
        if n in self.throttle:
            entry["status"] = 429
            headers = {"x-ms-user-quota-remaining": "0", "x-ms-user-quota-resets-after": self.resets_after}
            return _send(h, 429, _error("RateLimiting", "Please provide below info when asking for support"), headers)
        status, answer = self._answer(query, subscriptions, options)
        entry["status"] = status
        remaining = 0 if n in self.quota_spent_after else max(0, QUOTA - n)
        headers = {"x-ms-user-quota-remaining": str(remaining), "x-ms-user-quota-resets-after": self.resets_after}
        return _send(h, status, answer, headers)

    def _answer(self, query: str, subscriptions: set[str], options: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        if options.get("resultFormat") != "objectArray":
            return 400, _error("BadRequest", "this server speaks resultFormat objectArray only")
        top = int(options.get("$top") or 100)
        if not 1 <= top <= 1000:
            return 400, _error("BadRequest", "$top must be 1 to 1000")
        table = query.split(None, 1)[0].lower()
        rows = [r for r in self.tables.get(table, []) if str(r.get("subscriptionId", "")).lower() in subscriptions]
        digest = hashlib.sha256(query.encode()).hexdigest()[:16]
        offset = 0
        if options.get("$skipToken"):
            try:
                token = json.loads(base64.b64decode(options["$skipToken"]))
                offset = int(token["offset"])
                if token["query"] != digest:
                    raise ValueError("another query")
            except (ValueError, KeyError, TypeError):
                return 400, _error("InvalidSkipToken", "skip token does not belong to this query")
        page = rows[offset : offset + top]
        projects_id = "project id" in query.replace("\n", " ")
        answer: dict[str, Any] = {
            "totalRecords": len(rows),
            "count": len(page),
            "resultTruncated": "false" if projects_id else "true",
            "data": page,
            "facets": [],
        }
        if projects_id and offset + top < len(rows):
            next_token = {"query": digest, "offset": offset + top}
            answer["$skipToken"] = base64.b64encode(json.dumps(next_token).encode()).decode()
        return 200, answer


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _send(h: BaseHTTPRequestHandler, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
    data = json.dumps(body).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json; charset=utf-8")
    h.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        h.send_header(name, value)
    h.end_headers()
    h.wfile.write(data)
