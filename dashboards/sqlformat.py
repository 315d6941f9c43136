"""Lays panel SQL out for people: one clause per line, subqueries and long calls indented, no line over 120.

The generators compose SQL from fragments on one line; Grafana shows ``rawSql`` as written, so the JSON gets it
laid out here. Only whitespace between tokens changes: string literals, quoted names, ``${var:format}``
references and every other token stay byte for byte, and ``readable`` checks that the laid-out text has exactly
the tokens of the input. Line breaks go only where whitespace was, after ``(`` or ``,``, or before ``)``, so no
two tokens merge. The plugin's server macros (``$__timeFilter(col)`` and the like) are never broken; a
``$__conditionalAll(condition, $var)`` may be (the plugin's frontend splits its arguments on the brackets and
commas, whatever whitespace surrounds them, and replaces the call's exact text).

Theory of operation: a token stream is parsed into bracket groups. A query (a sequence starting with ``SELECT``
or ``WITH``) puts each clause (``SELECT``, ``FROM``, ``WHERE``, ``GROUP BY``, ``UNION ALL``, joins...) on its
own line when it does not fit on one; a clause too long for one line puts each item of a comma list on its own
line, or each ``AND`` / ``OR`` term. Any other bracket group that does not fit opens, its content indented
one step and laid out the same way, and closes on a line of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

WIDTH: Final = 120
STEP: Final = 4

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<string>'(?:[^'\\]|\\.|'')*')
    | (?P<quoted>"(?:[^"\\]|\\.)*"|`(?:[^`\\]|\\.)*`)
    | (?P<variable>\$\{[^}]*\})
    | (?P<word>\$?\w+)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_CLAUSES: Final = frozenset(
    {"SELECT", "FROM", "WHERE", "PREWHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "UNION", "WINDOW", "SETTINGS"}
)
_JOIN_WORDS: Final = frozenset({"LEFT", "RIGHT", "INNER", "FULL", "CROSS", "ARRAY", "OUTER", "ANY", "GLOBAL", "JOIN"})
# words that continue a clause's head: GROUP BY, UNION ALL, SELECT DISTINCT, LEFT ARRAY JOIN
_HEAD_WORDS: Final = frozenset({"BY", "ALL", "DISTINCT", *_JOIN_WORDS})
_BREAKABLE_MACRO: Final = "$__conditionalAll"


class LayoutError(ValueError):
    """SQL this module will not lay out (a comment, an unbalanced bracket) or a layout that changed a token."""


@dataclass(frozen=True)
class _Token:
    text: str
    gap: bool  # whitespace before it in the input


@dataclass(frozen=True)
class _Group:
    items: tuple[_Token | _Group, ...]
    gap: bool
    keep: bool  # a server macro's arguments: never broken


_Item = _Token | _Group


def tokens(sql: str) -> list[str]:
    """The tokens of ``sql`` (whitespace dropped); refuses comments, whose end a line break would move."""
    found = []
    for match in _TOKEN.finditer(sql):
        if match.lastgroup == "space":
            continue
        found.append(match.group())
        if found[-2:] in (["-", "-"], ["/", "*"]) and not sql[match.start() - 1].isspace():
            raise LayoutError(f"SQL comments are not laid out: {sql[:80]!r}")
    return found


def _parse(sql: str) -> tuple[_Item, ...]:
    stack: list[list[_Item]] = [[]]
    opened: list[tuple[bool, bool]] = []
    gap = False
    for match in _TOKEN.finditer(sql):
        text = match.group()
        if match.lastgroup == "space":
            gap = True
            continue
        if text == "(":
            previous = stack[-1][-1] if stack[-1] else None
            name = previous.text if isinstance(previous, _Token) and not gap else ""
            opened.append((gap, name.startswith("$__") and name != _BREAKABLE_MACRO))
            stack.append([])
        elif text == ")":
            if not opened:
                raise LayoutError(f"unbalanced ')' in {sql[:80]!r}")
            items = stack.pop()
            group_gap, keep = opened.pop()
            stack[-1].append(_Group(tuple(items), group_gap, keep))
        else:
            stack[-1].append(_Token(text, gap))
        gap = False
    if opened:
        raise LayoutError(f"unbalanced '(' in {sql[:80]!r}")
    return tuple(stack[0])


def _flat(items: tuple[_Item, ...] | list[_Item]) -> str:
    out = []
    for index, item in enumerate(items):
        if index and item.gap:
            out.append(" ")
        out.append(item.text if isinstance(item, _Token) else f"({_flat(item.items)})")
    return "".join(out)


def _word(item: _Item) -> str:
    return item.text if isinstance(item, _Token) else ""


def _is_query(items: tuple[_Item, ...] | list[_Item]) -> bool:
    return bool(items) and _word(items[0]) in ("SELECT", "WITH")


def _starts_clause(items: tuple[_Item, ...] | list[_Item], index: int) -> bool:
    word = _word(items[index])
    if word in _CLAUSES:
        return True
    if word in _JOIN_WORDS and _word(items[index - 1]) not in _JOIN_WORDS:
        # LEFT JOIN, ARRAY JOIN, JOIN: a join phrase (ANY alone is not one)
        rest = [_word(item) for item in items[index:]]
        following = next((w for w in rest if w not in _JOIN_WORDS - {"JOIN"}), "")
        return following == "JOIN"
    return False


def _split_clauses(items: tuple[_Item, ...]) -> list[list[_Item]]:
    clauses: list[list[_Item]] = [[]]
    for index, item in enumerate(items):
        if index and _starts_clause(items, index):
            clauses.append([])
        clauses[-1].append(item)
    return clauses


def _split_commas(items: list[_Item] | tuple[_Item, ...]) -> list[list[_Item]]:
    parts: list[list[_Item]] = [[]]
    for item in items:
        parts[-1].append(item)
        if _word(item) == ",":
            parts.append([])
    return [part for part in parts if part]


def _split_terms(items: list[_Item] | tuple[_Item, ...]) -> list[list[_Item]]:
    parts: list[list[_Item]] = [[]]
    for index, item in enumerate(items):
        if index and _word(item) in ("AND", "OR") and item.gap:
            parts.append([])
        parts[-1].append(item)
    return parts


def _pad(indent: int) -> str:
    return "\n" + " " * indent


def _sequence(items: tuple[_Item, ...] | list[_Item], indent: int, column: int, *, top: bool = False) -> str:
    """``items`` laid out from ``column`` on the current line, further lines at ``indent``."""
    if _is_query(items):
        clauses = _split_clauses(tuple(items))
        if not top and column + len(_flat(items)) <= WIDTH:
            return _flat(items)
        return _pad(indent).join(_clause(clause, indent) for clause in clauses)
    if column + len(_flat(items)) <= WIDTH:
        return _flat(items)
    for parts in (_split_commas(items), _split_terms(items)):
        if len(parts) > 1:
            return _pad(indent).join(_inline(part, indent, indent) for part in parts)
    return _inline(items, indent, column)


def _clause(items: list[_Item], indent: int) -> str:
    text = _flat(items)
    if indent + len(text) <= WIDTH:
        return text
    size = 1
    while size < len(items) and _word(items[size]) in _HEAD_WORDS:
        size += 1
    head, body = _flat(items[:size]), items[size:]
    if not body:
        return head
    inner = indent + STEP
    commas = _split_commas(body)
    if len(commas) > 1:
        return head + _pad(inner) + _pad(inner).join(_inline(part, inner, inner) for part in commas)
    terms = _split_terms(body)
    if len(terms) > 1:
        first = _inline(terms[0], indent, indent + len(head) + 1)
        return f"{head} {first}" + "".join(_pad(inner) + _inline(term, inner, inner) for term in terms[1:])
    return f"{head} {_inline(body, indent, indent + len(head) + 1)}"


def _inline(items: list[_Item] | tuple[_Item, ...], indent: int, column: int) -> str:
    """``items`` on the current line; a bracket group that does not fit opens onto lines of its own."""
    out: list[str] = []
    for index, item in enumerate(items):
        space = " " if index and item.gap else ""
        if isinstance(item, _Token):
            out.append(space + item.text)
            column += len(space) + len(item.text)
            continue
        flat = f"({_flat(item.items)})"
        tail = 0
        for after in items[index + 1 :]:
            if isinstance(after, _Group):
                break
            tail += len(after.text) + (1 if after.gap else 0)
        if item.keep or not item.items or column + len(space) + len(flat) + tail <= WIDTH:
            out.append(space + flat)
            column += len(space) + len(flat)
            continue
        inner = indent + STEP
        body = _sequence(item.items, inner, inner)
        out.append(f"{space}({_pad(inner)}{body}{_pad(indent)})")
        column = indent + 1
    return "".join(out)


def readable(sql: str) -> str:
    """``sql`` laid out on indented lines (one line when it is a short non-query); tokens unchanged."""
    laid_out = _sequence(_parse(sql), 0, 0, top=True)
    if tokens(laid_out) != tokens(sql):
        raise LayoutError(f"layout changed the tokens of {sql[:80]!r}")
    return laid_out


def longest_line(sql: str) -> int:
    return max(len(line) for line in sql.splitlines()) if sql else 0
