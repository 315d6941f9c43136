"""``--metrics-addr``: the process's OpenTelemetry figures served at /metrics in the Prometheus text format.

Theory of operation: the instruments stay OpenTelemetry ones (``collector.metrics``, ``ingest.metrics``); a
reader registered on the MeterProvider is collected on each scrape, and each OpenTelemetry metric becomes a
prometheus_client family (counters get ``_total``, seconds and bytes their unit suffix, dots become
underscores). prometheus_client writes the text format and runs the HTTP server, on a thread of its own.
Imported only when an address is configured: a collector without one never loads it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader, Metric, Sum
from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from sevents.config import split_host_port

log = logging.getLogger(__name__)

# OpenTelemetry unit -> Prometheus name suffix; annotations such as ``{poll}`` say nothing Prometheus keeps.
_UNIT_SUFFIX: Mapping[str, str] = {"s": "seconds", "By": "bytes", "ms": "milliseconds"}
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(name: str, unit: str) -> str:
    """``sevents.collector.imds_latency`` in ``s`` -> ``sevents_collector_imds_latency_seconds``."""
    base = _INVALID.sub("_", name)
    suffix = _UNIT_SUFFIX.get(unit, "")
    return f"{base}_{suffix}" if suffix and not base.endswith(suffix) else base


def _labels(attributes: Mapping[str, Any] | None) -> dict[str, str]:
    out = {}
    for key, value in (attributes or {}).items():
        out[_INVALID.sub("_", key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def families(metrics: Iterable[Metric]) -> Iterator[Any]:
    """Prometheus metric families for OpenTelemetry metrics (sums, gauges and explicit-bucket histograms)."""
    for metric in metrics:
        name = prometheus_name(metric.name, metric.unit or "")
        data = metric.data
        points: list[Any] = list(data.data_points)
        keys = sorted({k for p in points for k in _labels(p.attributes)})
        family: Any
        if isinstance(data, Sum) and data.is_monotonic:
            family = CounterMetricFamily(name.removesuffix("_total"), metric.description or "", labels=keys)
        elif isinstance(data, (Sum, Gauge)):
            family = GaugeMetricFamily(name, metric.description or "", labels=keys)
        elif isinstance(data, Histogram):
            family = HistogramMetricFamily(name, metric.description or "", labels=keys)
        else:
            continue  # exponential histograms: none of ours
        for point in points:
            labels = _labels(point.attributes)
            values = [labels.get(k, "") for k in keys]
            if isinstance(data, Histogram):
                buckets, running = [], 0
                for bound, count in zip(point.explicit_bounds, point.bucket_counts):
                    running += count
                    buckets.append((repr(float(bound)), running))
                buckets.append(("+Inf", point.count))
                family.add_metric(values, buckets, point.sum)
            else:
                family.add_metric(values, point.value)
        yield family


class OpenTelemetryCollector(Collector):
    """A prometheus_client collector that reads a MeterProvider through its own reader on every scrape."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self._reader = reader

    def collect(self) -> Iterator[Any]:
        data = self._reader.get_metrics_data()
        if data is None:
            return
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                yield from families(scope.metrics)


@dataclass
class MetricsServer:
    """The /metrics endpoint of one process; ``reader`` goes to ``sevents.telemetry.make_meter_provider``."""

    reader: InMemoryMetricReader
    host: str
    port: int  # the bound port (an address ending in :0 picks a free one)
    _server: Any

    def close(self) -> None:
        """Stop answering scrapes and release the port."""
        self._server.shutdown()
        self._server.server_close()


def serve(addr: str) -> MetricsServer:
    """Listen on ``HOST:PORT`` (raises OSError when it cannot bind); figures come from the returned reader."""
    host, port = split_host_port(addr)
    reader = InMemoryMetricReader()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OpenTelemetryCollector(reader))
    ProcessCollector(registry=registry)  # resident memory, CPU seconds, open files: the collector's budget
    server, _thread = start_http_server(port, addr=host, registry=registry)
    bound = server.server_address[1]
    log.info("serving /metrics", extra={"metrics_host": host, "metrics_port": bound})
    return MetricsServer(reader=reader, host=host, port=bound, _server=server)
