"""IMDS protocol rules of the simulator, checked with plain HTTP requests against a running server."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import pytest
import requests

from simulator import SimServer
from simulator.protocol import INSTANCE_VERSIONS, SCHEDULED_EVENTS_VERSIONS
from tests.simulator.conftest import HEADERS, events_url, small_scenario

STILL = [
    {"label": "freeze", "group": "web", "vms": ["web-0", "web-1"], "type": "Freeze", "at": 0, "duration": 5},
    {"label": "failure", "group": "web", "vms": ["web-2"], "type": "Reboot", "status": "Started", "at": 0},
    {"label": "preempt", "group": "web", "vms": ["web-3"], "type": "Preempt", "at": 0, "notice": 900},
    {"label": "terminate", "group": "web", "vms": ["web-3"], "type": "Terminate", "at": 0, "notice": 900},
]


@pytest.fixture
def still(start_sim: Callable[..., SimServer]) -> SimServer:
    """A fleet whose events stay put for the test: real-time speed, 15 minutes of notice."""
    return start_sim(small_scenario(STILL), speed=1.0)


def test_missing_metadata_header_is_400(still: SimServer, http: requests.Session) -> None:
    """A request without ``Metadata: true`` gets 400 with an error body."""
    for headers in ({}, {"Metadata": "false"}):
        r = http.get(events_url(still, "web-0"), headers=headers)
        assert r.status_code == 400
        assert "metadata header" in r.json()["error"].lower()
    r = http.get(still.vm_base_url("web-0") + "/metadata/instance?api-version=2021-02-01")
    assert r.status_code == 400


def test_x_forwarded_for_is_rejected(still: SimServer, http: requests.Session) -> None:
    """A request that went through a proxy (X-Forwarded-For) is rejected."""
    r = http.get(events_url(still, "web-0"), headers={**HEADERS, "X-Forwarded-For": "10.1.2.3"})
    assert r.status_code == 400
    assert "X-Forwarded-For" in r.json()["error"]


@pytest.mark.parametrize("query", ["", "?api-version=", "?api-version=2018-01-01", "?api-version=latest"])
def test_missing_or_unknown_api_version_is_400_with_newest_versions(
    still: SimServer, http: requests.Session, query: str
) -> None:
    """A missing or unknown api-version gets 400 with ``error`` and the newest versions, newest first."""
    r = http.get(still.vm_base_url("web-0") + "/metadata/scheduledevents" + query, headers=HEADERS)
    assert r.status_code == 400
    body = r.json()
    assert set(body) == {"error", "newest-versions"}
    assert body["newest-versions"] == ["2020-07-01", "2019-08-01", "2019-04-01"]
    r = http.get(still.vm_base_url("web-0") + "/metadata/instance" + query, headers=HEADERS)
    assert r.status_code == 400
    assert r.json()["newest-versions"][0] == max(INSTANCE_VERSIONS)


def _doc(server: SimServer, http: requests.Session, vm: str, version: str) -> dict:
    r = http.get(events_url(server, vm, version), headers=HEADERS)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    return r.json()


EXPECTED_FIELDS = {
    "2017-03-01": set(),
    "2017-08-01": set(),
    "2017-11-01": set(),
    "2019-01-01": set(),
    "2019-04-01": {"Description"},
    "2019-08-01": {"Description", "EventSource"},
    "2020-07-01": {"Description", "EventSource", "DurationInSeconds"},
}


@pytest.mark.parametrize("version", SCHEDULED_EVENTS_VERSIONS)
def test_document_shape_per_version(still: SimServer, http: requests.Session, version: str) -> None:
    """Each api-version shows exactly its fields and event types; 2017-03-01 prefixes resource names."""
    doc = _doc(still, http, "web-0", version)
    assert set(doc) == {"DocumentIncarnation", "Events"}
    assert isinstance(doc["DocumentIncarnation"], int)
    base = {"EventId", "EventStatus", "EventType", "ResourceType", "Resources", "NotBefore"}
    for event in doc["Events"]:
        assert set(event) == base | EXPECTED_FIELDS[version]
        assert event["ResourceType"] == "VirtualMachine"
        prefixed = [r.startswith("_") for r in event["Resources"]]
        assert all(prefixed) if version == "2017-03-01" else not any(prefixed)
    types = {e["EventType"] for e in doc["Events"]}
    expected = {"Freeze", "Reboot"}
    expected |= {"Preempt"} if version >= "2017-11-01" else set()
    expected |= {"Terminate"} if version >= "2019-01-01" else set()
    assert types == expected


def test_latest_path_form_only_for_2017_03_01(still: SimServer, http: requests.Session) -> None:
    """2017-03-01 is served under /metadata/latest/...; other path/version pairings are 400."""
    base = still.vm_base_url("web-0")
    ok = http.get(base + "/metadata/latest/scheduledevents?api-version=2017-03-01", headers=HEADERS)
    assert ok.status_code == 200
    bad = http.get(base + "/metadata/latest/scheduledevents?api-version=2020-07-01", headers=HEADERS)
    assert bad.status_code == 400
    bad = http.get(base + "/metadata/scheduledevents?api-version=2017-03-01", headers=HEADERS)
    assert bad.status_code == 400


def test_not_before_rfc1123_while_scheduled_blank_once_started(still: SimServer, http: requests.Session) -> None:
    """NotBefore is an RFC 1123 date about 15 minutes ahead while Scheduled and blank once Started."""
    events = {e["EventType"]: e for e in _doc(still, http, "web-1", "2020-07-01")["Events"]}
    freeze, reboot = events["Freeze"], events["Reboot"]
    assert freeze["EventStatus"] == "Scheduled"
    assert freeze["NotBefore"].endswith(" GMT") and freeze["NotBefore"][3:5] == ", "
    not_before = parsedate_to_datetime(freeze["NotBefore"])
    ahead = not_before - datetime.now(UTC)
    assert timedelta(minutes=14) < ahead <= timedelta(minutes=15)
    assert reboot["EventStatus"] == "Started" and reboot["NotBefore"] == ""
    assert reboot["DurationInSeconds"] == -1 and freeze["DurationInSeconds"] == 5


def test_every_vm_of_the_group_sees_the_group_event(still: SimServer, http: requests.Session) -> None:
    """An availability-set event reaches every member; Resources lists only the affected VMs."""
    ids = set()
    for vm in still.vm_names:
        freeze = [e for e in _doc(still, http, vm, "2020-07-01")["Events"] if e["EventType"] == "Freeze"]
        assert len(freeze) == 1 and freeze[0]["Resources"] == ["web-0", "web-1"]
        ids.add(freeze[0]["EventId"])
    assert len(ids) == 1


def test_same_incarnation_same_document(still: SimServer, http: requests.Session) -> None:
    """Polling without changes returns the same incarnation and identical events."""
    first = _doc(still, http, "web-0", "2020-07-01")
    second = _doc(still, http, "web-0", "2020-07-01")
    assert first == second


def test_approval_200_for_valid_ids_also_when_repeated(still: SimServer, http: requests.Session) -> None:
    """POST StartRequests with a valid id is 200, twice, from any VM that sees it; the approval is recorded."""
    doc = _doc(still, http, "web-3", "2020-07-01")
    freeze = next(e for e in doc["Events"] if e["EventType"] == "Freeze")
    body = json.dumps({"StartRequests": [{"EventId": freeze["EventId"]}]})
    before = datetime.now(UTC)
    for vm in ("web-3", "web-3", "web-0"):
        r = http.post(events_url(still, vm), data=body, headers=HEADERS)
        assert r.status_code == 200, r.text
    after = _doc(still, http, "web-0", "2020-07-01")
    started = next(e for e in after["Events"] if e["EventId"] == freeze["EventId"])
    assert started["EventStatus"] == "Started" and started["NotBefore"] == ""
    assert after["DocumentIncarnation"] == doc["DocumentIncarnation"] + 1
    rows = [r for r in still.truth() if r["event_id"] == freeze["EventId"]]
    assert {r["approved_by"] for r in rows} == {"web-3"}
    assert all(before <= r["approved_at"] <= datetime.now(UTC) for r in rows)
    assert [a[1] for a in still.approvals()] == ["web-3", "web-3", "web-0"]
    served = http.get(still.base_url + "/_sim/approvals").json()
    assert [(a["vm"], a["event_id"], a["source"]) for a in served] == [
        ("web-3", freeze["EventId"], "http"),
        ("web-3", freeze["EventId"], "http"),
        ("web-0", freeze["EventId"], "http"),
    ]


def test_approval_with_old_style_document_incarnation(still: SimServer, http: requests.Session) -> None:
    """The 2017 approval body, which also carries DocumentIncarnation, is accepted."""
    doc = _doc(still, http, "web-0", "2017-03-01")
    freeze = next(e for e in doc["Events"] if e["EventType"] == "Freeze")
    body = {"DocumentIncarnation": str(doc["DocumentIncarnation"]), "StartRequests": [{"EventId": freeze["EventId"]}]}
    r = http.post(events_url(still, "web-0", "2017-03-01"), json=body, headers=HEADERS)
    assert r.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b"{}",
        b'{"StartRequests": {}}',
        b'{"StartRequests": []}',
        b'{"StartRequests": [{}]}',
        b'{"StartRequests": [{"EventId": 5}]}',
        b'{"StartRequests": ["abc"]}',
        b"\xff\xfe",
    ],
)
def test_malformed_approval_is_400(still: SimServer, http: requests.Session, body: bytes) -> None:
    """A malformed approval body is 400 and approves nothing."""
    r = http.post(events_url(still, "web-0"), data=body, headers=HEADERS)
    assert r.status_code == 400
    assert "error" in r.json()
    assert still.approvals() == []


def test_approval_of_unknown_event_is_400(still: SimServer, http: requests.Session) -> None:
    """An EventId this VM never saw is not valid: 400."""
    body = {"StartRequests": [{"EventId": "00000000-0000-0000-0000-000000000000"}]}
    r = http.post(events_url(still, "web-0"), json=body, headers=HEADERS)
    assert r.status_code == 400


def test_approval_needs_metadata_header(still: SimServer, http: requests.Session) -> None:
    """POST without the Metadata header is 400 like GET."""
    r = http.post(events_url(still, "web-0"), json={"StartRequests": [{"EventId": "x"}]})
    assert r.status_code == 400


@pytest.mark.parametrize(
    "version", ["2017-03-01", "2017-04-02", "2017-08-01", "2017-12-01", "2019-03-11", "2021-02-01"]
)
def test_instance_metadata_fields_by_version(still: SimServer, http: requests.Session, version: str) -> None:
    """/metadata/instance has the real shape and adds fields by api-version as DESIGN.md lists."""
    r = http.get(still.vm_base_url("web-3") + f"/metadata/instance?api-version={version}", headers=HEADERS)
    assert r.status_code == 200
    doc = r.json()
    assert set(doc) == {"compute", "network"}
    compute = doc["compute"]
    assert compute["name"] == "web-3" and compute["location"] == "westeurope"
    truth_vm = next(row for row in still.truth() if row["vm_name"] == "web-3")
    assert compute["vmId"] == truth_vm["vm_id"]
    since = {
        "platformFaultDomain": "2017-04-02",
        "subscriptionId": "2017-08-01",
        "resourceGroupName": "2017-08-01",
        "zone": "2017-12-01",
        "vmScaleSetName": "2017-12-01",
        "resourceId": "2019-03-11",
    }
    for field, first in since.items():
        assert (field in compute) == (version >= first), field
    if version >= "2017-04-02":
        assert compute["platformFaultDomain"] == "1" and compute["platformUpdateDomain"] == "3"
    if version >= "2019-03-11":
        assert compute["resourceId"].endswith("/providers/Microsoft.Compute/virtualMachines/web-3")
    assert doc["network"]["interface"][0]["ipv4"]["ipAddress"][0]["privateIpAddress"].startswith("10.")


def test_unknown_vm_and_path_are_404(still: SimServer, http: requests.Session) -> None:
    """Unknown VMs and paths are 404; the bare /metadata path answers as the first VM."""
    assert http.get(events_url(still, "nope"), headers=HEADERS).status_code == 404
    assert (
        http.get(still.vm_base_url("web-0") + "/metadata/other?api-version=2020-07-01", headers=HEADERS).status_code
        == 404
    )
    bare = http.get(still.base_url + "/metadata/scheduledevents?api-version=2020-07-01", headers=HEADERS)
    assert bare.json() == _doc(still, http, "web-0", "2020-07-01")


def test_truth_endpoint_serves_the_interface_shape(still: SimServer, http: requests.Session) -> None:
    """GET /_sim/truth returns one JSON row per (event, VM) with the agreed keys and UTC times."""
    rows = http.get(still.base_url + "/_sim/truth").json()
    assert len(rows) == 4 * 4
    keys = {
        "event_id", "vm_name", "vm_id", "fault_domain", "update_domain", "event_type", "event_source",
        "description", "duration_s", "resources", "first_visible_at", "not_before", "approved_at", "started_at",
        "ended_at", "outcome",
    }  # fmt: skip
    for row in rows:
        assert keys <= set(row)
        assert row["outcome"] == "active"
        assert row["first_visible_at"].endswith("Z")
    status = http.get(still.base_url + "/_sim/status").json()
    assert status["done"] is False and status["vms"] == 4


def test_vms_and_history_endpoints(still: SimServer, http: requests.Session) -> None:
    """GET /_sim/vms lists each VM's identity and base path; /_sim/history the documents a VM went through."""
    vms = http.get(still.base_url + "/_sim/vms").json()
    assert [(v["name"], v["fault_domain"], v["base_path"]) for v in vms] == [
        ("web-0", 0, "/vm/web-0"),
        ("web-1", 1, "/vm/web-1"),
        ("web-2", 0, "/vm/web-2"),
        ("web-3", 1, "/vm/web-3"),
    ]
    docs = http.get(still.base_url + "/_sim/history?vm=web-3").json()
    assert [d["incarnation"] for d in docs] == [1, 2]
    assert len(docs[1]["events"]) == 4 and docs[0]["events"] == []
    assert http.get(still.base_url + "/_sim/history?vm=ghost").status_code == 404
    assert http.get(still.base_url + "/_sim/nothing").status_code == 404


def test_deeply_nested_approval_body_is_400(still: SimServer, http: requests.Session) -> None:
    """An approval body nested deeper than the JSON parser's recursion limit is 400 and approves nothing."""
    r = http.post(events_url(still, "web-0"), data=b"[" * 50_000, headers=HEADERS)
    assert r.status_code == 400
    assert still.approvals() == []
