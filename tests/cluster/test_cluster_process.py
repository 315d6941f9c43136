"""Runs ``test_cluster_sql.py`` in a pytest process of its own (see conftest.py): its verdict is this test's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.io]


def test_the_cluster_schema_tests_pass_in_their_own_process(tmp_path: Path) -> None:
    """Every test of test_cluster_sql.py passes, none skipped, with the engine alone in its process."""
    command = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:randomly", "-q", "-rs"]
    command += ["--basetemp", str(tmp_path / "run"), str(ROOT / "tests" / "cluster" / "test_cluster_sql.py")]
    env = {**os.environ, "SEVENTS_CLUSTER_PROCESS": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"{summary}\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary
