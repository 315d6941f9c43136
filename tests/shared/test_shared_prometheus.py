"""sevents.prometheus: OpenTelemetry figures read over real loopback HTTP in the Prometheus text format."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider

from sevents import prometheus
from sevents.config import host_port_problems, split_host_port
from tests.helpers import scrape


@pytest.fixture
def served() -> Iterator[tuple[prometheus.MetricsServer, MeterProvider]]:
    server = prometheus.serve("127.0.0.1:0")
    provider = MeterProvider(metric_readers=[server.reader])
    yield server, provider
    provider.shutdown()
    server.close()


def test_counters_gauges_and_histograms_are_exposed(served: tuple[prometheus.MetricsServer, MeterProvider]) -> None:
    """A counter gets _total, a gauge its value, a histogram cumulative buckets in seconds, labels kept."""
    server, provider = served
    meter = provider.get_meter("test")
    meter.create_counter("sevents.test.polls", unit="{poll}").add(3, {"ok": True})
    meter.create_observable_gauge("sevents.test.depth", [lambda options: [Observation(7, {"vm": "a"})]], unit="By")
    latency = meter.create_histogram("sevents.test.latency", unit="s", explicit_bucket_boundaries_advisory=(0.1, 1.0))
    for value in (0.05, 0.5, 0.5, 5.0):
        latency.record(value)
    samples = scrape(server.port)
    assert samples["sevents_test_polls_total"] == {(("ok", "true"),): 3.0}
    assert samples["sevents_test_depth_bytes"] == {(("vm", "a"),): 7.0}
    buckets = {dict(k)["le"]: v for k, v in samples["sevents_test_latency_seconds_bucket"].items()}
    assert buckets == {"0.1": 1.0, "1.0": 3.0, "+Inf": 4.0}
    assert samples["sevents_test_latency_seconds_count"] == {(): 4.0}
    assert samples["sevents_test_latency_seconds_sum"] == {(): pytest.approx(6.05)}
    assert "process_resident_memory_bytes" in samples


def test_close_releases_the_port() -> None:
    """After close nothing answers on the port, and it can be bound again."""
    server = prometheus.serve("127.0.0.1:0")
    port = server.port
    server.close()
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))


def test_a_taken_port_raises_os_error() -> None:
    """Binding a port another socket listens on fails at once with OSError (the commands make it fatal)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match=r"."):
            prometheus.serve(f"127.0.0.1:{taken.getsockname()[1]}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("0.0.0.0:0", ("0.0.0.0", 0)), ("[::1]:9464", ("::1", 9464))],
)
def test_host_port_forms(text: str, expected: tuple[str, int]) -> None:
    """HOST:PORT, with IPv6 hosts in brackets."""
    assert split_host_port(text) == expected


@pytest.mark.parametrize("text", ["9464", ":9464", "host:", "host:http", "host:70000"])
def test_bad_host_port_is_one_problem(text: str) -> None:
    """Anything else is reported as a configuration problem naming the setting."""
    (problem,) = host_port_problems("metrics_addr", text)
    assert problem.startswith("metrics_addr: expected HOST:PORT")
