"""Terminal logs no outside text can forge (issue 29): an IMDS answer or a hook's output with newlines or terminal
escapes shows them as escapes, on one line, in the message and in every field."""

from __future__ import annotations

import io
import logging
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from sevents.logs import ConsoleFormatter, JsonFormatter, printable


def console_line(message: str, **fields: object) -> str:
    record = logging.makeLogRecord({"name": "collector.imds", "levelname": "WARNING", "msg": "%s", "args": (message,)})
    record.__dict__.update(fields)
    return ConsoleFormatter().format(record)


def test_a_forged_log_line_and_terminal_codes_stay_on_the_one_line() -> None:
    forged = 'x\n2026-11-26T00:00:00.000Z info    collector.agent: approved event="E1"\x1b[2J\x1b]0;owned\x07'
    line = console_line(f"IMDS answered 500: {forged}", error=forged)
    assert "\n" not in line and "\x1b" not in line and "\x07" not in line
    assert line.count("\\n") == 2 and line.count("\\x1b") == 4


@given(st.text())
def test_printable_leaves_no_control_character_and_changes_nothing_else(text: str) -> None:
    shown = printable(text)
    assert not any(unicodedata.category(c) == "Cc" for c in shown)
    if not any(unicodedata.category(c) == "Cc" for c in text):
        assert shown == text


@given(st.text())
def test_json_lines_already_escape_them(text: str) -> None:
    stream = io.StringIO()
    record = logging.makeLogRecord({"name": "x", "levelname": "INFO", "msg": "%s", "args": (text,)})
    stream.write(JsonFormatter().format(record))
    assert "\n" not in stream.getvalue() and "\x1b" not in stream.getvalue()
