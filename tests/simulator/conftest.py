"""Fixtures for the simulator tests: a running SimServer per test and plain-HTTP helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from simulator import SimServer, load_scenario
from simulator.loader import parse_scenario
from simulator.scenario import Scenario

HEADERS = {"Metadata": "true"}


@pytest.fixture
def start_sim() -> Iterator[Callable[..., SimServer]]:
    """Start SimServers on 127.0.0.1:0 and stop them all after the test."""
    servers: list[SimServer] = []

    def start(scenario: str | Scenario, speed: float = 2000.0, **kwargs: Any) -> SimServer:
        scn = load_scenario(scenario) if isinstance(scenario, str) else scenario
        server = SimServer(scn, speed=speed, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def http() -> Iterator[requests.Session]:
    """A session that never goes through a proxy, as every IMDS client must."""
    with requests.Session() as session:
        session.trust_env = False
        yield session


def small_scenario(events: list[dict[str, Any]], **extra: Any) -> Scenario:
    """A scenario with one 4-VM availability set over 2 fault domains and the given events."""
    data: dict[str, Any] = {
        "name": "test",
        "fleet": {"groups": [{"name": "web", "kind": "availability-set", "size": 4, "fault_domains": 2}]},
        "events": events,
        **extra,
    }
    return parse_scenario(data, "test")


def events_url(server: SimServer, vm: str, version: str = "2020-07-01") -> str:
    """The scheduled-events URL of ``vm`` for ``version`` (the latest path form for 2017-03-01)."""
    path = "/metadata/latest/scheduledevents" if version == "2017-03-01" else "/metadata/scheduledevents"
    return f"{server.vm_base_url(vm)}{path}?api-version={version}"
