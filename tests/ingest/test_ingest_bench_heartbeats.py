"""The heartbeat throughput benchmark at a tiny size, so that it never rots: it stores all it made, and says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def bench(tmp_path: Path, *flags: str) -> tuple[dict[str, Any], str]:
    """Run the benchmark in a process of its own (the embedded engine holds one data directory per process)."""
    out = tmp_path / "figures.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_heartbeats.py"), *flags, "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}; its stderr ended:\n{done.stderr[-3000:]}"
    return json.loads(out.read_text(encoding="utf-8")), done.stdout


def stored_all(result: dict[str, Any]) -> None:
    made, counts = result["made"], result["stored_counts"]
    expected = {"heartbeats": made["heartbeats"], "transitions": made["transitions"], "dead_letters": 0}
    assert counts == {**expected, "events_without_lifecycle": 0}
    assert result["handler"] == {"stored": made["heartbeats"] + made["transitions"], "dead_letters": 0, "dropped": 0}


def test_sustained_stores_every_heartbeat_it_produced_and_gives_its_verdicts(tmp_path: Path) -> None:
    """Six windows of 30 heartbeats a second: every record stored, a window a line, both verdicts printed."""
    result, printed = bench(tmp_path, "--rate", "30", "--minutes", "0.1", "--window", "1")
    stored_all(result)
    assert result["made"]["heartbeats"] >= 30 * 5
    assert 5 <= len(result["windows"]) <= 6
    assert all(w["rss_bytes"] > 0 for w in result["windows"])
    lines = printed.splitlines()
    assert any(line.startswith("stored: every record (") for line in lines)
    assert any(line.startswith(("lag flat: yes (", "lag flat: NO (")) for line in lines)
    assert any(line.startswith(("RSS flat: yes (", "RSS flat: NO (")) for line in lines)


def test_catch_up_stores_a_backlog_with_transitions_and_extrapolates_a_day(tmp_path: Path) -> None:
    """A quarter of an hour of 600 VMs with five events' lifecycles: all stored; a day extrapolated, said so."""
    result, printed = bench(tmp_path, "--catch-up-hours", "0.25", "--vms", "600")
    stored_all(result)
    assert result["made"]["heartbeats"] == 15 * 600
    assert result["made"]["transitions"] > 0
    assert result["day_extrapolated"] and result["day_records"] > 1440 * 600
    assert result["peak_rss_bytes"] >= max(s["rss_bytes"] for s in result["samples"])
    assert any("(extrapolated from this run's rate)" in line for line in printed.splitlines())
    assert any(line.startswith(("RSS flat: yes (", "RSS flat: NO (")) for line in printed.splitlines())
