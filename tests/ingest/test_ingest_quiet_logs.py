"""Logs a log shipper can take (issue 30), with real processes: audits against a running ingest leave nothing in its
stderr but its own log lines; a second ingest waiting on a held directory says so once per 10 s in the project's
format, never the engine's raw "Cannot lock file"; a directory the user cannot write is named in one line."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.readpath import socket_path
from tests.helpers import wait_for
from tests.ingest.test_ingest_kill import CLI, dataset, depth, fill_outbox


@contextlib.contextmanager
def running_ingest(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A real ``sevents-ingest run`` holding chdb://tmp_path/ch with its outbox loaded; yields the target and, once
    the block is left (SIGTERM, exit 0), the lines of its stderr."""
    fill_outbox(tmp_path / "vm-0", dataset())
    target = f"chdb://{tmp_path / 'ch'}"
    runner = subprocess.Popen(
        [*CLI, "run", "--source", f"outbox:{tmp_path / 'vm-*'}", "--clickhouse", target],
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def serving() -> bool:
        assert runner.poll() is None, "the ingest exited"
        return depth(tmp_path / "vm-0") == 0 and socket_path(tmp_path / "ch").exists()

    try:
        wait_for(serving, 90, what="the ingest to drain and answer on its socket", interval=0.1)
        yield target, lines
    finally:
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=60)
        lines += err.splitlines()
    assert runner.returncode == 0, err


def audit(target: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "audit", "counts", "--clickhouse", target, "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def hang_up_after_asking(directory: Path) -> None:
    """An asker that sends its query and goes away before the answer (an audit killed or timed out mid-query)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(socket_path(directory)))
        conn.sendall(json.dumps({"sql": "SELECT 1", "database": ""}).encode())
        conn.shutdown(socket.SHUT_WR)


@pytest.mark.slow
def test_twenty_audits_against_a_running_ingest_leave_no_traceback_in_its_output(tmp_path: Path) -> None:
    """Every audit used to add a BrokenPipeError traceback to the ingest's stderr: its check for a running ingest
    connects and hangs up, and the server wrote an answer to nobody. Askers that leave early (killed audits, a
    client hanging up right after its query) are normal too."""
    with running_ingest(tmp_path) as (target, lines):
        for _ in range(4):  # 4 x (4 full audits + 1 killed) = 20 audit processes, 4 at a time on two cores
            batch = [audit(target) for _ in range(4)]
            killed = audit(target)
            time.sleep(0.8)
            killed.kill()
            killed.communicate(timeout=30)
            for done in batch:
                out, err = done.communicate(timeout=120)
                assert done.returncode == 0, err
                assert json.loads(out)[0]["transitions"] == 12
            for _ in range(3):
                hang_up_after_asking(tmp_path / "ch")
        time.sleep(1)  # the last answers written to nobody
        assert audit(target).communicate(timeout=120)[0], "the ingest stopped answering"
    text = "\n".join(lines)
    assert "Traceback" not in text
    assert "BrokenPipeError" not in text
    assert "Exception occurred" not in text
    for line in lines:  # nothing but the project's log lines: each one JSON object
        json.loads(line)
    assert "ingest stopped" in text


@pytest.mark.slow
def test_a_second_ingest_waiting_on_a_held_directory_warns_once_per_10s_without_the_engines_text(
    tmp_path: Path,
) -> None:
    """The waiting ingest used to try the engine once a second, which printed "Code: 76 ... Cannot lock file" on
    stderr every time; now it does not ask the engine while another process holds the lock."""
    (tmp_path / "b" / "vm-0").mkdir(parents=True)
    fill_outbox(tmp_path / "b" / "vm-0", dataset())
    with running_ingest(tmp_path) as (target, _):
        second = subprocess.Popen(
            [*CLI, "run", "--source", f"outbox:{tmp_path / 'b' / 'vm-*'}", "--clickhouse", target],
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(6)
        assert second.poll() is None, "the second ingest exited instead of waiting"
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=60)
    assert "Cannot lock file" not in err
    assert "Code: " not in err
    lines = err.splitlines()
    logged = [json.loads(line) for line in lines if not line.startswith("sevents-ingest: ")]
    assert len(logged) + 1 == len(lines), err  # log lines, and the one closing error line
    waiting = [entry for entry in logged if "waiting for it" in entry["message"]]
    assert len(waiting) == 1, err  # ~6 s of waiting: the first report only
    assert waiting[0]["level"] == "warning"
    assert waiting[0]["directory"] == str(tmp_path / "ch")
    assert lines[-1].startswith("sevents-ingest: stopped while waiting")


@contextlib.contextmanager
def unwritable(directory: Path) -> Iterator[str]:
    """``directory`` made unwritable for this user, root included; yields the reason the system gives."""
    directory.mkdir()
    if os.geteuid() != 0:
        directory.chmod(0o500)
        try:
            yield "Permission denied"
        finally:
            directory.chmod(0o700)
        return
    made = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"running as root and cannot make {directory} immutable: {made.stderr.decode().strip()}")
    try:
        yield "Operation not permitted"
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


@pytest.mark.slow
def test_a_directory_the_user_cannot_write_is_named_in_one_line(tmp_path: Path) -> None:
    """The engine said "Error initializing EmbeddedServer ... (BAD_ARGUMENTS)" (after its own raw lines); each
    command now says, in one line, which path it cannot write, as which user, and why."""
    directory = tmp_path / "ch"
    fill_outbox(tmp_path / "vm-0", dataset())
    with unwritable(directory) as reason:
        commands = {
            "migrate": ["migrate"],
            "run": ["run", "--source", f"outbox:{tmp_path / 'vm-*'}", "--until-idle"],
            "audit": ["audit", "counts"],
        }
        for name, command in commands.items():
            done = subprocess.run(
                [*CLI, *command, "--clickhouse", f"chdb://{directory}"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 1, (name, done.stderr)
            lines = done.stderr.splitlines()
            assert len(lines) == 1, (name, done.stderr)
            assert "BAD_ARGUMENTS" not in lines[0]
            assert str(directory / "status") in lines[0], lines[0]
            assert "cannot write" in lines[0] and reason in lines[0], lines[0]


@pytest.mark.slow
def test_a_path_the_engine_cannot_use_is_named_in_one_line_even_for_root(tmp_path: Path) -> None:
    """A lock file that is a directory, or a path through a regular file: one line naming the path."""
    (tmp_path / "odd" / "status").mkdir(parents=True)
    (tmp_path / "file").write_text("")
    cases = {
        tmp_path / "odd": f"cannot write {tmp_path / 'odd' / 'status'} (Is a directory)",
        tmp_path / "file" / "ch": f"{tmp_path / 'file'} is a file, not a directory",
    }
    for directory, said in cases.items():
        done = subprocess.run(
            [*CLI, "migrate", "--clickhouse", f"chdb://{directory}"], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr
        assert said in done.stderr and "BAD_ARGUMENTS" not in done.stderr, done.stderr
