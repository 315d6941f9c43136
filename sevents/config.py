"""Layered configuration: defaults < TOML file section < SEVENTS_* environment < command-line flags.

Each program declares its settings as a frozen dataclass whose fields have simple types (str, int,
float, bool, Path, tuple[str, ...], or Optional of those). ``build`` fills it from the layers,
converts and validates every value, and raises one ConfigError listing every problem. A config file holds only
the programs' tables (``TABLES``): a misspelt table or a setting outside any table is a problem, not a default.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
import types
import typing
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from sevents.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # the collector runs on 3.9 and 3.10 too
    import tomli as tomllib

# ``Path | None`` written in an evaluated annotation is a types.UnionType from 3.10 on; 3.9 has typing.Union only.
_UNIONS: tuple[Any, ...] = (typing.Union, getattr(types, "UnionType", typing.Union))

T = TypeVar("T")

# The tables of a config file: one file may serve every program, each reading its own table (the collector reads
# two: its settings and its approval policy, collector.approval.SECTION). Any other table is a mistake.
TABLES: Final = ("collector", "approval", "ingest", "coordinator")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_name(prefix: str, field: str) -> str:
    """The environment variable that sets ``field``: ``SEVENTS_`` + the field name in capitals."""
    return f"{prefix}{field.upper()}"


def read_toml_document(path: Path | None) -> tuple[dict[str, Any], list[str]]:
    """The whole TOML document of ``path`` (empty when None), and the problem reading it."""
    if path is None:
        return {}, []
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle), []
    except FileNotFoundError:
        return {}, [f"config file {path} does not exist"]
    except (OSError, tomllib.TOMLDecodeError) as error:
        return {}, [f"config file {path} cannot be read: {error}"]
    except UnicodeDecodeError as error:
        return {}, [f"config file {path} is not UTF-8 text (byte {error.start}), as TOML must be"]
    except RecursionError:
        return {}, [f"config file {path} nests arrays or tables too deeply to be a config file"]


def read_toml_section(path: Path | None, section: str) -> tuple[dict[str, Any], list[str]]:
    """The ``[section]`` table of a TOML file (empty when it has none), and every problem with the file's layout."""
    document, problems = read_toml_document(path)
    if problems or path is None:
        return {}, problems
    problems = layout_problems(path, document, section)
    table = document.get(section, {})
    if not isinstance(table, dict):
        return {}, [*problems, f"config file {path}: [{section}] is not a table"]
    return table, problems


def layout_problems(path: Path, document: Mapping[str, Any], section: str) -> list[str]:
    """What is wrong with the top level of a config file read for ``[section]``: a table no program reads (a
    misspelt header, whose settings would silently be defaults) and settings outside any table. One file may
    hold every program's table (``TABLES``); each program reads its own and accepts the others."""
    known = (*TABLES, section) if section not in TABLES else TABLES
    problems = [
        f"config file {path}: unknown table [{name}]{_table_hint(name, known)}"
        for name, value in document.items()
        if isinstance(value, dict) and name not in known
    ]
    # A known table's name with a value that is not a table is its own reader's problem (``[x] is not a table``).
    loose = [name for name, value in document.items() if not isinstance(value, dict) and name not in known]
    if loose:
        noun, verb, them = ("setting", "is", "it") if len(loose) == 1 else ("settings", "are", "them")
        problems.append(
            f"config file {path}: {noun} {', '.join(repr(name) for name in loose)} {verb} outside any table; "
            f"did you mean to write {them} under [{section}]?"
        )
    return problems


def _table_hint(name: str, known: Collection[str]) -> str:
    hint = did_you_mean(name, known, show=lambda table: f"[{table}]")
    return hint or f"; a config file holds {', '.join(f'[{table}]' for table in known)}"


