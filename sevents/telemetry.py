"""OpenTelemetry set-up: a MeterProvider that exports over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.

Components take a ``Meter`` (or a MeterProvider) as an argument; tests pass a provider built on an
``InMemoryMetricReader`` and read the figures back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

import sevents


def make_meter_provider(
    service_name: str,
    *,
    readers: Sequence[MetricReader] = (),
    env: Mapping[str, str] | None = None,
) -> MeterProvider:
    """A provider with the given readers plus an OTLP/HTTP exporter when the standard variable asks for one."""
    env = os.environ if env is None else env
    all_readers = list(readers)
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        all_readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    resource = Resource.create({"service.name": service_name, "service.version": sevents.__version__})
    return MeterProvider(resource=resource, metric_readers=all_readers)
