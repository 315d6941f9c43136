"""Glue for one ingest process: settings -> ClickHouse client, schema, writer, handler and source."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from opentelemetry.metrics import MeterProvider

from ingest import lifecycle_refresher, retention
from ingest.attestation import Trust
from ingest.attestation_gate import AttestationGate, PinStore
from ingest.clickhouse import connect, connect_waiting
from ingest.dead_letter_cap import DeadLetterCap
from ingest.handler import Handler
from ingest.metrics import IngestMetrics
from ingest.migrate import migrate
from ingest.progress import ProgressSource
from ingest.rows import Batch
from ingest.settings import IngestSettings
from ingest.source import Source
from ingest.source_outbox import OutboxSource
from ingest.writer import Writer
from sevents.retry import Backoff

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pipeline:
    """A ready-to-run ingest: ``run(stop)``."""

    client: Any
    source: Source
    handler: Handler

    def run(self, stop: threading.Event) -> None:
        """Deliver until ``stop`` (or until idle), then compute the lifecycles put off."""
        try:
            self.source.run(self.handler, stop)
        finally:
            self.handler.close()


def open_client(settings: IngestSettings, stop: threading.Event | None = None, *, create: bool = True) -> Any:
    """A client on the configured target (its database need not exist yet).

    With ``stop`` (a long-running ingest), an embedded directory held by another process is waited for.
    ``create=False``: for commands that only read, a missing embedded directory is an error, not created.
    """
    if stop is None:
        return connect(settings.clickhouse, password=settings.password(), create=create)
    return connect_waiting(
        settings.clickhouse, stop, password=settings.password(), lock_wait=settings.clickhouse_lock_wait
    )


def make_source(settings: IngestSettings, *, until_idle: bool = False) -> Source:
    """The configured source: the local outboxes, or Event Hubs (``ingest.source_eventhubs``)."""
    if settings.source == "eventhubs":
        return eventhubs_source(
            settings,
            hub=settings.eventhubs_name,
            consumer_group=settings.eventhubs_consumer_group,
            connection_string=settings.eventhubs_connection_string
            or read_secret(settings.eventhubs_connection_string_file),
        )
    return OutboxSource(
        settings.outbox_specs(),
        policy=settings.policy,
        poll_interval_s=settings.poll_interval,
        until_idle=until_idle,
    )


def build(
    settings: IngestSettings,
    stop: threading.Event,
    *,
    client: Any = None,
    source: Source | None = None,
    meter_provider: MeterProvider | None = None,
    until_idle: bool = False,
    apply_migrations: bool = True,
    on_stored: Callable[[Batch], None] | None = None,
) -> Pipeline:
    """Connect, migrate and wire everything; the caller runs ``pipeline.run(stop)``."""
    client = client if client is not None else open_client(settings, stop)
    if apply_migrations:
        applied = migrate(client, settings.target)
        if applied:
            log.info("schema migrated", extra={"versions": applied})
        retention.apply(client, settings.target, settings.retention)
    metrics = IngestMetrics.create(meter_provider) if meter_provider is not None else None
    handler = Handler(
        Writer(
            client,
            settings.database,
            cluster=bool(settings.cluster),
            verify_window=settings.verify_window,
            refresh_every=lifecycle_refresher.DEFAULT_EVERY,
        ),
        source=settings.source.split(":", 1)[0],
        stop=stop,
        backoff=Backoff(initial=settings.retry_initial, cap=settings.retry_cap),
        limits=settings.limits,
        metrics=metrics,
        on_stored=on_stored,
        clock_skew=timedelta(seconds=settings.eventhubs_clock_skew),
        gate=attestation_gate(settings, client),
        dead_letter_cap=DeadLetterCap(settings.dead_letter_cap_per_hour),
    )
    source = source or make_source(settings, until_idle=until_idle)
    backlog = _outbox_backlog(source) if isinstance(source, OutboxSource) else None
    return Pipeline(
        client, ProgressSource(source, handler, interval_s=settings.progress_interval, backlog=backlog), handler
    )


def attestation_gate(settings: IngestSettings, client: Any) -> AttestationGate:
    """The attestation gate the settings ask for (ingest/attestation_gate.py). Without a root file, attestation
    is off and the collectors' attestation events are counted as dropped, never taken for records."""
    trust = None
    if settings.attestation_ca_file is not None:
        trust = Trust.load(
            settings.attestation_ca_file,
            settings.attestation_intermediates_file,
            signer_name=settings.attestation_signer,
            max_age=timedelta(seconds=settings.attestation_max_age),
            clock_skew=timedelta(seconds=settings.eventhubs_clock_skew),
        )
        log.info("attestation", extra={"mode": settings.attestation, "roots": len(trust.roots)})
    return AttestationGate(PinStore(client, settings.database), trust, required=settings.attestation == "required")


def _outbox_backlog(source: OutboxSource) -> Callable[[int], int]:
    """Rows waiting in the open outboxes, less the ``delivered`` ones that are stored but not yet removed."""

    def backlog(delivered: int) -> int:
        return max(0, sum(outbox.depth() for outbox in list(source._outboxes.values())) - delivered)

    return backlog


def eventhubs_source(settings: IngestSettings, *, hub: str, consumer_group: str, connection_string: str) -> Source:
    """An Event Hubs source on ``hub`` with the settings' blob checkpoints, batching and balancing: over
    ``connection_string`` (SAS) when there is one, else with managed identity on ``eventhubs_namespace``. The
    collectors' hub (``make_source``) and the central feed's (``ingest.feed_wiring``) are both read this way."""
    from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

    from ingest.source_eventhubs import EventHubsSource

    checkpoint_cs = settings.checkpoint_connection_string or read_secret(settings.checkpoint_connection_string_file)
    if checkpoint_cs:
        store = BlobCheckpointStore.from_connection_string(checkpoint_cs, settings.checkpoint_container)
    else:
        from azure.identity import DefaultAzureCredential

        store = BlobCheckpointStore(
            settings.checkpoint_blob_url, settings.checkpoint_container, credential=DefaultAzureCredential()
        )
    options: dict[str, Any] = {
        "max_batch_size": settings.batch_max_records,
        "max_wait_time": settings.batch_max_wait,
        "load_balancing_interval": settings.eventhubs_load_balancing_interval,
        "ownership_expiry": settings.eventhubs_ownership_expiry,
        "owner_id": settings.eventhubs_owner_id,
    }
    if connection_string:
        return EventHubsSource.from_connection_string(
            connection_string,
            consumer_group=consumer_group,
            eventhub_name=hub or None,
            checkpoint_store=store,
            **options,
        )
    return EventHubsSource.from_namespace(
        settings.eventhubs_namespace, hub, consumer_group=consumer_group, checkpoint_store=store, **options
    )


def read_secret(path: Any) -> str:
    """The text of a secret's file (None: no file, "")."""
    return "" if path is None else str(path.read_text(encoding="utf-8")).strip()
