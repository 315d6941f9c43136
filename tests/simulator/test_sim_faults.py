"""Fault injection: each fault kind, armed through POST /_sim/faults or a scenario file, seen by a client."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
import requests

from simulator import SimServer
from tests.helpers import FakeClock
from tests.simulator.conftest import HEADERS, events_url, small_scenario

EVENTS = [{"label": "freeze", "group": "web", "type": "Freeze", "at": 0}]


@pytest.fixture
def sim(start_sim: Callable[..., SimServer]) -> SimServer:
    """A fleet with one long-lived Scheduled event."""
    return start_sim(small_scenario(EVENTS), speed=1.0)


def arm(server: SimServer, http: requests.Session, **fault: object) -> None:
    r = http.post(server.base_url + "/_sim/faults", json=fault)
    assert r.status_code == 200, r.text
    assert r.json()["armed"] >= 1


def get(server: SimServer, http: requests.Session, vm: str = "web-0", timeout: float = 5.0) -> requests.Response:
    return http.get(events_url(server, vm), headers=HEADERS, timeout=timeout)


@pytest.mark.parametrize("kind,status", [("429", 429), ("410", 410), ("500", 500)])
def test_status_faults_hit_count_requests_of_one_vm(
    sim: SimServer, http: requests.Session, kind: str, status: int
) -> None:
    """A status fault answers the next ``count`` requests of its VM only, then IMDS recovers."""
    arm(sim, http, vm="web-0", kind=kind, count=2, retry_after=3)
    assert get(sim, http, "web-1").status_code == 200
    for _ in range(2):
        r = get(sim, http)
        assert r.status_code == status
        assert "error" in r.json()
        assert (r.headers.get("Retry-After") == "3") == (kind == "429")
    assert get(sim, http).status_code == 200
    assert sim.status()["faults_injected"] == {kind: 2}


def test_timeout_fault_never_answers(sim: SimServer, http: requests.Session) -> None:
    """A timeout fault holds the request past the client's timeout; the next request is served."""
    arm(sim, http, vm="web-0", kind="timeout", seconds=2)
    with pytest.raises(requests.exceptions.Timeout):
        get(sim, http, timeout=0.3)
    assert get(sim, http).status_code == 200


def test_slow_fault_answers_late_but_right(sim: SimServer, http: requests.Session) -> None:
    """A slow call (like IMDS's first call) is answered correctly after the delay."""
    arm(sim, http, vm="web-0", kind="slow", seconds=0.3)
    began = time.monotonic()
    r = get(sim, http)
    assert time.monotonic() - began >= 0.3
    assert r.status_code == 200 and len(r.json()["Events"]) == 1


def test_malformed_fault_sends_broken_json(sim: SimServer, http: requests.Session) -> None:
    """A malformed answer is a 200 whose body is not JSON."""
    arm(sim, http, vm="web-0", kind="malformed")
    r = get(sim, http)
    assert r.status_code == 200
    with pytest.raises(ValueError):
        json.loads(r.content)
    assert get(sim, http).json()["Events"]


def test_truncated_fault_cuts_the_body(sim: SimServer, http: requests.Session) -> None:
    """A truncated answer announces more bytes than it sends and closes the connection."""
    arm(sim, http, vm="web-0", kind="truncated")
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError)):
        get(sim, http)
    assert get(sim, http).status_code == 200


def test_reset_fault_resets_the_connection(sim: SimServer, http: requests.Session) -> None:
    """A reset closes the connection with RST before any answer."""
    arm(sim, http, vm="web-0", kind="reset")
    with pytest.raises(requests.exceptions.ConnectionError):
        get(sim, http)
    assert get(sim, http).status_code == 200


def test_fault_path_selects_the_endpoint(sim: SimServer, http: requests.Session) -> None:
    """A fault for instance metadata leaves scheduled events alone, and vice versa."""
    arm(sim, http, vm="web-0", kind="500", path="instance")
    assert get(sim, http).status_code == 200
    r = http.get(sim.vm_base_url("web-0") + "/metadata/instance?api-version=2021-02-01", headers=HEADERS)
    assert r.status_code == 500


def test_star_arms_every_vm(sim: SimServer, http: requests.Session) -> None:
    """``vm: "*"`` arms the fault once per VM."""
    arm(sim, http, vm="*", kind="500")
    assert [get(sim, http, vm).status_code for vm in sim.vm_names] == [500] * 4
    assert [get(sim, http, vm).status_code for vm in sim.vm_names] == [200] * 4


