"""``sevents-demo`` as installed: on a collector-only install, say what is missing instead of a traceback.

The demo needs ``sevents[central]`` and Python 3.11+; this module imports on 3.9 with the base dependencies
and loads ``demo.cli`` only when it runs (see ``sevents.central``).
"""

from __future__ import annotations

from typing import Callable

from sevents.central import run_central

PROG = "sevents-demo"


def main() -> int:
    """Run ``demo.cli.main``, or exit 1 with the install hint when the central side is absent."""
    return run_central(PROG, _load)


def _load() -> Callable[[], int]:
    from demo.cli import main as run
    from ingest.clickhouse import as_command

    return as_command(run)  # the embedded engine closed before the interpreter exits
