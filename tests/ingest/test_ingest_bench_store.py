"""The small-batch store benchmark at a tiny size, so that it never rots: it finds every view the schema puts on the
record tables, times each with and without, stores all it made and says so."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def views_reading(table: str) -> set[str]:
    """The materialized views ``ingest/schema.sql`` (the schema in one file) defines over ``table``."""
    schema = (ROOT / "ingest" / "schema.sql").read_text(encoding="utf-8")
    found = set()
    for name, body in re.findall(r"CREATE MATERIALIZED VIEW sevents\.(\w+) TO .*?\n(.*?);\n", schema, re.S):
        if re.search(rf"\bFROM sevents\.{table}\b", body):
            found.add(name)
    return found


def bench(tmp_path: Path, *flags: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / "figures.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_store.py"), *flags, "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}; its stderr ended:\n{done.stderr[-3000:]}"
    return json.loads(out.read_text(encoding="utf-8")), done.stdout


def test_every_view_of_the_record_tables_is_timed_with_and_without_and_every_record_stored(tmp_path: Path) -> None:
    result, printed = bench(tmp_path, "--batches", "3", "--transitions", "4", "--heartbeats", "2")
    expected = views_reading("transitions") | views_reading("heartbeats")
    assert len(expected) >= 5
    assert set(result["views"]) == expected
    assert [s.get("view") for s in result["steps"][1:]] == result["views"]
    for figures in result["steps"]:
        assert figures["raw_ms"] > 0 and figures["ingest_ms"] > 0
    assert all(s["without_ms"] > 0 for s in result["steps"][1:])
    # the Handler stored the first step's batches and two paths' of each later step; raw one path's a step
    per_step = (result["warm_up_batches"] + 3) * 4
    views = len(result["views"])
    assert result["stored"] == {"ingest": (1 + 2 * views) * per_step, "raw": (1 + views) * per_step}
    assert result["lookup_ms"] > 0
    for view in expected:
        assert view in printed
    assert "no dead letter" in printed


def test_bad_sizes_are_refused_with_a_clear_error(tmp_path: Path) -> None:
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_store.py"), "--batches", "0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--batches and --transitions must be at least 1" in done.stderr
