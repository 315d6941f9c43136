"""Azure's Maintenance API for scheduled events, the acknowledge only, pure: what a request asks and how Azure answers.

``POST /subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/{type}/{name}/providers/
Microsoft.Maintenance/scheduledevents/{eventId}/acknowledge?api-version=...`` (no body) with a bearer token answers
200 ``{"value": "Successfully Approved"}`` (shared/DESIGN.md); Azure treats it as the VM's own approval through
IMDS. Here: another path is 404 ``NotFound``, no api-version 400 ``MissingApiVersionParameter``, no or an unknown
token 401 ``AuthenticationFailed``, an event the resource's VMs never saw 404 ``NotFound``.

The simulator serves it beside its IMDS (``SimServer.acknowledge``: the approval releases the event as a POST of
``StartRequests`` by that VM would), and tests/ingest/fake_maintenance.py serves it alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Final

from simulator.protocol import Reply

ARM_PREFIX: Final = "/subscriptions/"  # every ARM path starts so; no IMDS path does
ACK: Final = re.compile(
    r"^(?P<resource>/subscriptions/[^/]+/resourcegroups/[^/]+/providers/Microsoft\.Compute/"
    r"(?:virtualMachines|virtualMachineScaleSets|availabilitySets)/[^/]+)"
    r"/providers/Microsoft\.Maintenance/scheduledevents/(?P<event_id>[^/]+)/acknowledge$",
    re.IGNORECASE,
)
APPROVED: Final = {"value": "Successfully Approved"}


@dataclass(frozen=True)
class AckRequest:
    """One well-formed, authenticated acknowledge."""

    resource: str
    event_id: str
    api_version: str


def error(status: int, code: str, message: str) -> Reply:
    """An ARM error answer."""
    return Reply(status, {"error": {"code": code, "message": message}})


def bearer(headers: Mapping[str, str]) -> str:
    """The bearer token of a request's Authorization header ('' when none)."""
    auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    return auth[len("Bearer ") :].strip() if auth.startswith("Bearer ") else ""


def parse(
    path: str, query: Mapping[str, list[str]], headers: Mapping[str, str], tokens: Collection[str]
) -> AckRequest | Reply:
    """The acknowledge ``path`` asks for, or the error Azure answers: 404 path, 400 api-version, 401 token."""
    match = ACK.match(path)
    if match is None:
        return error(404, "NotFound", "not a scheduled events acknowledge")
    version = (query.get("api-version") or [""])[0]
    if not version:
        return error(400, "MissingApiVersionParameter", "api-version is required")
    if bearer(headers) not in tokens or not bearer(headers):
        return error(401, "AuthenticationFailed", "no valid bearer token")
    return AckRequest(match.group("resource"), match.group("event_id"), version)


def acknowledge(request: AckRequest, vms_of: Callable[[str], list[str]], approve: Callable[[str, str], bool]) -> Reply:
    """Approve ``request.event_id`` as the first VM of the resource (``vms_of``) that saw it (``approve``)."""
    for vm in vms_of(request.resource):
        if approve(vm, request.event_id):
            return Reply(200, dict(APPROVED))
    return error(404, "NotFound", f"no scheduled event {request.event_id[:64]} on this resource")


def vms_of(resource: str, resource_ids: Mapping[str, str]) -> list[str]:
    """The VMs (name -> resource id) an acknowledge on ``resource`` speaks for: the VM itself, or a scale set's
    instances (Azure acknowledges a Uniform scale set's events on the set)."""
    wanted = resource.lower()
    return [
        name
        for name, rid in resource_ids.items()
        if rid.lower() == wanted or rid.lower().startswith(wanted + "/virtualmachines/")
    ]
