"""Builds the committed Grafana files from Python: dashboards, alert rules. ``--check`` fails if they drifted.

python -m dashboards.generate           rewrite dashboards/json/*.json and the alert rules file
python -m dashboards.generate --check   exit 1 when a committed file differs from what the code builds
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dashboards import alerts, approval, fleet, impact, pipeline, timeline

HERE = Path(__file__).resolve().parent
JSON_DIR = HERE / "json"
ALERTS_FILE = HERE / "provisioning" / "alerting" / "sevents-alerts.json"

DASHBOARDS: dict[str, Callable[[], dict[str, Any]]] = {
    "fleet-overview": fleet.build,
    "maintenance-timeline": timeline.build,
    "approval-latency": approval.build,
    "impact": impact.build,
    "pipeline-health": pipeline.build,
}


def render(document: dict[str, Any]) -> str:
    """Stable text: the same model always gives the same bytes."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def outputs() -> dict[Path, str]:
    """Every generated file and its content."""
    files = {JSON_DIR / f"{name}.json": render(build()) for name, build in DASHBOARDS.items()}
    files[ALERTS_FILE] = render(alerts.build())
    return files


def stale(files: dict[Path, str]) -> list[Path]:
    """The files whose content on disk differs from ``files`` (missing ones included)."""
    return [p for p, text in files.items() if not p.exists() or p.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m dashboards.generate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args(argv)
    files = outputs()
    out_of_date = stale(files)
    if args.check:
        if out_of_date:
            names = ", ".join(str(p.relative_to(HERE.parent)) for p in out_of_date)
            print(f"out of date (run python -m dashboards.generate): {names}", file=sys.stderr)
            return 1
        return 0
    for path in out_of_date:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path], encoding="utf-8")
        print(f"wrote {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
