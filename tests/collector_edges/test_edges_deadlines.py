"""Slow answers never blind the poll loop: total deadlines on every request, instance metadata apart from polls."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from collector.imds import ImdsClient, ImdsError
from collector.imds_policy import ImdsPolicy
from collector.settings import CollectorSettings
from collector.wiring import build_agent
from tests.collector_edges.fake_imds import INSTANCE, FakeImds, event
from tests.helpers import wait_for

TRICKLE_FOR_S = 30.0


@pytest.fixture
def trickler() -> Iterator[tuple[str, list[str]]]:
    """A loopback server answering one byte every 100 ms for 30 s; the test sets whether head or body trickles."""
    listener = socket.create_server(("127.0.0.1", 0))
    mode: list[str] = ["body"]
    done = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
            stream = head + b" " * 1000
            if mode[0] == "body":
                conn.sendall(head)
                stream = b" " * 1000
            started = time.monotonic()
            for byte in stream:
                if done.is_set() or time.monotonic() - started > TRICKLE_FOR_S:
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return  # the client hung up: its deadline worked
                time.sleep(0.1)

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", mode
    done.set()
    listener.close()


@pytest.mark.parametrize("part", ["body", "head"])
def test_a_trickled_answer_ends_at_the_total_deadline(trickler: tuple[str, list[str]], part: str) -> None:
    """An answer trickled a byte per 100 ms fails as a timeout at the request's total deadline, not after 30 s."""
    url, mode = trickler
    mode[0] = part
    policy = ImdsPolicy(read_timeout_s=1.0, first_call_timeout_s=1.0, min_interval_s=0.0, deadline_s=0.0)
    client = ImdsClient(url, policy=policy)
    started = time.monotonic()
    with pytest.raises(ImdsError) as caught:
        client.scheduled_events(threading.Event())
    elapsed = time.monotonic() - started
    assert caught.value.kind == "timeout"
    # Each byte arrives well within a per-read timeout, so only a total deadline ends this before the trickle
    # does; the margin is for a loaded machine, far below the 30 s the trickle would last.
    assert elapsed < TRICKLE_FOR_S / 3


def test_slow_instance_metadata_never_delays_scheduled_events(imds: FakeImds, settings: CollectorSettings) -> None:
    """With instance metadata answering after 30 s, polls run on time and records carry the fallback identity."""
    imds.instance_delay = 30.0
    imds.set_document(1, [event("e1")])
    fast = dataclasses.replace(settings, request_timeout=1.0, first_call_timeout=1.0, retry_deadline=60.0)
    agent = build_agent(fast)
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    runner.start()
    try:
        wait_for(imds.scheduled, 30, what="a first poll", interval=0.01)
        first = imds.scheduled()[0].at
        # every poll of the first 2 s has arrived once one arrives after them (polls run in turn)
        wait_for(lambda: imds.scheduled()[-1].at - first > 2.0, 30, what="a poll 2 s after the first")
        polls = [s.at for s in imds.scheduled()]
        # While each instance-metadata try takes its full second and is retried for a minute, Scheduled
        # Events are still asked for every poll_interval (0.05 s); 2 s must hold many polls, not none.
        assert len([t for t in polls if t - first <= 2.0]) >= 10
        appeared = [r for r in agent.outbox.pending() if r.record_type == "transition"]
        assert appeared
    finally:
        stop.set()
        runner.join(timeout=10)
        agent.close()
    vm_ids = {json.loads(r.payload)["vm_id"] for r in appeared}
    assert len(vm_ids) == 1
    assert next(iter(vm_ids)).startswith("unknown-")
    assert INSTANCE["compute"]["vmId"] not in vm_ids


def test_an_answer_broken_off_mid_body_is_a_connection_error() -> None:
    """A body shorter than its Content-Length (the server hung up) is an ImdsError, never another exception."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"DocumentIncarnation"')

    threading.Thread(target=serve, daemon=True).start()
    policy = ImdsPolicy(min_interval_s=0.0, deadline_s=0.0)
    with pytest.raises(ImdsError) as caught:
        ImdsClient(f"http://127.0.0.1:{listener.getsockname()[1]}", policy=policy).scheduled_events(threading.Event())
    listener.close()
    assert caught.value.kind == "connection"
