"""Crash safety with real processes: SIGKILL between insert and acknowledgement, then two more full loads."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from collector.outbox import Outbox
from demo import synthetic

HERE = Path(__file__).parent
CLI = [sys.executable, "-m", "ingest.cli"]
POISON = {"record_type": "transition", "schema_version": 999}


def dataset() -> list[dict[str, Any]]:
    """12 transitions over 4 VMs, 4 heartbeats, 1 poison record."""
    out: list[dict[str, Any]] = []
    for vm in range(4):
        out += synthetic.lifecycle(f"E-{vm % 2}", vm)
        out.append(synthetic.heartbeat(vm_index=vm))
    out.insert(5, POISON)
    return out


def fill_outbox(state: Path, records: list[dict[str, Any]]) -> None:
    """A brand-new outbox holding ``records``: the same seqs (and so the same positions) every time."""
    for leftover in state.glob("outbox.sqlite*"):
        leftover.unlink()
    with Outbox(state / "outbox.sqlite") as outbox:
        outbox.commit(records, None)


def depth(state: Path) -> int:
    with Outbox(state / "outbox.sqlite") as outbox:
        return outbox.depth()


def run_cli(*args: str) -> str:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_sigkill_between_insert_and_ack_then_three_loads_leave_the_same_counts(tmp_path: Path) -> None:
    """Killing the ingest after an insert but before the ack, then loading the data three times, dedupes to once."""
    state, ch_dir, marker = tmp_path / "vm-0", tmp_path / "ch", tmp_path / "stored"
    records = dataset()
    fill_outbox(state, records)
    killable = subprocess.Popen(
        [sys.executable, str(HERE / "ingest_killable.py"), str(tmp_path / "vm-*"), str(ch_dir), str(marker)],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert killable.poll() is None, "the ingest died before storing a batch"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        killable.send_signal(signal.SIGKILL)
        killable.wait(10)
    assert killable.returncode == -signal.SIGKILL
    assert int(marker.read_text()) == 4
    assert depth(state) == len(records)  # stored but never acknowledged

    target = f"chdb://{ch_dir}"
    source = f"outbox:{tmp_path / 'vm-*'}"
    run_cli("run", "--source", source, "--clickhouse", target, "--until-idle", "--batch-max-records", "3")
    assert depth(state) == 0
    first = json.loads(run_cli("audit", "counts", "--clickhouse", target, "--format", "json"))
    for _ in range(2):
        fill_outbox(state, records)
        run_cli("run", "--source", source, "--clickhouse", target, "--until-idle")
        assert depth(state) == 0
    again = json.loads(run_cli("audit", "counts", "--clickhouse", target, "--format", "json"))
    expected = {"transitions": 12, "events": 2, "heartbeats": 4, "vms_with_heartbeat": 4, "dead_letters": 1}
    assert first == again == [expected]


@pytest.mark.slow
def test_a_running_ingest_owns_the_embedded_directory_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """While `run` holds chdb:///dir, `audit` there fails with a clear message; SIGTERM ends `run` with 0."""
    fill_outbox(tmp_path / "vm-0", dataset())
    target = f"chdb://{tmp_path / 'ch'}"
    runner = subprocess.Popen(
        [*CLI, "run", "--source", f"outbox:{tmp_path / 'vm-*'}", "--clickhouse", target],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while depth(tmp_path / "vm-0") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert depth(tmp_path / "vm-0") == 0
        audit = subprocess.run(
            [*CLI, "audit", "counts", "--clickhouse", target], capture_output=True, text=True, timeout=60
        )
        assert audit.returncode == 1
        assert "open in another process" in audit.stderr
    finally:
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=30)
    assert runner.returncode == 0
    assert "ingest stopped" in err
    counts = json.loads(run_cli("audit", "counts", "--clickhouse", target, "--format", "json"))
    assert counts[0]["transitions"] == 12
