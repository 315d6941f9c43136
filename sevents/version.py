"""``--version`` for every command: ``<prog> <version>`` from the installed distribution's metadata.

Looked up only when asked for (``importlib.metadata`` scans ``sys.path`` and loads ``email``, ``zipfile`` and
more: nothing a collector that polls should carry), so adding the flag costs a command nothing. Without
installed metadata (a source checkout on ``PYTHONPATH``) the version is ``sevents.__version__``, which a test
keeps equal to ``pyproject.toml``'s. Importable on Python 3.9, like the rest of the collector side.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Optional, Union

import sevents

DISTRIBUTION = "sevents"  # [project] name in pyproject.toml


def version() -> str:
    """The installed distribution's version, else the package's own ``__version__``."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return sevents.__version__


def version_line(prog: str) -> str:
    """What ``--version`` prints: ``<prog> <version>``."""
    return f"{prog} {version()}"


class VersionAction(argparse.Action):
    """``action=VersionAction``: print ``<prog> <version>`` on stdout and exit 0, like argparse's own
    ``action="version"`` but reading the version only when the flag is given."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str = argparse.SUPPRESS,
        default: Any = argparse.SUPPRESS,
        help: str = "print the program's name and version and exit",
    ) -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        sys.stdout.write(version_line(parser.prog) + "\n")
        sys.stdout.flush()
        parser.exit(0)


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the shared ``--version`` flag."""
    parser.add_argument("--version", action=VersionAction)
