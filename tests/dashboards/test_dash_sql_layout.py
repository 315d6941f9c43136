"""Panel SQL written for people: laid out on short indented lines, the same tokens, views named whole in the code."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards import filters, generate
from dashboards.sqlformat import WIDTH, LayoutError, readable, tokens
from dashboards.templating import ALL, Selection, apply_conditional_all

HERE = generate.HERE
# the modules that build panel, variable and alert SQL (the report has its own queries and tests)
# the modules that write panel SQL: the dashboards' own, and the fragments they share with the audit catalogue
GENERATORS = sorted(p for p in HERE.glob("*.py") if not p.name.startswith("report") and p.name != "svg.py")
GENERATORS.append(HERE.parent / "ingest" / "event_sql.py")


def _committed() -> Iterator[tuple[str, str]]:
    """(file, SQL) for every SQL text of the committed dashboards and alert rules."""
    for path in [*sorted((HERE / "json").glob("*.json")), generate.ALERTS_FILE]:
        for sql in generate.sql_texts(json.loads(path.read_text(encoding="utf-8"))):
            yield path.name, sql


def _code_strings(path: Path) -> str:
    """Every string constant of a module except docstrings (f-string parts included), one per line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return "\n".join(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    )


def test_no_line_of_panel_sql_is_longer_than_the_bound() -> None:
    """Every query of every panel, variable and alert rule is on lines of at most 120 characters."""
    assert WIDTH == 120
    for name, sql in _committed():
        assert "\n" in sql, f"{name}: one line: {sql[:80]}"
        for line in sql.splitlines():
            assert len(line) <= WIDTH, f"{name}: {len(line)} characters: {line[:80]}"


def test_every_table_and_view_a_panel_reads_is_named_whole_in_the_code() -> None:
    """A search for a view (``event_vm_lifecycles``) finds the Python that builds every query reading it: each name
    after ``sevents.`` in the committed SQL is a whole word of a string in the generator modules."""
    code = "\n".join(_code_strings(path) for path in GENERATORS)
    read = {name for _, sql in _committed() for name in re.findall(r"\bsevents\.(\w+)", sql)}
    assert {"events", "event_vm_lifecycles", "event_history", "event_rollup"} <= read
    missing = sorted(name for name in read if not re.search(rf"\b{name}\b", code))
    assert not missing, f"assembled, not named: {missing}"


def test_since_takes_the_views_whole_name() -> None:
    """``filters.since`` reads the view it is given by its full name, and refuses a name it does not know."""
    assert "FROM sevents.event_vm_lifecycles WHERE" in filters.since(filters.STARTED_IDS, "event_vm_lifecycles")
    assert "FROM sevents.events WHERE" in filters.since(filters.STARTED_IDS, "events")
    with pytest.raises(ValueError, match="event_impacts"):
        filters.since(filters.STARTED_IDS, "event_impacts_since")


def test_layout_changes_whitespace_only() -> None:
    """The laid-out text has the tokens of the input: literals, ``${var:format}`` references and macros as they
    were; breaks go where a space was or next to a bracket or comma, so no two tokens merge."""
    one_line = (
        "SELECT a, count() AS n, decodeURLComponent('${vm:percentencode}') AS v FROM sevents.events_since(since_day = "
        "toDate('2024-01-01')) WHERE $__timeFilter(first_seen_at) AND a IN (SELECT b FROM sevents.event_rollup WHERE "
        "last_seen_at >= $__fromTime - INTERVAL 30 DAY AND c = 'x, (y) AND z') GROUP BY a ORDER BY n DESC LIMIT 10"
    )
    laid_out = readable(one_line)
    assert tokens(laid_out) == tokens(one_line)
    assert " ".join(laid_out.split()).replace("( ", "(").replace(" )", ")") == one_line
    assert "'x, (y) AND z'" in laid_out and "$__timeFilter(first_seen_at)" in laid_out
    assert laid_out.splitlines()[0] == "SELECT a, count() AS n, decodeURLComponent('${vm:percentencode}') AS v"


def test_server_macros_stay_on_one_line() -> None:
    """``$__timeFilter(...)`` and the other backend macros are never broken, however long their line."""
    column = "toDateTime64(" + ", ".join(f"c{i}" for i in range(40)) + ")"
    laid_out = readable(f"SELECT 1 FROM t WHERE $__timeFilter({column}) AND x")
    assert f"$__timeFilter({column})" in laid_out


def test_comments_are_refused() -> None:
    """A ``--`` comment would swallow what a line break moves onto its line: refused, not laid out."""
    with pytest.raises(LayoutError):
        readable("SELECT 1 -- one\nFROM t")
    assert readable("SELECT '--' AS dash, 2 - -1 AS three") == "SELECT '--' AS dash, 2 - -1 AS three"


@pytest.mark.parametrize("chosen", [ALL, "web-1"])
def test_conditional_all_resolves_alike_on_one_line_and_laid_out(chosen: str) -> None:
    """The plugin's ``$__conditionalAll`` gives the same tokens on the laid-out query as on the same query on one
    line (its whitespace collapsed), for All and for a choice, and leaves none unresolved."""
    resolved = 0
    for name, sql in _committed():
        if "$__conditionalAll" not in sql:
            continue
        one_line = " ".join(sql.split())
        variables = {n: Selection((chosen,), ("web-1", "web-2")) for n in re.findall(r"\$(?!__)(\w+)", one_line)}
        laid_out = apply_conditional_all(sql, variables)
        assert tokens(laid_out) == tokens(apply_conditional_all(one_line, variables)), name
        assert "$__conditionalAll" not in laid_out, name
        resolved += 1
    assert resolved >= 20
