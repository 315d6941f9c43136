"""Maintenance windows, pure: ``"Mon-Fri 02:00-05:00"`` read once, and whether a moment (UTC) falls in one.

A window is days and a span of the day, in UTC: ``DAYS HH:MM-HH:MM``. DAYS is a comma-separated list of day
names (Mon Tue Wed Thu Fri Sat Sun) and ranges (``Mon-Fri``, ``Fri-Mon`` wraps), or ``daily``. The span starts
on each of those days; its end is not in it (``24:00`` is the day's end). A span that ends at or before its start
crosses midnight: ``Sat 22:00-02:00`` is Saturday 22:00 to Sunday 02:00.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final

DAYS: Final = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DAY_MINUTES: Final = 24 * 60
_FORM: Final = re.compile(r"^\s*(?P<days>\S+)\s+(?P<start>\d\d?:\d\d)\s*-\s*(?P<end>\d\d?:\d\d)\s*$")
EXAMPLE: Final = '"Mon-Fri 02:00-05:00"'


@dataclass(frozen=True)
class Window:
    """Days (0 = Monday) on which the span ``start``..``end`` (minutes of the day, UTC) begins."""

    days: frozenset[int]
    start: int
    end: int  # at or before start: the span ends on the next day

    def holds(self, at: datetime) -> bool:
        """Whether ``at`` (aware, any zone; compared in UTC) is in this window."""
        utc = at.astimezone(timezone.utc)
        minute = utc.hour * 60 + utc.minute + utc.second / 60 + utc.microsecond / 60e6
        day = utc.weekday()
        if self.start < self.end:
            return day in self.days and self.start <= minute < self.end
        return (day in self.days and minute >= self.start) or ((day - 1) % 7 in self.days and minute < self.end)


def within(windows: Sequence[Window], at: datetime) -> bool:
    """Whether ``at`` is in any of ``windows``; no windows: always."""
    return not windows or any(w.holds(at) for w in windows)


def parse_window(text: str) -> Window | str:
    """The window ``text`` describes, or the problem with it (a sentence)."""
    match = _FORM.match(text)
    if not match:
        return f"{text!r} is not DAYS HH:MM-HH:MM (UTC), e.g. {EXAMPLE}"
    days = _days(match["days"])
    start, end = _minute(match["start"]), _minute(match["end"])
    if isinstance(days, str):
        return f"{text!r}: {days}"
    if start is None or start == DAY_MINUTES or end is None:
        return f"{text!r}: a time is HH:MM from 00:00 to 24:00 (the end only)"
    if start == end % DAY_MINUTES and end != DAY_MINUTES:
        return f"{text!r}: the span is empty (for a whole day write 00:00-24:00)"
    return Window(days, start, end)


def _days(text: str) -> frozenset[int] | str:
    if text.lower() == "daily":
        return frozenset(range(7))
    days: set[int] = set()
    for part in text.lower().split(","):
        first, _, last = part.partition("-")
        if first not in DAYS or (last and last not in DAYS):
            return f"{part!r} is not a day or a range of days ({', '.join(d.title() for d in DAYS)}, or daily)"
        a, b = DAYS.index(first), DAYS.index(last or first)
        days.update((a + i) % 7 for i in range((b - a) % 7 + 1))
    return frozenset(days)


def _minute(text: str) -> int | None:
    hours, minutes = (int(p) for p in text.split(":"))
    if minutes >= 60 or hours > 24 or (hours == 24 and minutes):
        return None
    return hours * 60 + minutes
