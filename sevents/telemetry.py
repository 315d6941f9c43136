"""OpenTelemetry set-up: a MeterProvider that exports over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.

Components take a ``Meter`` (or a MeterProvider) as an argument; tests pass a provider built on an
``InMemoryMetricReader`` and read the figures back. The SDK is imported only when a provider is made: a
process that exports nothing (``otlp_configured`` false) gives its components the API's no-op provider and
never pays the SDK's memory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import sevents

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader


def otlp_configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether the standard variables ask for metrics over OTLP (without them, no figure leaves the process)."""
    env = os.environ if env is None else env
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))


def make_meter_provider(
    service_name: str,
    *,
    readers: Sequence[MetricReader] = (),
    env: Mapping[str, str] | None = None,
) -> MeterProvider:
    """A provider with the given readers plus an OTLP/HTTP exporter when the standard variable asks for one."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    all_readers = list(readers)
    if otlp_configured(env):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        all_readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    resource = Resource.create({"service.name": service_name, "service.version": sevents.__version__})
    return MeterProvider(resource=resource, metric_readers=all_readers)
