"""The IMDS wire format, pure: api-versions, document shapes per version, request checks and error bodies."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.utils import format_datetime
from typing import Any, Final

# Scheduled Events api-versions, oldest first, and the first version that knows each addition.
SCHEDULED_EVENTS_VERSIONS: Final = (
    "2017-03-01",
    "2017-08-01",
    "2017-11-01",
    "2019-01-01",
    "2019-04-01",
    "2019-08-01",
    "2020-07-01",
)
LATEST_PATH_VERSION: Final = "2017-03-01"  # the preview used /metadata/latest/... and "_"-prefixed names
_EVENT_TYPE_SINCE: Final = {"Preempt": "2017-11-01", "Terminate": "2019-01-01"}
_FIELD_SINCE: Final = {
    "Description": "2019-04-01",
    "EventSource": "2019-08-01",
    "DurationInSeconds": "2020-07-01",
}

# Instance metadata api-versions the simulator answers, and the first version that carries each field
# (DESIGN.md). Fields of a version absent here are absent from the document.
INSTANCE_VERSIONS: Final = (
    "2017-03-01",
    "2017-04-02",
    "2017-08-01",
    "2017-10-01",
    "2017-12-01",
    "2018-02-01",
    "2018-04-02",
    "2018-10-01",
    "2019-02-01",
    "2019-03-11",
    "2019-04-30",
    "2019-06-01",
    "2019-06-04",
    "2019-08-01",
    "2019-08-15",
    "2019-11-01",
    "2020-06-01",
    "2020-07-15",
    "2020-09-01",
    "2020-10-01",
    "2020-12-01",
    "2021-01-01",
    "2021-02-01",
    "2021-03-01",
    "2021-05-01",
    "2021-08-01",
    "2021-10-01",
    "2021-11-01",
    "2021-11-15",
    "2021-12-13",
    "2022-02-01",
    "2022-03-01",
    "2022-07-01",
    "2022-08-01",
    "2023-07-01",
)
_COMPUTE_SINCE: Final = {
    "platformFaultDomain": "2017-04-02",
    "platformUpdateDomain": "2017-04-02",
    "subscriptionId": "2017-08-01",
    "resourceGroupName": "2017-08-01",
    "zone": "2017-12-01",
    "vmScaleSetName": "2017-12-01",
    "resourceId": "2019-03-11",
}


@dataclass(frozen=True)
class EventView:
    """One event as a VM's document shows it, independent of api-version."""

    event_id: str
    event_type: str
    resources: tuple[str, ...]
    status: str  # "Scheduled" | "Started"
    not_before: datetime | None  # None once Started (rendered blank)
    description: str
    event_source: str  # "Platform" | "User"
    duration_s: int
    resource_type: str = "VirtualMachine"


@dataclass(frozen=True)
class VmView:
    """The instance metadata of one VM, independent of api-version."""

    vm_id: str
    name: str
    location: str
    zone: str
    fault_domain: int
    update_domain: int
    scale_set: str
    subscription_id: str
    resource_group: str
    resource_id: str
    vm_size: str
    private_ip: str
    mac: str


@dataclass(frozen=True)
class Reply:
    """An HTTP answer as data: status, JSON body and extra headers."""

    status: int
    body: Any
    headers: tuple[tuple[str, str], ...] = ()


def rfc1123(moment: datetime) -> str:
    """``Mon, 19 Sep 2016 18:29:47 GMT``, as IMDS writes NotBefore."""
    return format_datetime(moment.replace(microsecond=0), usegmt=True)


def newest(versions: Sequence[str]) -> list[str]:
    """The three newest versions, newest first, as IMDS lists them in a 400 answer."""
    return sorted(versions, reverse=True)[:3]


def bad_request(message: str, versions: Sequence[str] | None = None) -> Reply:
    """400 with IMDS's error body; ``newest-versions`` only for api-version problems."""
    body: dict[str, Any] = {"error": f"Bad request. {message}"}
    if versions is not None:
        body["newest-versions"] = newest(versions)
    return Reply(400, body)


