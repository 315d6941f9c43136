"""/healthz and /readyz on the collector's /metrics listener: a real daemon against a loopback IMDS, a real full
filesystem, and the checks on real files.

No assert waits a fixed time: each polls until the state the collector could know (a failed poll, a filler file
removed) shows, and then compares the answer with what the daemon itself reports on /metrics.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector.liveness import ALIVE_FILE
from collector.outbox import DEFAULT_RESERVE_BYTES
from collector.probes import LIVE_MAX_AGE_S, alive_problem, live_check, outbox_problem, poll_problem
from sevents import prometheus
from tests.collector_edges import fullfs
from tests.collector_edges.daemon import start_collector
from tests.collector_edges.fake_imds import FakeImds, _reply, event
from tests.collector_edges.fullfs import fill
from tests.helpers import LogReader, wait_for

small_fs = fullfs.small_fs  # the fixture, shared with the other full-disk tests


class SwitchableImds(FakeImds):
    """The loopback IMDS, with Scheduled Events answering 500 while ``down`` (IMDS mid-update)."""

    down = False

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        if self.down and "scheduledevents" in request.path:
            return _reply(request, 500, '{"error": "Internal server error"}')
        return super().handle(request)


@pytest.fixture
def switchable() -> Iterator[SwitchableImds]:
    server = SwitchableImds().start()
    yield server
    server.stop()


def get(port: int, path: str, method: str = "GET") -> tuple[int, str, dict[str, str]]:
    """Status, body and headers (lower-case names) of one request to the listener."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path)
        answer = connection.getresponse()
        return answer.status, answer.read().decode(), {k.lower(): v for k, v in answer.getheaders()}
    finally:
        connection.close()


def last_successful_poll(port: int) -> float:
    """The daemon's own figure for the last successful poll (Unix time, 0: none)."""
    _, text, _ = get(port, "/metrics")
    (value,) = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "sevents_collector_last_successful_poll_timestamp_seconds"
    ]
    return value


def start(imds: FakeImds, state: Path, *extra: str) -> tuple[subprocess.Popen[bytes], LogReader, int]:
    process, logs = start_collector(imds.base_url, state, "--poll-interval", "0.2", "--retry-deadline", "0.5", *extra)
    return process, logs, logs.metrics_port()


def stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=60)
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_readiness_follows_imds_and_liveness_the_tick(switchable: SwitchableImds, tmp_path: Path) -> None:
    """Live and ready once polling; IMDS answering 500: /readyz 503 naming the error once the last successful poll
    is older than the limit asked for (and /metrics agrees), /healthz still 200; IMDS back: ready again."""
    switchable.set_document(1, [event("a")])
    process, logs, port = start(switchable, tmp_path / "state")
    try:
        wait_for(lambda: get(port, "/healthz")[0] == 200)
        wait_for(lambda: get(port, "/readyz")[0] == 200)
        status, body, headers = get(port, "/readyz")
        assert (status, body) == (200, "ok\n")
        assert headers["content-type"].startswith("text/plain") and headers["cache-control"] == "no-store"

        switchable.down = True
        wait_for(lambda: any(line.get("message") == "poll failed" for line in logs.lines))
        wait_for(lambda: get(port, "/readyz?max_age=1")[0] == 503)
        status, body, _ = get(port, "/readyz?max_age=1")
        answered_at = time.time()
        assert status == 503
        assert body.startswith("the last successful IMDS poll was ") and "(more than 1 s)" in body
        assert "(last error: server_error)" in body and body.endswith("\n") and body.count("\n") == 1
        last_ok = last_successful_poll(port)
        assert answered_at - last_ok > 1  # the daemon's own figure says the same
        assert get(port, "/readyz")[0] == 200  # the default limit (120 s) rides out a short IMDS outage
        assert get(port, "/healthz")[:2] == (200, "ok\n")  # the ticker goes on

        switchable.down = False
        wait_for(lambda: get(port, "/readyz?max_age=1")[0] == 200)
        assert last_successful_poll(port) > last_ok  # ready again because a poll succeeded again
        assert stop(process) == 0
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_other_paths_and_methods_keep_their_answers(imds: FakeImds, tmp_path: Path) -> None:
    """/metrics and any other path still give the metrics; HEAD is answered without a body; other methods 405;
    a max_age that is not a positive number 400."""
    process, _, port = start(imds, tmp_path / "state")
    try:
        wait_for(lambda: get(port, "/readyz")[0] == 200)
        for path in ("/metrics", "/", "/healthz/", "/ready"):
            status, text, headers = get(port, path)
            assert status == 200 and "sevents_collector_polls_total" in text, path
        status, body, headers = get(port, "/healthz", "HEAD")
        assert (status, body, headers["content-length"]) == (200, "", "3")
        assert get(port, "/readyz", "POST")[0] == 405
        for bad in ("abc", "0", "-5", "nan", "inf"):
            assert get(port, f"/healthz?max_age={bad}")[:2] == (400, "max_age: expected a number of seconds above 0\n")
        assert get(port, "/healthz?max_age=30")[0] == 200
        assert stop(process) == 0
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_a_full_state_filesystem_makes_the_collector_unready_until_there_is_room(
    imds: FakeImds, small_fs: Path
) -> None:
    """The state directory on a real 2 MiB tmpfs: filled to the last byte, /readyz says the outbox's reserve is not
    there (the poll itself still succeeds: nothing changed to store); the filler removed, ready again."""
    process, _, port = start(imds, small_fs / "state")
    try:
        wait_for(lambda: get(port, "/readyz")[0] == 200)
        filler = fill(small_fs)
        wait_for(lambda: get(port, "/readyz")[0] == 503)
        body = get(port, "/readyz")[1]
        assert f"below the outbox's reserve of {DEFAULT_RESERVE_BYTES}" in body, body
        assert "IMDS" not in body  # polls still succeed
        assert get(port, "/healthz")[0] == 200  # a full disk is no reason to restart the collector
        filler.unlink()
        wait_for(lambda: get(port, "/readyz")[0] == 200)
        assert stop(process) == 0
    finally:
        process.kill()
        process.wait()


