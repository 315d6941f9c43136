"""Today's schema in one file: ``ingest/schema.sql``, generated from the migrations, never edited by hand.

The migrations (``ingest/migrations/NNNN_*.sql``) are history: a view is dropped and defined again in several of
them, so none shows what a database holds today. This module migrates a fresh database and writes every table,
materialized view and view it ends with, in dependency order (what an object reads comes before it), each as
ClickHouse stores it (``system.tables.create_table_query``, laid out by ``formatQuery``), after a comment saying
what it is for and which migration last defined it.

python -m ingest.schema --write    rewrite ingest/schema.sql
python -m ingest.schema --check    exit 1 when ingest/schema.sql differs from what the migrations give today

``tests/ingest/test_ingest_schema_file.py`` does what ``--check`` does, and builds a database from the file to
compare it with the migrated one. The layout is the embedded engine's (chdb) ``formatQuery``: a new chdb may lay
the same schema out differently, and then ``--write`` is the whole fix. The file shows the single-node form; on a
cluster (``--cluster``) ``migrate`` makes each table ``Replicated*`` under the name ``*_local``, with a
``Distributed`` table of the plain name over it.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ingest.clickhouse import connect
from ingest.migrate import Migration, Target, load_migrations, migrate, split_statements
from sevents import contract

DATABASE: Final = "sevents"
WIDTH: Final = 120  # the comments' (the DDL is laid out by ClickHouse)
FILE: Final = Path(__file__).resolve().parent / "schema.sql"

# What each object is for, in one line (from the migrations' comments and the ingest README). An object the
# migrations create without a line here stops the generator: a new table or view says what it is for.
PURPOSE: Final = {
    "schema_migrations": "the migrations applied, with their checksums (each applied once, never edited)",
    "heartbeats_latest": "the latest heartbeat per VM, kept for good: what the VM variables and silence read",
    "heartbeats_latest_mv": "keeps heartbeats_latest from every heartbeat inserted",
    "dead_letters": "records that could not be stored as sent: payload verbatim, reason, source and position",
    "transitions_by_time": "transitions in time order, narrow: what time-range panels (state timeline, ingest lag) "
    "read",
    "transitions_by_time_mv": "keeps transitions_by_time from every transition inserted",
    "transition_observers": "each VM once per identity it observed transitions with (subscription, location, scale "
    "set, fault domain, name): the ids of the VMs a panel's VM variables choose",
    "transition_observers_mv": "keeps transition_observers from every transition inserted",
    "event_vm_rollup": "per (EventId, VM): first and last values of the lifecycle as aggregate states, merged by "
    "event_vms",
    "event_vm_rollup_mv": "keeps event_vm_rollup from every transition inserted",
    "event_rollup": "per EventId, by month of last activity: first/last seen, each VM's last state, affected VMs; "
    "finds the events of a range or the active set without old parts",
    "event_rollup_mv": "keeps event_rollup from every transition inserted",
    "vm_retirements": "when a VM's own Terminate or Preempt started: the VM is going away",
    "vm_retirements_mv": "keeps vm_retirements from every transition inserted",
    "heartbeat_hours": "one VM per hour: heartbeats received (coverage), the deepest outbox, whether a poll failed",
    "heartbeat_hours_mv": "keeps heartbeat_hours from every heartbeat inserted",
    **{t.table: t.purpose for t in contract.RECORD_TYPES},
    "azure_vms": "Azure Resource Graph's VM inventory, one row per VM and change (sevents-ingest reconcile)",
    "azure_annotations": "Resource Health annotation changes: what the platform says it did to a VM",
    "azure_scheduled_events": "Microsoft's central scheduled events, one row per (EventId, EventStatus) seen",
    "azure_feed_deliveries": "the Event Grid ids of the central feed's events stored (its deduplication)",
    "attested_keys": "each VM's signing keys, pinned on first use once IMDS's attested document proved them its "
    "own; a later key of a VM flagged new_key (attestation)",
    "retired_vms": "the VMs retired now (silent after their own Terminate or Preempt); in step with vm_status",
    "silent_or_retired_vms": "the VMs without a heartbeat for the silence threshold, and whether each is retired",
    "vm_status": "per VM: reporting, silent or retired, and why",
    "event_vms_since": "one row per (EventId, observing VM) with its lifecycle and identity, from rollup rows of "
    "since_day on",
    "event_vms": "event_vms_since over the whole history: one row per (EventId, observing VM)",
    "event_evidence_since": "one row per EventId from all its evidence (every VM's lifecycle, downtime, approvals, "
    "Azure's account), without what changes with time alone: the VMs still showing it instead of 'active'",
    "event_history": "each event's lifecycle as event_evidence_since last computed it, written by the ingest for "
    "every event a stored batch touched; the newest computation wins",
    "event_vm_evidence_since": "event_vms_since's rows without what changes with time alone: whether the VM still "
    "shows the event (holding) and whether any VM saw it end, instead of the outcome",
    "event_vm_history": "each (EventId, observing VM)'s lifecycle as event_vm_evidence_since last computed it, "
    "written by the ingest with the event's event_history row; the newest computation wins",
    "holders_quiet": "of the VMs still showing an event seen in the last 30 days, those silent now and those of them "
    "retired (one row: two arrays)",
    "event_vm_lifecycles": "one row per (EventId, observing VM) with event_vms_since's columns: event_vm_history read "
    "now",
    "event_refresh_queue": "a mark per event each stored batch of impacts or approvals named (written by the "
    "INSERT, through the views below; transitions mark event_rollup.stored_at): a sweep refreshes the events whose "
    "event_history row is older than their mark, which the ingest put off while batches kept coming (kept a week)",
    "event_refresh_queue_impacts_mv": "marks the events each inserted block of impacts names",
    "event_refresh_queue_approvals_mv": "marks the events each inserted block of approvals names",
    "events": "one row per EventId (types, times, outcome, domains, sets, impact): event_history read now, active "
    "while a VM still showing it reports",
    "events_since": "events last active on or after since_day",
    "event_lifecycles_since": "the lifecycle columns of events last active on or after since_day",
    "event_impacts_since": "announced against measured, per event last active on or after since_day",
    "active_events": "the EventIds of events with outcome 'active': what alerts and 'active now' panels start from",
}

_DEFINES = re.compile(
    r"\b(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:MATERIALIZED\s+)?(?:VIEW|TABLE)(?:\s+IF\s+NOT\s+EXISTS)?|ALTER\s+TABLE)"
    r"\s+\$\{db\}\.(\w+)",
    re.IGNORECASE,
)
_HEADER: Final = """\
-- Today's sevents schema: every table, materialized view and view the migrations leave, in dependency order.
-- GENERATED by `python -m ingest.schema --write` from ingest/migrations/ (the history, applied by migrate.py);
-- never edit it: change the schema with a new migration, then regenerate. `--check` and
-- tests/ingest/test_ingest_schema_file.py fail while it differs from what the migrations give.
-- As ClickHouse stores each object (system.tables), single node; on a cluster each table is Replicated*, named
-- *_local, under a Distributed table of the plain name.
"""


@dataclass(frozen=True)
class Entry:
    """One object of the schema: its name, kind, the migration that last defined it, and its DDL."""

    name: str
    kind: str
    migration: str
    ddl: str

    def text(self) -> str:
        about = f"{self.name}: {PURPOSE[self.name]} ({self.kind}, last defined by {self.migration})"
        return textwrap.fill(about, WIDTH, initial_indent="-- ", subsequent_indent="--   ") + f"\n{self.ddl};\n"


def last_defined(migrations: Sequence[Migration]) -> dict[str, str]:
    """Object name -> the migration (``0013_name``) whose statements last created, replaced or altered it."""
    found = {"schema_migrations": "migrate.py"}
    for migration in migrations:
        for statement in split_statements(migration.template):
            match = _DEFINES.search(re.sub(r"--[^\n]*", "", statement))
            if match:
                found[match.group(1)] = f"{migration.version:04d}_{migration.name}"
    return found


def _references(ddl: str, names: set[str], own: str) -> set[str]:
    """The other objects of the schema a statement names (``sevents.name``)."""
    return {n for n in re.findall(rf"\b{DATABASE}\.(\w+)", ddl) if n in names and n != own}


def _kind(engine: str) -> str:
    return {"View": "view", "MaterializedView": "materialized view"}.get(engine, "table")


def entries(client: Any, database: str) -> list[Entry]:
    """Every object of the migrated ``database``, named in ``sevents``, in dependency order."""
    rows = client.query(
        "SELECT name, engine, create_table_query, formatQuery(create_table_query) FROM system.tables "
        "WHERE database = {database:String} ORDER BY name",
        parameters={"database": database},
    ).result_rows
    # a parameterised view is called by its quoted name (`sevents.events_since`(...))
    own = re.compile(rf"(?<![\w.]){re.escape(database)}\.(?=\w)")
    defined = last_defined(load_migrations())
    missing = sorted({str(r[0]) for r in rows} - set(PURPOSE))
    if missing:
        raise ValueError(f"no purpose written in ingest/schema.py PURPOSE for {', '.join(missing)}")
    by_name = {
        str(name): Entry(
            str(name), _kind(str(engine)), defined.get(str(name), "?"), own.sub(f"{DATABASE}.", str(pretty))
        )
        for name, engine, _raw, pretty in rows
    }
    names = set(by_name)
    first = {name: index for index, name in enumerate(first_defined(load_migrations()))}

    def order(group: set[str]) -> list[str]:
        return sorted(group, key=lambda n: (first.get(n, -1), n))

    needs = {name: _references(entry.ddl, names, name) for name, entry in by_name.items()}
    tables = {n for n in names if by_name[n].kind == "table"}
    feeders = {n for n in names if by_name[n].kind == "materialized view"}
    done: list[str] = []
    # each table in the order the migrations introduce it, followed by the materialized views that keep it
    # once what they read is there; then the views, each after what it reads
    for table in order(tables):
        done.append(table)
        done += [mv for mv in order(feeders) if mv not in done and needs[mv] <= set(done)]
    views = order(names - set(done))
    while views:
        ready = [v for v in views if needs[v] <= set(done)]
        if not ready:
            raise ValueError(f"a cycle among {', '.join(views)}")
        done.append(ready[0])
        views.remove(ready[0])
    ordered = [by_name[name] for name in done]
    return ordered


def first_defined(migrations: Sequence[Migration]) -> list[str]:
    """Object names in the order the migrations first create them."""
    order = []
    for migration in migrations:
        for statement in split_statements(migration.template):
            match = _DEFINES.search(re.sub(r"--[^\n]*", "", statement))
            if match and match.group(1) not in order:
                order.append(match.group(1))
    return order


def render(client: Any, database: str) -> str:
    """The text of ``ingest/schema.sql`` for a database the migrations built (its name replaced by sevents)."""
    return _HEADER + "".join(f"\n{entry.text()}" for entry in entries(client, database))


def generate() -> str:
    """Migrate a fresh embedded database and render it (opens its own chdb directory: not in a process that holds
    another one open)."""
    with tempfile.TemporaryDirectory(prefix="sevents-schema-") as directory:
        client = connect(f"chdb://{directory}")
        try:
            migrate(client, Target(database=DATABASE))
            return render(client, DATABASE)
        finally:
            client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m ingest.schema", description=__doc__.splitlines()[0]
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help=f"rewrite {FILE.name}")
    action.add_argument("--check", action="store_true", help=f"exit 1 when {FILE.name} differs, write nothing")
    args = parser.parse_args(argv)
    text = generate()
    current = FILE.read_text(encoding="utf-8") if FILE.exists() else ""
    if args.check:
        if current != text:
            print(f"out of date (run python -m ingest.schema --write): {FILE}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        FILE.write_text(text, encoding="utf-8")
        print(f"wrote {FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
