"""Approval hooks as real processes: no shell, the event on stdin and in the environment, bounded output, kills."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from collector.hooks import EXIT_KILLED, EXIT_NOT_STARTED, run_hook


def test_a_hook_gets_the_event_on_stdin_and_in_its_environment(tmp_path: Path) -> None:
    """No shell: the argv runs as given; its output is captured and bounded; a missing program is 127."""
    code = (
        "import json,os,sys; e=json.load(sys.stdin); print(e['event_id'], os.environ['SEVENTS_RESOURCES']); "
        "print('x'*9000)"
    )
    result = run_hook(
        (sys.executable, "-c", code),
        {"event_id": "E; rm -rf /", "resources": ["a", "b"]},
        timeout_s=30,
        stop=threading.Event(),
    )
    assert result.ok and result.exit_code == 0
    assert len(result.output) <= 4096 and result.output.endswith("x\n")
    first = run_hook(
        (sys.executable, "-c", code.replace("print('x'*9000)", "")),
        {"event_id": "E; rm", "resources": ["a", "b"]},
        timeout_s=30,
        stop=threading.Event(),
    )
    assert first.output.strip() == "E; rm a,b"
    missing = run_hook((str(tmp_path / "nope"),), {}, timeout_s=5, stop=threading.Event())
    assert missing.exit_code == EXIT_NOT_STARTED and not missing.ok


def test_a_hook_is_killed_when_the_collector_stops(tmp_path: Path) -> None:
    """Stop ends a hanging hook at once rather than at its timeout."""
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    result = run_hook((sys.executable, "-c", "import time; time.sleep(60)"), {}, timeout_s=60, stop=stop)
    assert result.timed_out and result.exit_code == EXIT_KILLED
    assert result.duration_s < 60


def test_a_hook_does_not_inherit_the_collectors_secrets() -> None:
    """The Event Hubs connection string in the collector's environment is not passed to its hooks; a name the
    operator lists (hook_env) is."""
    code = "import os; print(os.environ.get('SEVENTS_EVENTHUBS_CONNECTION_STRING', 'absent'), os.environ['KEEP'])"
    environ = {"SEVENTS_EVENTHUBS_CONNECTION_STRING": "Endpoint=sb://x/;SharedAccessKey=secret", "KEEP": "kept"}
    result = run_hook(
        (sys.executable, "-c", code), {}, timeout_s=30, stop=threading.Event(), environ=environ, allow_env=("KEEP",)
    )
    assert result.output.strip() == "absent kept"
