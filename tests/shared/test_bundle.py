"""The offline bundle installs a working collector into an empty virtualenv with no package index reachable.

Run for this interpreter and, where one is installed, for Python 3.9 (the oldest the collector supports): the
installed collector polls the loopback IMDS, fits the 100 MB budget and has none of the central side's libraries.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import sevents
from tests.collector_edges.fake_imds import FakeImds, event
from tests.helpers import LogReader, scrape, value, wait_for

ROOT = Path(__file__).resolve().parents[2]
BUDGET_BYTES = 100 * 10**6
CENTRAL_ONLY = ("chdb", "pyarrow", "pandas", "clickhouse_connect", "msgspec", "orjson")
IMPORT_ALL = (
    "import importlib, pkgutil, collector, sevents\n"
    "for package in (collector, sevents):\n"
    "    for module in pkgutil.iter_modules(package.__path__):\n"
    "        importlib.import_module(package.__name__ + '.' + module.name)\n"
)


def _python39() -> str | None:
    """A Python 3.9 that runs, as the interpreter's own path (a pyenv shim answers differently elsewhere)."""
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")))
    candidates += [found] if (found := shutil.which("python3.9")) else []
    for candidate in candidates:
        ran = subprocess.run([candidate, "-c", "import sys; print(sys.executable)"], capture_output=True, check=False)
        if ran.returncode == 0:
            return ran.stdout.decode().strip()
    return None


PYTHON39 = _python39()
INTERPRETERS = [
    pytest.param(sys.executable, id="this-python"),
    pytest.param(PYTHON39, id="python3.9", marks=pytest.mark.skipif(PYTHON39 is None, reason="no Python 3.9 here")),
]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _offline_env() -> dict[str, str]:
    """No pip configuration and every proxy a closed port: any attempt to reach an index fails."""
    hole = f"http://127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "SEVENTS_", "VIRTUAL_ENV"))}
    env.update(HTTP_PROXY=hole, HTTPS_PROXY=hole, http_proxy=hole, https_proxy=hole, PIP_INDEX_URL=hole)
    return env


def _quick(tmp_path: Path) -> list[str]:
    return ["--state-dir", str(tmp_path / "state"), "--min-request-interval", "0"]


def _site_packages_bytes(venv: Path) -> int:
    (site,) = venv.glob("lib/python3.*/site-packages")
    return sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.slow
@pytest.mark.parametrize("python", INTERPRETERS)
def test_bundle_installs_a_working_slim_collector_offline(python: str, tmp_path: Path) -> None:
    """bundle-collector.sh, then install.sh with no index: the collector polls, in budget, without chDB & co."""
    built = subprocess.run(
        ["bash", str(ROOT / "scripts/bundle-collector.sh"), "--python", python, "--out", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    bundle = Path(built.stdout.strip().splitlines()[-1])
    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (top,) = (tmp_path / "unpacked").iterdir()
    assert {p.name for p in top.iterdir()} >= {"install.sh", "wheelhouse", "sevents-collector.service"}

    venv = tmp_path / "empty" / "venv"
    installed = subprocess.run(
        ["bash", str(top / "install.sh"), "--prefix", str(venv), "--python", python],
        capture_output=True,
        text=True,
        env=_offline_env(),
        timeout=600,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr

    imds = FakeImds().start()
    try:
        imds.set_document(1, [event("a")])
        polled = subprocess.run(
            [str(venv / "bin/sevents-collector"), "once", "--imds-url", imds.base_url, *_quick(tmp_path)],
            capture_output=True,
            text=True,
            env=_offline_env(),
            timeout=120,
            check=False,
        )
    finally:
        imds.stop()
    assert polled.returncode == 0, polled.stderr
    assert [json.loads(line)["event_id"] for line in polled.stdout.splitlines()] == ["a"]

    assert _site_packages_bytes(venv) <= BUDGET_BYTES
    probe = "import importlib.util as u, sys; print(','.join(m for m in sys.argv[1:] if u.find_spec(m)))"
    found = subprocess.run(
        [str(venv / "bin/python"), "-c", probe, *CENTRAL_ONLY], capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == ""
    # Every module of the collector side imports on this interpreter (newer syntax fails at import).
    subprocess.run([str(venv / "bin/python"), "-c", IMPORT_ALL], check=True, timeout=120)
    _scrape_a_running_collector(venv, tmp_path)
    # The central side's commands say what to install rather than failing with a traceback; --version answers.
    for script in ("sevents-ingest", "sevents-report", "sevents-demo"):
        ran = subprocess.run([str(venv / "bin" / script), "--help"], capture_output=True, text=True, check=False)
        assert ran.returncode == 1 and len(ran.stderr.splitlines()) == 1, ran.stderr
        assert "pip install 'sevents[central]'" in ran.stderr and "Traceback" not in ran.stderr
        asked = subprocess.run([str(venv / "bin" / script), "--version"], capture_output=True, text=True, check=False)
        assert (asked.returncode, asked.stdout) == (0, f"{script} {sevents.__version__}\n"), asked.stderr


def _scrape_a_running_collector(venv: Path, tmp_path: Path) -> None:
    """``run --metrics-addr`` on the installed collector answers /metrics with its poll count."""
    imds = FakeImds().start()
    imds.set_document(1, [event("a")])
    process = subprocess.Popen(
        [
            str(venv / "bin/sevents-collector"),
            "run",
            "--imds-url",
            imds.base_url,
            *_quick(tmp_path),
            "--poll-interval",
            "0.1",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_offline_env(),
    )
    assert process.stderr is not None
    logs = LogReader(process.stderr)
    try:
        port = logs.metrics_port()
        wait_for(lambda: value(scrape(port), "sevents_collector_polls_total", ok="true") >= 2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.wait()
        imds.stop()
