"""The ingest's OpenTelemetry instruments: records in, batches, insert latency, lag, dead letters."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider

import sevents


@dataclass(frozen=True)
class IngestMetrics:
    """One set of instruments; attributes say the record type, outcome or reason."""

    records: Counter
    batches: Counter
    insert_duration: Histogram
    insert_failures: Counter
    lag: Histogram
    dead_letters: Counter

    @classmethod
    def create(cls, provider: MeterProvider) -> IngestMetrics:
        meter: Meter = provider.get_meter("sevents.ingest", sevents.__version__)
        return cls(
            records=meter.create_counter(
                "sevents.ingest.records", unit="{record}", description="records handled, by type and outcome"
            ),
            batches=meter.create_counter("sevents.ingest.batches", unit="{batch}", description="batches stored"),
            insert_duration=meter.create_histogram(
                "sevents.ingest.insert.duration", unit="s", description="time for ClickHouse to confirm a batch"
            ),
            insert_failures=meter.create_counter(
                "sevents.ingest.insert.failures", unit="{attempt}", description="failed insert attempts (retried)"
            ),
            lag=meter.create_histogram(
                "sevents.ingest.lag", unit="s", description="age of a batch's oldest record when it was stored"
            ),
            dead_letters=meter.create_counter(
                "sevents.ingest.dead_letters", unit="{record}", description="records sent to dead_letters, by reason"
            ),
        )
