"""``sevents-ingest`` as installed: on a collector-only install, say what is missing instead of a traceback.

``pip install .`` is the collector alone (Python 3.9+); the ingest needs ``sevents[central]`` and Python 3.11+.
This module must stay importable on 3.9 for that reason: it names nothing newer.
"""

from __future__ import annotations

import sys

CENTRAL_PACKAGES = ("clickhouse_connect", "chdb", "msgspec", "orjson", "tabulate", "azure")
HINT = "sevents-ingest: the central side is not installed: pip install 'sevents[central]' (Python 3.11 or newer)"


def main() -> int:
    """Run ``ingest.cli.main``, or exit 1 with the install hint when the central side is absent (``--version``
    still answers there: the version of what is installed)."""
    if sys.version_info < (3, 11):
        return _without_central(f"this is Python {sys.version.split()[0]}")
    try:
        from ingest.cli import main as run
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in CENTRAL_PACKAGES:
            raise
        return _without_central(f"missing: {error.name}")
    return run()


def _without_central(why: str) -> int:
    if sys.argv[1:] == ["--version"]:
        from sevents.version import version_line

        print(version_line("sevents-ingest"))
        return 0
    print(f"{HINT}; {why}", file=sys.stderr)
    return 1
