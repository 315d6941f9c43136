"""The OTLP switch: the standard variables decide whether a process builds the SDK's provider at all."""

from __future__ import annotations

from sevents.telemetry import otlp_configured


def test_otlp_is_configured_by_either_standard_variable() -> None:
    """The general or the metrics-only endpoint turns exporting on; neither, or empty values, leave it off."""
    assert otlp_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert otlp_configured({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://collector:4318/v1/metrics"})
    assert not otlp_configured({})
    assert not otlp_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_SERVICE_NAME": "x"})
