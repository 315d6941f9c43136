"""The collectors' webhook in the Event Hubs benchmark: a receiver on loopback and the latency of each post.

Every collector of the benchmark posts its Preempt and Terminate transitions (``collector.webhook``, the
default event types, body ``json``: the wire record) to ``WebhookReceiver``, which notes when each arrived.
The latency of a post is that moment minus the simulator's true moment of the change it reports (IMDS
change -> webhook received), matched as the stored transitions are (``bench_latency.true_moment``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench_latency import true_moment


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 that answers 204 to every POST and keeps (arrival time, body)."""

    def __init__(self) -> None:
        self.received: list[tuple[float, dict[str, Any]]] = []
        lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                arrived = time.time()
                self.send_response(204)
                self.end_headers()
                try:
                    record = json.loads(body)
                except ValueError:
                    return
                with lock:
                    received.append((arrived, record))

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/hook"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def webhook_latencies(received: Sequence[tuple[float, dict[str, Any]]], truth: list[dict[str, Any]]) -> list[float]:
    """Seconds from each true change to the first post reporting it (a post retried counts once, its first)."""
    moments = {(t["event_id"], t["vm_name"]): t for t in truth}
    first: dict[str, float] = {}
    changed: dict[str, float] = {}
    for arrived, record in received:
        t = moments.get((record.get("event_id"), record.get("vm_name")))
        moment = None if t is None else true_moment(t, str(record.get("kind")), str(record.get("status")))
        key = str(record.get("record_id"))
        if moment is None or key in first:
            continue
        first[key], changed[key] = arrived, moment.timestamp()
    return [first[k] - changed[k] for k in first]
