"""Pure: the Azure Resource Graph queries of the reconciler, and their answers turned into table rows.

Each query projects ``id`` (ARG returns a ``$skipToken`` only then) and the columns that ``*_row`` reads; the
rows are those of migration 0014 (``azure_vms``, ``azure_annotations``, ``azure_scheduled_events``) without the
bookkeeping columns the store adds (``row_hash`` over ``content``, ``first_seen_at``, ``reconciled_at``).
Whatever ARG leaves out or sends in an unexpected shape becomes an empty value, never an exception: one odd
resource must not stop the inventory of a fleet.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Final

# Resources holds standalone, availability-set and Flexible scale-set VMs; Uniform scale-set instances are only
# in ComputeResources. KQL cannot union the two tables: two queries.
VMS_QUERY: Final = """\
Resources
| where type =~ 'microsoft.compute/virtualmachines'
| project id, vmId = tostring(properties.vmId), name, resourceGroup, subscriptionId, location,
    zone = tostring(zones[0]),
    availabilitySetId = tostring(properties.availabilitySet.id),
    scaleSetId = tostring(properties.virtualMachineScaleSet.id),
    vmSize = tostring(properties.hardwareProfile.vmSize),
    powerState = tostring(properties.extended.instanceView.powerState.code),
    faultDomain = toint(properties.platformFaultDomain),
    updateDomain = toint(properties.extended.instanceView.platformUpdateDomain)"""

SCALE_SET_VMS_QUERY: Final = """\
ComputeResources
| where type =~ 'microsoft.compute/virtualmachinescalesets/virtualmachines'
| project id, vmId = tostring(properties.vmId), name, resourceGroup, subscriptionId, location,
    zone = tostring(zones[0]),
    availabilitySetId = '',
    scaleSetId = '',
    vmSize = tostring(sku.name),
    powerState = tostring(properties.extended.instanceView.powerState.code),
    faultDomain = toint(properties.instanceView.platformFaultDomain),
    updateDomain = toint(properties.instanceView.platformUpdateDomain)"""

ANNOTATIONS_QUERY: Final = """\
HealthResourceChanges
| where type =~ 'microsoft.resources/changes'
| where tostring(properties.targetResourceType) =~ 'microsoft.resourcehealth/resourceannotations'
| extend changedAt = todatetime(properties.changeAttributes.timestamp)
| where changedAt > ago({days}d)
| extend c = properties.changes
| project id, subscriptionId, changedAt,
    targetResourceId = tostring(properties.targetResourceId),
    changeType = tostring(properties.changeType),
    annotationName = tostring(c['properties.annotationName'].newValue),
    reason = tostring(c['properties.reason'].newValue),
    category = tostring(c['properties.category'].newValue),
    context = tostring(c['properties.context'].newValue),
    summary = tostring(c['properties.summary'].newValue),
    occurredTime = tostring(c['properties.occurredTime'].newValue)
