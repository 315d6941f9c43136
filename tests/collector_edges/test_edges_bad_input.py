"""Bad input is one clean line and exit 2, never a traceback (issue 29): config files that are not UTF-8, that
nest beyond reason, or that hold numbers that are not finite, through the real ``sevents-collector``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.collector_edges.test_edges_cli import COLLECTOR, clean_env

BAD_FILES = {
    "not_utf8": (b'[collector]\nsink = "\xff\xfe"\n', "not UTF-8"),
    "nested": (b"[collector]\nsink = " + b"[" * 50_000 + b"]" * 50_000 + b"\n", "too deeply"),
    "infinite": (b"[collector]\npoll_interval = inf\n", "finite number"),
    "not_a_number": (b"[collector]\nheartbeat_interval = nan\n", "finite number"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_config_file_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    content, says = BAD_FILES[case]
    config = tmp_path / "collector.toml"
    config.write_bytes(content)
    result = subprocess.run(
        [COLLECTOR, "once", "--config", str(config), "--state-dir", str(tmp_path / "state")],
        capture_output=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and says in lines[0] and str(config) in lines[0], lines
    assert not (tmp_path / "state").exists(), "nothing is started on a bad configuration"
