"""Crash safety with real processes: SIGKILL between insert and acknowledgement, then two more full loads."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from collector.outbox import Outbox
from demo import synthetic
from tests.helpers import wait_for

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

    def stored_a_batch() -> bool:
        assert killable.poll() is None, "the ingest died before storing a batch"
        return marker.exists()

    try:
        wait_for(stored_a_batch, 60, what="a stored batch")
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
    expected["impacts"] = 0
    expected["approvals"] = 0
    assert first == again == [expected]


@pytest.mark.slow
def test_audit_and_report_work_while_the_ingest_runs_and_sigterm_stops_it(tmp_path: Path) -> None:
    """While `run` holds chdb:///dir, `audit` and `report` there ask it (they used to fail with "Cannot lock
    file"), read-only; SIGTERM ends `run` with 0 and takes its socket away."""
    fill_outbox(tmp_path / "vm-0", dataset())
    target = f"chdb://{tmp_path / 'ch'}"
    runner = subprocess.Popen(
        [*CLI, "run", "--source", f"outbox:{tmp_path / 'vm-*'}", "--clickhouse", target],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: depth(tmp_path / "vm-0") == 0, 60, what="the outbox to drain", interval=0.1)
        audit = subprocess.run(
            [*CLI, "audit", "counts", "--clickhouse", target, "--format", "json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert audit.returncode == 0, audit.stderr
        assert json.loads(audit.stdout)[0]["transitions"] == 12
        page = tmp_path / "report.html"
        window = ["--since", "2000-01-01T00:00:00Z", "--until", "2100-01-01T00:00:00Z"]
        report = subprocess.run(
            [*CLI, "report", *window, "--clickhouse", target, "--out", str(page)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert report.returncode == 0, report.stderr
        assert "<svg" in page.read_text()
    finally:
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=30)
    assert runner.returncode == 0
    assert "ingest stopped" in err
    assert not (tmp_path / "ch" / "read.sock").exists()
    counts = json.loads(run_cli("audit", "counts", "--clickhouse", target, "--format", "json"))
    assert counts[0]["transitions"] == 12


def many_records(vms: int) -> list[dict[str, Any]]:
    """A lifecycle and a heartbeat per VM (4 records each), one poison record: enough for many small batches."""
    out: list[dict[str, Any]] = [POISON]
    for vm in range(vms):
        out += [*synthetic.lifecycle(f"E-{vm}", vm), synthetic.heartbeat(vm_index=vm)]
    return out


def random_kills(tmp_path: Path, kills: int, *, vms: int = 25, seed: int = 17) -> dict[str, int]:
    """``kills`` SIGKILLs of a real ingest at random moments, with 2-record batches, then one clean load.

    When the outbox is drained it is refilled with the same records (same positions, same tokens), so the
    redelivered batches hit insert deduplication over and over. Returns lost and duplicated rows after FINAL.
    """
    rng = random.Random(seed)
    state, ch_dir = tmp_path / "vm-0", tmp_path / "ch"
    records = many_records(vms)
    fill_outbox(state, records)
    target, source = f"chdb://{ch_dir}", f"outbox:{tmp_path / 'vm-*'}"
    args = [*CLI, "run", "--source", source, "--clickhouse", target, "--until-idle", "--batch-max-records", "2"]
    args += ["--batch-max-wait", "0.01"]
    done_kills = 0
    while done_kills < kills:
        if depth(state) == 0:
            fill_outbox(state, records)
        ingest = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            ingest.wait(rng.uniform(0.3, 3.0))
        except subprocess.TimeoutExpired:
            ingest.send_signal(signal.SIGKILL)
            ingest.wait(10)
            done_kills += 1
    run_cli("run", "--source", source, "--clickhouse", target, "--until-idle", "--batch-max-records", "2")
    assert depth(state) == 0
    # read in a process of its own: this test process may hold another embedded directory already (one per process)
    done = subprocess.run([sys.executable, "-c", COUNT_ROWS, target], check=True, capture_output=True, text=True)
    counts = json.loads(done.stdout)
    found: dict[str, int] = {}
    for table, expected in (("transitions", 3 * vms), ("heartbeats", vms)):
        final, distinct = counts[table]
        found[f"{table}_lost"] = expected - distinct
        found[f"{table}_duplicated"] = final - distinct
    found["dead_letters"] = counts["dead_letters"]
    return found


COUNT_ROWS = """
import json, sys
from ingest.clickhouse import connect
client = connect(sys.argv[1])
found = {}
for table, key in (("transitions", "transition_id"), ("heartbeats", "heartbeat_id")):
    final, distinct = client.query(f"SELECT count(), uniqExact({key}) FROM sevents.{table} FINAL").result_rows[0]
    found[table] = [final, distinct]
found["dead_letters"] = client.query("SELECT count() FROM sevents.dead_letters FINAL").result_rows[0][0]
client.close()
print(json.dumps(found))
"""


@pytest.mark.slow
@pytest.mark.timeout(7200)  # about 3 s a kill: the default 30 take under two minutes, 500 by hand half an hour
def test_many_random_kills_with_small_batches_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    """Issue 17.6: random kill -9 of the ingest (default 30; SEVENTS_KILLS=500 by hand) lose nothing, and FINAL
    shows each row once."""
    kills = int(os.environ.get("SEVENTS_KILLS", "30"))
    found = random_kills(tmp_path, kills)
    print(f"{kills} kills: {found}")
    assert found == {
        "transitions_lost": 0,
        "transitions_duplicated": 0,
        "heartbeats_lost": 0,
        "heartbeats_duplicated": 0,
        "dead_letters": 1,
    }


@pytest.mark.slow
def test_an_ingest_finding_the_directory_locked_waits_for_it_with_a_message(tmp_path: Path) -> None:
    """Issue 17.8, two real processes: a second ``run`` on a held embedded directory does not exit; it says it is
    waiting, and loads its outbox once the first stops. With a short ``--clickhouse-lock-wait`` it gives up."""
    fill_outbox(tmp_path / "a" / "vm-0", dataset())
    fill_outbox(tmp_path / "b" / "vm-0", [synthetic.heartbeat(vm_index=9)])
    target = f"chdb://{tmp_path / 'ch'}"
    first = subprocess.Popen(
        [*CLI, "run", "--source", f"outbox:{tmp_path / 'a' / 'vm-*'}", "--clickhouse", target],
        stderr=subprocess.DEVNULL,
    )
    second: subprocess.Popen[str] | None = None
    try:
        # the first holds the directory once it drained its outbox
        wait_for(lambda: depth(tmp_path / "a" / "vm-0") == 0, 60, what="the first to drain", interval=0.1)
        run_b = [*CLI, "run", "--source", f"outbox:{tmp_path / 'b' / 'vm-*'}", "--clickhouse", target, "--until-idle"]
        impatient = subprocess.run(
            [*run_b, "--clickhouse-lock-wait", "1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert impatient.returncode == 1
        assert "open in another process" in impatient.stderr
        assert "waiting for it" in impatient.stderr
        second = subprocess.Popen(
            run_b,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(4)
        assert second.poll() is None, "the second ingest exited instead of waiting"
        assert depth(tmp_path / "b" / "vm-0") == 1
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(30)
    assert second is not None
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert "waiting for it" in err
    assert depth(tmp_path / "b" / "vm-0") == 0
    counts = json.loads(run_cli("audit", "counts", "--clickhouse", target, "--format", "json"))
    assert counts[0]["heartbeats"] == 5
