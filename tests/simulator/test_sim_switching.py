"""Scheduled Events switching on (a slow first call) and off (after idle_off without polls), on a manual clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import requests

from simulator import SimServer
from simulator.loader import parse_scenario
from tests.helpers import FakeClock
from tests.simulator.conftest import HEADERS, events_url


def _doc(server: SimServer, http: requests.Session, vm: str, version: str) -> Any:
    r = http.get(events_url(server, vm, version), headers=HEADERS)
    assert r.status_code == 200, r.text
    return r.json()


def test_first_call_is_slow_and_idle_switches_off(start_sim: Callable[..., SimServer], http: requests.Session) -> None:
    """The call that switches Scheduled Events on is slow; after idle_off without polls it starts over."""
    data = {
        "fleet": {"idle_off": 400, "first_call_delay": 1.0, "groups": [{"name": "web", "size": 2}]},
        "events": [{"group": "web", "type": "Freeze", "at": 0, "notice": 1000, "started_for": 100}],
    }
    # Scenario time moves only when told, so a slow machine cannot switch the VM off between two polls; the
    # first-call delay is wall time, and only its lower bound (and a far larger one for the next call) is checked.
    clock = FakeClock()
    server = start_sim(parse_scenario(data, "idle"), speed=1000.0, clock=clock)
    began = time.monotonic()
    first = _doc(server, http, "web-0", "2020-07-01")
    assert time.monotonic() - began >= 1.0
    assert first["DocumentIncarnation"] == 2 and first["Events"][0]["EventStatus"] == "Scheduled"
    began = time.monotonic()
    assert _doc(server, http, "web-0", "2020-07-01") == first
    assert time.monotonic() - began < 1.0  # no longer switching on
    clock.advance(1.2)  # 1200 scenario seconds without a poll: the event is over and Scheduled Events is off
    assert server.wait_done(30)
    began = time.monotonic()
    again = _doc(server, http, "web-0", "2020-07-01")
    assert time.monotonic() - began >= 1.0
    assert again == {"DocumentIncarnation": 1, "Events": []}
