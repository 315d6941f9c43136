"""The test tiers' own rules (tests/tiers.py): what leaves the pure tier, and the watch that keeps it pure."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tests.tiers import IoWatch, io_imports, io_reason


def _module(tmp_path: Path, source: str, name: str = "test_sample.py") -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


def test_a_module_importing_a_server_or_a_process_leaves_the_pure_tier(tmp_path: Path) -> None:
    """Imports name the tools: a server, a process, chDB; a submodule or a name from them counts too."""
    assert io_imports(_module(tmp_path, "import subprocess\nfrom simulator import SimServer\n")) == (
        "simulator.SimServer",
        "subprocess",
    )
    server = _module(tmp_path, "from http.server import HTTPServer\n", "test_server.py")
    assert io_reason(server, ()) == "imports http.server"


def test_a_pure_module_stays_unless_a_fixture_says_otherwise(tmp_path: Path) -> None:
    """Standard library and product cores leave a module pure; a fixture that starts an engine takes a test out."""
    source = "import json\nfrom collector.transitions import diff\nfrom sockets_lib import x\n"
    source += "def test_x():\n    import subprocess\n"  # inside a test: the watch's to see
    path = _module(tmp_path, source)
    assert io_reason(path, ("tmp_path",)) == ""
    assert io_reason(path, ("tmp_path", "db")) == "fixture db"


@pytest.mark.io  # binds a socket and starts a process on purpose: the watch under test must see them
def test_the_watch_sees_sockets_and_processes_of_the_test_and_its_threads() -> None:
    """What the test's own thread or a thread it starts does is seen; a thread running before the test is not its."""
    import socket
    import subprocess

    earlier_go, earlier_done = threading.Event(), threading.Event()

    def earlier() -> None:
        earlier_go.wait(10)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
        earlier_done.set()

    left_running = threading.Thread(target=earlier, daemon=True)
    left_running.start()
    watch = IoWatch()
    watch.start()
    earlier_go.set()
    assert earlier_done.wait(10)
    assert watch.take() == []  # an earlier test's thread: not this test's doing

    def started() -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))

    worker = threading.Thread(target=started)
    worker.start()
    worker.join(10)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert watch.stop() == ["bound a socket", "started a subprocess"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
    assert watch.take() == []  # stopped: between tests nothing is recorded
