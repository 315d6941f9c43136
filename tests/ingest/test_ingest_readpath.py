"""The read socket a running ingest answers on (issue 29): read-only queries answered, anything that writes refused.

A real ReadServer on the embedded engine and a real ReadClient over its Unix socket, as ``audit`` and ``report``
use them. ``readonly=1`` already refuses inserts, DDL and table functions; ``INTO OUTFILE`` is what it lets through,
because the embedded engine writes that file from the ingest's own process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.readpath import ReadClient, ReadError, ReadServer
from tests.helpers import wait_for


@pytest.fixture
def asker(ch: Any, db: str, tmp_path: Path) -> Iterator[ReadClient]:
    server = ReadServer(tmp_path, ch)
    client = ReadClient(tmp_path)
    client.database = db
    try:
        yield client
    finally:
        server.close()


def test_a_select_with_bound_parameters_is_answered(asker: ReadClient) -> None:
    answer = asker.query("SELECT {n:UInt8} + 1 AS n, count() AS rows FROM transitions", parameters={"n": 41})
    assert answer.column_names == ("n", "rows")
    assert answer.result_rows == [(42, 0)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 INTO OUTFILE '{target}'",
        "select 1 into   outfile '{target}' TRUNCATE",
        "WITH 1 AS x SELECT x INTO OUTFILE '{target}' FORMAT CSV",
        "SELECT 1 UNION ALL SELECT 2 INTO OUTFILE '{target}'",
        "SELECT /* a comment */ 1 -- and another\nINTO OUTFILE '{target}'",
    ],
)
def test_into_outfile_is_refused_and_writes_no_file(asker: ReadClient, tmp_path: Path, sql: str) -> None:
    target = tmp_path / "written-by-the-ingest.txt"
    with pytest.raises(ReadError, match="INTO OUTFILE is refused"):
        asker.query(sql.format(target=target))
    assert not target.exists()


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO transitions (transition_id) VALUES ('forged')",
        "ALTER TABLE transitions DELETE WHERE 1",
        "DROP TABLE transitions",
        "SYSTEM FLUSH LOGS",
        "SET readonly = 0",
        "KILL QUERY WHERE 1",
    ],
)
def test_statements_other_than_select_are_refused(asker: ReadClient, sql: str) -> None:
    with pytest.raises(ReadError, match="SELECT queries only"):
        asker.query(sql)
    assert asker.query("SELECT count() FROM transitions").result_rows == [(0,)]


def test_a_string_that_merely_reads_select_is_still_parsed_by_clickhouse(asker: ReadClient) -> None:
    """The decision is the engine's parser, not a prefix match: text that is not a query is a clean error."""
    with pytest.raises(ReadError, match=r"(?i)syntax"):
        asker.query("SELECTED nothing")


def test_close_waits_for_an_answer_in_flight_and_refuses_later_ones(ch: Any, db: str, tmp_path: Path) -> None:
    """The ingest closes its client after the read socket: an answer still running then would query a closed
    engine, so ``close`` waits for it, and any asked later is told the ingest is stopping."""
    server = ReadServer(tmp_path, ch)
    answers: list[dict[str, Any]] = []

    def ask(sql: str) -> None:
        answers.append(json.loads(server.answer(json.dumps({"sql": sql, "database": db}).encode())))

    asking = threading.Thread(target=ask, args=("SELECT sleep(0.5) AS slept",))
    asking.start()
    wait_for(server._lock.locked, 30, what="the answer to begin")
    server.close()
    assert answers == [{"columns": ["slept"], "rows": [[0]]}], "close returned before the answer in flight"
    asking.join(30)
    ask("SELECT 1")
    assert "the ingest is stopping" in answers[1]["error"]
