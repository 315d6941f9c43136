"""The demo as a user runs it: a real subprocess, its summary, and the report it writes."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.clickhouse import _locked
from tests.helpers import wait_for


@pytest.mark.slow
def test_demo_runs_the_fleet_and_matches_ground_truth(tmp_path: Path) -> None:
    """sevents-demo shows progress, prints the summary with every value matching, and writes the report."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from demo.entry import main; sys.exit(main())",
            "--workdir",
            str(tmp_path / "demo"),
            "--speed",
            "40",
            "--poll-interval",
            "0.5",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "36 collector processes polling" in out and "events:" in out  # progress while it runs
    assert "Per fault domain of each set" in out
    # FD 0 of availability sets web and api are both hit: two rows, each checked against the simulator's fleet
    assert "web / FD 0" in out and "api / FD 0" in out
    # every figure printed is compared: each event's values, the (set, FD) rows' counts and means, the downtime the
    # collectors measured (per event and the unannounced pause) and the approvals sevents made
    assert "Unannounced pause of web-7: 3.0 s; measured 3." in out
    assert "159 of 159 values match the ground truth" in out
    # the api tier's Reboot names four VMs: each drains and records ready, and the coordinator beside the ingest
    # approves it (HTTP 200, through the simulator's Maintenance API) once all four are: none is cut short
    decisions = out[out.index("Approval policy decisions") :]
    approved = [line for line in decisions.splitlines()[1:] if " approved " in f" {line} "]  # below the header
    assert len(approved) == 1, decisions
    assert approved[0].split()[:5] == ["reboot", "Reboot", "coordinator-demo", "approved", "coordinator"], decisions
    assert " 200 " in approved[0] and approved[0].rstrip().endswith("yes"), decisions
    others = [line for line in decisions.splitlines() if line.startswith("reboot ") and " approved " not in line]
    assert len(others) == 4 and all(" ready " in o for o in others), decisions
    assert "hook_interrupted" not in out
    assert (tmp_path / "demo" / "report.html").is_file()
    assert (tmp_path / "demo" / "clickhouse").is_dir()


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from demo.entry import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, check=False)


def test_demo_bad_input_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """An unknown scenario, a speed that is not positive and an unusable workdir are named, never a traceback."""
    unknown = _demo("--workdir", str(tmp_path / "a"), "--scenario", "no-such-scenario")
    assert unknown.returncode == 2 and "no-such-scenario" in unknown.stderr and "Traceback" not in unknown.stderr
    slow = _demo("--workdir", str(tmp_path / "b"), "--speed", "-1")
    assert slow.returncode == 2 and "--speed" in slow.stderr and "Traceback" not in slow.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    unusable = _demo("--workdir", str(blocker / "demo"))
    assert unusable.returncode == 1 and "cannot run in workdir" in unusable.stderr
    assert "Traceback" not in unusable.stderr


def test_demo_refuses_a_workdir_whose_clickhouse_another_process_holds(tmp_path: Path) -> None:
    """The demo starts fresh by deleting <workdir>/clickhouse, so a directory in use elsewhere is left alone."""
    directory = tmp_path / "work" / "clickhouse"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ingest.cli",
            "run",
            "--source",
            f"outbox:{tmp_path}/none",
            "--clickhouse",
            f"chdb://{directory}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def opened() -> bool:
        assert holder.poll() is None, "the holder exited"
        return _locked(directory)

    try:
        wait_for(opened, 60, what="the holder to open the directory", interval=0.2)
        refused = _demo("--workdir", str(tmp_path / "work"), "--timeout", "1")
        assert refused.returncode == 1 and "open in another process" in refused.stderr
        assert (directory / "status").is_file() and _locked(directory)
    finally:
        holder.terminate()
        holder.wait(timeout=30)


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass  # gone meanwhile
    return found


def _signal_state(pid: int | str = "self") -> str:
    """The blocked, ignored and caught signal masks of a process (``/proc/PID/status``), for a failure message."""
    lines = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
    return " ".join(line.replace("\t", "") for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


# The demo dumps every thread's stack to stderr on SIGUSR1: if SIGINT does not stop it, the failure shows where each
# thread was (in some full suites the demo ran on after SIGINT; alone it never did).
DUMPS_STACKS = "import faulthandler, signal; faulthandler.register(signal.SIGUSR1, all_threads=True); "


@pytest.mark.slow
def test_ctrl_c_stops_the_demo_cleanly(tmp_path: Path) -> None:
    """SIGINT while the fleet runs: exit 130, one line on stderr, no traceback, no collector process left behind.
    The scenario runs at a quarter of its speed, so it is still running when the signal comes on a loaded machine
    (a demo that finished first exits 0)."""
    workdir = tmp_path / "demo"
    code = DUMPS_STACKS + "import sys; from demo.entry import main; sys.exit(main())"
    demo = subprocess.Popen(
        [sys.executable, "-c", code, "--workdir", str(workdir), "--speed", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            if "collector processes polling" in line:
                break
        assert _processes_mentioning(str(workdir / "collectors")), "the collectors run"
        states = f"demo {_signal_state(demo.pid)}; this worker {_signal_state()}"
        demo.send_signal(signal.SIGINT)
        try:
            _, err = demo.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            demo.send_signal(signal.SIGUSR1)
            try:
                demo.communicate(timeout=5)
            except subprocess.TimeoutExpired as still:  # it runs on: what it wrote so far, the stacks last
                stacks = still.stderr.decode(errors="replace") if isinstance(still.stderr, bytes) else still.stderr
            pytest.fail(f"the demo still ran 120 s after SIGINT; signal masks before it: {states}\n{stacks}")
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert _processes_mentioning(str(workdir / "collectors")) == []
