"""Raw IMDS Scheduled Events bodies -> ``Document``, for every API version from 2017-03-01 to 2020-07-01.

Errors of the collector core (decode, transitions, enrich), "the peer did something odd" kept apart from
"we are wrong"::

    the peer did something odd: expected, counted or recorded, never a crash
    ├── DecodeError(ValueError)   the body is not a Scheduled Events document (not JSON, no object, no usable
    │                             DocumentIncarnation, Events not a list); the only exception
    │                             decode_document raises for any input. The poll counts as failed
    │                             (kind "decode") and the snapshot stays as it was.
    ├── Event.repairs             an event field in a shape IMDS never sends, made safe (unknown: None, ""
    │                             or left out), noted in the event's records' ``anomaly``; the event and
    │                             the document's other events are recorded as usual
    ├── Document.dropped          an entry of Events that cannot be an event (not an object, no usable
    │                             EventId, an EventId already read): left out, counted by reason; the
    │                             other events are recorded
    └── anomaly transitions       a document that decodes but breaks the lifecycle (transitions.diff):
                                  data in the record stream, never an exception
    our saved state is damaged
    └── ValueError                Snapshot.from_json on text this version did not write
    we are wrong: bugs, never caught, never translated
    ├── AssertionError            a record whose fields differ from sevents.records (enrich)
    ├── ValueError                a naive datetime passed to transitions.diff or records.format_time
    └── TypeError, AttributeError, ...

One bad event or field never costs the others: IMDS keeps sending the same document, so a document refused
as a whole for one field would hide every event beside it for as long as the field stays bad.

What the versions differ in, and how each is read:

- ``DocumentIncarnation``: an integer, or a string of digits (the 2017-03-01 preview samples).
- ``Resources``: 2017-03-01 prefixed IaaS VM names with "_"; one leading "_" is removed always, which is safe
  because Azure VM names cannot start with an underscore.
- ``NotBefore``: RFC 1123 (``Mon, 19 Sep 2016 18:29:47 GMT``), ISO 8601 (``2016-09-19T18:29:47Z``, preview
  docs) or blank / absent / null once Started -> None. A zone-less time is taken as UTC.
- ``Description`` (2019-04-01+), ``EventSource`` (2019-08-01+), ``DurationInSeconds`` (2020-07-01+): None
  when absent or null. ``DurationInSeconds`` may also come as a decimal string.
- Present in every version, yet tolerated when absent: ``EventType`` and ``ResourceType`` ("") and
  ``Resources`` (empty). ``EventId`` (a non-empty string) is required: an entry without one is dropped.
  ``EventStatus`` is required too, yet an event without one is kept with status "" (noted): leaving it out
  would read as the event's end.
- An EventId twice in one document: the document cannot say what state that event is in. The first entry is
  kept (noted), the later ones dropped: dropping every copy would read as the event's end.

Values are checked for shape only. Whether a status or a change is allowed is the transition engine's
business (an unknown ``EventStatus`` decodes, and becomes an anomaly record there).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Final

from collector.model import Document, Dropped, Event
from sevents import isotime

# Why an entry of Events was left out (``Dropped.reason``, the label it is counted under).
DROP_NOT_OBJECT: Final = "not_an_object"
DROP_NO_ID: Final = "no_event_id"  # EventId missing, null or ""
DROP_BAD_ID: Final = "bad_event_id"  # EventId not a string
DROP_DUPLICATE_ID: Final = "duplicate_event_id"  # a second entry with an EventId already read


class DecodeError(ValueError):
    """The body is not a Scheduled Events document; the message says what is wrong and where."""


def decode_document(body: bytes) -> Document:
    """Decode one Scheduled Events response body; raises DecodeError and nothing else for any input."""
    try:
        raw = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        # JSONDecodeError is a ValueError; so are over-long integer literals.
        raise DecodeError(f"body is not JSON: {_clip(str(e))}") from e
    if not isinstance(raw, dict):
        raise DecodeError(f"document is a JSON {type(raw).__name__}, not an object")
    if "DocumentIncarnation" not in raw:
        raise DecodeError("document has no DocumentIncarnation")
    incarnation = _integer(raw["DocumentIncarnation"], "DocumentIncarnation")
    if incarnation is None:
        raise DecodeError("DocumentIncarnation is null or blank")
    if not _INT64[0] <= incarnation <= _INT64[1]:
        raise DecodeError(f"DocumentIncarnation {_clip(str(incarnation))} is out of range")
    items = raw.get("Events")
    if not isinstance(items, list):
        raise DecodeError(f"Events is {_kind(items)}, not a list")
    repairs: list[str] = []
    dropped: list[Dropped] = []
    events = _events(items, repairs, dropped)
    return Document(incarnation=incarnation, events=events, repairs=tuple(repairs), dropped=tuple(dropped))


def parse_not_before(value: Any, where: str = "NotBefore") -> datetime | None:
    """Read a NotBefore value of any API version; None when blank; DecodeError when unreadable."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise DecodeError(f"{where} is {_kind(value)}, not a string")
    text = value.strip()
    if not text:
        return None
    try:
        # .NET writes seven fractional digits; isotime keeps six.
        moment = isotime.parse(text) if _ISO.match(text) else parsedate_to_datetime(text)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.astimezone(timezone.utc)
    except (ValueError, TypeError, IndexError, OverflowError) as e:
        # parsedate_to_datetime raises several kinds for junk, depending on how far parsing got.
        raise DecodeError(f"{where} {_clip(text)!r} is not a time in RFC 1123 or ISO 8601 form") from e


_ISO = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)
_MAX_SHOWN = 80


