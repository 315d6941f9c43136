"""What every command line of sevents has in common: no abbreviated flags, --help with examples."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from collector import cli as collector_cli
from dashboards import report
from demo import cli as demo_cli
from ingest import cli as ingest_cli
from simulator import cli as simulator_cli

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
