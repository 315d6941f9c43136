"""Applies dashboard template variables to panel SQL exactly as Grafana and the ClickHouse plugin's frontend do.

Tests use it to run a panel's SQL the way Grafana would; nothing in production calls it.

Theory of operation (grafana-clickhouse-datasource ``CHDatasource.applyTemplateVariables``): first
``$__conditionalAll(condition, $var)`` is resolved, last occurrence first: it becomes ``1=1`` when the
variable's current value, joined with commas, is empty or ``$__all``, otherwise the condition as written.
Then Grafana's template service replaces ``$var``, ``${var}``, ``${var:format}`` and ``[[var]]``: the plugin's
formatter quotes a list as ``'a','b'`` and leaves a single string as it is; a multi-value variable's
value is always a list, so one selected value is still quoted. "All" without a custom all-value stands
for every option. Names that are not variables (``$__timeFilter``) are left for the backend macros.

Named formats follow Grafana's format registry (``formatRegistry.ts`` of @grafana/scenes, the same functions
as the older template service): ``singlequote`` escapes only ``'`` (as ``\'``), ``sqlstring`` doubles ``'``
and escapes ``"``, neither touches a backslash; ``percentencode`` is encodeURIComponent plus ``!'()*``, and a
list is joined as a glob, ``{a,b}``, before it is encoded. The plugin swaps the ``$__conditionalAll`` text with
JavaScript's ``String.replace``, so ``$&``, ``$'``, ``$` `` and ``$$`` in a condition are expanded as there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

ALL = "$__all"

# Grafana's variable reference syntax (public/app/features/variables/utils.ts).
_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}")
_CONDITIONAL_VAR = re.compile(r"(?<=\$\{)\w+(?=\})|(?<=\$)\w+")
_CONDITIONAL = "$__conditionalAll("


class TemplateError(ValueError):
    """A variable reference or selection Grafana could not have produced."""


@dataclass(frozen=True)
class Selection:
    """A template variable's current selection: chosen values (or ``(ALL,)``) and all its options."""

    values: tuple[str, ...]
    options: tuple[str, ...] = ()
    multi: bool = True
    all_value: str | None = None

    @property
    def is_all(self) -> bool:
        return self.values == (ALL,)

    def current_value(self) -> str | list[str]:
        """The variable's ``current.value`` as the dashboard model holds it."""
        if self.multi:
            return list(self.values)
        if len(self.values) != 1:
            raise TemplateError("a single-value variable holds exactly one value")
        return self.values[0]

    def substituted(self) -> str | list[str]:
        """The value the template service hands to the formatter."""
        if not self.is_all:
            return self.current_value()
        if self.all_value is not None:
            return self.all_value
        return list(self.options)


def _current_text(selection: Selection) -> str:
    value = selection.current_value()
    # JavaScript's Array.prototype.toString joins with commas.
    return ",".join(value) if isinstance(value, list) else value


def _macro_args(sql: str, open_index: int) -> list[str]:
    """The plugin's getMacroArgs: untrimmed arguments split on commas at bracket depth one."""
    args: list[str] = []
    depth, last = 0, open_index + 1
    for index in range(open_index, len(sql)):
        char = sql[index]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 1:
            args.append(sql[last:index])
            last = index + 1
        if char in "()," and depth == 0:
            args.append(sql[last:index])
            return args
    return []


def apply_conditional_all(sql: str, variables: Mapping[str, Selection]) -> str:
    """Resolve every ``$__conditionalAll(condition, $var)``, the last one first, as the plugin does."""
    index = sql.rfind(_CONDITIONAL)
    while index != -1:
        params = _macro_args(sql, index + len(_CONDITIONAL) - 1)
        if len(params) != 2:
            return sql
        phrase = params[0]
        found = _CONDITIONAL_VAR.search(params[1].strip())
        if found and found.group(0) in variables and _current_text(variables[found.group(0)]) in ("", ALL):
            phrase = "1=1"
        sql = _js_replace_first(sql, f"{_CONDITIONAL}{params[0]},{params[1]})", phrase)
        index = sql.rfind(_CONDITIONAL)
    return sql


def _js_replace_first(text: str, search: str, replacement: str) -> str:
    """JavaScript's ``text.replace(search, replacement)`` with a string pattern: the first occurrence, and the
    replacement's ``$$``, ``$&``, ``$` `` and ``$'`` patterns expanded (a string pattern has no groups, so
    ``$1`` and ``$<name>`` stay as written)."""
    at = text.find(search)
    if at == -1:
        return text
    before, after = text[:at], text[at + len(search) :]
    patterns = {"$": "$", "&": search, "`": before, "'": after}
    out: list[str] = []
    index = 0
    while index < len(replacement):
        char = replacement[index]
        if char == "$" and index + 1 < len(replacement) and replacement[index + 1] in patterns:
            out.append(patterns[replacement[index + 1]])
            index += 2
            continue
        out.append(char)
        index += 1
    return before + "".join(out) + after


def _plugin_format(value: str | list[str]) -> str:
    if isinstance(value, list):
        return "'" + "','".join(value) + "'"
    return value


def _encode_uri_component_strict(text: str) -> str:
    """Grafana's encodeURIComponentStrict: UTF-8 percent-encoding of all but [A-Za-z0-9-_.~], hex upper case."""
    return quote(text, safe="-_.~")


def _named_format(value: str | list[str], fmt: str) -> str:
    values = value if isinstance(value, list) else [value]
    if fmt == "singlequote":
        return ",".join("'" + v.replace("'", "\\'") + "'" for v in values)
    if fmt == "sqlstring":
        return ",".join("'" + v.replace("'", "''").replace('"', '\\"') + "'" for v in values)
    if fmt == "doublequote":
        return ",".join('"' + v.replace('"', '\\"') + '"' for v in values)
    if fmt == "percentencode":
        # encodeURIComponent plus !'()*: what is left is [A-Za-z0-9-_.~] and %XX, never a quote or a backslash.
        # A list is first joined as a glob, "{a,b}" (even of one value), then encoded as one string.
        return _encode_uri_component_strict("{" + ",".join(value) + "}" if isinstance(value, list) else value)
    if fmt == "csv":
        return ",".join(values)
    if fmt == "raw":
        return ",".join(values) if isinstance(value, list) else value
    raise TemplateError(f"variable format {fmt!r} is not modelled here")


def replace_variables(sql: str, variables: Mapping[str, Selection]) -> str:
    """Grafana's templateSrv.replace with the plugin's formatter."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        fmt = match.group(3) or match.group(6)
        if match.group(5):
            raise TemplateError(f"field paths (${{{name}.{match.group(5)}}}) are not modelled here")
        selection = variables.get(name)
        if selection is None:
            return match.group(0)
        value = selection.substituted()
        return _named_format(value, fmt) if fmt else _plugin_format(value)

    return _VARIABLE.sub(one, sql)


def apply(sql: str, variables: Mapping[str, Selection]) -> str:
    """Everything the frontend does to a panel's SQL before the backend expands its macros."""
    return replace_variables(apply_conditional_all(sql, variables), variables)
