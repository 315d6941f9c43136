"""Raw IMDS Scheduled Events bodies -> ``Document``, for every API version from 2017-03-01 to 2020-07-01.

Errors of the collector core (decode, transitions, enrich), "the peer did something odd" kept apart from
"we are wrong"::

    the peer did something odd: expected, counted or recorded, never a crash
    ├── DecodeError(ValueError)   the body is not a Scheduled Events document; the only exception
    │                             decode_document raises for any input. The poll counts as failed
    │                             (kind "decode") and the snapshot stays as it was.
    └── anomaly transitions       a document that decodes but breaks the lifecycle (transitions.diff):
                                  data in the record stream, never an exception
    our saved state is damaged
    └── ValueError                Snapshot.from_json on text this version did not write
    we are wrong: bugs, never caught, never translated
    ├── AssertionError            a record whose fields differ from sevents.records (enrich)
    ├── ValueError                a naive datetime passed to transitions.diff or records.format_time
    └── TypeError, AttributeError, ...

What the versions differ in, and how each is read:

- ``DocumentIncarnation``: an integer, or a string of digits (the 2017-03-01 preview samples).
- ``Resources``: 2017-03-01 prefixed IaaS VM names with "_"; one leading "_" is removed always, which is safe
  because Azure VM names cannot start with an underscore.
- ``NotBefore``: RFC 1123 (``Mon, 19 Sep 2016 18:29:47 GMT``), ISO 8601 (``2016-09-19T18:29:47Z``, preview
  docs) or blank / absent / null once Started -> None. A zone-less time is taken as UTC.
- ``Description`` (2019-04-01+), ``EventSource`` (2019-08-01+), ``DurationInSeconds`` (2020-07-01+): None
  when absent or null. ``DurationInSeconds`` may also come as a decimal string.
- Present in every version, yet tolerated when absent: ``EventType`` and ``ResourceType`` ("") and
  ``Resources`` (empty). ``EventId`` (non-blank) and ``EventStatus`` are required.
- An EventId twice in one document is a DecodeError: the document cannot say what state that event is in.

Values are checked for shape only. Whether a status or a change is allowed is the transition engine's
business (an unknown ``EventStatus`` decodes, and becomes an anomaly record there).
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from collector.model import Document, Event
from sevents import isotime


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
    events = tuple(_event(item, i, repairs) for i, item in enumerate(items))
    seen: set[str] = set()
    for event in events:
        if event.event_id in seen:
            raise DecodeError(f"EventId {_clip(event.event_id)!r} appears twice in one document")
        seen.add(event.event_id)
    return Document(incarnation=incarnation, events=events, repairs=tuple(repairs))


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


def _event(item: Any, index: int, repairs: list[str]) -> Event:
    where = f"Events[{index}]"
    if not isinstance(item, dict):
        raise DecodeError(f"{where} is {_kind(item)}, not an object")

    def text(key: str) -> str | None:
        return _string(item.get(key), f"{where}.{key}", repairs)

    event_id = text("EventId")
    if event_id is None or not event_id:
        raise DecodeError(f"{where}.EventId is missing or blank")
    status = text("EventStatus")
    if status is None:
        raise DecodeError(f"{where}.EventStatus is missing")
    resources = item.get("Resources", [])
    if resources is None:
        resources = []
    if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
        raise DecodeError(f"{where}.Resources is {_kind(resources)}, not a list of strings")
    duration = _integer(item.get("DurationInSeconds"), f"{where}.DurationInSeconds")
    if duration is not None and not _INT32[0] <= duration <= _INT32[1]:
        # One absurd optional field must not cost the event: it is unknown, and the repair is counted.
        repairs.append(f"{where}.DurationInSeconds out of range")
        duration = None
    return Event(
        event_id=event_id,
        event_type=text("EventType") or "",
        resource_type=text("ResourceType") or "",
        resources=tuple(_string(r, f"{where}.Resources", repairs) or "" for r in resources),
        status=status,
        not_before=parse_not_before(item.get("NotBefore"), f"{where}.NotBefore"),
        description=text("Description"),
        event_source=text("EventSource"),
        duration_s=duration,
    )


def _string(value: Any, where: str, repairs: list[str]) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        if where.endswith(".Resources"):
            value = value.removeprefix("_")
        fixed, repaired = valid_text(value)
        if repaired:
            repairs.append(f"{where}: invalid text replaced")
        return fixed
    raise DecodeError(f"{where} is {_kind(value)}, not a string")


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
