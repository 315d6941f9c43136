"""ingest/schema.sql: today's schema in one file, exactly what the migrations give, and a schema in itself."""

from __future__ import annotations

import re
import uuid
from typing import Any

from ingest import schema
from ingest.migrate import Migration, split_statements


def _objects(ch: Any, database: str) -> dict[str, tuple[str, str]]:
    """name -> (engine, definition with the database named sevents) for every object of ``database``."""
    rows = ch.query(
        "SELECT name, engine, create_table_query FROM system.tables WHERE database = {d:String}",
        parameters={"d": database},
    ).result_rows
    return {str(n): (str(e), re.sub(rf"\b{database}\.", "sevents.", str(q))) for n, e, q in rows}


def _columns(ch: Any, database: str) -> list[tuple[Any, ...]]:
    sql = (
        "SELECT table, name, type, default_kind, default_expression, position FROM system.columns "
        "WHERE database = {d:String} ORDER BY table, position"
    )
    return [tuple(r) for r in ch.query(sql, parameters={"d": database}).result_rows]


def test_schema_file_is_what_the_migrations_give_today(ch: Any, db: str) -> None:
    """The committed ingest/schema.sql is the rendering of a freshly migrated database (run
    python -m ingest.schema --write after adding a migration)."""
    assert schema.FILE.read_text(encoding="utf-8") == schema.render(ch, db)


def test_a_database_built_from_the_file_equals_the_migrated_one(ch: Any, db: str) -> None:
    """Running schema.sql's statements in order builds the same objects: names, engines, definitions (view and
    materialized view queries included) and every column with its type and default."""
    built = "t_" + uuid.uuid4().hex[:12]
    ch.command(f"CREATE DATABASE {built}")
    for statement in split_statements(schema.FILE.read_text(encoding="utf-8")):
        ch.command(re.sub(r"\bsevents\.", f"{built}.", re.sub(r"--[^\n]*", "", statement)))
    assert _objects(ch, built) == _objects(ch, db)
    assert _columns(ch, built) == _columns(ch, db)


def test_every_object_says_what_it_is_for(ch: Any, db: str) -> None:
    """Each table and view has its sentence in schema.PURPOSE, and no sentence names an object that is gone."""
    assert set(schema.PURPOSE) == set(_objects(ch, db))
    text = schema.FILE.read_text(encoding="utf-8")
    for name in schema.PURPOSE:
        assert re.search(rf"^-- {name}: ", text, re.MULTILINE), name


def test_the_last_migration_to_define_an_object_is_named() -> None:
    """A table created in one migration and altered in a later one, a view dropped and created again: the later
    migration is the one named."""
    migrations = [
        Migration(1, "one", "CREATE TABLE IF NOT EXISTS ${db}.t${local} (a UInt8) ENGINE = MergeTree ORDER BY a;"),
        Migration(2, "two", "CREATE VIEW ${db}.v AS SELECT a FROM ${db}.t;"),
        Migration(
            3,
            "three",
            "-- CREATE VIEW ${db}.not_this\nALTER TABLE ${db}.t${local} ADD COLUMN b UInt8;\n"
            "DROP VIEW IF EXISTS ${db}.v;\nCREATE VIEW ${db}.v AS SELECT a, b FROM ${db}.t;",
        ),
    ]
    assert schema.last_defined(migrations) == {"schema_migrations": "migrate.py", "t": "0003_three", "v": "0003_three"}
    assert schema.first_defined(migrations) == ["t", "v"]


def test_the_file_lists_each_object_after_what_it_reads() -> None:
    """Dependency order: no statement names an object defined further down the file."""
    statements = [s for s in split_statements(schema.FILE.read_text(encoding="utf-8")) if "CREATE" in s]
    defined: list[str] = []
    for statement in statements:
        name = re.search(r"CREATE (?:MATERIALIZED )?(?:VIEW|TABLE) sevents\.(\w+)", statement)
        assert name, statement[:80]
        later = {n for n in re.findall(r"\bsevents\.(\w+)", statement)} - set(defined) - {name.group(1)}
        assert not later, (name.group(1), later)
        defined.append(name.group(1))
