"""Layered configuration: precedence, conversion, and one error listing every problem."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from sevents.config import build
from sevents.errors import ConfigError


@dataclass(frozen=True)
class Example:
    url: str
    interval_s: float = 1.0
    retries: int = 3
    verbose: bool = False
    state_dir: Path = Path("/var/lib/example")
    tags: tuple[str, ...] = ()
    limit: int | None = None


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "example.toml"
    path.write_text(text)
    return path


def test_flags_beat_environment_beat_file_beat_defaults(tmp_path: Path) -> None:
    """Each layer overrides the one below it, field by field."""
    file = write(tmp_path, '[example]\nurl = "http://file"\ninterval_s = 5\nretries = 7\n')
    settings = build(
        Example,
        file=file,
        section="example",
        env={"SEVENTS_INTERVAL_S": "2.5", "SEVENTS_URL": "http://env"},
        flags={"url": "http://flag", "verbose": None},
    )
    assert settings == Example(url="http://flag", interval_s=2.5, retries=7)


def test_strings_from_the_environment_are_converted_to_the_declared_types() -> None:
    """Booleans, tuples, paths and optional integers are parsed from environment text."""
    env = {
        "SEVENTS_URL": "u",
        "SEVENTS_VERBOSE": "yes",
        "SEVENTS_TAGS": "a, b,,c",
        "SEVENTS_STATE_DIR": "/tmp/x",
        "SEVENTS_LIMIT": "",
    }
    settings = build(Example, section="example", env=env, flags={})
    assert settings.verbose is True
    assert settings.tags == ("a", "b", "c")
    assert settings.state_dir == Path("/tmp/x")
    assert settings.limit is None


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    """A bad configuration names all its problems, not only the first."""
    file = write(tmp_path, '[example]\nretries = "many"\nbogus = 1\n')
    with pytest.raises(ConfigError) as caught:
        build(Example, file=file, section="example", env={"SEVENTS_VERBOSE": "perhaps"}, flags={})
    text = "\n".join(caught.value.problems)
    assert "url is required" in text
    assert "unknown setting 'bogus'" in text
    assert "expected an integer" in text
    assert "expected true or false" in text
    assert len(caught.value.problems) == 4


def test_validation_problems_are_reported_after_conversion() -> None:
    """A validator sees the built object and its problems become the ConfigError."""

    def validate(settings: Example) -> list[str]:
        return ["interval_s must be positive"] if settings.interval_s <= 0 else []

    with pytest.raises(ConfigError, match="interval_s must be positive"):
        build(Example, section="example", env={}, flags={"url": "u", "interval_s": -1}, validate=validate)


def test_missing_config_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    """A config file that does not exist is reported as a configuration problem."""
    with pytest.raises(ConfigError, match="does not exist"):
        build(Example, file=tmp_path / "nope.toml", section="example", env={}, flags={"url": "u"})


def test_a_misspelt_table_is_a_problem_with_a_suggestion(tmp_path: Path) -> None:
    """A table no program reads would leave its settings silently at their defaults: it is named, with the
    closest table name (or the tables there are); the program's own table is read as before."""
    file = write(tmp_path, '[example]\nurl = "u"\n\n[colector]\nsink = "eventhubs"\n\n[zzz]\n')
    with pytest.raises(ConfigError) as caught:
        build(Example, file=file, section="example", env={}, flags={})
    assert caught.value.problems == [
        f"config file {file}: unknown table [colector]; did you mean [collector]?",
        f"config file {file}: unknown table [zzz]; a config file holds [collector], [approval], [ingest], "
        "[coordinator], [example]",
    ]


def test_settings_outside_any_table_are_a_problem(tmp_path: Path) -> None:
    """Keys before the first table header are named (never their values) with the table they belong in."""
    file = write(tmp_path, 'url = "http://file"\nretries = 7\n')
    with pytest.raises(ConfigError) as caught:
        build(Example, file=file, section="example", env={}, flags={"url": "u"})
    assert caught.value.problems == [
        f"config file {file}: settings 'url', 'retries' are outside any table; "
        "did you mean to write them under [example]?"
    ]


def test_every_program_accepts_the_tables_of_the_others(tmp_path: Path) -> None:
    """One file may hold [collector], [approval] and [ingest]: each program reads its own table, or its defaults
    when the file has none."""
    text = '[collector]\nsink = "local"\n\n[approval]\nevent_types = ["Reboot"]\n\n[ingest]\ndatabase = "d"\n'
    file = write(tmp_path, text + '\n[example]\nurl = "http://file"\n')
    assert build(Example, file=file, section="example", env={}, flags={}).url == "http://file"
    file = write(tmp_path, text)
    assert build(Example, file=file, section="example", env={}, flags={"url": "u"}) == Example(url="u")


def test_a_known_table_nested_in_another_says_where_it_goes(tmp_path: Path) -> None:
    """[example.approval] is not a setting of [example]: the message says to write [approval] instead."""
    file = write(tmp_path, '[example]\nurl = "u"\n\n[example.approval]\nevent_types = ["Reboot"]\n')
    with pytest.raises(ConfigError) as caught:
        build(Example, file=file, section="example", env={}, flags={})
    assert caught.value.problems == [
        f"config file {file}: [example.approval] is a table of its own: write it as [approval], at the top level"
    ]


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "Infinity", "1e999"])
def test_a_number_that_is_not_finite_is_a_problem_from_every_layer(tmp_path: Path, raw: str) -> None:
    """`poll_interval = inf` would never poll again: non-finite numbers are refused like any bad value."""
    toml = raw.lower() if raw in ("nan", "inf", "-inf") else ("inf" if raw == "Infinity" else raw)
    layers: list[dict[str, object]] = [
        {"file": write(tmp_path, f'[example]\nurl = "u"\ninterval_s = {toml}\n'), "env": {}, "flags": {}},
        {"env": {"SEVENTS_INTERVAL_S": raw}, "flags": {"url": "u"}},
        {"env": {}, "flags": {"url": "u", "interval_s": raw}},
    ]
    for layer in layers:
        with pytest.raises(ConfigError, match=r"finite number|expected a number") as raised:
            build(Example, section="example", **layer)  # type: ignore[arg-type]
        assert len(raised.value.problems) == 1


def test_a_config_file_that_is_not_utf8_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "example.toml"
    path.write_bytes(b'[example]\nurl = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        build(Example, file=path, section="example", env={}, flags={})


def test_a_config_file_nested_beyond_reason_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    path = write(tmp_path, "[example]\nurl = " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ConfigError, match="too deeply"):
        build(Example, file=path, section="example", env={}, flags={})
