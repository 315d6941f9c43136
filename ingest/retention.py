"""How long each table keeps its rows: retention as configuration, applied as ClickHouse TTLs at migrate time.

The migrations create the tables; how long their rows live is the operator's choice, not a schema version. Three
settings cover every table (0 keeps rows for ever):

- ``retention_days`` (default 400: a year, and a month to compare it with): the history. ``transitions`` (the
  table of record), ``impacts``, ``approvals`` and the rollups built from them, ``heartbeat_hours``.
- ``heartbeat_retention_days`` (default 7): raw heartbeats, one a minute per VM; ``heartbeat_hours`` keeps them
  by the hour for the history, and ``heartbeats_latest`` keeps each VM's last one for ever (silence needs it).
- ``dead_letter_retention_days`` (default 90): the records the ingest could not load.

``apply`` compares each table's TTL with the wanted one and changes only those that differ, with
``materialize_ttl_after_modify = 0``: existing parts are not rewritten at once (a year of a large fleet would be
rewritten in one mutation); rows past their time go at the table's next merges.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Final

from ingest.migrate import Target
from sevents import contract

log = logging.getLogger(__name__)

# table -> (the moment a row's age counts from, which setting says how long it is kept)
TABLES: Final[dict[str, tuple[str, str]]] = {
    **{t.table: (f"toDateTime({t.time})", t.retention) for t in contract.RECORD_TYPES},
    "transitions_by_time": ("toDateTime(observed_at)", "history"),
    "event_vm_rollup": ("day", "history"),
    "event_rollup": ("toDateTime(last_seen_at)", "history"),
    "vm_retirements": ("toDateTime(retired_at)", "history"),
    "heartbeat_hours": ("hour", "history"),
    "dead_letters": ("toDateTime(received_at)", "dead_letters"),
}
_TTL: Final = re.compile(r"\bTTL\s+(.*?)(?:\s+SETTINGS\b|$)", re.DOTALL)


@dataclass(frozen=True)
class Retention:
    """Days each kind of table keeps a row; 0 keeps it for ever."""

    history_days: int = 400
    heartbeat_days: int = 7
    dead_letter_days: int = 90

    def days(self, kind: str) -> int:
        return {"history": self.history_days, "heartbeats": self.heartbeat_days, "dead_letters": self.dead_letter_days}[
            kind
        ]

    def problems(self) -> list[str]:
        names = {"history": "retention_days", "heartbeats": "heartbeat_retention_days"}
        names["dead_letters"] = "dead_letter_retention_days"
        return [
            f"{names[kind]} must be 0 (for ever) or a number of days up to 36500, got {self.days(kind)}"
            for kind in names
            if not 0 <= self.days(kind) <= 36_500
        ]


def wanted(table: str, retention: Retention) -> str:
    """The TTL ``table`` should have, as ClickHouse writes it back (empty: none)."""
    moment, kind = TABLES[table]
    days = retention.days(kind)
    return f"{moment} + toIntervalDay({days})" if days else ""


def current(engine_full: str) -> str:
    """The TTL clause of a table's ``engine_full`` (empty: none)."""
    found = _TTL.search(engine_full)
    return found.group(1).strip() if found else ""


def apply(client: Any, target: Target, retention: Retention) -> list[str]:
    """Give every table the TTL ``retention`` wants; the tables changed. On a cluster, the local tables (the ones
    holding rows) are altered on every node."""
    local = "_local" if target.cluster else ""
    on_cluster = f" ON CLUSTER '{target.cluster}'" if target.cluster else ""
    names = [f"{table}{local}" for table in TABLES]
    found = client.query(
        "SELECT name, engine_full FROM system.tables WHERE database = {db:String} AND name IN {names:Array(String)}",
        parameters={"db": target.database, "names": names},
    ).result_rows
    engines = {str(name).removesuffix(local): str(engine) for name, engine in found}
    changed = []
    for table in TABLES:
        if table not in engines:
            continue  # not made by this version's migrations (an older schema): nothing to keep short
        want, have = wanted(table, retention), current(engines[table])
        if want == have:
            continue
        # identifiers are checked (Target.problems) and the TTL is built from constants and integers
        change = f"MODIFY TTL {want}" if want else "REMOVE TTL"
        client.command(
            f"ALTER TABLE {target.database}.{table}{local}{on_cluster} {change}",
            settings={"materialize_ttl_after_modify": 0},
        )
        log.info("retention changed", extra={"table": table, "ttl": want or "for ever", "was": have or "for ever"})
        changed.append(table)
    return changed
