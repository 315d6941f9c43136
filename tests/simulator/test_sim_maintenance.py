"""The simulator's Maintenance API (simulator/maintenance.py): an acknowledge releases the event for every VM in
Resources, exactly as a POST of StartRequests to IMDS does; Azure's answers for a bad path, version or token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import SimServer, maintenance
from simulator.loader import parse_scenario
from tests.helpers import eventually
from tests.tiers import examples

API = "api-version=2025-11-01"


def _scenario(approval: str = "any", kind: str = "availability-set") -> Any:
    group = {"name": "web", "kind": kind, "size": 4, "fault_domains": 2}
    event = {"label": "e", "group": "web", "fault_domain": 0, "type": "Reboot", "at": 0, "notice": 900}
    return parse_scenario(
        {"name": "ack", "fleet": {"groups": [group]}, "events": [{**event, "approval": approval}]}, "ack"
    )


def _request(url: str, method: str, token: str | None = None, body: bytes | None = None) -> tuple[int, Any]:
    headers = {"Metadata": "true"} | ({"Authorization": f"Bearer {token}"} if token is not None else {})
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            data = answer.read()
            return answer.status, json.loads(data) if data else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def _document(sim: SimServer, vm: str) -> list[dict[str, Any]]:
    url = f"{sim.vm_base_url(vm)}/metadata/scheduledevents?api-version=2020-07-01"
    events: list[dict[str, Any]] = _request(url, "GET")[1]["Events"]
    return events


def _resource(sim: SimServer, vm: str) -> str:
    return str(sim.engine.vms[vm].view.resource_id)


def _ack_url(sim: SimServer, resource: str, event_id: str, query: str = API) -> str:
    return f"{sim.base_url}{resource}/providers/Microsoft.Maintenance/scheduledevents/{event_id}/acknowledge?{query}"


def _started(sim: SimServer, vms: list[str], timeout: float = 10.0) -> dict[str, str]:
    """Each VM's event status, once all are Started (or as they are at the timeout)."""

    def statuses() -> dict[str, str]:
        return {vm: _document(sim, vm)[0]["EventStatus"] for vm in vms}

    eventually(lambda: set(statuses().values()) == {"Started"}, timeout)
    return statuses()


def test_an_acknowledge_releases_the_event_for_every_vm_in_resources_as_an_imds_post_does() -> None:
    """web-0 and web-2 (fault domain 0) see a Reboot; one acknowledge on web-2's resource starts it for both, and
    the simulator records it as web-2's approval through the Maintenance API."""
    with SimServer(_scenario(), speed=1).start() as sim:
        (event,) = _document(sim, "web-0")
        assert event["Resources"] == ["web-0", "web-2"] and event["EventStatus"] == "Scheduled"
        _document(sim, "web-2")
        status, body = _request(_ack_url(sim, _resource(sim, "web-2"), event["EventId"]), "POST", sim.arm_token)
        assert (status, body) == (200, {"value": "Successfully Approved"})
        assert _started(sim, ["web-0", "web-2"]) == {"web-0": "Started", "web-2": "Started"}
        assert [(vm, how) for _, vm, _, how in sim.approvals()] == [("web-2", "maintenance")]


def test_on_a_shared_host_one_acknowledge_is_one_vm_s_approval_as_with_imds() -> None:
    """approval = "each": like a POST to IMDS, an acknowledge approves for the VM it names, and the event waits."""
    with SimServer(_scenario("each"), speed=1).start() as sim:
        (event,) = _document(sim, "web-0")
        _document(sim, "web-2")
        assert _request(_ack_url(sim, _resource(sim, "web-0"), event["EventId"]), "POST", sim.arm_token)[0] == 200
        assert _document(sim, "web-2")[0]["EventStatus"] == "Scheduled"
        assert _request(_ack_url(sim, _resource(sim, "web-2"), event["EventId"]), "POST", sim.arm_token)[0] == 200
        assert _started(sim, ["web-0", "web-2"]) == {"web-0": "Started", "web-2": "Started"}


def test_a_scale_set_s_event_is_acknowledged_on_the_scale_set() -> None:
    with SimServer(_scenario(kind="scale-set"), speed=1).start() as sim:
        (event,) = _document(sim, "web_0")
        scale_set = _resource(sim, "web_0").rsplit("/virtualMachines/", 1)[0]
        assert _request(_ack_url(sim, scale_set, event["EventId"]), "POST", sim.arm_token)[0] == 200
        assert _started(sim, ["web_0"]) == {"web_0": "Started"}


def test_azure_s_answers_for_what_is_not_an_approval() -> None:
    """No token, another token, no api-version, another path, an event the VM never saw, a GET: nothing approved."""
    with SimServer(_scenario(), speed=1).start() as sim:
        (event,) = _document(sim, "web-0")
        web0, event_id = _resource(sim, "web-0"), event["EventId"]
        answers = [
            _request(_ack_url(sim, web0, event_id), "POST"),
            _request(_ack_url(sim, web0, event_id), "POST", "not-the-token"),
            _request(_ack_url(sim, web0, event_id, "x=1"), "POST", sim.arm_token),
            _request(f"{sim.base_url}{web0}/providers/Microsoft.Maintenance/scheduledevents", "POST", sim.arm_token),
            _request(_ack_url(sim, web0, "5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7"), "POST", sim.arm_token),
            _request(_ack_url(sim, web0, event_id), "GET", sim.arm_token),
        ]
        assert [(status, body["error"]["code"]) for status, body in answers] == [
            (401, "AuthenticationFailed"),
            (401, "AuthenticationFailed"),
            (400, "MissingApiVersionParameter"),
            (404, "NotFound"),
            (404, "NotFound"),
            (405, "MethodNotAllowed"),
        ]
        assert sim.approvals() == [] and _document(sim, "web-0")[0]["EventStatus"] == "Scheduled"


@given(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=80),
    st.text(max_size=40),
    st.sampled_from(["", "Bearer ", "Basic ", "bearer "]),
)
@settings(max_examples=examples(200), deadline=None)
def test_parse_approves_only_a_well_formed_acknowledge_with_the_token(path: str, token: str, scheme: str) -> None:
    """Pure: whatever the path and Authorization header, parse returns a request only for the acknowledge path with
    an api-version and exactly the bearer token held."""
    parsed = maintenance.parse(path, {"api-version": ["2025-11-01"]}, {"Authorization": scheme + token}, {"secret"})
    if isinstance(parsed, maintenance.AckRequest):
        assert maintenance.ACK.match(path) and scheme == "Bearer " and token.strip() == "secret"
    else:
        assert parsed.status in (401, 404)


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        ("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/web-1", ["web-1"]),
        ("/subscriptions/s/resourcegroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/ss", ["ss_0", "ss_1"]),
        ("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/web", []),
    ],
)
def test_the_vms_an_acknowledge_speaks_for(resource: str, expected: list[str]) -> None:
    base = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute"
    ids = {
        "web-1": f"{base}/virtualMachines/web-1",
        "ss_0": f"{base}/virtualMachineScaleSets/ss/virtualMachines/0",
        "ss_1": f"{base}/virtualMachineScaleSets/ss/virtualMachines/1",
    }
    assert maintenance.vms_of(resource, ids) == expected
