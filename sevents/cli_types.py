"""One spelling for event-type filters on every command: ``--event-type TYPE``, repeatable, each value a type or a
comma-separated list of them (``--event-type Reboot --event-type Redeploy`` is ``--event-type Reboot,Redeploy``).

``add_event_type_flag`` declares the flag (and any old spelling, still accepted with a one-line note on stderr);
``event_types`` splits, checks every name against ``sevents.records.EVENT_TYPES`` and raises ``EventTypeError``
with a "did you mean" for a typo, which the commands print as one line and exit 2 (``ExitCode.INVALID``).
Importable on Python 3.9, like the rest of the collector side.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Optional, Union

from sevents.config import did_you_mean
from sevents.records import EVENT_TYPES

FLAG = "--event-type"


class EventTypeError(ValueError):
    """An event-type filter naming an unknown type, or no type at all; the message is one line."""


class _Append(argparse.Action):
    """Appends each value; given under an old spelling, notes the new one on stderr once per parse."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new: str = FLAG, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new
        self._noted = False

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        if option_string is not None and option_string != self.new and not self._noted:
            self._noted = True
            print(
                f"{parser.prog}: note: {option_string} is the old spelling of {self.new} (still accepted); "
                f"write {self.new} TYPE, repeatable or comma-separated",
                file=sys.stderr,
            )
        items = list(getattr(namespace, self.dest, None) or [])
        items.append(values)
        setattr(namespace, self.dest, items)


def add_event_type_flag(
    parser: argparse.ArgumentParser,
    help: str,
    *,
    flag: str = FLAG,
    old: Sequence[str] = (),
    dest: Optional[str] = None,
) -> None:
    """Declare ``flag TYPE`` (repeatable, commas allowed) and its old spellings ``old`` on ``parser``; the values
    land as a list of the raw strings in ``dest`` (None when the flag is not given)."""
    dest = dest or flag.lstrip("-").replace("-", "_")
    parser.add_argument(flag, action=_Append, new=flag, dest=dest, default=None, metavar="TYPE", help=help)
    for spelling in old:
        parser.add_argument(spelling, action=_Append, new=flag, dest=dest, default=None, help=argparse.SUPPRESS)


def event_types(values: Iterable[str], flag: str = FLAG) -> tuple[str, ...]:
    """The event types named by the raw ``values`` of ``flag`` (each may be comma-separated), in order and
    without repeats; ``EventTypeError`` when one is unknown (with the closest known name) or none is named."""
    names = [part.strip() for value in values for part in value.split(",") if part.strip()]
    problems = [
        f"unknown event type {name!r} (one of {', '.join(EVENT_TYPES)}){_hint(name)}"
        for name in names
        if name not in EVENT_TYPES
    ]
    if problems:
        raise EventTypeError(f"{flag}: {'; '.join(problems)}")
    if not names:
        raise EventTypeError(f"{flag}: names no event type (one of {', '.join(EVENT_TYPES)})")
    return tuple(dict.fromkeys(names))


def _hint(name: str) -> str:
    # Case first: "reboot" is Reboot; then spelling.
    for known in EVENT_TYPES:
        if known.lower() == name.lower():
            return f"; did you mean {known}?"
    return did_you_mean(name.capitalize(), EVENT_TYPES, show=str)
