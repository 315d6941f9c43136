"""``sevents-collector run --metrics-addr``: a real daemon against the loopback IMDS, scraped over real HTTP."""

from __future__ import annotations

import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from collector.settings import load_settings
from tests.collector_edges.daemon import start_collector
from tests.collector_edges.fake_imds import FakeImds, Scripted, event
from tests.collector_edges.test_edges_cli import COLLECTOR, clean_env
from tests.helpers import LogReader, scrape, value, wait_for


@pytest.mark.slow
def test_metrics_show_polls_errors_transitions_outbox_and_active_events(imds: FakeImds, tmp_path: Path) -> None:
    """A scrape of the running daemon shows what it counted, labelled by kind, type and status."""
    imds.set_document(1, [event("a"), event("b", status="Started", event_type="Freeze")])
    imds.script.append(Scripted(500, b'{"error": "busy"}'))  # one failed request, retried
    process, logs = start_collector(imds.base_url, tmp_path / "state", "--poll-interval", "0.1")
    try:
        port = logs.metrics_port()
        wait_for(lambda: value(scrape(port), "sevents_collector_polls_total", ok="true") >= 3)
        imds.set_document(2, [event("b", status="Started", event_type="Freeze")])
        wait_for(lambda: value(scrape(port), "sevents_collector_transitions_total", kind="disappeared") == 1)
        samples = scrape(port)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()
        process.wait()
    assert value(samples, "sevents_collector_transitions_total", kind="appeared") == 2
    assert sum(samples["sevents_collector_poll_errors_total"].values()) >= 1
    assert value(samples, "sevents_collector_outbox_depth") >= 3
    assert value(samples, "sevents_collector_outbox_bytes") > 0
    assert value(samples, "sevents_collector_active_events", event_type="Freeze", status="Started") == 1
    assert value(samples, "sevents_collector_active_events", event_type="Reboot", status="Scheduled") == 0
    assert value(samples, "sevents_collector_imds_latency_seconds_count", endpoint="scheduled_events") >= 3
    with socket.socket() as probe:  # the port is released with the process
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_metrics_address_in_use_is_fatal_at_start(imds: FakeImds, tmp_path: Path) -> None:
    """The daemon refuses to run blind to Prometheus: exit 3 naming the address, before any poll."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        result = subprocess.run(
            [
                COLLECTOR,
                "run",
                "--imds-url",
                imds.base_url,
                "--state-dir",
                str(tmp_path / "state"),
                "--metrics-addr",
                addr,
            ],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=60,
            check=False,
        )
    assert result.returncode == 3, result.stderr
    assert f"cannot serve /metrics on {addr}" in result.stderr
    assert imds.scheduled() == []


def test_a_malformed_metrics_address_is_a_config_error(tmp_path: Path) -> None:
    """``--metrics-addr web-0`` (no port) is listed as a configuration problem: exit 2."""
    result = subprocess.run(
        [COLLECTOR, "run", "--state-dir", str(tmp_path / "state"), "--metrics-addr", "web-0"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "metrics_addr: expected PORT (served on 127.0.0.1) or HOST:PORT" in result.stderr


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("9464", "127.0.0.1:9464"),
        (":9464", "127.0.0.1:9464"),
        ("0", "127.0.0.1:0"),
        ("10.1.2.3:9464", "10.1.2.3:9464"),
        ("[::1]:9464", "[::1]:9464"),
        ("", ""),
    ],
)
def test_a_port_alone_listens_on_loopback(given: str, used: str) -> None:
    """A port without a host serves /metrics on 127.0.0.1 only; a host, when named, is used as it is."""
    assert load_settings(flags={"metrics_addr": given}, env={}).metrics_addr == used


def test_a_port_alone_is_served_on_loopback_only(imds: FakeImds, tmp_path: Path) -> None:
    """``--metrics-addr PORT``: the daemon answers on 127.0.0.1 and logs that host."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [
            COLLECTOR,
            "run",
            *["--imds-url", imds.base_url, "--state-dir", str(tmp_path / "state")],
            *["--min-request-interval", "0", "--metrics-addr", str(port)],
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert process.stderr is not None
    logs = LogReader(process.stderr)
    try:
        assert logs.metrics_port() == port
        serving = next(line for line in logs.lines if line.get("message") == "serving /metrics")
        assert serving["metrics_host"] == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            assert answer.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        finally:
            process.kill()
            process.wait()
