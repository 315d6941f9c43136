"""The ingest's error tree.

SeventsError (sevents.errors)
└── IngestError                 exit 1 where one ends a command (sevents.errors.exit_code)
    ├── InvalidRecord           one record cannot be loaded: it goes to dead_letters, the batch goes on
    ├── StoreError              ClickHouse did not confirm an insert: retried, nothing acknowledged meanwhile
    │   └── RejectedRows        the rows, not the server: halved until the refused one is dead-lettered alone
    ├── Interrupted             shutdown was asked for while a batch was still unstored: the source must not ack
    ├── MigrationError          the schema cannot be brought up to date (edited migration, bad DDL)
    ├── TargetError             the --clickhouse target is malformed, unreachable or already in use
    ├── LeaseLost               the coordinator's lease of an event is no longer its own: it decides nothing more
    ├── reconcile.ReconcileError  Azure Resource Graph could not be asked (retried next pass)
    └── reconcile.Stopped       shutdown between two pages; what was stored stays stored

Errors that never leave their module, so not SeventsErrors: source_eventhubs.EventHubsSourceError (and
DeliverFailed: the batch is read again from its checkpoint), readpath.ReadError (the asker of the read socket gets
its message), feed_decode's refusals (dead letters with their reason).
"""

from __future__ import annotations

from sevents.errors import SeventsError


class IngestError(SeventsError):
    """Base of every error the ingest raises on purpose."""


class InvalidRecord(IngestError):
    """A record failed decoding or validation; ``reason`` is a short stable label for metrics."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class StoreError(IngestError):
    """ClickHouse refused or did not answer; whatever was being stored must be retried."""


class RejectedRows(StoreError):
    """The rows, not the server, are the problem (a value the column or a constraint refuses, a block over too many
    partitions): never retried as they are; the handler halves the batch until the refused row is alone."""


class Interrupted(IngestError):
    """Shutdown interrupted a batch before ClickHouse confirmed it; it was not acknowledged."""


class MigrationError(IngestError):
    """The schema cannot be migrated."""


class TargetError(IngestError):
    """The ClickHouse target cannot be used."""


class LeaseLost(IngestError):
    """The lease of an event is no longer ours: another coordinator decides about it."""
