"""The outbox's figures in the metrics (depth, bytes, drops), read again whenever they may have changed."""

from __future__ import annotations

import logging

from collector.metrics import CollectorMetrics
from collector.outbox import Outbox, OutboxError

# The collector's log lines keep the one logger name they always had (collector.health does the same).
log = logging.getLogger("collector.agent")


def show_outbox(metrics: CollectorMetrics, outbox: Outbox) -> None:
    """Read the outbox's figures into ``metrics``; figures that cannot be read (a full disk) are logged, kept."""
    try:
        metrics.outbox(outbox.depth(), outbox.size_bytes(), outbox.drops())
    except OutboxError as error:
        log.warning("cannot read the outbox figures", extra={"error": str(error)})
