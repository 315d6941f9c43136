"""``sevents-ingest run --metrics-addr``: a real ingest process draining a real outbox, scraped over HTTP."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.collector_edges.fake_imds import FakeImds, event
from tests.collector_edges.test_edges_cli import clean_env, once
from tests.helpers import LogReader, scrape, value, wait_for

INGEST = str(Path(sys.executable).parent / "sevents-ingest")


@pytest.mark.slow
def test_metrics_show_records_batches_and_lag(tmp_path: Path) -> None:
    """After the ingest stored a collector's records, a scrape shows them by type and outcome, and the lag."""
    imds = FakeImds().start()
    try:
        imds.set_document(1, [event("a"), event("b", event_type="Freeze")])
        assert len(once(imds, tmp_path / "vm")) == 2
    finally:
        imds.stop()
    process = subprocess.Popen(
        [
            INGEST,
            "run",
            "--source",
            f"outbox:{tmp_path / 'vm'}",
            "--clickhouse",
            f"chdb://{tmp_path / 'ch'}",
            *["--batch-max-wait", "0.1", "--metrics-addr", "127.0.0.1:0"],
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert process.stderr is not None
    logs = LogReader(process.stderr)
    try:
        port = logs.metrics_port()
        wait_for(lambda: "sevents_ingest_lag_seconds_count" in scrape(port), timeout=120)
        samples = scrape(port)
        health = {path: _get(port, path) for path in ("/healthz", "/readyz")}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()
    stored = samples["sevents_ingest_records_total"]
    assert sum(stored.values()) == 2, stored
    assert value(samples, "sevents_ingest_batches_total") >= 1
    assert value(samples, "sevents_ingest_lag_seconds_count") >= 1
    assert value(samples, "sevents_ingest_insert_duration_seconds_count") >= 1
    assert health == {"/healthz": (200, "ok"), "/readyz": (200, "ok")}  # running, ClickHouse taking its writes


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode().strip()
