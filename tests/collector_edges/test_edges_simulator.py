"""End to end against the IMDS simulator: one in-process agent per VM records what the simulator says happened."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from collector.settings import CollectorSettings
from collector.wiring import build_agent
from simulator import SimServer, load_scenario


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["platform-reboot", "cancelled"])
def test_agents_record_every_event_the_simulator_shows(scenario: str, tmp_path: Path) -> None:
    """Each VM's outbox holds appeared and disappeared for every event that reached it, with its identity."""
    with SimServer(load_scenario(scenario), speed=600).start() as sim:
        agents = [
            build_agent(
                CollectorSettings(
                    imds_url=sim.vm_base_url(name),
                    state_dir=tmp_path / name,
                    poll_interval=0.05,
                    min_request_interval=0.0,
                    retry_deadline=2.0,
                )
            )
            for name in sim.vm_names
        ]
        stop = threading.Event()
        threads = [threading.Thread(target=a.run, args=(stop,)) for a in agents]
        for thread in threads:
            thread.start()
        try:
            assert sim.wait_done(timeout=60)
            # Two more polls per agent: the first of them began after the end, so it saw the last disappearance
            # and (polls run one after another) was committed before the second began.
            polls = [a.polls for a in agents]
            deadline = time.monotonic() + 30
            while any(a.polls < p + 2 for a, p in zip(agents, polls, strict=True)):
                assert time.monotonic() < deadline, "agents stopped polling"
                stop.wait(0.02)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=10)
        truth = sim.truth()

    by_vm = {}
    for name, agent in zip(sim.vm_names, agents, strict=True):
        rows = [json.loads(r.payload) for r in agent.outbox.pending(limit=10_000)]
        by_vm[name] = [r for r in rows if r["record_type"] == "transition"]
        agent.close()
    reached = [t for t in truth if t["first_visible_at"] is not None]
    assert reached
    for fact in reached:
        mine = [r for r in by_vm[fact["vm_name"]] if r["event_id"] == fact["event_id"]]
        kinds = [r["kind"] for r in mine]
        assert kinds[0] == "appeared", (fact, kinds)
        if fact["outcome"] in ("completed", "cancelled"):
            assert kinds[-1] == "disappeared", (fact, kinds)
        for record in mine:
            assert record["vm_id"] == fact["vm_id"]
            assert record["fault_domain"] == fact["fault_domain"]
            assert record["event_type"] == fact["event_type"]
