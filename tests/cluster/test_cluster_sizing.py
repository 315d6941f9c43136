"""The sizing benchmark (benchmarks/sizing.py, docs/scale.md) at a tiny size, so that it never rots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# its own process: the embedded engine holds one data directory per process, and this package has one open
pytestmark = [pytest.mark.slow, pytest.mark.io]


def test_sizing_measures_every_table_and_scales_each_fleet_from_it(tmp_path: Path) -> None:
    out = tmp_path / "sizing.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "sizing.py"), "--vms", "100", "--heartbeat-days", "1"]
    subprocess.run([*command, "--json", str(out)], check=True, capture_output=True, timeout=600)
    result = json.loads(out.read_text(encoding="utf-8"))
    measured = result["measured"]
    assert measured["heartbeats"]["rows"] == 100 * 1440  # a day of minute heartbeats
    assert measured["heartbeats_latest"]["rows"] == 100
    assert measured["heartbeat_hours"]["bytes_per_row"] < 100  # a bit per minute, not a hash per heartbeat (0020)
    assert all(cost["bytes_per_row"] > 0 for cost in result["costs"].values())
    small, medium, large = result["fleets"]
    assert (small["vms"], medium["vms"], large["vms"]) == (20_000, 100_000, 1_000_000)
    assert medium["total_bytes"] == pytest.approx(5 * small["total_bytes"])
    kept = medium["tables"]["heartbeats"]["rows"]
    assert kept == pytest.approx(100_000 * 1440 * 7)  # seven days kept (ingest.retention)
    states = result["coverage_states"]
    assert {s["most_in_an_hour"] for s in states.values()} == {60}  # every way counts the same heartbeats
    assert result["queries"]["alert_qps"] > 0 and result["queries"]["qps"]["5"] > result["queries"]["alert_qps"]
