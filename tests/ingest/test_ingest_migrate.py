"""Migrations: rendered for one node or a cluster, applied once, recorded, and edits refused."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ingest.errors import MigrationError
from ingest.migrate import Migration, Target, load_migrations, migrate, render, split_statements

from .conftest import scalar


def test_split_respects_quotes_and_comments() -> None:
    """Semicolons inside strings and comments do not split; comments stay with the next statement (directives)."""
    sql = "SELECT 'a;b' -- c;d\n; ;\n-- @directive x;\nSELECT \"x;y\";\n-- trailing comment\n"
    assert split_statements(sql) == ["SELECT 'a;b' -- c;d", '-- @directive x;\nSELECT "x;y"']


def test_single_node_rendering_has_plain_engines_and_no_cluster_clause() -> None:
    """Without a cluster the templates become plain MergeTree DDL in the chosen database."""
    statements = [s for m in load_migrations() for s in render(m, Target(database="hist"))]
    text = "\n".join(statements)
    assert "CREATE TABLE IF NOT EXISTS hist.transitions \n(" in text
    assert "ON CLUSTER" not in text and "Replicated" not in text and "Distributed" not in text
    assert "${" not in text


def test_cluster_rendering_uses_replicated_local_tables_distributed_tables_and_on_cluster() -> None:
    """With a cluster every storage table is Replicated*_local with a Distributed table of the plain name."""
    statements = [s for m in load_migrations() for s in render(m, Target(cluster="prod"))]
    creates = [s for s in statements if s.startswith(("CREATE TABLE", "CREATE VIEW", "CREATE MATERIALIZED"))]
    assert all("ON CLUSTER 'prod'" in s for s in creates)
    local = next(s for s in statements if s.startswith("CREATE TABLE IF NOT EXISTS sevents.transitions_local"))
    assert (
        "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}', "
        "ingested_at)" in local
    )
    for table in ("transitions", "heartbeats", "heartbeats_latest", "dead_letters"):
        dist = [s for s in statements if s.startswith(f"CREATE TABLE IF NOT EXISTS sevents.{table} ON CLUSTER")]
        assert len(dist) == 1 and f"Distributed('prod', 'sevents', '{table}_local'" in dist[0]
    mv = next(s for s in statements if "MATERIALIZED VIEW" in s)
    assert "TO sevents.heartbeats_latest_local" in mv and "FROM sevents.heartbeats_local" in mv


def test_bad_names_are_refused_before_any_ddl() -> None:
    """Database and cluster names are spliced into DDL, so anything but a plain identifier is refused."""
    with pytest.raises(MigrationError):
        migrate(object(), Target(database="x; DROP DATABASE y"))
    assert Target(cluster="a'b").problems()


def test_migrate_applies_once_and_records_every_version(ch: Any) -> None:
    """The first run applies every migration, the second applies nothing; schema_migrations lists them."""
    target = Target(database="m_" + uuid.uuid4().hex[:10])
    versions = [m.version for m in load_migrations()]
    assert migrate(ch, target) == versions
    assert migrate(ch, target) == []
    assert scalar(ch, f"SELECT count() FROM {target.database}.schema_migrations FINAL") == len(versions)
    tables = {r[0] for r in ch.query(f"SHOW TABLES FROM {target.database}").result_rows}
    assert {"transitions", "events", "event_vms", "heartbeats", "heartbeats_latest", "dead_letters"} <= tables


def test_an_edited_applied_migration_is_refused(ch: Any) -> None:
    """Changing a migration after it was applied raises instead of silently diverging."""
    target = Target(database="m_" + uuid.uuid4().hex[:10])
    migrations = load_migrations()
    migrate(ch, target, migrations)
    first = migrations[0]
    edited = [Migration(first.version, first.name, first.template + "\n-- edited\n"), *migrations[1:]]
    with pytest.raises(MigrationError, match="edited"):
        migrate(ch, target, edited)


def test_a_new_migration_is_applied_on_top(ch: Any) -> None:
    """A later numbered migration runs on an existing schema and is recorded."""
    target = Target(database="m_" + uuid.uuid4().hex[:10])
    migrate(ch, target)
    extra = Migration(
        99,
        "extra",
        "CREATE TABLE IF NOT EXISTS ${db}.extra${local} ${on_cluster} (x UInt8) ENGINE = MergeTree() ORDER BY x;",
    )
    assert migrate(ch, target, [*load_migrations(), extra]) == [99]
    assert scalar(ch, f"SELECT count() FROM {target.database}.extra") == 0
