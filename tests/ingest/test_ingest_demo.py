"""The demo as a user runs it: a real subprocess, its summary, and the report it writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_runs_the_fleet_and_matches_ground_truth(tmp_path: Path) -> None:
    """sevents-demo shows progress, prints the summary with every value matching, and writes the report."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from sevents.demo import main; sys.exit(main())",
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
    assert "collectors polling" in out and "events:" in out  # progress while it runs
    assert "Per fault domain" in out
    assert "105 of 105 values match the ground truth" in out
    assert (tmp_path / "demo" / "report.html").is_file()
    assert (tmp_path / "demo" / "clickhouse").is_dir()
