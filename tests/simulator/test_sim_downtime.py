"""A VM that is really down answers nothing until it runs again, as in Azure; the truth says how long it was down."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import requests

from simulator import SimServer, load_scenario
from simulator.state import DownSpan
from tests.helpers import wait_for
from tests.simulator.conftest import HEADERS, events_url


def _first_span(server: SimServer, vm: str) -> DownSpan:
    def spans() -> list[DownSpan]:
        return [d for d in server.downtime() if d.vm_name == vm]

    wait_for(spans, 30, what=f"{vm} to go down", interval=0.01)
    return spans()[0]


def test_a_down_vm_is_answered_only_once_it_runs_again(
    start_sim: Callable[..., SimServer], http: requests.Session
) -> None:
    """web-0's Freeze pauses it for 4 wall seconds whatever the speed: its request waits, web-3's does not."""
    server = start_sim("vm-downtime", speed=100.0)
    span = _first_span(server, "web-0")
    assert span.how == "pause" and span.down_s == 4.0
    running = http.get(events_url(server, "web-3"), headers=HEADERS, timeout=10)
    assert running.status_code == 200 and server.served("web-3")[-1] < span.ended_at
    held = http.get(events_url(server, "web-0"), headers=HEADERS, timeout=10)
    assert held.status_code == 200
    assert server.served("web-0")[-1] >= span.ended_at
    assert datetime.now(UTC) >= span.ended_at


def test_downtime_is_served_as_ground_truth(start_sim: Callable[..., SimServer], http: requests.Session) -> None:
    """``/_sim/downtime`` lists each stretch a VM was down: its event (none for an unannounced pause) and how."""
    server = start_sim("vm-downtime", speed=2000.0)
    assert server.wait_done(30)
    wait_for(lambda: len(server.downtime()) >= 3, 10, what="three stretches of downtime")
    spans = http.get(f"{server.base_url}/_sim/downtime", timeout=10).json()
    got = sorted((s["vm_name"], s["how"], s["down_s"], s["event_id"] == "") for s in spans)
    assert got == [("web-0", "pause", 4.0, False), ("web-1", "reboot", 5.0, False), ("web-2", "pause", 3.0, True)]


def test_downtime_is_off_unless_the_scenario_asks() -> None:
    """Without ``fleet.downtime`` or an event's ``down``, VMs keep running through their events (older scenarios)."""
    reboot = load_scenario("platform-reboot")
    assert all(e.down_s == 0 for e in reboot.events)
    demo = load_scenario("demo")
    downs = {e.label: e.down_s for e in demo.events}
    assert downs["reboot"] == 5.0 and downs["redeploy"] == 8.0 and downs["wave-fd0"] == 5.0  # Freeze: announced
    assert downs["cancelled"] == 7.0 and len(demo.pauses) == 1
