"""The fleet-scale dashboard benchmark at a tiny size, so that it never rots: its data and its verdict."""

from __future__ import annotations

import json
import statistics
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
    command += ["--transitions", "15000", "--runs", "2", "--heartbeat-every", "600", "--json", str(out)]
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
    # heartbeats every 10 minutes for the raw table's 7 days, in INSERTs of the fleet's steps
    assert result["heartbeat_load"]["raw_7_days"]["rows"] == 7 * 144 * 200
    assert counts["heartbeats"] >= 0.99 * 7 * 144 * 200
    assert result["disk"][1]["heartbeats"]["bytes"] > 0 and result["disk"][1]["heartbeat_hours"]["rows"] > 0
    assert set(result["concurrency"]) == {"one_query_ms", "two_on_one_client_ms", "two_on_two_clients_ms"}


def test_every_panel_is_measured_three_ways(tmp_path: Path) -> None:
    """Alone with All, alone with one value of each variable (one VM of the chosen scale set), and as whole
    dashboards: a sample per viewer per round at each size, and each dashboard's CPU floor beside it."""
    out = tmp_path / "bench.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_dashboards.py"), "--vms", "200", "--runs", "2"]
    command += ["--transitions", "15000", "--modes", "all,selection,dashboards-selection", "--viewers", "2"]
    shown = subprocess.run([*command, "--json", str(out)], check=True, capture_output=True, text=True, timeout=600)
    result_text = shown.stdout
    result = json.loads(out.read_text(encoding="utf-8"))
    modes = result["modes"]
    assert set(modes) == {"all", "selection", "dashboards-selection"}
    panels = {r["query"] for r in modes["all"]["rows"] if r["query"].startswith("panel ")}
    chosen = {r["query"] for r in modes["selection"]["rows"]}
    assert panels and panels <= chosen and not any(q.startswith(("alert ", "audit ")) for q in chosen)
    assert {f"variable {v}" for v in ("subscription", "location", "scale_set", "fault_domain", "vm")} <= chosen
    timeline = result["selection"]["sevents-timeline"]
    (scale_set,), (vm,), (event_id,) = timeline["scale_set"], timeline["vm"], timeline["event_id"]
    assert scale_set.startswith("vmss-") and vm.startswith(f"set{scale_set.removeprefix('vmss-')}-vm") and event_id
    boards = modes["dashboards-selection"]
    assert {r["query"] for r in boards["rows"]} == {
        "sevents-fleet", "sevents-timeline", "sevents-approval", "sevents-impact", "sevents-pipeline"
    }  # fmt: skip
    for row in boards["rows"]:
        assert row["panels"] > 0 and row["request_p95_ms_100pct"] > 0
        for size in ("10pct", "100pct"):
            raw = boards["raw"][size][row["query"]]
            assert len(raw["viewer_ms"]) == 2 * 2  # runs x viewers
            assert len(raw["request_ms"]) == 2 * 2 * row["panels"]
            # a viewer is done when its last panel is: the slowest of its own requests (listed viewer by viewer)
            panels = row["panels"]
            mine = [raw["request_ms"][n * panels : (n + 1) * panels] for n in range(len(raw["viewer_ms"]))]
            assert raw["viewer_ms"] == [max(requests) for requests in mine]
            assert len(raw["one_viewer_cpu_ms"]) == 2 and min(raw["one_viewer_cpu_ms"]) > 0  # a figure per run
    # the CPU floor: one viewer's CPU alone (the median of the runs) times the viewers over the cores, beside the
    # measured p95 and the CPU a panel may cost for the goal to be within reach
    floors = result["floors"]["dashboards-selection"]
    assert set(floors) == {row["query"] for row in boards["rows"]}
    for row in boards["rows"]:
        floor, raw = floors[row["query"]], boards["raw"]["100pct"][row["query"]]
        assert floor["one_viewer_cpu_ms"] == statistics.median(raw["one_viewer_cpu_ms"])
        assert floor["least_ms"] == pytest.approx(2 * floor["one_viewer_cpu_ms"] / bench_dashboards.CORES)
        assert floor["measured_p95_ms"] == row["p95_ms_100pct"]
        assert floor["panel_budget_ms"] == pytest.approx(500 * bench_dashboards.CORES / 2 / row["panels"])
    assert "CPU floor of 2 viewers on" in result_text


def test_a_kept_year_is_measured_again_by_this_version_with_a_live_fleet(tmp_path: Path) -> None:
    """``--keep`` leaves the loaded year and its fleet in a directory; ``--measure`` migrates it and measures it
    once, with every VM's collector heard from in the last minute but one in ``SILENT_EVERY``."""
    kept = tmp_path / "year"
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_dashboards.py"), "--vms", "400", "--runs", "1"]
    command += ["--transitions", "15000", "--modes", "all", "--settle", "5"]
    subprocess.run([*command, "--keep", str(kept)], check=True, capture_output=True, timeout=600)
    assert json.loads((kept / bench_dashboards.FLEET_FILE).read_text(encoding="utf-8"))["vms"] == 400
    out = tmp_path / "again.json"
    again = subprocess.run(
        [*command, "--measure", str(kept), "--json", str(out)], check=True, capture_output=True, text=True, timeout=600
    )
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["migrated"] == [] and result["vms"] == 400
    timings = result["phase"]["timings"]["all"]
    assert any(n.startswith("panel sevents-fleet: ") for n in timings) and all(len(t) == 1 for t in timings.values())
    assert "panel sevents-fleet: Silent and retired collectors" in again.stdout
    states = "SELECT state, count() FROM sevents.vm_status GROUP BY state ORDER BY state"
    query = f"from ingest.clickhouse import connect; print(connect('chdb://{kept}').query({states!r}).result_rows)"
    shown = subprocess.run([sys.executable, "-c", query], check=True, capture_output=True, text=True, cwd=ROOT)
    silent = 400 // bench_dashboards.SILENT_EVERY
    assert shown.stdout.strip() == str([("reporting", 400 - silent), ("silent", silent)])
    refused = subprocess.run([*command, "--keep", str(kept)], capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "not empty" in refused.stderr
