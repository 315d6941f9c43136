"""Numbered, versioned schema migrations: render for one node or a cluster, apply once, record in a table.

Theory of operation. ``ingest/migrations/NNNN_name.sql`` are templates written for a single node:

- ``${db}`` is the database, ``${on_cluster}`` becomes ``ON CLUSTER 'name'`` on a cluster and nothing
  otherwise, ``${local}`` is appended to storage table names (``_local`` on a cluster).
- On a cluster every ``ENGINE = XMergeTree(args)`` becomes ``ReplicatedXMergeTree(path, replica, args)``,
  and a ``-- @distributed NAME SHARDING_KEY`` comment before a CREATE TABLE adds a ``Distributed`` table
  ``NAME`` over ``NAME_local`` right after it, so that readers and writers always use plain names.
- A ``-- @backfill`` comment before a ``CREATE MATERIALIZED VIEW ... TO target AS SELECT ...`` adds, right after
  it, ``INSERT INTO target SELECT ...``: the rows that were there before the view, read through the view's own
  query (on a cluster through the Distributed tables, so every shard is read and written). The view exists
  first, so no row inserted meanwhile is missed; rows seen twice change nothing because rollups keep only
  states that a repeated row leaves unchanged. Nothing like POPULATE, which misses rows inserted while it runs.

Every statement is idempotent (``IF NOT EXISTS``); a migration is recorded in ``schema_migrations`` with the
checksum of its template once all its statements succeeded, and is never applied twice. Editing a migration
that was already applied is refused: add a new one instead.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from string import Template
from typing import Any

from ingest.errors import MigrationError

log = logging.getLogger(__name__)

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_ENGINE = re.compile(r"ENGINE\s*=\s*(\w*MergeTree)\(([^)]*)\)")
_DISTRIBUTED = re.compile(r"^--\s*@distributed\s+(\w+)\s+(.+?)\s*$", re.MULTILINE)
_BACKFILL = re.compile(r"^--\s*@backfill\s*$", re.MULTILINE)
# (distributed_product_mode: on a cluster a backfill reading a view runs each of its subqueries once and sends
# the result to every shard; docs/scale.md. Nothing on one node.)
BACKFILL_SETTINGS = "max_bytes_before_external_group_by = 1000000000, distributed_product_mode = 'global'"
_VIEW_TARGET = re.compile(r"\bTO\s+(\S+)\s+AS\s+(SELECT\b.*)$", re.DOTALL)
_REPLICA_ARGS = "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'"


@dataclass(frozen=True)
class Target:
    """Where the schema lives: a database, and the cluster name when it spans a cluster."""

    database: str = "sevents"
    cluster: str = ""

    def problems(self) -> list[str]:
        """Names are spliced into DDL (identifiers cannot be bound parameters), so they must be plain."""
        found = []
        if not _IDENTIFIER.match(self.database):
            found.append(f"database {self.database!r} is not a plain identifier")
        if self.cluster and not _IDENTIFIER.match(self.cluster):
            found.append(f"cluster {self.cluster!r} is not a plain identifier")
        return found


@dataclass(frozen=True)
class Migration:
    """One numbered template."""

    version: int
    name: str
    template: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.template.encode()).hexdigest()[:16]


def load_migrations() -> list[Migration]:
    """The packaged migrations, in version order."""
    found = []
    for entry in importlib.resources.files("ingest.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration numbers in {versions}")
    return found


def split_statements(sql: str) -> list[str]:
    """Split on semicolons outside quotes and ``--`` comments; drop empty statements."""
    statements, current, quote, i = [], [], "", 0
    while i < len(sql):
        char = sql[i]
        if quote:
            current.append(char)
            if char == "\\" and i + 1 < len(sql):
                current.append(sql[i + 1])
                i += 1
            elif char == quote:
                quote = ""
        elif char in "'\"`":
            quote = char
            current.append(char)
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            end = len(sql) if end < 0 else end
            current.append(sql[i:end])
            i = end
            continue
        elif char == ";":
            statements.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    statements.append("".join(current))
    return [s.strip() for s in statements if _without_comments(s).strip()]


def _without_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)


def render(migration: Migration, target: Target) -> list[str]:
    """The statements to run for ``target``, in order (pure)."""
    cluster = target.cluster
    values = {
        "db": target.database,
        "on_cluster": f"ON CLUSTER '{cluster}'" if cluster else "",
        "local": "_local" if cluster else "",
    }
    try:
        sql = Template(migration.template).substitute(values)
    except (KeyError, ValueError) as error:
        raise MigrationError(f"migration {migration.version:04d}: bad placeholder {error}") from error
    out = []
    for statement in split_statements(sql):
        directive = _DISTRIBUTED.search(statement)
        body = _without_comments(statement).strip()
        backfill = _backfill(body, target) if _BACKFILL.search(statement) else []
        if not cluster:
            out.extend([body, *backfill])
            continue
        out.append(_ENGINE.sub(_replicated, body))
        out.extend(backfill)
        if directive:
            name, key = directive.group(1), directive.group(2)
            db = target.database
            out.append(
                f"CREATE TABLE IF NOT EXISTS {db}.{name} ON CLUSTER '{cluster}' AS {db}.{name}_local "
                f"ENGINE = Distributed('{cluster}', '{db}', '{name}_local', {key})"
            )
    return out


def _backfill(view: str, target: Target) -> list[str]:
    """``INSERT INTO target SELECT ...`` from a materialized view's own statement (on a cluster: plain names)."""
    match = _VIEW_TARGET.search(view)
    if not match:
        raise MigrationError(f"@backfill needs CREATE MATERIALIZED VIEW ... TO table AS SELECT: {view[:80]}")
    # a long history spills its aggregation to disk instead of holding it all in memory (10 M transitions:
    # 3.6 GB resident instead of 11.5 GB on the embedded engine)
    insert = f"INSERT INTO {match.group(1)} {match.group(2)} SETTINGS {BACKFILL_SETTINGS}"
    if target.cluster:
        insert = re.sub(rf"\b({re.escape(target.database)}\.\w+)_local\b", r"\1", insert)
    return [insert]


