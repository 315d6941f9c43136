"""The SQLite outbox: atomic commits, seq never reused, the bound policy, and a second process removing rows."""

from __future__ import annotations

import functools
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.outbox import (
    DROP_HEARTBEAT_EVICTED,
    DROP_HEARTBEAT_REJECTED,
    Outbox,
    OutboxFull,
    OutboxIOError,
)
from sevents.records import encode
from tests.helpers import wait_for


def transition(n: int, pad: int = 0) -> dict[str, Any]:
    return {"record_type": "transition", "record_id": f"t{n}", "pad": "x" * pad}


def heartbeat(n: int, pad: int = 0) -> dict[str, Any]:
    return {"record_type": "heartbeat", "record_id": f"h{n}", "pad": "x" * pad}


def test_commit_stores_records_with_seq_and_snapshot(tmp_path: Path) -> None:
    """A commit assigns consecutive seqs, stores the canonical payload with seq, and saves the snapshot."""
    with Outbox(tmp_path / "o.sqlite") as outbox:
        assert outbox.snapshot() is None
        seqs = outbox.commit([transition(1), transition(2)], '{"s":1}')
        assert seqs == [1, 2]
        rows = outbox.pending()
        assert [r.seq for r in rows] == [1, 2]
        assert rows[0].payload == encode({**transition(1), "seq": 1})
        assert rows[0].record_type == "transition"
        assert outbox.snapshot() == '{"s":1}'
        assert outbox.depth() == 2
        assert outbox.payload_bytes() == sum(len(r.payload) for r in rows)
        assert [r.seq for r in outbox.pending(after_seq=1)] == [2]


def test_snapshot_none_leaves_it_unchanged(tmp_path: Path) -> None:
    """Committing a heartbeat with snapshot None keeps the last snapshot."""
    with Outbox(tmp_path / "o.sqlite") as outbox:
        outbox.commit([transition(1)], "A")
        outbox.commit([heartbeat(1)], None)
        assert outbox.snapshot() == "A"


def test_failed_commit_writes_nothing(tmp_path: Path) -> None:
    """A commit that fails half-way (an unencodable record) leaves neither records nor snapshot behind."""
    with Outbox(tmp_path / "o.sqlite") as outbox:
        outbox.commit([transition(1)], "A")
        with pytest.raises(TypeError):
            outbox.commit([transition(2), {"record_type": "transition", "bad": object()}], "B")
        assert outbox.snapshot() == "A"
        assert [r.seq for r in outbox.pending()] == [1]
        assert outbox.commit([transition(3)], "C") == [2]


