"""What every command line of sevents has in common: no abbreviated flags, --help with examples, --version."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import sevents
from collector import cli as collector_cli
from dashboards import report
from demo import cli as demo_cli
from ingest import cli as ingest_cli
from ingest.entry import CENTRAL_PACKAGES, HINT
from sevents import version as version_module
from sevents.central import MISSING_DEPENDENCY, hint
from sevents.errors import ExitCode
from sevents.version import DISTRIBUTION, version
from simulator import cli as simulator_cli

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _project() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project: dict[str, Any] = tomllib.load(handle)["project"]
    return project


SCRIPTS = sorted(_project()["scripts"])

Main = Callable[[Sequence[str]], int]


@pytest.mark.parametrize(
    ("main", "argv"),
    [
        (collector_cli.main, ["once", "--imds", "http://127.0.0.1:1", "--state-dir", "/nonexistent"]),
        (ingest_cli.main, ["audit", "counts", "--click", "chdb:///nonexistent"]),
        (report.main, ["--since", "1h", "--click", "chdb:///nonexistent"]),
        (simulator_cli.main, ["--scen", "demo"]),
        (demo_cli.main, ["--work", "/nonexistent"]),
    ],
)
def test_no_command_accepts_an_abbreviated_flag(
    main: Main, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--imds`` is not ``--imds-url``: a prefix is a usage error (exit 2), never a guess."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.parametrize(("main", "argv"), [(collector_cli.main, ["run", "--help"]), (ingest_cli.main, ["--help"])])
def test_help_shows_examples(main: Main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0 and "examples:" in capsys.readouterr().out


def test_every_console_script_is_covered() -> None:
    """The commands of these tests are the ones pyproject.toml installs."""
    assert SCRIPTS == ["sevents-collector", "sevents-demo", "sevents-imds-sim", "sevents-ingest", "sevents-report"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_command_prints_its_version(script: str) -> None:
    """``<command> --version``, the installed entry point itself: ``<command> <version>`` on stdout, exit 0."""
    result = subprocess.run([str(BIN / script), "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{script} {version()}\n", "")


def test_the_version_is_the_installed_projects() -> None:
    """The version is read from the metadata of the distribution pyproject.toml names, and the package's own
    ``__version__`` (the fallback, and the collector's User-Agent) says the same."""
    project = _project()
    assert project["name"] == DISTRIBUTION
    assert version() == project["version"] == sevents.__version__


def test_without_installed_metadata_the_version_is_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """A source checkout that was never installed still answers --version."""
    monkeypatch.setattr(version_module, "DISTRIBUTION", "sevents-not-installed-anywhere")
    assert version() == sevents.__version__


@pytest.mark.parametrize(
    ("main", "prog"),
    [
        (collector_cli.main, "sevents-collector"),
        (ingest_cli.main, "sevents-ingest"),
        (report.main, "sevents-report"),
        (simulator_cli.main, "sevents-imds-sim"),
        (demo_cli.main, "sevents-demo"),
    ],
)
def test_version_wins_over_required_arguments(main: Main, prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--version`` needs no subcommand, no configuration and nothing reachable."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"{prog} {version()}\n"


# The central side's commands as a collector-only install runs them: none of the central packages can be imported.
WITHOUT_CENTRAL = """
import importlib, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
entry, sys.argv = sys.argv[2], sys.argv[3:]
sys.exit(importlib.import_module(entry).main())
"""
CENTRAL_SCRIPTS = [
    pytest.param("sevents-ingest", "ingest.entry", ["audit", "counts"], id="ingest"),
    pytest.param("sevents-report", "dashboards.entry", ["--since", "1h"], id="report"),
    pytest.param("sevents-demo", "demo.entry", ["--work", "/nonexistent"], id="demo"),
]


def _without_central(entry: str, prog: str, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", WITHOUT_CENTRAL, ",".join(CENTRAL_PACKAGES), entry, prog, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(("prog", "entry", "argv"), CENTRAL_SCRIPTS)
def test_central_commands_answer_on_a_collector_only_install(prog: str, entry: str, argv: list[str]) -> None:
    """Without the central side, ``--version`` still answers; anything else (``--help`` too) is one line with the
    install hint and exit 1, the exit code of a missing dependency, and no traceback."""
    answered = _without_central(entry, prog, "--version")
    assert (answered.returncode, answered.stdout, answered.stderr) == (0, f"{prog} {version()}\n", "")
    for args in (argv, ["--help"], []):
        refused = _without_central(entry, prog, *args)
        assert refused.returncode == MISSING_DEPENDENCY == ExitCode.FAILED, refused.stderr
        assert refused.stdout == "" and len(refused.stderr.splitlines()) == 1, refused.stderr
        assert refused.stderr.startswith(hint(prog) + "; missing: "), refused.stderr
        assert "pip install 'sevents[central]'" in refused.stderr and "Python 3.11" in refused.stderr
    assert hint("sevents-ingest") == HINT


def test_central_scripts_point_at_their_entry_wrappers() -> None:
    """pyproject.toml installs the central side's commands through the wrappers tested above."""
    scripts = _project()["scripts"]
    assert {scripts[p.values[0]] for p in CENTRAL_SCRIPTS} == {f"{p.values[1]}:main" for p in CENTRAL_SCRIPTS}


ENTRY_IMPORTS = """
import sys
import dashboards.entry, demo.entry, ingest.entry
heavy = sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[1].split(",") or m in sys.argv[2].split(","))
print(",".join(heavy))
"""


def test_entry_wrappers_import_nothing_heavy() -> None:
    """Importing the wrappers loads neither the commands they run nor any central package: that happens in main."""
    commands = "ingest.cli,dashboards.report,demo.cli"
    command = [sys.executable, "-c", ENTRY_IMPORTS, ",".join(CENTRAL_PACKAGES), commands]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == ""
