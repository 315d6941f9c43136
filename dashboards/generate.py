"""Builds the Grafana files from Python: dashboards, alert rules, provisioning. ``--check`` fails if they drifted.

python -m dashboards.generate                            rewrite dashboards/json/*.json and the alert rules file
python -m dashboards.generate --check                    exit 1 when a committed file differs from the code's
python -m dashboards.generate --database NAME --out DIR  every Grafana file for the ingest's database NAME, in DIR

The committed files read the database ``sevents`` (the ingest's default). Every table reference in their SQL is
qualified (``sevents.events_since``), alert rules included (Grafana evaluates them without a dashboard, so no
variable could name the database), so the whole set is rendered again for an ingest run with ``--database``:
DIR gets the layout of ``dashboards/`` (``json/``, ``provisioning/``), ready to mount the same way.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dashboards import alerts, approval, filters, fleet, impact, pipeline, timeline
from ingest.migrate import Target

HERE = Path(__file__).resolve().parent
JSON_DIR = HERE / "json"
PROVISIONING = HERE / "provisioning"
ALERTS_FILE = PROVISIONING / "alerting" / "sevents-alerts.json"
DATASOURCE_FILE = PROVISIONING / "datasources" / "sevents-clickhouse.yaml"
DEFAULT_DATABASE = filters.DB
# SQL fields of the dashboard and alert models: panel and alert targets, variable queries and their definitions.
SQL_KEYS = frozenset({"rawSql", "definition"})
_DEFAULT_DATABASE_LINE = re.compile(rf"^(\s*defaultDatabase:\s*){re.escape(DEFAULT_DATABASE)}\s*$", re.MULTILINE)

DASHBOARDS: dict[str, Callable[[], dict[str, Any]]] = {
    "fleet-overview": fleet.build,
    "maintenance-timeline": timeline.build,
    "approval-latency": approval.build,
    "impact": impact.build,
    "pipeline-health": pipeline.build,
}


def qualified(database: str) -> re.Pattern[str]:
    """A table reference in ``database``: ``sevents.events``, not ``x.sevents.y`` or ``a_sevents.y``."""
    return re.compile(rf"(?<![\w.`]){re.escape(database)}\.(?=[A-Za-z_])")


def sql_texts(document: Any) -> list[str]:
    """Every SQL string of a dashboard or alert-rule model."""
    found: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            if key in SQL_KEYS and isinstance(value, str):
                found.append(value)
            else:
                found += sql_texts(value)
    elif isinstance(document, list):
        for item in document:
            found += sql_texts(item)
    return found


def for_database(document: Any, database: str) -> Any:
    """``document`` with every table reference of its SQL in ``database`` instead of the built-in one."""
    if database == DEFAULT_DATABASE:
        return document
    pattern = qualified(DEFAULT_DATABASE)
    if isinstance(document, dict):
        return {
            key: pattern.sub(f"{database}.", value)
            if key in SQL_KEYS and isinstance(value, str)
            else for_database(value, database)
            for key, value in document.items()
        }
    if isinstance(document, list):
        return [for_database(item, database) for item in document]
    return document


def check_database(database: str) -> None:
    """The name is spliced into SQL, so it must be a plain identifier, as the ingest requires of ``--database``."""
    problems = Target(database=database).problems()
    if problems:
        raise ValueError("; ".join(problems))


def render(document: dict[str, Any]) -> str:
    """Stable text: the same model always gives the same bytes."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def outputs(database: str = DEFAULT_DATABASE, root: Path = HERE) -> dict[Path, str]:
    """Every generated dashboard and the alert rules, reading ``database``, under ``root`` (``dashboards/``)."""
    check_database(database)
    models = {root / "json" / f"{name}.json": build() for name, build in DASHBOARDS.items()}
    models[root / ALERTS_FILE.relative_to(HERE)] = alerts.build()
    return {path: render(for_database(model, database)) for path, model in models.items()}


def provisioning(database: str = DEFAULT_DATABASE, root: Path = HERE) -> dict[Path, str]:
    """The hand-written provisioning files (data source, dashboard provider, contact point) for ``root``: the
    data source's default database set to ``database``, the others as committed."""
    check_database(database)
    files: dict[Path, str] = {}
    for source in sorted(PROVISIONING.rglob("*.yaml")):
        text = source.read_text(encoding="utf-8")
        if source == DATASOURCE_FILE:
            text, count = _DEFAULT_DATABASE_LINE.subn(rf"\g<1>{database}", text)
            if count != 1:
                raise ValueError(f"{source}: no single `defaultDatabase: {DEFAULT_DATABASE}` line to set")
        files[root / source.relative_to(HERE)] = text
    return files


def tree(database: str = DEFAULT_DATABASE, root: Path = HERE) -> dict[Path, str]:
    """Every file Grafana needs for ``database``: what ``outputs`` builds and the provisioning files."""
    return {**provisioning(database, root), **outputs(database, root)}


def stale(files: dict[Path, str]) -> list[Path]:
    """The files whose content on disk differs from ``files`` (missing ones included)."""
    return [p for p, text in files.items() if not p.exists() or p.read_text(encoding="utf-8") != text]


def _shown(path: Path) -> str:
    return str(path.relative_to(HERE.parent)) if path.is_relative_to(HERE.parent) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="python -m dashboards.generate",
        description=__doc__.splitlines()[0],
        epilog="Without --out the committed files are written (database sevents only).",
    )
    parser.add_argument("--check", action="store_true", help="compare with the files there, write nothing")
    parser.add_argument(
        "--database",
        default=DEFAULT_DATABASE,
        help=f"the database the ingest writes (its --database; default {DEFAULT_DATABASE})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="write every Grafana file there (json/, provisioning/) instead of into dashboards/",
    )
    args = parser.parse_args(argv)
    if args.out is None and args.database != DEFAULT_DATABASE:
        parser.error(f"--database {args.database} needs --out DIR: the committed files read {DEFAULT_DATABASE}")
    try:
        files = outputs(args.database) if args.out is None else tree(args.database, args.out.resolve())
    except ValueError as error:
        parser.error(str(error))
    out_of_date = stale(files)
    if args.check:
        if out_of_date:
            names = ", ".join(_shown(p) for p in out_of_date)
            print(f"out of date (run python -m dashboards.generate): {names}", file=sys.stderr)
            return 1
        return 0
    for path in out_of_date:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path], encoding="utf-8")
        print(f"wrote {_shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
