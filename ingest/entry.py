"""``sevents-ingest`` as installed: on a collector-only install, say what is missing instead of a traceback.

``pip install .`` is the collector alone (Python 3.9+); the ingest needs ``sevents[central]`` and Python 3.11+.
This module must stay importable on 3.9 for that reason: it names nothing newer.
"""

from __future__ import annotations

import sys

CENTRAL_PACKAGES = ("clickhouse_connect", "chdb", "msgspec", "orjson", "tabulate", "azure")
HINT = "sevents-ingest: the central side is not installed: pip install 'sevents[central]' (Python 3.11 or newer)"


def main() -> int:
    """Run ``ingest.cli.main``, or exit 1 with the install hint when the central side is absent."""
    if sys.version_info < (3, 11):
        print(f"{HINT}; this is Python {sys.version.split()[0]}", file=sys.stderr)
        return 1
    try:
        from ingest.cli import main as run
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in CENTRAL_PACKAGES:
            raise
        print(f"{HINT}; missing: {error.name}", file=sys.stderr)
        return 1
    return run()