def valid_text(text: str) -> tuple[str, bool]:
    """``text`` with every lone surrogate replaced by U+FFFD, and whether any was.

    JSON may escape a lone surrogate (``"\\ud800"``), and Python's json decodes it into a str that no UTF-8
    encoder accepts: stored or encoded as it is, it would crash the collector at every poll.
    """
    if not _SURROGATE.search(text):
        return text, False
    return _SURROGATE.sub("\ufffd", text), True


class _Drop(Exception):
    """This entry of Events cannot be read as an event: it is left out, counted under ``reason``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _events(items: list[Any], repairs: list[str], dropped: list[Dropped]) -> tuple[Event, ...]:
    """Every entry that can be read as an event (with unreadable optional fields made safe), in document order.

    An entry without a usable EventId is left out; a second entry with an EventId already read is left out and
    the first one kept, noted (the document cannot say which is true, and dropping both would read as the
    event's end)."""
    events: list[Event] = []
    first: dict[str, tuple[int, int]] = {}  # EventId -> (position in events, index in the document)
    for index, item in enumerate(items):
        try:
            event = _event(item, index, repairs)
        except _Drop as drop:
            dropped.append(Dropped(reason=drop.reason, detail=drop.detail))
            continue
        seen = first.get(event.event_id)
        if seen is None:
            first[event.event_id] = (len(events), index)
            events.append(event)
            continue
        at, at_index = seen
        detail = f"Events[{index}].EventId {_clip(event.event_id)!r} appears again in one document"
        dropped.append(Dropped(reason=DROP_DUPLICATE_ID, detail=f"{detail}: left out, the first kept"))
        kept = events[at]
        note = "EventId appears more than once in the document: the first kept"
        if note not in kept.repairs:
            repairs.append(f"Events[{at_index}].{note}")
            events[at] = dataclasses.replace(kept, repairs=(*kept.repairs, note))
    return tuple(events)


def _event(item: Any, index: int, repairs: list[str]) -> Event:
    """One event; raises ``_Drop`` only when it has no usable EventId. Any other field IMDS sent in a shape it
    never uses is made safe (unknown: None, "" or left out) and noted in the event's ``repairs``."""
    where = f"Events[{index}]"
    if not isinstance(item, dict):
        raise _Drop(DROP_NOT_OBJECT, f"{where} is {_kind(item)}, not an object: left out")
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        repairs.append(f"{where}.{text}")

    def text(key: str) -> str | None:
        value = item.get(key)
        if value is None or isinstance(value, str):
            return _string(value, key, note)
        note(f"{key} {_clip(repr(value))} is {_kind(value)}, not a string: made unknown")
        return None

    raw_id = item.get("EventId")
    if raw_id is not None and not isinstance(raw_id, str):
        raise _Drop(DROP_BAD_ID, f"{where}.EventId {_clip(repr(raw_id))} is {_kind(raw_id)}, not a string: left out")
    event_id = text("EventId")
    if not event_id:
        raise _Drop(DROP_NO_ID, f"{where}.EventId is missing or blank: left out")
    # Without a readable status the event is kept, not dropped: leaving it out would read as its end. "" is a
    # status the engine does not know, so its record is an anomaly.
    raw_status = item.get("EventStatus")
    if raw_status is None:
        note("EventStatus is missing: made empty")
    status = text("EventStatus") or ""
    return Event(
        event_id=event_id,
        event_type=text("EventType") or "",
        resource_type=text("ResourceType") or "",
        resources=_resources(item.get("Resources"), note),
        status=status,
        not_before=_not_before(item.get("NotBefore"), note),
        description=text("Description"),
        event_source=text("EventSource"),
        duration_s=_duration(item.get("DurationInSeconds"), note),
        repairs=tuple(notes),
    )


def _resources(value: Any, note: Callable[[str], None]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        note(f"Resources {_clip(repr(value))} is {_kind(value)}, not a list: made empty")
        return ()
    names = [r for r in value if isinstance(r, str)]
    if len(names) < len(value):
        note(f"Resources: {len(value) - len(names)} of {len(value)} entries are not strings: left out")
    return tuple(_string(r, "Resources", note) or "" for r in names)


def _not_before(value: Any, note: Callable[[str], None]) -> datetime | None:
    try:
        return parse_not_before(value)
    except DecodeError as error:
        note(f"{error}: made unknown")
        return None


def _duration(value: Any, note: Callable[[str], None]) -> int | None:
    try:
        duration = _integer(value, "DurationInSeconds")
    except DecodeError as error:
        note(f"{error}: made unknown")
        return None
    if duration is not None and not _INT32[0] <= duration <= _INT32[1]:
        note(f"DurationInSeconds {_clip(str(duration))} out of range: made unknown")
        return None
    return duration


def _string(value: str | None, key: str, note: Callable[[str], None]) -> str | None:
    if value is None:
        return None
    if key == "Resources":
        value = value.removeprefix("_")
    fixed, repaired = valid_text(value)
    if repaired:
        note(f"{key}: invalid text replaced")
    return fixed


def _integer(value: Any, where: str) -> int | None:
    """An integer sent as a JSON number or as a decimal string; None for null or blank."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise DecodeError(f"{where} is a boolean, not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if re.fullmatch(r"[+-]?[0-9]{1,30}", text):
            return int(text)
    raise DecodeError(f"{where} {_clip(repr(value))} is not an integer")


def _reject_constant(name: str) -> Any:
    raise DecodeError(f"{name} is not valid JSON")


def _kind(value: Any) -> str:
    return "missing" if value is None else f"a JSON {type(value).__name__}"


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."
