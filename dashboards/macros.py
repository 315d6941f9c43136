"""Expands the ClickHouse data source plugin's server-side ``$__`` macros exactly as the plugin does.

Tests use it to run a panel's SQL the way Grafana would; nothing in production calls it.

Theory of operation (grafana-clickhouse-datasource 4.19+, ``pkg/macros/macros.go`` on the macropro engine):
a macro is ``$__name`` followed by an optional parenthesised argument list; arguments split on commas at
the outer bracket level and are whitespace-trimmed. Names match whole words only, so ``$__timeFilter``
never eats the start of ``$__timeFilter_ms``. Unknown names stay as written. String literals and quoted
identifiers are skipped. Times become ``toDateTime(<unix seconds>)`` (or
``fromUnixTimestamp64Milli(<ms>)`` for the ``_ms`` forms); the interval is at least one second.

Two things the plugin also does are refused here instead, because our queries must not depend on them:
SQL comments (the plugin strips them first) and macros nested in another macro's arguments (expanded only
since 4.20; we pin 4.19 as the minimum).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


class MacroError(ValueError):
    """A query the plugin would reject (bad argument count, unclosed bracket) or that we refuse."""


@dataclass(frozen=True)
class QueryContext:
    """What the plugin's backend knows about one query: the panel's time range and interval."""

    time_from: datetime
    time_to: datetime
    interval: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        if self.time_from.tzinfo is None or self.time_to.tzinfo is None:
            raise ValueError("the time range must be timezone-aware")


def _unix(moment: datetime) -> int:
    # Go's time.Unix() floors to whole seconds; so does math.floor on a POSIX timestamp.
    return math.floor(moment.astimezone(UTC).timestamp())


def _unix_ms(moment: datetime) -> int:
    return math.floor(moment.astimezone(UTC).timestamp() * 1000)


def _date_time(moment: datetime) -> str:
    return f"toDateTime({_unix(moment)})"


def _date_time_ms(moment: datetime) -> str:
    return f"fromUnixTimestamp64Milli({_unix_ms(moment)})"


def _date(moment: datetime) -> str:
    return f"toDate('{moment.astimezone(UTC):%Y-%m-%d}')"


def _one(name: str, args: list[str]) -> str:
    if len(args) != 1:
        raise MacroError(f"$__{name} expected 1 argument(s), received {len(args)}")
    return args[0]


def _interval_seconds(ctx: QueryContext) -> int:
    return int(max(ctx.interval.total_seconds(), 1))


def _go_duration_seconds(text: str) -> int:
    """Whole seconds of a Go duration string such as ``5m``, ``1h30m`` or ``90s`` (what $__timeGroup takes)."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    total, number = 0.0, ""
    index = 0
    while index < len(text):
        char = text[index]
        if char.isdigit() or char == ".":
            number += char
            index += 1
            continue
        unit = "ms" if text.startswith("ms", index) else char
        if unit not in units or not number:
            raise MacroError(f"$__timeGroup: invalid interval {text!r}")
        total += float(number) * units[unit]
        number = ""
        index += len(unit)
    if number or total <= 0:
        raise MacroError(f"$__timeGroup: invalid interval {text!r}")
    return round(total)


def _time_group(ctx: QueryContext, args: list[str]) -> str:
    if len(args) != 2:
        raise MacroError(f"$__timeGroup expected 2 argument(s), received {len(args)}")
    seconds = _go_duration_seconds(args[1].strip().strip("'\""))
    return f"toStartOfInterval(toDateTime({args[0]}), INTERVAL {seconds} second)"


def _date_time_filter(ctx: QueryContext, args: list[str]) -> str:
    if len(args) != 2:
        raise MacroError(f"$__dateTimeFilter expected 2 argument(s), received {len(args)}")
    day, moment = args
    f, t = ctx.time_from, ctx.time_to
    return (
        f"({day} >= {_date(f)} AND {day} <= {_date(t)}) AND "
        f"({moment} >= {_date_time(f)} AND {moment} <= {_date_time(t)})"
    )


Macro = Callable[[QueryContext, list[str]], str]

