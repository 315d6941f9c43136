"""Run the generated dashboards' queries the way Grafana would: variables, then macros, then ClickHouse."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dashboards.generate import ALERTS_FILE, HERE
from dashboards.macros import QueryContext, expand
from dashboards.templating import ALL, Selection, apply


def dashboards(root: Path = HERE) -> dict[str, dict[str, Any]]:
    """The committed dashboard JSON (or that of files rendered into ``root``), by uid."""
    out = {}
    for path in sorted((root / "json").glob("*.json")):
        model = json.loads(path.read_text(encoding="utf-8"))
        out[model["uid"]] = model
    return out


def alert_rules(root: Path = HERE) -> list[dict[str, Any]]:
    """The committed alert rules (or those rendered into ``root``)."""
    document = json.loads((root / ALERTS_FILE.relative_to(HERE)).read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    title: str
    kind: str
    fmt: int
    sql: str


def panel_queries() -> Iterator[PanelQuery]:
    for uid, model in dashboards().items():
        for panel in model["panels"]:
            for target in panel.get("targets", []):
                yield PanelQuery(uid, panel["title"], panel["type"], target["format"], target["rawSql"])


def panel(uid: str, title: str) -> PanelQuery:
    found = [q for q in panel_queries() if q.dashboard == uid and q.title == title]
    assert len(found) == 1, f"{uid}: no single panel titled {title!r}"
    return found[0]


@dataclass(frozen=True)
class Frame:
    """A query result: column names, ClickHouse type names and rows (timestamps aware UTC)."""

    columns: tuple[str, ...]
    types: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def _aware(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def run(client: Any, sql: str, variables: Mapping[str, Selection], ctx: QueryContext) -> Frame:
    """Grafana's order: the frontend applies variables and $__conditionalAll, the backend the macros."""
    final = expand(apply(sql, variables), ctx)
    result = client.query(final)
    rows = [tuple(_aware(v) for v in row) for row in result.result_rows]
    if not result.column_names:
        # The embedded engine returns no header for an empty result: ask ClickHouse for the result's shape.
        described = client.query(f"DESCRIBE TABLE ({final})").result_rows
        return Frame(tuple(r[0] for r in described), tuple(r[1] for r in described), rows)
    return Frame(tuple(result.column_names), tuple(t.name for t in result.column_types), rows)


def context(time_from: datetime, time_to: datetime, interval_s: float = 1.0) -> QueryContext:
    return QueryContext(time_from, time_to, timedelta(seconds=interval_s))


def all_of(options: tuple[str, ...]) -> Selection:
    return Selection(values=(ALL,), options=options)


def observed_in(value: datetime | None, truth: datetime | None, window: tuple[float, float] | None) -> bool:
    """An observed time agrees with the truth: both absent, or inside the window the collectors' polls allow
    (``Seeded.windows``), however late a loaded machine let them poll."""
    if value is None or truth is None:
        return value is truth
    return window is not None and window[0] < value.timestamp() < window[1]