def test_bad_request_does_not_consume_a_fault(sim: SimServer, http: requests.Session) -> None:
    """A request IMDS rejects anyway (no Metadata header) gets its 400, not the fault."""
    arm(sim, http, vm="web-0", kind="500")
    assert http.get(events_url(sim, "web-0")).status_code == 400
    assert get(sim, http).status_code == 500


def test_invalid_fault_request_lists_problems(sim: SimServer, http: requests.Session) -> None:
    """POST /_sim/faults with bad fields is 400 listing each problem; nothing is armed."""
    r = http.post(sim.base_url + "/_sim/faults", json={"vm": "ghost", "kind": "418", "count": -1, "x": 1})
    assert r.status_code == 400
    problems = r.json()["problems"]
    assert len(problems) == 4
    assert http.post(sim.base_url + "/_sim/faults", data=b"nope").status_code == 400
    assert http.get(sim.base_url + "/_sim/faults").json() == []


def test_scenario_faults_arm_at_their_time(start_sim: Callable[..., SimServer], http: requests.Session) -> None:
    """Faults from a scenario file: a slow first call for everyone and 429s for one VM later on."""
    faults = [
        {"vms": ["*"], "kind": "slow", "seconds": 0.2},
        {"vms": ["web-1"], "kind": "429", "count": 1, "at": 600, "retry_after": 2},
    ]
    clock = FakeClock()  # scenario time moves when the test says; the slow call's 0.2 s is wall time
    server = start_sim(small_scenario(EVENTS, faults=faults), speed=1000.0, clock=clock)
    began = time.monotonic()
    assert get(server, http, "web-1").status_code == 200
    assert time.monotonic() - began >= 0.2
    pending = http.get(server.base_url + "/_sim/faults").json()
    assert {(f["vm"], f["kind"]) for f in pending} >= {("web-1", "429")}
    clock.advance(0.7)  # 700 scenario seconds: past the 429's 600
    r = get(server, http, "web-1")
    assert r.status_code == 429 and r.headers["Retry-After"] == "2"


def test_rate_limit_throttles_a_busy_vm(start_sim: Callable[..., SimServer], http: requests.Session) -> None:
    """With fleet.rate_limit = 5, a VM's sixth request within a second is 429 with Retry-After; others are fine."""
    scenario = small_scenario(EVENTS)
    scenario = replace(scenario, fleet=replace(scenario.fleet, rate_limit=5.0))
    server = start_sim(scenario, speed=1.0)
    # Poll until throttled (a slow machine may spread the first requests over more than a second).
    answers: list[requests.Response] = []
    while len(answers) < 60 and not any(r.status_code == 429 for r in answers):
        answers.append(get(server, http))
    assert [r.status_code for r in answers[:5]] == [200] * 5
    throttled = [r for r in answers if r.status_code == 429]
    assert throttled and all(r.headers["Retry-After"] == "1" for r in throttled)
    assert get(server, http, "web-1").status_code == 200
    assert server.status()["rate_limited"] == len(throttled)


def test_invalid_content_length_is_400(sim: SimServer) -> None:
    """A request whose Content-Length is not a number is answered 400, not dropped."""
    host, port = sim.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(
            b"POST /vm/web-0/metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\n"
            b"Host: x\r\nMetadata: true\r\nContent-Length: lots\r\n\r\n"
        )
        assert conn.recv(100).startswith(b"HTTP/1.1 400")


@pytest.mark.parametrize(
    "fault",
    [
        {"vm": "web-0", "kind": "500", "count": float("inf")},
        {"vm": "web-0", "kind": "500", "count": float("nan")},
        {"vm": "web-0", "kind": "timeout", "seconds": 1e300},
        {"vm": "web-0", "kind": "429", "retry_after": 1e300},
    ],
)
def test_absurd_fault_numbers_are_400(sim: SimServer, http: requests.Session, fault: dict[str, object]) -> None:
    """Non-finite or absurdly large fault numbers are refused with a problem list, and the server keeps serving."""
    r = http.post(sim.base_url + "/_sim/faults", data=json.dumps(fault), headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["problems"]
    assert get(sim, http).status_code == 200
    assert sim.faults.pending() == []


def test_deeply_nested_control_body_is_400(sim: SimServer, http: requests.Session) -> None:
    """A fault body nested deeper than the JSON parser's recursion limit is a 400, not a dropped connection."""
    r = http.post(sim.base_url + "/_sim/faults", data=b"[" * 50_000)
    assert r.status_code == 400
