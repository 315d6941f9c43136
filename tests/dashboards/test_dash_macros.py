"""The Grafana macro expander and template service model against the plugin's documented expansions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboards.macros import MacroError, QueryContext, expand
from dashboards.templating import ALL, Selection, apply, apply_conditional_all, replace_variables

# The time range the plugin's own tests and docs use.
FROM = datetime(2014, 11, 12, 11, 45, 26, 371000, tzinfo=UTC)
TO = datetime(2015, 11, 12, 11, 45, 26, 371000, tzinfo=UTC)
CTX = QueryContext(FROM, TO, timedelta(seconds=20))


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("$__timeFilter(time)", "time >= toDateTime(1415792726) AND time <= toDateTime(1447328726)"),
        (
            "$__timeFilter_ms(time)",
            "time >= fromUnixTimestamp64Milli(1415792726371) AND time <= fromUnixTimestamp64Milli(1447328726371)",
        ),
        ("$__dateFilter(date)", "date >= toDate('2014-11-12') AND date <= toDate('2015-11-12')"),
        (
            "$__dt(d, t)",
            "(d >= toDate('2014-11-12') AND d <= toDate('2015-11-12')) AND "
            "(t >= toDateTime(1415792726) AND t <= toDateTime(1447328726))",
        ),
        ("$__timeFrom(time)", "time >= toDateTime(1415792726)"),
        ("$__timeTo(time)", "time <= toDateTime(1447328726)"),
        ("$__timeGroup(column, 5m)", "toStartOfInterval(toDateTime(column), INTERVAL 300 second)"),
        ("$__timeGroup(column, '1h30m')", "toStartOfInterval(toDateTime(column), INTERVAL 5400 second)"),
        ("$__fromTime", "toDateTime(1415792726)"),
        ("$__toTime", "toDateTime(1447328726)"),
        ("$__fromTime_ms", "fromUnixTimestamp64Milli(1415792726371)"),
        ("$__toTime_ms", "fromUnixTimestamp64Milli(1447328726371)"),
        ("$__interval_s", "20"),
        ("$__timeInterval(column)", "toStartOfInterval(toDateTime(column), INTERVAL 20 second)"),
        ("$__timeInterval_ms(column)", "toStartOfInterval(toDateTime64(column, 3), INTERVAL 20000 millisecond)"),
    ],
)
def test_documented_expansions(sql: str, expected: str) -> None:
    """Each macro expands to the output the plugin's query-editor documentation shows."""
    assert expand(sql, CTX) == expected


def test_interval_is_at_least_one_second() -> None:
    """A sub-second interval rounds up to one second, as the plugin's math.Max(…, 1) does."""
    ctx = QueryContext(FROM, TO, timedelta(milliseconds=200))
    assert expand("$__interval_s $__timeInterval(t)", ctx) == ("1 toStartOfInterval(toDateTime(t), INTERVAL 1 second)")


def test_whole_words_and_strings() -> None:
    """`$__timeFilter` never matches the start of `$__timeFilter_ms`; quoted text and unknown macros stay."""
    sql = "SELECT '$__fromTime', `$__toTime` FROM t WHERE $__timeFilter_ms(ts) AND $__unknown(x) AND f(a, (b))"
    assert expand(sql, CTX) == (
        "SELECT '$__fromTime', `$__toTime` FROM t WHERE ts >= fromUnixTimestamp64Milli(1415792726371) "
        "AND ts <= fromUnixTimestamp64Milli(1447328726371) AND $__unknown(x) AND f(a, (b))"
    )


def test_arguments_split_at_outer_level_and_trimmed() -> None:
    """Commas inside nested brackets belong to one argument; arguments lose surrounding spaces."""
    assert expand("$__timeFilter(  coalesce(a, b)  )", CTX) == (
        "coalesce(a, b) >= toDateTime(1415792726) AND coalesce(a, b) <= toDateTime(1447328726)"
    )


@pytest.mark.parametrize(
    "sql",
    ["$__timeFilter(a, b)", "$__timeFilter", "$__timeFilter(a", "x -- $__fromTime", "$__timeFilter($__fromTime)"],
)
def test_rejected(sql: str) -> None:
    """Wrong argument counts, unclosed brackets, comments and nested macros raise MacroError."""
    with pytest.raises(MacroError):
        expand(sql, CTX)


@given(st.text(alphabet=st.characters(blacklist_characters="$'`\"-/"), max_size=80))
def test_text_without_macros_is_unchanged(sql: str) -> None:
    """SQL holding no macro, quote or comment passes through unchanged."""
    assert expand(sql, CTX) == sql


