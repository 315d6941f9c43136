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
    from opentelemetry.sdk.trace import TracerProvider


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


def traces_configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether the standard variables ask for spans over OTLP."""
    env = os.environ if env is None else env
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def install_tracer_provider(service_name: str, env: Mapping[str, str] | None = None) -> TracerProvider | None:
    """The global tracer provider, exporting over OTLP/HTTP, when the standard variables ask for it; else None
    (the API's no-op tracer stays, and the SDK is never imported). Shut it down to send what is buffered."""
    if not traces_configured(env):
        return None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": service_name, "service.version": sevents.__version__})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider
