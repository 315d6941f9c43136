"""``sevents-ingest`` as installed: on a collector-only install, say what is missing instead of a traceback.

``pip install .`` is the collector alone (Python 3.9+); the ingest needs ``sevents[central]`` and Python 3.11+.
This module must stay importable on 3.9 for that reason: it names nothing newer (see ``sevents.central``).
"""

from __future__ import annotations

from typing import Callable

from sevents.central import CENTRAL_PACKAGES, hint, run_central

__all__ = ["CENTRAL_PACKAGES", "HINT", "main"]

PROG = "sevents-ingest"
HINT = hint(PROG)


def main() -> int:
    """Run ``ingest.cli.main``, or exit 1 with the install hint when the central side is absent (``--version``
    still answers there: the version of what is installed)."""
    return run_central(PROG, _load)


def _load() -> Callable[[], int]:
    from ingest.cli import main as run
    from ingest.clickhouse import as_command

    return as_command(run)  # the embedded engine closed before the interpreter exits
