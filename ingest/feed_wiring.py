"""Glue for the central Scheduled Events feed: settings -> its Event Hubs source and ``FeedHandler``, alone or beside
the collectors' source in one ``sevents-ingest run``."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from ingest.feed import FeedHandler
from ingest.migrate import migrate
from ingest.settings import IngestSettings
from ingest.source import Source
from ingest.wiring import eventhubs_source, read_secret
from sevents.retry import Backoff

log = logging.getLogger(__name__)


def feed_source(settings: IngestSettings) -> Source:
    """An ``EventHubsSource`` on the feed's hub (``feed_eventhub``), its own consumer group and checkpoints, with the
    namespace and credentials of the collectors' hub unless the feed has its own connection string."""
    return eventhubs_source(
        settings,
        hub=settings.feed_eventhub,
        consumer_group=settings.feed_consumer_group,
        connection_string=settings.feed_connection_string
        or read_secret(settings.feed_connection_string_file)
        or settings.eventhubs_connection_string
        or read_secret(settings.eventhubs_connection_string_file),
    )


def feed_handler(settings: IngestSettings, client: Any, stop: threading.Event) -> FeedHandler:
    return FeedHandler(
        client,
        settings.database,
        stop=stop,
        cluster=bool(settings.cluster),
        backoff=Backoff(initial=settings.retry_initial, cap=settings.retry_cap),
        max_payload_bytes=settings.max_payload_bytes,
    )


def run_feed(settings: IngestSettings, client: Any, stop: threading.Event, *, apply_migrations: bool = True) -> int:
    """``sevents-ingest run --source feed``: the feed alone, until ``stop``."""
    if apply_migrations:
        applied = migrate(client, settings.target)
        if applied:
            log.info("schema migrated", extra={"versions": applied})
    handler = feed_handler(settings, client, stop)
    log.info("feed running", extra={"eventhub": settings.feed_eventhub})
    feed_source(settings).run(handler, stop)
    log.info("feed stopped", extra={"stored": handler.stored, "repeated": handler.repeated})
    return 0


@contextlib.contextmanager
def beside(settings: IngestSettings, client: Any, stop: threading.Event) -> Iterator[None]:
    """While the collectors' source runs, the feed runs on a thread of its own (when ``feed_eventhub`` is set);
    it stops with the run."""
    if not settings.feed_eventhub:
        yield
        return
    handler = feed_handler(settings, client, stop)
    own_stop = threading.Event()
    source = feed_source(settings)

    def consume() -> None:
        try:
            source.run(handler, own_stop)
        except Exception:  # the feed failing must not go unseen; the collectors' source goes on
            log.exception("the central feed's consumer stopped")

    thread = threading.Thread(target=consume, name="central-feed", daemon=True)
    thread.start()
    log.info("feed running beside the source", extra={"eventhub": settings.feed_eventhub})
    try:
        yield
    finally:
        own_stop.set()
        thread.join(60)
        log.info("feed stopped", extra={"stored": handler.stored, "repeated": handler.repeated})