@given(st.datetimes(timezones=st.just(UTC), min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1)))
def test_from_time_is_floor_of_unix_seconds(moment: datetime) -> None:
    """`$__fromTime` renders the whole Unix seconds of the range start, like Go's time.Unix()."""
    ctx = QueryContext(moment, moment + timedelta(hours=1))
    seconds = int(expand("$__fromTime", ctx)[len("toDateTime(") : -1])
    assert datetime.fromtimestamp(seconds, UTC) <= moment < datetime.fromtimestamp(seconds + 1, UTC)


FD = Selection(values=("0", "2"), options=("0", "1", "2"))


def test_conditional_all_matches_plugin_tests() -> None:
    """The plugin's own examples: All becomes 1=1, a selection keeps the condition, all occurrences resolve."""
    sql = "select stuff from table where $__conditionalAll(fieldVal in ($fieldVal), $fieldVal) and " + (
        "$__conditionalAll(fieldVal in ($fieldVal2), $fieldVal2);"
    )
    variables = {"fieldVal": Selection(values=("val1", "val2")), "fieldVal2": Selection(values=(ALL,))}
    assert apply_conditional_all(sql, variables) == "select stuff from table where fieldVal in ($fieldVal) and 1=1;"


def test_conditional_all_with_braces_and_empty() -> None:
    """`${var}` is recognised as the variable and an empty selection behaves like All."""
    sql = "WHERE $__conditionalAll(vm IN (${vm}), ${vm})"
    assert apply_conditional_all(sql, {"vm": Selection(values=())}) == "WHERE 1=1"
    assert apply_conditional_all(sql, {"vm": Selection(values=("a",))}) == "WHERE vm IN (${vm})"


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (Selection(values=("vm-1",)), "vm IN ('vm-1')"),
        (Selection(values=("vm-1", "vm-2")), "vm IN ('vm-1','vm-2')"),
        (Selection(values=(ALL,), options=("a", "b", "c")), "vm IN ('a','b','c')"),
        (Selection(values=("vm-1",), multi=False), "vm IN (vm-1)"),
        (Selection(values=(ALL,), options=("a",), all_value="any"), "vm IN (any)"),
    ],
)
def test_plugin_formatter(selection: Selection, expected: str) -> None:
    """Lists are single-quoted and comma-joined; a single-value variable's string is inserted raw."""
    assert replace_variables("vm IN ($vm)", {"vm": selection}) == expected


def test_formats_and_unknown_names() -> None:
    """Named formats apply; `[[var]]` works; names that are not variables (macros) stay for the backend."""
    sql = "${fd:singlequote} ${fd:csv} [[fd]] $__timeFilter(t) $other"
    assert replace_variables(sql, {"fd": FD}) == "'0','2' 0,2 '0','2' $__timeFilter(t) $other"


def test_frontend_then_backend() -> None:
    """conditionalAll first, then variables, then macros: the order Grafana applies them in."""
    sql = "SELECT 1 FROM t WHERE $__timeFilter(ts) AND $__conditionalAll(toString(fd) IN ($fd), $fd)"
    assert expand(apply(sql, {"fd": FD}), CTX) == (
        "SELECT 1 FROM t WHERE ts >= toDateTime(1415792726) AND ts <= toDateTime(1447328726) "
        "AND toString(fd) IN ('0','2')"
    )
    all_fd = Selection(values=(ALL,), options=FD.options)
    assert apply(sql, {"fd": all_fd}).endswith("AND 1=1")


VALUES = st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=8), min_size=1)


@given(VALUES)
def test_multi_value_round_trips(values: list[str]) -> None:
    """Any selection of plain names becomes a quoted list that splits back into exactly those names."""
    out = replace_variables("$vm", {"vm": Selection(values=tuple(values))})
    assert [v[1:-1] for v in out.split(",")] == values and all(v[0] == v[-1] == "'" for v in out.split(","))


def test_conditional_all_keeps_unknown_variables() -> None:
    """A condition on a variable the dashboard does not define stays as written (the plugin cannot judge it)."""
    assert apply_conditional_all("$__conditionalAll(a IN ($nope), $nope)", {}) == "a IN ($nope)"


def test_sqlstring_format() -> None:
    """Grafana's sqlstring doubles single quotes and backslash-escapes double quotes, per value."""
    assert replace_variables("${e:sqlstring}", {"e": Selection(values=("a'b",), multi=False)}) == "'a''b'"
    assert replace_variables("${e:sqlstring}", {"e": Selection(values=("x", 'y"z'))}) == "'x','y\\\"z'"
