"""Progress of long ingest work (issue 30): the pure meter, and a real ``sevents-ingest run --until-idle`` over an
outbox that takes many progress intervals, logging increasing counts, the backlog and a final summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demo import synthetic
from ingest.progress import ProgressMeter
from tests.helpers import wait_for
from tests.ingest.test_ingest_kill import CLI, depth, fill_outbox

# (seconds since the previous step, records stored meanwhile, dead letters stored meanwhile)
steps = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=30, allow_nan=False),
        st.integers(min_value=0, max_value=1000),
        st.integers(min_value=0, max_value=5),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(interval=st.floats(min_value=0.01, max_value=20), steps=steps)
def test_lines_are_spaced_by_the_interval_add_up_and_never_come_when_idle(
    interval: float, steps: list[tuple[float, int, int]]
) -> None:
    meter = ProgressMeter(interval, start=100.0)
    now, stored, dead = 100.0, 0, 0
    last_line_at, reported, reported_dead = 100.0, 0, 0
    for gap, records, letters in steps:
        now += gap
        stored += records
        dead += letters
        line = meter.update(now, stored, dead)
        if line is None:
            # not due, or nothing new since the last line
            assert now - last_line_at < interval or (stored, dead) == (reported, reported_dead)
            continue
        assert now - last_line_at >= interval
        assert (line.since_last, line.dead_letters_since_last) != (0, 0), "a line while idle"
        assert line.stored == stored and line.dead_letters == dead
        assert line.since_last == stored - reported
        assert line.dead_letters_since_last == dead - reported_dead
        assert line.rate_per_s == pytest.approx(line.since_last / (now - last_line_at))
        assert line.elapsed_s == pytest.approx(now - 100.0)
        last_line_at, reported, reported_dead = now, stored, dead
    summary = meter.summary(now)
    assert (summary.stored, summary.dead_letters, summary.since_last) == (stored, dead, stored)
    assert summary.rate_per_s == (pytest.approx(stored / (now - 100.0)) if now > 100.0 else 0.0)


def test_an_idle_meter_stays_quiet_and_totals_never_go_back() -> None:
    meter = ProgressMeter(10.0, start=0.0)
    assert meter.update(5.0, 50, 0) is None  # too soon
    first = meter.update(10.0, 100, 1)
    assert first is not None
    assert (first.stored, first.since_last, first.rate_per_s, first.dead_letters) == (100, 100, 10.0, 1)
    assert meter.update(60.0, 100, 1) is None  # idle for 50 s: nothing stored, nothing said
    late = meter.update(70.0, 90, 1)  # a stale, lower reading from another thread changes nothing
    assert late is None
    second = meter.update(71.0, 130, 1)
    assert second is not None and (second.stored, second.since_last, second.dead_letters_since_last) == (130, 30, 0)
    with pytest.raises(ValueError):
        ProgressMeter(0.0, start=0.0)


def _records(vms: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for vm in range(vms):
        out += synthetic.lifecycle(f"E-{vm % 7}", vm)
        out.append(synthetic.heartbeat(vm_index=vm))
    out.insert(3, {"record_type": "transition", "schema_version": 999})  # poison: one dead letter
    return out


@pytest.mark.slow
def test_a_drain_logs_progress_with_increasing_counts_then_a_summary(tmp_path: Path) -> None:
    records = _records(60)
    fill_outbox(tmp_path / "vm-0", records)
    env = {
        **os.environ,
        "SEVENTS_PROGRESS_INTERVAL": "0.05",  # many intervals in a short drain
        "SEVENTS_BATCH_MAX_RECORDS": "25",
    }
    done = subprocess.run(
        [
            *CLI,
            "run",
            "--source",
            f"outbox:{tmp_path / 'vm-0'}",
            "--clickhouse",
            f"chdb://{tmp_path / 'ch'}",
            "--until-idle",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert depth(tmp_path / "vm-0") == 0
    logged = [json.loads(line) for line in done.stderr.splitlines()]  # JSON lines: stderr is not a terminal
    messages = [entry["message"] for entry in logged]
    progress = [entry for entry in logged if entry["message"] == "ingest progress"]
    assert len(progress) >= 2, messages
    counts = [entry["stored"] for entry in progress]
    assert counts == sorted(counts) and len(set(counts)) == len(counts), counts
    assert all(entry["since_last"] > 0 and entry["rate_per_s"] > 0 for entry in progress)
    backlogs = [entry["backlog"] for entry in progress]
    assert backlogs == sorted(backlogs, reverse=True) and backlogs[0] > 0, backlogs
    assert progress[0]["backlog"] + progress[0]["stored"] + progress[0]["dead_letters"] == len(records)
    summaries = [entry for entry in logged if entry["message"] == "ingest summary"]
    assert len(summaries) == 1
    summary = summaries[0]
    assert (summary["stored"], summary["dead_letters"]) == (len(records) - 1, 1)
    # nothing about progress once the source went idle: the summary is the last word before "ingest stopped"
    after = messages[messages.index("ingest summary") + 1 :]
    assert "ingest progress" not in after and after[-1] == "ingest stopped", messages


@pytest.mark.slow
def test_a_daemon_says_nothing_while_idle(tmp_path: Path) -> None:
    """After the catch-up the daemon idles for many intervals: no progress line repeats the final count."""
    records = _records(20)
    fill_outbox(tmp_path / "vm-0", records)
    env = {**os.environ, "SEVENTS_PROGRESS_INTERVAL": "0.05", "SEVENTS_BATCH_MAX_RECORDS": "10"}
    runner = subprocess.Popen(
        [*CLI, "run", "--source", f"outbox:{tmp_path / 'vm-0'}", "--clickhouse", f"chdb://{tmp_path / 'ch'}"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )

    def drained() -> bool:
        assert runner.poll() is None, "the ingest exited"
        return depth(tmp_path / "vm-0") == 0

    try:
        wait_for(drained, 90, what="the catch-up", interval=0.1)
        time.sleep(1.5)  # 30 intervals of idling: a real process's silence takes real time
    finally:
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=60)
    assert runner.returncode == 0, err
    logged = [json.loads(line) for line in err.splitlines()]
    progress = [entry for entry in logged if entry["message"] == "ingest progress"]
    assert progress, err
    assert [entry["stored"] for entry in progress] == sorted({entry["stored"] for entry in progress})
    summary = next(entry for entry in logged if entry["message"] == "ingest summary")
    assert (summary["stored"], summary["dead_letters"]) == (len(records) - 1, 1)
