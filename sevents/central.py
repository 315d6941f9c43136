"""The console scripts of the central side on a collector-only install: one line saying what is missing.

``pip install .`` is the collector alone (Python 3.9+); ``sevents-ingest``, ``sevents-report`` and ``sevents-demo``
need ``sevents[central]`` and Python 3.11+. Each has a small entry module (``ingest.entry``, ``dashboards.entry``,
``demo.entry``) that hands ``run_central`` a loader of its real ``main``: the loader imports the heavy modules only
when called, so the entry module itself imports on 3.9 with the base dependencies. There ``--version`` still
answers (the version of what is installed) and anything else is the install hint, exit 1 (``ExitCode.FAILED``: a
dependency is missing), never a traceback. Importable on Python 3.9, like the rest of the collector side.
"""

from __future__ import annotations

import sys
from typing import Callable

from sevents.errors import ExitCode

# Top-level import names of the central extra's packages (``azure`` for the checkpoint store): a missing one of
# these is a collector-only install; any other missing module is a bug and keeps its traceback.
CENTRAL_PACKAGES = ("clickhouse_connect", "chdb", "msgspec", "orjson", "pyarrow", "tabulate", "azure")
# Looked for (not imported) before a command starts: the commands import some of them only once they run (the
# report connects after parsing its flags), so an import that fails on loading is not enough. ``azure`` is left
# out: its namespace also holds the collector's own Event Hubs and identity packages.
PROBED = tuple(name for name in CENTRAL_PACKAGES if name != "azure")
MISSING_DEPENDENCY = ExitCode.FAILED


def hint(prog: str) -> str:
    """The start of the line a command prints when the central side is not installed."""
    return f"{prog}: the central side is not installed: pip install 'sevents[central]' (Python 3.11 or newer)"


def run_central(prog: str, load: Callable[[], Callable[[], int]]) -> int:
    """``load()()`` (import the command's ``main``, then run it), or the install hint for ``prog`` when the central
    side is absent: an older Python, a central package not installed, or one that cannot be imported."""
    if sys.version_info < (3, 11):
        return _without_central(prog, f"this is Python {sys.version.split()[0]}")
    missing = [name for name in PROBED if _absent(name)]
    if missing:
        return _without_central(prog, f"missing: {', '.join(missing)}")
    try:
        run = load()
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in CENTRAL_PACKAGES:
            raise
        return _without_central(prog, f"missing: {error.name}")
    return run()


def _absent(name: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(name) is None
    except (ImportError, ValueError):  # a broken install of it, or one blocked in sys.modules
        return True


def _without_central(prog: str, why: str) -> int:
    if sys.argv[1:] == ["--version"]:
        from sevents.version import version_line

        print(version_line(prog))
        return int(ExitCode.OK)
    print(f"{hint(prog)}; {why}", file=sys.stderr)
    return int(MISSING_DEPENDENCY)