| where annotationName != ''"""

SCHEDULED_EVENTS_QUERY: Final = """\
maintenanceresources
| where type =~ 'microsoft.maintenance/scheduledevents'
| project id, name, subscriptionId, resourceGroup, properties"""

MAX_ANNOTATION_DAYS: Final = 14  # what HealthResourceChanges keeps

VM_COLUMNS: Final = (
    "vm_id",
    "resource_id",
    "name",
    "subscription_id",
    "resource_group",
    "location",
    "zone",
    "availability_set_id",
    "availability_set",
    "scale_set_id",
    "scale_set",
    "vm_size",
    "power_state",
    "fault_domain",
    "update_domain",
    "source_table",
    "present",
)
ANNOTATION_COLUMNS: Final = (
    "change_id",
    "resource_id",
    "vm_id",
    "subscription_id",
    "changed_at",
    "change_type",
    "annotation_name",
    "reason",
    "category",
    "context",
    "summary",
    "occurred_at",
)
EVENT_COLUMNS: Final = (
    "event_id",
    "event_status",
    "event_type",
    "resource_type",
    "resources",
    "not_before",
    "duration_s",
    "event_source",
    "description",
    "resource_id",
    "subscription_id",
    "resource_group",
)
BOOKKEEPING: Final = ("row_hash", "first_seen_at", "reconciled_at")

_SCALE_SET_INSTANCE = re.compile(r"/virtualmachinescalesets/([^/]+)/virtualmachines/[^/]+$", re.IGNORECASE)
_ANNOTATION_SUFFIX = re.compile(r"/providers/microsoft\.resourcehealth/.*$", re.IGNORECASE)


@dataclass(frozen=True)
class Table:
    """One table of record: its name, columns (content only), key columns and the query that fills it."""

    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]

    def key_of(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.key)


VMS: Final = Table("azure_vms", VM_COLUMNS, ("vm_id",))
ANNOTATIONS: Final = Table("azure_annotations", ANNOTATION_COLUMNS, ("resource_id", "change_id"))
SCHEDULED_EVENTS: Final = Table("azure_scheduled_events", EVENT_COLUMNS, ("event_id", "event_status"))


def annotations_query(days: int) -> str:
    return ANNOTATIONS_QUERY.format(days=max(1, min(int(days), MAX_ANNOTATION_DAYS)))


def content_hash(row: Mapping[str, Any], columns: Sequence[str]) -> int:
    """A stable 64-bit hash of a row's content (the columns, in order; times as ISO text)."""
    values = [_canonical(row[c]) for c in columns]
    digest = hashlib.sha256(json.dumps(values, separators=(",", ":"), sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def changed_rows(
    table: Table,
    candidates: Iterable[tuple[tuple[Any, ...], Mapping[str, Any], datetime, datetime]],
    stored: Mapping[tuple[Any, ...], tuple[int, datetime]],
) -> list[list[Any]]:
    """The rows to insert of ``candidates`` ((key, row, seen_at, version) each), in ``table``'s columns and then
    ``BOOKKEEPING``: those new, or whose content differs from the version ``stored`` (key -> (row_hash,
    first_seen_at)); a changed row keeps the earlier of its stored first_seen_at and ``seen_at``."""
    out = []
    for key, row, seen_at, version in candidates:
        digest = content_hash(row, table.columns)
        before = stored.get(key)
        if before is not None and before[0] == digest:
            continue
        first_seen = min(before[1], seen_at) if before is not None else seen_at
        out.append([*(row[c] for c in table.columns), digest, first_seen, version])
    return out


def event_ids(table: Table, rows: Sequence[Sequence[Any]]) -> list[str]:
    """The EventIds of ``rows`` of ``table`` (as ``changed_rows`` gives them), none if it holds no events."""
    if "event_id" not in table.columns:
        return []
    at = table.columns.index("event_id")
    return [str(row[at]) for row in rows]


def _canonical(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="milliseconds")
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def text(value: Any) -> str:
    """A string field; anything else (missing, null, a number, an object) is its text or ''."""
    if value is None or isinstance(value, dict | list):
        return ""
    return str(value)


def small_int(value: Any, limit: int = 65535) -> int | None:
    """A fault or update domain: a whole number in 0..limit, else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if 0 <= number <= limit else None


def last_segment(resource_id: str) -> str:
    """The name at the end of an ARM resource id (``.../availabilitySets/web-as`` -> ``web-as``)."""
    return resource_id.rstrip("/").rsplit("/", 1)[-1] if resource_id else ""


def parse_time(value: Any) -> datetime | None:
    """ISO 8601 or RFC 1123 (``Mon, 19 Sep 2016 18:29:47 GMT``) as aware UTC; None for blank or junk."""
    raw = text(value).strip()
    if not raw:
        return None
    try:
        iso = raw[:4].isdigit()
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00")) if iso else parsedate_to_datetime(raw)
    except (ValueError, TypeError, IndexError):
        return None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def vm_row(item: Mapping[str, Any], source_table: str) -> dict[str, Any] | None:
    """An ``azure_vms`` row from one answer of ``VMS_QUERY`` / ``SCALE_SET_VMS_QUERY``; None without a vmId."""
    vm_id = text(item.get("vmId")).strip().lower()
    resource_id = text(item.get("id")).lower()
    if not vm_id:
        return None
    availability_set_id = text(item.get("availabilitySetId"))
    scale_set_id = text(item.get("scaleSetId"))
    scale_set = last_segment(scale_set_id)
    instance = _SCALE_SET_INSTANCE.search(text(item.get("id")))
    if not scale_set and instance:  # a Uniform instance: the scale set is in its own id
        scale_set = instance.group(1)
        scale_set_id = text(item.get("id"))[: instance.start()] + f"/virtualMachineScaleSets/{scale_set}"
    name = text(item.get("name")) or last_segment(text(item.get("id")))
    return {
        "vm_id": vm_id,
        "resource_id": resource_id,
        "name": name,
        "subscription_id": text(item.get("subscriptionId")).lower(),
        "resource_group": text(item.get("resourceGroup")),
        "location": text(item.get("location")),
        "zone": text(item.get("zone")),
        "availability_set_id": availability_set_id.lower(),
        "availability_set": last_segment(availability_set_id),
        "scale_set_id": scale_set_id.lower(),
        "scale_set": scale_set,
        "vm_size": text(item.get("vmSize")),
        "power_state": text(item.get("powerState")).removeprefix("PowerState/"),
        "fault_domain": small_int(item.get("faultDomain")),
        "update_domain": small_int(item.get("updateDomain")),
        "source_table": source_table,
        "present": True,
    }


def vm_resource_id(target_resource_id: str) -> str:
    """The VM's resource id (lower case) from an annotation's: ``.../virtualMachines/x/providers/Microsoft.
    ResourceHealth/resourceAnnotations/current`` -> ``.../virtualmachines/x``."""
    return _ANNOTATION_SUFFIX.sub("", target_resource_id).lower()


def annotation_row(item: Mapping[str, Any], vm_ids: Callable[[str], str]) -> dict[str, Any] | None:
    """An ``azure_annotations`` row from one answer of ``ANNOTATIONS_QUERY``; None without id or time.

    ``vm_ids`` maps a VM's resource id (lower case) to its vmId ('' when unknown)."""
    change_id = text(item.get("id"))
    changed_at = parse_time(item.get("changedAt"))
    if not change_id or changed_at is None:
        return None
    resource_id = vm_resource_id(text(item.get("targetResourceId")))
    return {
        "change_id": change_id,
        "resource_id": resource_id,
        "vm_id": vm_ids(resource_id),
        "subscription_id": text(item.get("subscriptionId")).lower(),
        "changed_at": changed_at,
        "change_type": text(item.get("changeType")),
        "annotation_name": text(item.get("annotationName")),
        "reason": text(item.get("reason")),
        "category": text(item.get("category")),
        "context": text(item.get("context")),
        "summary": text(item.get("summary")),
        "occurred_at": parse_time(item.get("occurredTime")),
    }


def event_row(item: Mapping[str, Any]) -> dict[str, Any] | None:
    """An ``azure_scheduled_events`` row from one answer of ``SCHEDULED_EVENTS_QUERY``; None without EventId.

    The event's fields are read case-insensitively (``EventId`` or ``eventId``); ``name`` is the EventId too."""
    raw = item.get("properties")
    props = {str(k).lower(): v for k, v in raw.items()} if isinstance(raw, Mapping) else {}
    event_id = text(props.get("eventid")) or text(item.get("name"))
    if not event_id:
        return None
    resources = props.get("resources")
    duration = props.get("durationinseconds")
    try:
        duration_s = None if duration is None or isinstance(duration, bool) else int(str(duration).strip())
    except ValueError:
        duration_s = None
    return {
        "event_id": event_id,
        "event_status": text(props.get("eventstatus")),
        "event_type": text(props.get("eventtype")),
        "resource_type": text(props.get("resourcetype")),
        "resources": sorted(text(r) for r in resources if text(r)) if isinstance(resources, list) else [],
        "not_before": parse_time(props.get("notbefore")),
        "duration_s": duration_s,
        "event_source": text(props.get("eventsource")),
        "description": text(props.get("description")),
        "resource_id": text(item.get("id")).lower(),
        "subscription_id": text(item.get("subscriptionId")).lower(),
        "resource_group": text(item.get("resourceGroup")),
    }


def quota_wait(remaining: str | None, resets_after: str | None) -> float:
    """Seconds to wait before the next query from ARG's quota headers: none while quota remains, else until it
    resets (``x-ms-user-quota-resets-after`` is ``hh:mm:ss``); 0 when the headers are missing or unreadable."""
    try:
        left = int(remaining) if remaining is not None else None
    except ValueError:
        left = None
    if left is None or left > 0:
        return 0.0
    return duration_seconds(resets_after)


def duration_seconds(value: str | None) -> float:
    """``hh:mm:ss`` (optionally with fractions, or ``d.hh:mm:ss``) in seconds; 0 when unreadable."""
    if not value:
        return 0.0
    match = re.fullmatch(r"\s*(?:(\d+)\.)?(\d+):(\d{1,2}):(\d{1,2}(?:\.\d+)?)\s*", value)
    if not match:
        return 0.0
    days, hours, minutes, seconds = match.groups()
    return timedelta(
        days=int(days or 0), hours=int(hours), minutes=int(minutes), seconds=float(seconds)
    ).total_seconds()