def test_seq_never_reused_after_removal_and_reopen(tmp_path: Path) -> None:
    """Removed rows' seqs are not handed out again, not even by a reopened outbox."""
    path = tmp_path / "o.sqlite"
    with Outbox(path) as outbox:
        outbox.commit([transition(1), transition(2), transition(3)], None)
        assert outbox.remove([1, 2, 3]) == 3
        assert outbox.depth() == 0
        assert outbox.payload_bytes() == 0
    with Outbox(path) as outbox:
        assert outbox.commit([transition(4)], None) == [4]
        assert outbox.last_seq() == 4


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.lists(st.integers(0, 30), max_size=6)), max_size=12))
def test_seq_strictly_increasing_under_any_commit_remove_sequence(steps: list[tuple[int, list[int]]]) -> None:
    """Whatever is committed and removed, every seq handed out is larger than all before it."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, Outbox(Path(tmp) / "o.sqlite") as outbox:
        handed: list[int] = []
        for count, removals in steps:
            handed += outbox.commit([transition(i) for i in range(count)], None)
            outbox.remove(removals)
        assert handed == sorted(set(handed))
        assert handed == list(range(1, len(handed) + 1))


def test_heartbeats_give_way_first(tmp_path: Path) -> None:
    """When full, the oldest heartbeats are evicted for a transition, and each eviction is counted."""
    with Outbox(tmp_path / "o.sqlite", max_bytes=200_000) as outbox:
        for n in range(6):
            outbox.commit([heartbeat(n, pad=20_000)], None)
        outbox.commit([transition(1, pad=90_000)], "S")
        kinds = [r.record_type for r in outbox.pending()]
        assert kinds.count("transition") == 1
        assert kinds.count("heartbeat") == 6 - outbox.drops()[DROP_HEARTBEAT_EVICTED]
        assert outbox.drops()[DROP_HEARTBEAT_EVICTED] >= 3
        assert outbox.size_bytes() <= 200_000
        # The oldest went first.
        remaining = [json.loads(r.payload)["record_id"] for r in outbox.pending() if r.record_type == "heartbeat"]
        assert remaining == [f"h{n}" for n in range(6 - len(remaining), 6)]


def test_a_commit_never_evicts_its_own_heartbeat(tmp_path: Path) -> None:
    """Rows go in by chunks, yet eviction sees only the rows stored before the commit: a heartbeat handed a seq
    by this commit is never deleted by it, so transitions that fit only that way are refused (OutboxFull)."""
    with Outbox(tmp_path / "o.sqlite", max_bytes=200_000) as outbox:
        outbox.commit([heartbeat(0, pad=20_000)], None)
        with pytest.raises(OutboxFull):
            outbox.commit([heartbeat(1, pad=40_000)] + [transition(n, pad=1_000) for n in range(130)], "S")
        assert [r.seq for r in outbox.pending()] == [1]
        assert outbox.drops() == {}


def test_transition_never_dropped_silently(tmp_path: Path) -> None:
    """Transitions that do not fit raise OutboxFull and leave records and snapshot exactly as they were."""
    with Outbox(tmp_path / "o.sqlite", max_bytes=200_000) as outbox:
        outbox.commit([transition(1, pad=120_000)], "A")
        with pytest.raises(OutboxFull):
            outbox.commit([transition(2, pad=60_000)], "B")
        assert outbox.snapshot() == "A"
        assert outbox.depth() == 1
        outbox.remove([1])
        assert outbox.commit([transition(2, pad=60_000)], "B") == [2]


def test_heartbeat_rejected_when_only_transitions_fill_the_outbox(tmp_path: Path) -> None:
    """A heartbeat that cannot fit is not stored and counted as rejected; the commit still succeeds."""
    with Outbox(tmp_path / "o.sqlite", max_bytes=200_000) as outbox:
        outbox.commit([transition(1, pad=150_000)], None)
        assert outbox.commit([heartbeat(1, pad=40_000)], None) == []
        assert outbox.drops() == {DROP_HEARTBEAT_REJECTED: 1}


def test_drop_counts_are_persisted(tmp_path: Path) -> None:
    """Drop counts survive reopening the outbox file and add up."""
    path = tmp_path / "o.sqlite"
    with Outbox(path) as outbox:
        outbox.count_drop("transitions_deferred", 3)
        outbox.count_drop("transitions_deferred", 2)
    with Outbox(path) as outbox:
        assert outbox.drops() == {"transitions_deferred": 5}


def test_wal_and_full_sync(tmp_path: Path) -> None:
    """The file is in WAL mode and the connection syncs fully."""
    with Outbox(tmp_path / "o.sqlite") as outbox:
        assert outbox._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert outbox._db.execute("PRAGMA synchronous").fetchone()[0] == 2


def test_unusable_file_fails_loudly(tmp_path: Path) -> None:
    """A file that is not SQLite raises OutboxIOError instead of carrying on."""
    path = tmp_path / "o.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(OutboxIOError):
        Outbox(path)


def test_disk_error_during_commit_stops_loudly(tmp_path: Path) -> None:
    """A write that SQLite cannot complete (read-only file here) raises OutboxIOError, not a silent loss."""
    path = tmp_path / "o.sqlite"
    with Outbox(path) as outbox:
        outbox.commit([transition(1)], "A")
    outbox = Outbox(path)
    outbox._db.close()
    outbox._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    with pytest.raises(OutboxIOError):
        outbox.commit([transition(2)], "B")
    outbox.close()


READER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from collector.outbox import Outbox
    want = int(sys.argv[2])
    removed = []
    with Outbox(Path(sys.argv[1])) as outbox:
        print("ready", flush=True)
        deadline = time.monotonic() + 60
        while len(removed) < want and time.monotonic() < deadline:
            rows = outbox.pending(limit=7)
            outbox.remove(r.seq for r in rows)
            removed += [json.loads(r.payload)["seq"] for r in rows]
    print(json.dumps(removed))
    """
)


def _removed_some(outbox: Outbox, committed: int) -> bool:
    return outbox.depth() < committed


def test_second_process_reads_and_removes_concurrently(tmp_path: Path) -> None:
    """An ingest-like process removing rows while we commit gets every record exactly once, in seq order."""
    path = tmp_path / "o.sqlite"
    total = 400
    with Outbox(path) as outbox:
        reader = subprocess.Popen([sys.executable, "-c", READER, str(path), str(total)], stdout=subprocess.PIPE)
        assert reader.stdout is not None
        assert reader.stdout.readline() == b"ready\n"
        committed: list[int] = []
        for n in range(0, total, 4):
            committed += outbox.commit([transition(n + i) for i in range(4)], f'{{"n":{n}}}')
            if n == total // 2:
                # Go on only once the reader has removed rows, so the second half is committed while it removes
                # (a depth that merely stops growing could also mean a reader that never ran).
                wait_for(functools.partial(_removed_some, outbox, len(committed)), 60, interval=0.01)
        out, _ = reader.communicate(timeout=90)
        removed = json.loads(out)
        assert removed == committed == list(range(1, total + 1))
        assert outbox.depth() == 0
        assert outbox.payload_bytes() == 0


@pytest.mark.parametrize("reader_holds_a_snapshot", [False, True])
def test_the_cap_bounds_the_files_on_disk_wal_included(tmp_path: Path, reader_holds_a_snapshot: bool) -> None:
    """Filled until it refuses, the outbox's files (database and WAL) stay within the cap, even while a reader's
    open transaction keeps the WAL from being checkpointed."""
    path = tmp_path / "o.sqlite"
    cap = 256 * 1024
    with Outbox(path, max_bytes=cap) as outbox:
        reader = sqlite3.connect(str(path))
        if reader_holds_a_snapshot:
            reader.execute("BEGIN")
            reader.execute("SELECT COUNT(*) FROM records").fetchall()  # the ingest, mid-read
        stored = 0
        with pytest.raises(OutboxFull):
            for n in range(1, 1000):
                outbox.commit([transition(n, pad=4_000)], None)
                stored += 1
                on_disk = sum(p.stat().st_size for p in tmp_path.glob("o.sqlite*") if not p.name.endswith("-shm"))
                # A commit is checked before it is written: it may pass the cap by its own pages at most.
                assert on_disk <= cap + 16 * 4096, f"{on_disk} bytes on disk after {stored} commits"
        assert stored >= 5  # a reader holding the WAL back makes each commit cost its pages twice: counted
        reader.close()
