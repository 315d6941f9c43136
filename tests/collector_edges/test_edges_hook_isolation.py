"""Hooks without the collector's secrets, and nothing of a hook outliving it: real processes, real environments."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from collector.hooks import EXIT_KILLED, run_hook
from tests.helpers import eventually, wait_for

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the hook supervisor is Linux's")

# Every secret the collector may hold in its environment (issue 28), with a value a leak would show.
SECRETS = {
    "SEVENTS_WEBHOOK_URL": "https://hooks.example.com/services/T0K3N",
    "SEVENTS_CLICKHOUSE_PASSWORD": "ch-password-s3cret",
    "AZURE_CLIENT_CERTIFICATE_PASSWORD": "cert-password-s3cret",
    "IDENTITY_HEADER": "identity-header-s3cret",
    "MSI_SECRET": "msi-s3cret",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer otlp-s3cret",
    "SEVENTS_CHECKPOINT_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountKey=checkpoint-s3cret",
    "SEVENTS_EVENTHUBS_CONNECTION_STRING": "Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=eh-s3cret",
    "AZURE_CLIENT_SECRET": "client-s3cret",
}
DUMP_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_a_hook_sees_none_of_the_collectors_secrets(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each secret set in the collector's own environment: neither its name nor its value reaches the hook."""
    monkeypatch.setenv(name, SECRETS[name])
    monkeypatch.setenv("PATH", os.environ.get("PATH", "/usr/bin"))
    result = run_hook(
        (sys.executable, "-c", DUMP_ENV), {"event_id": "E"}, timeout_s=30, stop=threading.Event(), output_bytes=65536
    )
    assert result.ok, result.output
    seen = json.loads(result.output)
    assert name not in seen
    assert not any(SECRETS[name] in value for value in seen.values())
    assert seen["SEVENTS_EVENT_ID"] == "E" and seen["PATH"] == os.environ["PATH"]


def _stat(pid: int) -> tuple[int, int, int]:
    """Its parent, process group and session."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()  # state ppid pgrp session ...
    return int(fields[1]), int(fields[2]), int(fields[3])


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid: int, timeout: float = 5.0) -> bool:
    return eventually(lambda: not _alive(pid), timeout, interval=0.02)


ESCAPES = {
    # A child that calls setsid (a session and a process group of its own), the hook waiting on.
    "setsid": "setsid sh -c 'echo $$ > {pid}; exec sleep 300' & sleep 300",
    # A child that only moves to a process group of its own.
    "setpgid": (
        f'{sys.executable} -c \'import os, time; os.setpgid(0, 0); open("{{pid}}", "w").write(str(os.getpid())); '
        "time.sleep(300)' & sleep 300"
    ),
    # A daemon's double fork: the middle process exits, the grandchild (setsid) loses its parent.
    "double-fork": "setsid sh -c 'sh -c \"echo \\$\\$ > {pid}; exec sleep 300\" & exit 0' & sleep 300",
}


@linux
@pytest.mark.parametrize("how", sorted(ESCAPES))
def test_a_hooks_detached_child_is_gone_after_the_timeout(how: str, tmp_path: Path) -> None:
    """The hook starts a process that leaves its session or process group and then hangs: at the timeout the hook
    and that process are both gone (real processes, checked in /proc)."""
    pid_file, hook_file = tmp_path / "pid", tmp_path / "hook"
    script = f"echo $$ > {hook_file}; " + ESCAPES[how].format(pid=pid_file)
    results: list[Any] = []
    runner = threading.Thread(
        target=lambda: results.append(run_hook(("sh", "-c", script), {}, timeout_s=2.0, stop=threading.Event()))
    )
    runner.start()
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 10, what="the hook's child to start")
    escaped, hook = int(pid_file.read_text()), int(hook_file.read_text())
    assert _alive(escaped)
    _, group, session = _stat(escaped)
    _, hook_group, hook_session = _stat(hook)
    assert group != hook_group  # it really left the hook's process group (and, but for setpgid, its session)
    assert (session == hook_session) is (how == "setpgid")
    if how == "double-fork":
        # Its parent exited; it went to the hook's supervisor (the subreaper, leader of the hook's session), not init.
        wait_for(lambda: _stat(escaped)[0] == hook_session, 10, what="a reparenting to the hook's supervisor")
    runner.join(timeout=30)
    (result,) = results
    assert result.timed_out and result.exit_code == EXIT_KILLED
    assert _gone(escaped), f"{how}: process {escaped} outlived its hook"


@linux
def test_what_a_hook_leaves_behind_when_it_exits_is_ended_with_it(tmp_path: Path) -> None:
    """A hook that exits at once after detaching a daemon: the hook's result stands, the daemon is gone."""
    pid_file = tmp_path / "pid"
    script = f"setsid sh -c 'sh -c \"echo \\$\\$ > {pid_file}; exec sleep 300\" & exit 0'; sleep 0.5; echo drained"
    result = run_hook(("sh", "-c", script), {}, timeout_s=30, stop=threading.Event())
    assert result.ok and result.output.strip() == "drained"
    assert _gone(int(pid_file.read_text()))
