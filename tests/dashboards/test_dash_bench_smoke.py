"""The fleet-scale dashboard benchmark at a tiny size, so that it never rots: its data and its verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_dashboards

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_benchmark_runs_every_query_on_a_consistent_fleet(tmp_path: Path) -> None:
    """Three transitions per VM of each finished event, a few events still under way, every query measured."""
    out = tmp_path / "bench.json"
    # its own process: the embedded engine holds one data directory per process, and this package has one open
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_dashboards.py"), "--vms", "200"]
    command += ["--transitions", "15000", "--runs", "2", "--json", str(out)]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    result = json.loads(out.read_text(encoding="utf-8"))
    counts = result["counts"]
    assert counts["events"] == result["events"] == 15000 // (3 * bench_dashboards.SET_SIZE)
    under_way = len(bench_dashboards.ACTIVE_TAIL)
    assert counts["active_events"] == under_way
    finished = (counts["events"] - under_way) * bench_dashboards.SET_SIZE * 3
    assert finished < counts["transitions"] < finished + under_way * bench_dashboards.SET_SIZE * 3
    sets = 200 // bench_dashboards.SET_SIZE
    assert counts["inventory_vms"] == (sets + 1) * bench_dashboards.SET_SIZE  # a set that never ran a collector
    fortnight = result["events"] * bench_dashboards.ANNOTATION_DAYS / 365
    # every VM of each ended event of the last 14 days annotated (the events still under way are not)
    assert (fortnight - under_way - 1) * bench_dashboards.SET_SIZE <= counts["annotations"]
    assert counts["annotations"] <= (fortnight + 1) * (bench_dashboards.SET_SIZE + 1)
    names = {row["query"] for row in result["queries"]}
    assert any(n.startswith("alert Reboot or Redeploy scheduled") for n in names)
    assert {f"audit {q}" for q in ("vm_history", "event_summary", "counts", "coverage", "gaps")} <= names
    assert all(row["p95_ms_100pct"] > 0 and row["ratio_100_to_10"] > 0 for row in result["queries"])
