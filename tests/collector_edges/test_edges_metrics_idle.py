"""Idle connections to /metrics cannot blind the poll: a real daemon against the loopback IMDS, 1,000 idle TCP
connections held open to its /metrics port.

The listener used to take a thread per connection: 80 idle local connections under the unit's TasksMax=64 made
every IMDS poll fail ("can't start new thread") while they were held. What the test checks is what the system
itself can tell: the daemon's thread count does not grow with the connections, its open files stay bounded, no
poll fails, a new event in IMDS is stored by the first polls that see it, and a fresh scrape is answered.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import sqlite3
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sevents.prometheus import MAX_CONNECTIONS
from tests.collector_edges.daemon import start_collector
from tests.collector_edges.fake_imds import FakeImds, event
from tests.helpers import scrape, value, wait_for

IDLE = 1000
# Polls that may see the new document before the test notices its record: the test reads the outbox between
# polls, and a loaded machine may pause it for a poll or two. A blinded collector records nothing at all.
POLL_SLACK = 3


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _stored_event_ids(outbox: Path) -> set[str]:
    """EventIds of the transitions in the outbox, read as ``status`` does (read-only, beside the daemon)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{outbox}?mode=ro", uri=True, timeout=5)) as db:
            rows = db.execute("SELECT payload FROM records WHERE record_type = 'transition'").fetchall()
    except sqlite3.OperationalError:
        return set()  # not created yet
    return {json.loads(payload)["event_id"] for (payload,) in rows}


@contextlib.contextmanager
def _file_limit(needed: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below the {needed} this test needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _connect_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` TCP connections to the port that send nothing (the listener may close some: they stay open here)."""
    held = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            held.append(sock)
    except BaseException:
        for sock in held:
            sock.close()
        raise
    return held


@pytest.mark.slow
def test_a_thousand_idle_connections_to_metrics_leave_polling_on_time(imds: FakeImds, tmp_path: Path) -> None:
    imds.set_document(1, [event("first")])
    state = tmp_path / "state"
    with _file_limit(IDLE + 1024):
        process, logs = start_collector(imds.base_url, state, "--poll-interval", "0.2")
        held: list[socket.socket] = []
        try:
            port = logs.metrics_port()
            wait_for(lambda: "first" in _stored_event_ids(state / "outbox.sqlite"))
            wait_for(lambda: value(scrape(port), "sevents_collector_polls_total", ok="true") >= 3)
            threads, files = _threads(process.pid), _open_files(process.pid)
            failed_before = value(scrape(port), "sevents_collector_polls_total", ok="false")

            held = _connect_idle(port, IDLE)
            polls_held = len(imds.scheduled())

            # The connections cost the daemon no thread and a bounded number of files.
            assert _threads(process.pid) <= threads + 1  # +1: a thread the daemon may start on its own
            assert _open_files(process.pid) <= files + MAX_CONNECTIONS + 4

            # Polling goes on: a new event is stored by the first polls that see it.
            imds.set_document(2, [event("first"), event("late", event_type="Freeze")])
            wait_for(lambda: "late" in _stored_event_ids(state / "outbox.sqlite"), timeout=60)
            saw_late = [s for s in imds.scheduled() if s.incarnation == 2]
            assert 1 <= len(saw_late) <= 1 + POLL_SLACK, f"{len(saw_late)} polls saw the new event before it was stored"
            assert len(imds.scheduled()) > polls_held

            # A fresh client is answered while the idle ones are held, and no poll failed meanwhile.
            samples = scrape(port)
            assert value(samples, "sevents_collector_polls_total", ok="false") == failed_before
            assert value(samples, "sevents_collector_transitions_total", kind="appeared") == 2
            assert _threads(process.pid) <= threads + 1
        finally:
            for sock in held:
                sock.close()
            process.send_signal(signal.SIGTERM)
            try:
                assert process.wait(timeout=30) == 0
            finally:
                process.kill()
                process.wait()


def test_scrape_after_idle_connections_in_process() -> None:
    """The listener alone: idle connections beyond its bound are closed oldest first, a scrape still answers,
    and a connection that sends nothing is closed after the timeout."""
    from sevents.prometheus import MetricsListener

    calls: list[str] = []

    def handler(method: str, target: str, headers: object) -> tuple[str, list[tuple[str, str]], bytes]:
        calls.append(target)
        return "200 OK", [("Content-Type", "text/plain")], b"ok\n"

    listener = MetricsListener("127.0.0.1", 0, handler, max_connections=8, timeout=1.0).start()
    port = listener.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(50)]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            assert answer.read() == b"ok\n"
        assert calls == ["/metrics"]
        assert listener.connections() <= 8
        idle[-1].settimeout(10)
        started = time.monotonic()
        assert idle[-1].recv(1) == b""  # closed by the listener: by the bound or after the timeout
        assert time.monotonic() - started < 10
        wait_for(lambda: listener.connections() == 0, timeout=10)
    finally:
        for sock in idle:
            sock.close()
        listener.shutdown()
        listener.server_close()


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_listener_answers_as_prometheus_client_did() -> None:
    """Text format by default, OpenMetrics when asked for, gzip when accepted, HEAD without a body; other
    methods 405, a request that is not HTTP 400, headers beyond the bound 431; one request per connection."""
    import gzip

    from sevents import prometheus

    server = prometheus.serve("127.0.0.1:0")
    port = server.port
    try:
        plain = _raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        head, _, body = plain.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in head
        assert b"text/plain" in head and b"process_resident_memory_bytes" in body
        assert f"Content-Length: {len(body)}".encode() in head

        zipped = _raw(port, b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n")
        head, _, body = zipped.partition(b"\r\n\r\n")
        assert b"Content-Encoding: gzip" in head and b"process_resident_memory_bytes" in gzip.decompress(body)

        open_metrics = _raw(port, b"GET / HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n")
        assert b"application/openmetrics-text" in open_metrics and open_metrics.endswith(b"# EOF\n")

        only_head = _raw(port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert only_head.startswith(b"HTTP/1.1 200 OK") and only_head.endswith(b"\r\n\r\n")

        assert _raw(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").startswith(b"HTTP/1.1 405")
        assert _raw(port, b"hello\r\n\r\n").startswith(b"HTTP/1.1 400")
        big = b"GET / HTTP/1.1\r\n" + b"X-Pad: " + b"x" * 20_000  # no end in sight: answered once past the bound
        assert _raw(port, big).startswith(b"HTTP/1.1 431")
    finally:
        server.close()
