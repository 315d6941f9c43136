"""Pure: one Event Hubs delivery of Microsoft's central Scheduled Events feed turned into scheduled-event rows.

Event Grid delivers ``Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted`` events (the docs
disagree on the last word, so the type is matched by prefix) into an Event Hub, in the Event Grid schema
(``id``, ``eventType``, ``eventTime``, ``data``) or as CloudEvents 1.0 (``specversion``, ``id``, ``type``,
``time``, ``data``; structured mode, or binary mode with the envelope in ``cloudEvents:*`` application
properties). A message body holds one event or a JSON array of them. The event itself is under
``data.resourceInfo``: ``id`` (the scheduled event's ARM id, under the VM, scale set or availability set it was
announced to), ``name`` (the EventId) and ``properties`` (``EventId``, ``EventType``, ``EventStatus``,
``NotBefore``, ``Resources``, ``ResourceType``, ``DurationInSeconds``, ``EventSource``, ``Description``).

Each event becomes the very row ``sevents-ingest reconcile`` makes of the same event read from Azure Resource
Graph (``ingest.reconcile_rows.event_row``), so the two sources agree row for row. What cannot be such an event is
a ``Refused`` with a short stable reason, never an exception.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ingest import reconcile_rows as rr
from sevents.contract import TIME_YEARS

EVENT_TYPE_PREFIX: Final = "microsoft.resourcenotifications.maintenanceresources.scheduledevent"
CLOUDEVENTS_PREFIX: Final = "cloudEvents:"  # the AMQP binding's application-property prefix (binary mode)

# The reasons a delivery, or one event of it, is refused (dead_letters.error starts with one).
NOT_JSON: Final = "feed_not_json"  # the body is not UTF-8 JSON
NOT_AN_EVENT: Final = "feed_not_an_event"  # neither an Event Grid nor a CloudEvents envelope
OTHER_TYPE: Final = "feed_other_event_type"  # an event, but not ScheduledEventEmitted
NO_EVENT_ID: Final = "feed_no_event_id"  # no id of its own, or no EventId in data.resourceInfo
TOO_LARGE: Final = "feed_too_large"  # over the ingest's max_payload_bytes
BAD_VALUE: Final = "feed_bad_value"  # a value no column can hold (a NotBefore outside 1970-2105, a huge duration)

INT64: Final = (-(2**63), 2**63 - 1)

_ARM_PARENT = re.compile(r"^/subscriptions/([^/]+)/resourcegroups/([^/]+)/", re.IGNORECASE)


@dataclass(frozen=True)
class FeedEvent:
    """One scheduled event as the feed told it: Event Grid's own id (``delivery_id``: the same on a repeated
    delivery), when it was published (None when unsaid or unreadable), and the ``azure_scheduled_events`` row."""

    delivery_id: str
    published_at: datetime | None
    row: Mapping[str, Any]
    index: int = 0  # its place in the message body (an array)


@dataclass(frozen=True)
class Refused:
    """What could not be read: ``index`` of the event in the body (0 for the body itself), the reason, the detail,
    and the bytes to keep in dead_letters (the event alone when the body held several)."""

    index: int
    reason: str
    detail: str
    payload: bytes


def decode(
    payload: bytes, properties: Mapping[str, str] | None = None, *, max_bytes: int = 256 * 1024
) -> tuple[list[FeedEvent], list[Refused]]:
    """The events of one Event Hubs message body and what was refused (each event on its own: one bad event of an
    array does not refuse its neighbours)."""
    if len(payload) > max_bytes:
        return [], [Refused(0, TOO_LARGE, f"{len(payload)} bytes, more than {max_bytes}", payload)]
    try:
        body = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        return [], [Refused(0, NOT_JSON, _short(error), payload)]
    items = body if isinstance(body, list) else [body]
    events: list[FeedEvent] = []
    refused: list[Refused] = []
    binary = _binary_envelope(properties or {}) if not isinstance(body, list) else None
    for index, item in enumerate(items):
        own = payload if len(items) == 1 else _dumps(item)
        try:
            events.append(_event(item, binary, index))
        except _Refusal as refusal:
            refused.append(Refused(index, refusal.reason, refusal.detail, own))
    if not items:
        refused.append(Refused(0, NOT_AN_EVENT, "an empty array", payload))
    return events, refused


class _Refusal(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def _event(item: Any, binary: Mapping[str, str] | None, index: int) -> FeedEvent:
    if not isinstance(item, Mapping):
        raise _Refusal(NOT_AN_EVENT, f"a JSON {type(item).__name__}, not an object")
    if "specversion" in item:  # CloudEvents, structured mode
        envelope = {"id": item.get("id"), "type": item.get("type"), "time": item.get("time")}
        data = item.get("data")
    elif "eventType" in item:  # Event Grid schema
        envelope = {"id": item.get("id"), "type": item.get("eventType"), "time": item.get("eventTime")}
        data = item.get("data")
    elif binary is not None:  # CloudEvents, binary mode: the body is the data
        envelope = {"id": binary.get("id"), "type": binary.get("type"), "time": binary.get("time")}
        data = item
    else:
        raise _Refusal(NOT_AN_EVENT, "neither an Event Grid event (eventType) nor a CloudEvent (specversion)")
    event_type = rr.text(envelope["type"])
    if not event_type.lower().startswith(EVENT_TYPE_PREFIX):
        raise _Refusal(OTHER_TYPE, f"event type {event_type[:200]!r}")
    delivery_id = rr.text(envelope["id"])  # as given: a repeated delivery repeats it exactly
    if not delivery_id.strip():
        raise _Refusal(NO_EVENT_ID, "the event has no id")
    info = data.get("resourceInfo") if isinstance(data, Mapping) else None
    if not isinstance(info, Mapping):
        raise _Refusal(NO_EVENT_ID, "no data.resourceInfo")
    row = rr.event_row(_as_arg_item(info))
    if row is None:
        raise _Refusal(NO_EVENT_ID, "no EventId in data.resourceInfo")
    not_before, duration = row["not_before"], row["duration_s"]
    if not_before is not None and not TIME_YEARS[0] <= not_before.year <= TIME_YEARS[1]:
        raise _Refusal(BAD_VALUE, f"NotBefore {not_before.isoformat()} is outside the years {TIME_YEARS}")
    if duration is not None and not INT64[0] <= duration <= INT64[1]:
        raise _Refusal(BAD_VALUE, f"DurationInSeconds {duration} is not a 64-bit number")
    published = rr.parse_time(envelope["time"])
    if published is not None and not TIME_YEARS[0] <= published.year <= TIME_YEARS[1]:
        published = None  # its arrival stands in (ingest.feed)
    return FeedEvent(delivery_id[:512], published, row, index)


def _as_arg_item(info: Mapping[str, Any]) -> dict[str, Any]:
    """``data.resourceInfo`` in the shape of an answer to the reconciler's ``maintenanceresources`` query."""
    resource_id = rr.text(info.get("id"))
    parent = _ARM_PARENT.match(resource_id)
    return {
        "id": resource_id,
        "name": info.get("name"),
        "subscriptionId": parent.group(1) if parent else "",
        "resourceGroup": parent.group(2).lower() if parent else "",  # as ARG spells it
        "properties": info.get("properties"),
    }


def _binary_envelope(properties: Mapping[str, str]) -> dict[str, str] | None:
    """The CloudEvents attributes of a binary-mode message (``cloudEvents:id``, ...), or None if it is not one."""
    found = {k[len(CLOUDEVENTS_PREFIX) :].lower(): v for k, v in properties.items() if k.startswith(CLOUDEVENTS_PREFIX)}
    return found if "specversion" in found else None


def _dumps(item: Any) -> bytes:
    return json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode()


def _short(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