# -- the checks, on real files -------------------------------------------------------------------------------
def test_liveness_is_the_alive_files_age_as_the_exec_probe_tests_it(tmp_path: Path) -> None:
    """No file: not live; fresh: live; older than the limit (60 s, or the one asked for): not live."""
    check = live_check(tmp_path)
    assert check(None).startswith("no alive file yet")
    alive = tmp_path / ALIVE_FILE
    alive.write_text("boot-id 2026-11-26T10:00:00.000000Z\n")
    assert check(None) == ""
    stale = time.time() - (LIVE_MAX_AGE_S + 1)
    os.utime(alive, (stale, stale))
    assert "(more than 60 s): the ticker is stuck" in check(None)
    assert check(120.0) == ""
    assert alive_problem(1000.0, 1030.0, 30.0) == ""
    assert alive_problem(1000.0, 1030.5, 30.0) != ""


def test_poll_problem_names_the_cause() -> None:
    assert poll_problem(0.0, 1000.0, 60.0, "") == "no successful IMDS poll yet"
    assert poll_problem(0.0, 1000.0, 60.0, "connection") == "no successful IMDS poll yet (last error: connection)"
    assert poll_problem(990.0, 1000.0, 60.0, "") == ""
    assert poll_problem(990.0, 1000.0, 60.0, "http_500") == ""  # one failed poll after a recent success
    assert poll_problem(990.0, 1000.0, 5.0, "timeout") == (
        "the last successful IMDS poll was 10.0 s ago (more than 5 s) (last error: timeout)"
    )
    assert poll_problem(990.0, 1000.0, 60.0, "outbox_full") == "the outbox refused the last poll's commit (outbox_full)"
    assert poll_problem(990.0, 1000.0, 60.0, "outbox_error") != ""


def test_outbox_problem_sees_a_read_only_filesystem_and_missing_room(small_fs: Path) -> None:
    """A real tmpfs: writable with room; remounted read-only, both the directory and the file named; the reserve
    larger than what is free, the figures named."""
    state = small_fs / "state"
    state.mkdir()
    outbox = state / "outbox.sqlite"
    outbox.write_bytes(b"")
    assert outbox_problem(outbox, DEFAULT_RESERVE_BYTES) == ""
    assert outbox_problem(outbox, 4 * 2**20).endswith("below the outbox's reserve of 4194304")
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    try:
        assert outbox_problem(outbox, DEFAULT_RESERVE_BYTES) == f"{state} is not writable; {outbox} is not writable"
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    assert outbox_problem(outbox, DEFAULT_RESERVE_BYTES) == ""


# -- the listener's routes, with checks of the test's own ----------------------------------------------------
def test_the_listener_answers_starting_until_checks_are_registered_then_theirs() -> None:
    """503 starting before ``watch``; then each route asks its own check with the max_age given (None when not);
    a check that raises is a 503 naming the error, never a 500 or a dead listener."""
    health = prometheus.Health()
    server = prometheus.serve("127.0.0.1:0", health=health)
    asked: list[tuple[str, float | None]] = []

    def live(max_age: float | None) -> str:
        asked.append(("live", max_age))
        return ""

    def ready(max_age: float | None) -> str:
        asked.append(("ready", max_age))
        if max_age is not None and max_age < 5:
            raise RuntimeError("boom")
        return "" if max_age is None else "not yet\nreally"

    try:
        assert get(server.port, "/healthz")[:2] == (503, "starting: no health check registered yet\n")
        assert get(server.port, "/readyz")[0] == 503
        health.watch(live=live, ready=ready)
        assert get(server.port, "/healthz")[:2] == (200, "ok\n")
        assert get(server.port, "/readyz")[:2] == (200, "ok\n")
        assert get(server.port, "/readyz?max_age=30")[:2] == (503, "not yet really\n")
        assert get(server.port, "/readyz?max_age=1")[:2] == (503, "health check failed: RuntimeError\n")
        assert get(server.port, "/healthz?max_age=2.5")[0] == 200
        assert asked == [("live", None), ("ready", None), ("ready", 30.0), ("ready", 1.0), ("live", 2.5)]
        assert get(server.port, "/metrics")[0] == 200
    finally:
        server.close()
