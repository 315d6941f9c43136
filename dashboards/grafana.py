"""Small builders for Grafana dashboard JSON: panels with ClickHouse targets, template variables, grid layout.

Plugin facts the JSON relies on: a target carries ``rawSql``, ``editorType: "sql"`` and a numeric
``format`` (0 time series, 1 table, 2 logs); every datasource reference goes through the ``$datasource``
variable so one dashboard works against any ClickHouse data source. Every SQL text is laid out on indented lines
(``sqlformat.readable``: whitespace only), so a panel's query reads in Grafana's editor as written by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from dashboards.sqlformat import readable

PLUGIN_ID: Final = "grafana-clickhouse-datasource"
# 4.19.0 moved macro expansion to macropro with ClickHouse-native $__timeGroup/$__timeFrom/$__timeTo;
# dashboards/macros.py models that engine, so older plugins are not supported.
MIN_PLUGIN_VERSION: Final = "4.19.0"
MIN_GRAFANA_VERSION: Final = "10.4.0"
DATASOURCE_UID: Final = "sevents-clickhouse"
DATASOURCE: Final = {"type": PLUGIN_ID, "uid": "${datasource}"}

FORMAT_TIME_SERIES: Final = 0
FORMAT_TABLE: Final = 1
FORMAT_LOGS: Final = 2

GRID_WIDTH: Final = 24


@dataclass(frozen=True)
class Panel:
    """One query panel: its Grafana type, SQL, result format and size on the 24-column grid."""

    title: str
    kind: str
    sql: str
    format: int = FORMAT_TABLE
    width: int = 12
    height: int = 8
    description: str = ""
    unit: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    field_config: dict[str, Any] = field(default_factory=dict)
    links: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Row:
    """A collapsible section header spanning the grid."""

    title: str


def target(sql: str, fmt: int, ref_id: str = "A") -> dict[str, Any]:
    """A ClickHouse plugin query in raw SQL mode."""
    return {
        "refId": ref_id,
        "datasource": dict(DATASOURCE),
        "editorType": "sql",
        "format": fmt,
        "queryType": "timeseries" if fmt == FORMAT_TIME_SERIES else "table",
        "rawSql": readable(sql),
        "pluginVersion": MIN_PLUGIN_VERSION,
    }


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit} if panel.unit else {}
    defaults.update(panel.field_config.get("defaults", {}))
    body: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": dict(DATASOURCE),
        "gridPos": {"x": x, "y": y, "w": panel.width, "h": panel.height},
        "targets": [target(panel.sql, panel.format)],
        "fieldConfig": {"defaults": defaults, "overrides": panel.field_config.get("overrides", [])},
        "options": panel.options,
    }
    if panel.links:
        body["links"] = list(panel.links)
    return body


def layout(items: Sequence[Panel | Row]) -> list[dict[str, Any]]:
    """Panels placed left to right, wrapping at 24 columns; rows start a new line. Ids count from 1."""
    out: list[dict[str, Any]] = []
    x = y = line_height = 0
    for number, item in enumerate(items, start=1):
        if isinstance(item, Row):
            if x:
                y += line_height
            out.append(
                {
                    "id": number,
                    "type": "row",
                    "title": item.title,
                    "collapsed": False,
                    "gridPos": {"x": 0, "y": y, "w": GRID_WIDTH, "h": 1},
                    "panels": [],
                }
            )
            x, y, line_height = 0, y + 1, 0
            continue
        if x + item.width > GRID_WIDTH:
            x, y, line_height = 0, y + line_height, 0
        out.append(_panel_json(item, number, x, y))
        x += item.width
        line_height = max(line_height, item.height)
    return out


def datasource_variable() -> dict[str, Any]:
    """The data source picker every panel and variable refers to."""
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": PLUGIN_ID,
        "current": {"text": "sevents ClickHouse", "value": DATASOURCE_UID},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def query_variable(name: str, label: str, sql: str, *, multi: bool = True, include_all: bool = True) -> dict[str, Any]:
    """A variable whose options come from ClickHouse, refreshed when the time range changes."""
    current: dict[str, Any] = {"text": ["All"], "value": ["$__all"]} if multi else {"text": "All", "value": "$__all"}
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": dict(DATASOURCE),
        "definition": readable(sql),
        "query": {"rawSql": readable(sql), "editorType": "sql", "format": FORMAT_TABLE},
        "multi": multi,
        "includeAll": include_all,
        "current": current if include_all else {},
        "refresh": 2,
        "sort": 1,
        "hide": 0,
        "options": [],
        "regex": "",
    }


def custom_variable(name: str, label: str, values: Sequence[str]) -> dict[str, Any]:
    """A fixed multi-value list with All."""
    return {
        "name": name,
        "label": label,
        "type": "custom",
        "query": ",".join(values),
        "multi": True,
        "includeAll": True,
        "current": {"text": ["All"], "value": ["$__all"]},
        "options": [{"text": v, "value": v, "selected": False} for v in values],
        "hide": 0,
    }


def textbox_variable(name: str, label: str, default: str = "") -> dict[str, Any]:
    """Free text (the drill-down EventId)."""
    return {
        "name": name,
        "label": label,
        "type": "textbox",
        "query": default,
        "current": {"text": default, "value": default},
        "options": [],
        "hide": 0,
    }


def dashboard(
    uid: str,
    title: str,
    items: Sequence[Panel | Row],
    variables: Sequence[dict[str, Any]],
    *,
    description: str,
    time_from: str = "now-24h",
    refresh: str = "1m",
    links: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A complete dashboard model, ready to be provisioned from a file."""
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["sevents", "scheduled-events"],
        "timezone": "utc",
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": refresh,
        "time": {"from": time_from, "to": "now"},
        "templating": {"list": list(variables)},
        "annotations": {"list": []},
        "links": list(links),
        "panels": layout(items),
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": MIN_GRAFANA_VERSION},
            {"type": "datasource", "id": PLUGIN_ID, "name": "ClickHouse", "version": MIN_PLUGIN_VERSION},
        ],
    }
