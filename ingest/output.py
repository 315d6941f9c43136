"""Query results for people (aligned tables) and for scripts (JSON, CSV)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tabulate import tabulate

from ingest.queries import Result
from sevents import records

FORMATS = ("table", "json", "csv")


def render(result: Result, fmt: str = "table") -> str:
    """``result`` as text in ``fmt`` (table | json | csv)."""
    if fmt == "json":
        return json.dumps([{k: _plain(v) for k, v in row.items()} for row in result.dicts()], indent=2) + "\n"
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([_cell(v, limit=0) for v in row] for row in result.rows)
        return buffer.getvalue()
    return table(result.columns, [[_cell(v) for v in row] for row in result.rows])


def table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain aligned text table (tabulate's "simple" layout, cells as given); "(no rows)" when empty."""
    if not rows:
        return "(no rows)\n"
    text = tabulate(rows, headers=list(columns), tablefmt="simple", disable_numparse=True, stralign="left")
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return records.format_time(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _cell(value: Any, limit: int = 80) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return records.format_time(value)
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, list | tuple):
        return ",".join(_cell(v, limit) for v in value)
    text = str(value)
    return text if not limit or len(text) <= limit else text[: limit - 3] + "..."
