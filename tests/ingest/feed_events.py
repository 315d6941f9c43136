"""Central Scheduled Events feed events as Event Grid delivers them (Event Grid schema and CloudEvents 1.0).

The shapes follow Microsoft's Event Grid documentation of the ``Microsoft.ResourceNotifications.MaintenanceResources``
system topic: the envelope of each schema around ``data.resourceInfo`` (``id``, ``name``, ``type``, ``properties``)
and ``data.operationalInfo``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

EVENT_TYPE = "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted"
SUB = "11111111-2222-3333-4444-555555555555"
RG = "fleet"


def resource_info(
    event_id: str,
    status: str,
    resources: list[str],
    *,
    parent: str = "virtualMachines/vm-000",
    event_type: str = "Reboot",
    not_before: str = "Mon, 23 Nov 2026 18:29:47 GMT",
    duration_s: int = -1,
) -> dict[str, Any]:
    """``data.resourceInfo`` of one scheduled event announced to ``parent`` (a VM, scale set or availability set)."""
    return {
        "id": f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/{parent}"
        f"/providers/Microsoft.Maintenance/scheduledevents/{event_id}",
        "name": event_id,
        "type": "Microsoft.Maintenance/scheduledevents",
        "properties": {
            "EventId": event_id,
            "EventType": event_type,
            "EventStatus": status,
            "NotBefore": not_before if status == "Scheduled" else "",
            "Resources": resources,
            "ResourceType": "VirtualMachine",
            "DurationInSeconds": duration_s,
            "EventSource": "Platform",
            "Description": "Host server is undergoing maintenance.",
        },
    }


def event_grid(delivery_id: str, info: dict[str, Any], at: datetime) -> dict[str, Any]:
    """One event in the Event Grid schema."""
    return {
        "id": delivery_id,
        "topic": f"/subscriptions/{SUB}",
        "subject": info["id"],
        "eventType": EVENT_TYPE,
        "eventTime": at.isoformat().replace("+00:00", "Z"),
        "data": {"resourceInfo": info, "apiVersion": "2023-10-01-preview", "operationalInfo": {}},
        "dataVersion": "1",
        "metadataVersion": "1",
    }


def cloud_event(delivery_id: str, info: dict[str, Any], at: datetime) -> dict[str, Any]:
    """One event as a CloudEvent 1.0 (structured mode)."""
    return {
        "specversion": "1.0",
        "id": delivery_id,
        "source": f"/subscriptions/{SUB}",
        "subject": info["id"],
        "type": EVENT_TYPE,
        "time": at.isoformat().replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        "data": {"resourceInfo": info, "apiVersion": "2023-10-01-preview", "operationalInfo": {}},
    }
