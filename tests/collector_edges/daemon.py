"""A real ``sevents-collector run`` daemon serving /metrics, as the metrics and health tests start it (they used
to carry four copies of this start-up): its JSON log read on a thread, so a test can wait for a line or the port."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.collector_edges.test_edges_cli import COLLECTOR, clean_env
from tests.helpers import LogReader


def start_collector(
    imds_url: str, state: Path, *flags: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], LogReader]:
    """``run`` against ``imds_url`` with its state in ``state``, no request spacing, /metrics on a free loopback
    port (``logs.metrics_port()`` waits for it), then ``flags``; ``env``: the clean environment by default."""
    command = [COLLECTOR, "run", "--imds-url", imds_url, "--state-dir", str(state), "--min-request-interval", "0"]
    process = subprocess.Popen(
        [*command, "--metrics-addr", "127.0.0.1:0", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_env() if env is None else env,
    )
    assert process.stderr is not None
    return process, LogReader(process.stderr)