def check_request(headers: Mapping[str, str], query: Mapping[str, list[str]], versions: Sequence[str]) -> Reply | str:
    """Apply IMDS's request rules; return the api-version or the 400 that IMDS would send."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "x-forwarded-for" in lowered:
        return bad_request("Request contains X-Forwarded-For header; IMDS is never reached through a proxy.")
    if lowered.get("metadata", "").strip().lower() != "true":
        return bad_request("Required metadata header not specified")
    given = query.get("api-version", [])
    if not given or not given[0]:
        return bad_request("api-version was not specified in the request.", versions)
    if given[0] not in versions:
        return bad_request("Invalid api-version: " + given[0][:40], versions)
    return given[0]


def _present_in(version: str, fields: Mapping[str, Any], since: Mapping[str, str]) -> dict[str, Any]:
    """The fields that ``version`` carries: each appears from the api-version ``since`` names on."""
    return {name: value for name, value in fields.items() if version >= since[name]}


def _event_visible(version: str, event_type: str) -> bool:
    since = _EVENT_TYPE_SINCE.get(event_type)
    return since is None or version >= since


def render_event(version: str, event: EventView) -> dict[str, Any]:
    """One entry of ``Events`` in the shape of ``version`` (fields the version lacks are absent)."""
    prefix = "_" if version == LATEST_PATH_VERSION else ""
    entry: dict[str, Any] = {
        "EventId": event.event_id,
        "EventStatus": event.status,
        "EventType": event.event_type,
        "ResourceType": event.resource_type,
        "Resources": [prefix + name for name in event.resources],
        "NotBefore": rfc1123(event.not_before) if event.not_before is not None else "",
    }
    optional = {
        "Description": event.description,
        "EventSource": event.event_source,
        "DurationInSeconds": event.duration_s,
    }
    entry.update(_present_in(version, optional, _FIELD_SINCE))
    return entry


def render_document(version: str, incarnation: int, events: Sequence[EventView]) -> dict[str, Any]:
    """The scheduled events document; event types newer than ``version`` are not shown to it."""
    return {
        "DocumentIncarnation": incarnation,
        "Events": [render_event(version, e) for e in events if _event_visible(version, e.event_type)],
    }


def render_instance(version: str, vm: VmView) -> dict[str, Any]:
    """The ``/metadata/instance`` document: ``{"compute": {...}, "network": {...}}`` as of ``version``."""
    compute: dict[str, Any] = {
        "location": vm.location,
        "name": vm.name,
        "offer": "0001-com-ubuntu-server-jammy",
        "osType": "Linux",
        "publisher": "Canonical",
        "sku": "22_04-lts-gen2",
        "version": "22.04.202311010",
        "vmId": vm.vm_id,
        "vmSize": vm.vm_size,
    }
    optional: dict[str, Any] = {
        "platformFaultDomain": str(vm.fault_domain),
        "platformUpdateDomain": str(vm.update_domain),
        "subscriptionId": vm.subscription_id,
        "resourceGroupName": vm.resource_group,
        "zone": vm.zone,
        "vmScaleSetName": vm.scale_set,
        "resourceId": vm.resource_id,
    }
    compute.update(_present_in(version, optional, _COMPUTE_SINCE))
    network = {
        "interface": [
            {
                "ipv4": {
                    "ipAddress": [{"privateIpAddress": vm.private_ip, "publicIpAddress": ""}],
                    "subnet": [{"address": "10.0.0.0", "prefix": "16"}],
                },
                "ipv6": {"ipAddress": []},
                "macAddress": vm.mac,
            }
        ]
    }
    return {"compute": dict(sorted(compute.items())), "network": network}


def parse_start_requests(body: bytes) -> list[str] | None:
    """EventIds of an approval body ``{"StartRequests": [{"EventId": ...}]}``; None when malformed."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("StartRequests"), list):
        return None
    ids: list[str] = []
    for item in doc["StartRequests"]:
        if not isinstance(item, dict) or not isinstance(item.get("EventId"), str) or not item["EventId"]:
            return None
        ids.append(item["EventId"])
    return ids if ids else None
