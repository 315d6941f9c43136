"""The ingest's config file: a misspelt table or settings outside any table are refused with a suggestion."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest import cli
from ingest.settings import load
from sevents.errors import ConfigError


def _problems(stderr: str) -> list[str]:
    """The problems of an "invalid configuration" message: one line each, nothing else printed (no traceback)."""
    prefix = "sevents-ingest: invalid configuration: "
    lines = stderr.splitlines()
    assert lines and all(line.startswith(prefix) for line in lines), stderr
    return [line.removeprefix(prefix) for line in lines]


def test_a_misspelt_table_is_refused_with_a_suggestion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """[injest] was silently ignored (an ingest on its defaults, reading the local outbox instead of Event Hubs);
    now every command refuses it, exit 2, one line naming the table to write."""
    config = tmp_path / "ingest.toml"
    config.write_text('[injest]\nsource = "eventhubs"\neventhubs_name = "hub"\n')
    for command in (["migrate"], ["run"], ["audit", "counts"]):
        assert cli.main([*command, "--config", str(config)]) == 2
        assert _problems(capsys.readouterr().err) == [
            f"config file {config}: unknown table [injest]; did you mean [ingest]?"
        ]


def test_settings_outside_any_table_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Keys with no table are named, with the table to write them under."""
    config = tmp_path / "ingest.toml"
    config.write_text('source = "eventhubs"\ndatabase = "fleet"\n')
    assert cli.main(["migrate", "--config", str(config)]) == 2
    assert _problems(capsys.readouterr().err) == [
        f"config file {config}: settings 'source', 'database' are outside any table; "
        "did you mean to write them under [ingest]?"
    ]


def test_the_collectors_tables_are_accepted_and_not_read(tmp_path: Path) -> None:
    """A file holding the collector's tables too is the ingest's [ingest] alone; one with no [ingest] is defaults."""
    config = tmp_path / "sevents.toml"
    config.write_text(
        '[collector]\nsink = "eventhubs"\n\n[approval]\nevent_types = ["Reboot"]\n\n[ingest]\ndatabase = "f"\n'
    )
    assert load(file=config, env={}, flags={}).database == "f"
    config.write_text('[collector]\npoll_interval = 2\n\n[approval]\nevent_types = ["Reboot"]\n')
    assert load(file=config, env={}, flags={}).database == "sevents"


def test_a_table_no_program_reads_names_the_tables_there_are(tmp_path: Path) -> None:
    """With nothing close to suggest, the message lists the tables a config file may hold."""
    config = tmp_path / "ingest.toml"
    config.write_text("[clickhouse]\nurl = 1\n")
    with pytest.raises(ConfigError, match=r"unknown table \[clickhouse\]; a config file holds \[collector\], "):
        load(file=config, env={}, flags={})
