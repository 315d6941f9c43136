"""The ingest's OpenTelemetry instruments: records in, batches, insert latency, lag, dead letters, drops."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider

import sevents

# Seconds, where the SDK's default buckets are for milliseconds: inserts take milliseconds to a minute; a
# record's lag spans a second (live) to hours (a backlog after an outage).
INSERT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LAG_BUCKETS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


@dataclass(frozen=True)
class IngestMetrics:
    """One set of instruments; attributes say the record type, outcome or reason."""

    records: Counter
    batches: Counter
    insert_duration: Histogram
    insert_failures: Counter
    lag: Histogram
    dead_letters: Counter
    dropped: Counter

    @classmethod
    def create(cls, provider: MeterProvider) -> IngestMetrics:
        meter: Meter = provider.get_meter("sevents.ingest", sevents.__version__)
        return cls(
            records=meter.create_counter(
                "sevents.ingest.records", unit="{record}", description="records handled, by type and outcome"
            ),
            batches=meter.create_counter("sevents.ingest.batches", unit="{batch}", description="batches stored"),
            insert_duration=meter.create_histogram(
                "sevents.ingest.insert.duration",
                unit="s",
                description="time for ClickHouse to confirm a batch",
                explicit_bucket_boundaries_advisory=INSERT_BUCKETS_S,
            ),
            insert_failures=meter.create_counter(
                "sevents.ingest.insert.failures", unit="{attempt}", description="failed insert attempts (retried)"
            ),
            lag=meter.create_histogram(
                "sevents.ingest.lag",
                unit="s",
                description="age of a batch's oldest record when it was stored",
                explicit_bucket_boundaries_advisory=LAG_BUCKETS_S,
            ),
            dead_letters=meter.create_counter(
                "sevents.ingest.dead_letters", unit="{record}", description="records sent to dead_letters, by reason"
            ),
            dropped=meter.create_counter(
                "sevents.ingest.dropped",
                unit="{record}",
                description="records stored nowhere on purpose, by type and reason (retention: older than every "
                "table that would keep them)",
            ),
        )