def build(
    cls: type[T],
    *,
    file: Path | None = None,
    section: str,
    env: Mapping[str, str],
    flags: Mapping[str, Any],
    prefix: str = "SEVENTS_",
    validate: Callable[[T], list[str]] | None = None,
) -> T:
    """Build ``cls`` from the layers; raise ConfigError listing every problem."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    from_file, problems = read_toml_section(file, section)
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    problems += [
        f"config file {file}: [{section}.{key}] is a table of its own: write it as [{key}], at the top level"
        if key in TABLES and key != section and isinstance(from_file[key], dict)
        else f"config file {file}: unknown setting {key!r}{did_you_mean(key, known)}"
        for key in from_file
        if key not in known
    ]
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        name = field.name
        raw: Any = dataclasses.MISSING
        origin = ""
        if flags.get(name) is not None:
            raw, origin = flags[name], f"--{name.replace('_', '-')}"
        elif env_name(prefix, name) in env:
            raw, origin = env[env_name(prefix, name)], env_name(prefix, name)
        elif name in from_file:
            raw, origin = from_file[name], f"{file} [{section}] {name}"
        if raw is dataclasses.MISSING:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                problems.append(f"{name} is required (flag --{name.replace('_', '-')} or {env_name(prefix, name)})")
            continue
        try:
            values[name] = convert(raw, hints[name])
        except (TypeError, ValueError) as error:
            problems.append(f"{origin}: {error}")
    # Every problem in one message: the values that converted are validated too, the others at their defaults.
    try:
        settings = cls(**values)
    except TypeError:  # a required setting is missing: already listed
        raise ConfigError(problems) from None
    if validate is not None:
        problems += [p for p in validate(settings) if p not in problems]
    if problems:
        raise ConfigError(problems)
    return settings


def did_you_mean(word: str, choices: Collection[str], show: Callable[[str], str] = repr) -> str:
    """``"; did you mean NAME?"`` for the closest of ``choices`` to a misspelt ``word`` (shown by ``show``), or
    ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {show(close[0])}?" if close else ""


def one_of(name: str, value: str, choices: Collection[str]) -> list[str]:
    """The problem with a setting that must be one of ``choices`` (none when it is)."""
    if value in choices:
        return []
    return [f"{name} must be one of {', '.join(choices)}, got {value!r}{did_you_mean(value, choices)}"]


def convert(raw: Any, hint: Any) -> Any:
    """Convert a flag, environment string or TOML value to the declared type."""
    origin = typing.get_origin(hint)
    if origin in _UNIONS:
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if raw is None or (isinstance(raw, str) and raw == "" and len(options) == 1 and options[0] is not str):
            return None
        return convert(raw, options[0])
    if origin is tuple:
        (item,) = typing.get_args(hint)[:1]
        parts = [p.strip() for p in raw.split(",") if p.strip()] if isinstance(raw, str) else list(raw)
        return tuple(convert(p, item) for p in parts)
    if hint is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"expected true or false, got {raw!r}")
    if hint is int:
        # a bool is an int to Python, and int(2.7) is 2: a value that is not a whole number is refused, not cut
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError(f"expected an integer, got {raw!r}")
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise ValueError(f"expected an integer, got {raw!r}") from None
    if hint is float:
        try:
            number = float(raw)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"expected a number, got {raw!r}") from None
        if not math.isfinite(number):  # nan and inf pass float(); poll_interval = inf would never poll again
            raise ValueError(f"expected a finite number, got {raw!r}")
        return number
    if hint is Path:
        return Path(str(raw)).expanduser()
    if hint is str:
        if not isinstance(raw, (str, int, float)):
            raise ValueError(f"expected text, got {raw!r}")
        return str(raw)
    raise TypeError(f"unsupported setting type {hint!r}")


def split_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6; port 0 picks a free one) -> (host, port); ValueError otherwise."""
    host, sep, port = text.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:9464 or 0.0.0.0:9464), got {text!r}")
    return host, int(port)


def host_port_problems(name: str, text: str) -> list[str]:
    """The problem with an optional ``HOST:PORT`` setting, if any (empty means not set)."""
    if not text:
        return []
    try:
        split_host_port(text)
    except ValueError as error:
        return [f"{name}: {error}"]
    return []


def error_lines(prog: str, error: ConfigError) -> str:
    """What a command prints for ``error``: one line per problem, each ``PROG: invalid configuration: PROBLEM``
    (no header line of its own, so a log shipper or ``head -1`` sees the whole of each problem)."""
    return "\n".join(f"{prog}: invalid configuration: {problem}" for problem in error.problems)