MACROS: dict[str, Macro] = {
    "fromTime": lambda c, a: _date_time(c.time_from),
    "toTime": lambda c, a: _date_time(c.time_to),
    "fromTime_ms": lambda c, a: _date_time_ms(c.time_from),
    "toTime_ms": lambda c, a: _date_time_ms(c.time_to),
    "timeFilter": lambda c, a: (
        f"{(col := _one('timeFilter', a))} >= {_date_time(c.time_from)} AND {col} <= {_date_time(c.time_to)}"
    ),
    "timeFilter_ms": lambda c, a: (
        f"{(col := _one('timeFilter_ms', a))} >= {_date_time_ms(c.time_from)} AND {col} <= {_date_time_ms(c.time_to)}"
    ),
    "dateFilter": lambda c, a: (
        f"{(col := _one('dateFilter', a))} >= {_date(c.time_from)} AND {col} <= {_date(c.time_to)}"
    ),
    "dateTimeFilter": _date_time_filter,
    "dt": _date_time_filter,
    "timeFrom": lambda c, a: f"{_one('timeFrom', a)} >= {_date_time(c.time_from)}",
    "timeTo": lambda c, a: f"{_one('timeTo', a)} <= {_date_time(c.time_to)}",
    "timeGroup": _time_group,
    "timeInterval": lambda c, a: (
        f"toStartOfInterval(toDateTime({_one('timeInterval', a)}), INTERVAL {_interval_seconds(c)} second)"
    ),
    "timeInterval_ms": lambda c, a: (
        f"toStartOfInterval(toDateTime64({_one('timeInterval_ms', a)}, 3), "
        f"INTERVAL {max(int(c.interval.total_seconds() * 1000), 1)} millisecond)"
    ),
    "interval_s": lambda c, a: str(_interval_seconds(c)),
}


def _skip_quoted(sql: str, start: int) -> int:
    """Index just past the quoted run opening at ``start`` (backslash escapes, as ClickHouse reads them)."""
    quote = sql[start]
    index = start + 1
    while index < len(sql):
        if sql[index] == "\\":
            index += 2
            continue
        if sql[index] == quote:
            return index + 1
        index += 1
    raise MacroError(f"unterminated {quote} quote at offset {start}")


def _parse_args(sql: str, start: int) -> tuple[list[str], int]:
    """The trimmed arguments of the bracket opening at ``start`` and the index just past its close."""
    depth, args, current = 0, [], start + 1
    index = start
    while index < len(sql):
        char = sql[index]
        if char in "'`\"":
            index = _skip_quoted(sql, index)
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                args.append(sql[current:index].strip())
                return args, index + 1
        elif char == "," and depth == 1:
            args.append(sql[current:index].strip())
            current = index + 1
        index += 1
    raise MacroError("failed to parse macro arguments (missing close bracket?)")


def _name_at(sql: str, start: int) -> str:
    end = start
    while end < len(sql) and (sql[end].isalnum() or sql[end] == "_"):
        end += 1
    return sql[start:end]


def expand(sql: str, ctx: QueryContext) -> str:
    """``sql`` with every known ``$__`` macro replaced by its ClickHouse expression."""
    out: list[str] = []
    index = 0
    while index < len(sql):
        char = sql[index]
        if char in "'`\"":
            end = _skip_quoted(sql, index)
            out.append(sql[index:end])
            index = end
            continue
        if sql.startswith("--", index) or sql.startswith("/*", index):
            raise MacroError(f"SQL comment at offset {index}: keep comments out of panel queries")
        if not sql.startswith("$__", index):
            out.append(char)
            index += 1
            continue
        name = _name_at(sql, index + 3)
        macro = MACROS.get(name)
        end = index + 3 + len(name)
        if macro is None:
            out.append(sql[index:end])
            index = end
            continue
        args: list[str] = []
        if end < len(sql) and sql[end] == "(":
            args, end = _parse_args(sql, end)
            if any("$__" in arg for arg in args):
                raise MacroError(f"$__{name}: macros nested in arguments need plugin 4.20+")
        out.append(macro(ctx, args))
        index = end
    return "".join(out)
