"""Structured logging: JSON lines when stderr is not a terminal, readable key=value lines when it is.

Call sites use the standard library: ``log.info("polled", extra={"incarnation": 3})``; every extra
becomes a field. Secrets never reach a log because no code passes them as extras or messages. Text from outside
(an IMDS answer, a hook's output) may hold newlines or terminal escapes: JSON escapes them, and the terminal
format shows every control character as an escape, so no value can forge a log line or drive the terminal.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

# C0 and C1 control characters and DEL: shown as escapes on a terminal
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character as an escape (``\\n``, ``\\x1b``): one line, no terminal codes."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


# Attributes every LogRecord has; anything else was passed through ``extra``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and every extra field."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class ConsoleFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={printable(str(v))}" for k, v in _fields(record).items())
        line = f"{_timestamp(record)} {record.levelname.lower():7} {record.name}: {printable(record.getMessage())}"
        if extras:
            line += " " + extras
        if record.exc_info:
            # a traceback keeps its lines; only escape sequences that would drive the terminal are shown as text
            line += "\n" + self.formatException(record.exc_info).replace("\x1b", "\\x1b")
        return line


def setup_logging(level: str = "info", *, stream: TextIO | None = None, json_lines: bool | None = None) -> None:
    """Configure the root logger once per process; ``json_lines=None`` picks JSON unless on a terminal."""
    stream = stream or sys.stderr
    if json_lines is None:
        json_lines = not stream.isatty()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if json_lines else ConsoleFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The Azure SDKs log every AMQP frame at INFO; keep them to warnings.
    for noisy in ("azure", "uamqp", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
