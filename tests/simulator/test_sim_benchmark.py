"""Benchmark: how many IMDS polls per second the simulator serves, against a bare-HTTP baseline (same run)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest
import requests

from simulator import SimServer, load_scenario
from tests.simulator.conftest import HEADERS, events_url

N = 600


@pytest.mark.benchmark
def test_poll_throughput(start_sim: Callable[..., SimServer], http: requests.Session) -> None:
    """Print polls/s of the demo fleet's documents and the ratio to a 404 answered without the engine."""
    server = start_sim(replace(load_scenario("demo"), faults=()), speed=20.0)
    names = server.vm_names
    began = time.perf_counter()
    for _ in range(N):
        assert http.get(server.base_url + "/vm/nobody/metadata/none", headers=HEADERS).status_code == 404
    baseline = N / (time.perf_counter() - began)
    began = time.perf_counter()
    for i in range(N):
        assert http.get(events_url(server, names[i % len(names)]), headers=HEADERS).status_code == 200
    polls = N / (time.perf_counter() - began)
    print(
        f"\nbaseline 404: {baseline:.0f} req/s; scheduled events polls: {polls:.0f} req/s; ratio {polls / baseline:.2f}"
    )
    print(f"a 36-VM fleet polling once per second uses {36 / polls:.1%} of one simulator's capacity")
