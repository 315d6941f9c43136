"""The ``sevents-imds-sim`` command, run as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import requests

from simulator import BUILTIN_SCENARIOS

SIM = [sys.executable, "-m", "simulator.cli"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SIM, *args], capture_output=True, text=True, timeout=timeout, check=False)


def test_help_explains_urls_and_control_endpoints() -> None:
    """--help explains the per-VM base URL, the control endpoints and the speed factor."""
    out = run("--help")
    assert out.returncode == 0
    for needle in ("/vm/NAME", "/_sim/truth", "/_sim/faults", "--speed", "--exit-when-done", "--list-scenarios"):
        assert needle in out.stdout


def test_list_scenarios() -> None:
    """--list-scenarios prints every built-in scenario with its description."""
    out = run("--list-scenarios")
    assert out.returncode == 0
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert names == sorted(BUILTIN_SCENARIOS)


def test_bad_scenario_is_a_clear_error(tmp_path: Path) -> None:
    """An unknown scenario or an invalid file exits 2 naming the problem."""
    out = run("--scenario", "no-such-thing")
    assert out.returncode == 2 and "no-such-thing" in out.stderr and "demo" in out.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[[fleet.groups]]\nname = "a"\n[[events]]\ngroup = "b"\nat = 0\n')
    out = run("--scenario", str(bad))
    assert out.returncode == 2 and "unknown group 'b'" in out.stderr
    assert run("--speed", "0").returncode == 2


def test_every_scenario_problem_is_one_whole_line(tmp_path: Path) -> None:
    """Each problem on a line of its own in the form every sevents command uses (PROG: invalid ...: PROBLEM), so
    a log shipper or `head -1` sees all of it; a file that is not UTF-8 or nests beyond reason is one of them."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[[fleet.groups]]\nname = "a"\n[[events]]\ngroup = "b"\nat = 0\n[[events]]\ngroup = "c"\nat = 0\n')
    lines = run("--scenario", str(bad)).stderr.splitlines()
    assert len(lines) >= 2 and all(line.startswith("sevents-imds-sim: invalid scenario: ") for line in lines)
    assert any("'b'" in line for line in lines) and any("'c'" in line for line in lines)
    deep = b"x = " + b"[" * 50_000 + b"]" * 50_000
    for content, says in ((b'[fleet]\nname = "\xff"\n', "not UTF-8"), (deep, "deeply")):
        bad.write_bytes(content)
        out = run("--scenario", str(bad))
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert len(out.stderr.splitlines()) == 1 and says in out.stderr
        assert out.stderr.startswith(f"sevents-imds-sim: invalid scenario: {bad}: ")


def test_runs_a_scenario_logs_and_exits_when_done(tmp_path: Path) -> None:
    """With --port 0 the base URL is the first stdout line; events are logged; truth is written at exit."""
    truth = tmp_path / "truth.json"
    args = ["--scenario", "live-migration", "--speed", "600", "--port", "0", "--exit-when-done", "--linger", "0"]
    proc = subprocess.Popen(
        [*SIM, *args, "--truth-out", str(truth)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        with requests.Session() as http:
            http.trust_env = False
            r = http.get(
                f"{base_url}/vm/web-0/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"}
            )
            assert r.status_code == 200 and "DocumentIncarnation" in r.json()
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0
    logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    messages = [entry["message"] for entry in logs]
    for message in (
        "simulator started",
        "event scheduled",
        "event approved",
        "event started",
        "event ended",
        "scenario done",
    ):
        assert message in messages
    rows = json.loads(truth.read_text())
    assert len(rows) == 4 and {row["outcome"] for row in rows} == {"completed"}


def test_odd_speed_and_port_are_clear_errors() -> None:
    """A speed that is not a finite positive number, or a port outside 0-65535, exits 2 with a message."""
    for args in (("--speed", "nan"), ("--speed", "inf"), ("--port", "70000"), ("--port", "-1")):
        out = run(*args, "--exit-when-done", "--linger", "0", timeout=30)
        assert out.returncode == 2, (args, out.stderr)
        assert "Traceback" not in out.stderr and args[0] in out.stderr


def test_truth_out_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    """--truth-out in a missing directory is refused up front (exit 2); one that cannot be opened exits 1."""
    missing = run("--truth-out", str(tmp_path / "nope" / "truth.json"), "--exit-when-done", "--port", "0")
    assert missing.returncode == 2 and "--truth-out" in missing.stderr and "Traceback" not in missing.stderr
    a_directory = tmp_path / "truth.json"
    a_directory.mkdir()
    args = ("--scenario", "platform-reboot", "--speed", "10000", "--port", "0", "--exit-when-done", "--linger", "0")
    out = run(*args, "--truth-out", str(a_directory))
    assert out.returncode == 1, out.stderr
    assert "cannot write --truth-out" in out.stderr and "Traceback" not in out.stderr