def _replicated(match: re.Match[str]) -> str:
    args = match.group(2).strip()
    return f"ENGINE = Replicated{match.group(1)}({_REPLICA_ARGS}{', ' + args if args else ''})"


def bootstrap(target: Target) -> list[str]:
    """Statements creating the database and the migrations table."""
    on_cluster = f" ON CLUSTER '{target.cluster}'" if target.cluster else ""
    engine = (
        f"ReplicatedReplacingMergeTree({_REPLICA_ARGS}, applied_at)"
        if target.cluster
        else ("ReplacingMergeTree(applied_at)")
    )
    return [
        f"CREATE DATABASE IF NOT EXISTS {target.database}{on_cluster}",
        f"CREATE TABLE IF NOT EXISTS {target.database}.schema_migrations{on_cluster} "
        "(version UInt32, name String, checksum String, applied_at DateTime64(3, 'UTC')) "
        f"ENGINE = {engine} ORDER BY version",
    ]


def applied(client: Any, target: Target) -> dict[int, tuple[str, str]]:
    """Applied migrations: version -> (name, checksum)."""
    # the database name is a checked identifier (Target.problems); identifiers cannot be bound
    sql = f"SELECT version, argMax(name, applied_at), argMax(checksum, applied_at) FROM {target.database}.schema_migrations GROUP BY version"  # noqa: E501, S608
    result = client.query(sql)
    return {int(v): (str(n), str(c)) for v, n, c in result.result_rows}


def migrate(client: Any, target: Target, migrations: Sequence[Migration] | None = None) -> list[int]:
    """Bring the schema up to date; returns the versions applied now (empty when already current)."""
    problems = target.problems()
    if problems:
        raise MigrationError("; ".join(problems))
    migrations = load_migrations() if migrations is None else list(migrations)
    try:
        for statement in bootstrap(target):
            client.command(statement)
        done = applied(client, target)
    except Exception as error:
        raise MigrationError(f"cannot read the migrations table: {error}") from error
    changed = [
        f"{m.version:04d}_{m.name}" for m in migrations if m.version in done and done[m.version][1] != m.checksum
    ]
    if changed:
        raise MigrationError(
            f"already applied migrations were edited: {', '.join(changed)}; add a new migration instead"
        )
    now_applied = []
    for migration in migrations:
        if migration.version in done:
            continue
        for statement in render(migration, target):
            try:
                client.command(statement)
            except Exception as error:
                raise MigrationError(
                    f"migration {migration.version:04d}_{migration.name} failed: {error}\n{statement}"
                ) from error
        client.insert(
            f"{target.database}.schema_migrations",
            [[migration.version, migration.name, migration.checksum, datetime.now(UTC)]],
            column_names=["version", "name", "checksum", "applied_at"],
        )
        log.info("migration applied", extra={"version": migration.version, "migration": migration.name})
        now_applied.append(migration.version)
    return now_applied
