"""The demo's coordinator: ``sevents-ingest coordinate``'s own loop beside the ingest, approving through the
simulator's Maintenance API, with leases in the workdir.

The embedded ClickHouse directory is opened by one process only, so the coordinator runs in the demo's process, on
a client of its own, as the ingest does: ``ingest.coordinator.run``, the very loop the command runs. Its rules are
the collectors' ``[approval]`` table (event types, sources, maximum duration); it acknowledges each event on the
simulator (``SimServer.acknowledge``, with the simulator's bearer token), which releases it for every VM in
Resources as their own approval through IMDS would; its leases are ``lease_backend = "local"`` in
``<workdir>/coordinator``. ``deadline_s`` is scaled to the scenario's speed: the demo gives a 15-minute notice in
well under a minute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from collector.approval import ApprovalPolicy
from ingest import coordinator
from ingest.clickhouse import connect
from ingest.coordinator_settings import CoordinatorSettings
from simulator import SimServer

NAME: Final = "coordinator-demo"
POLL_S: Final = 0.25  # how often it reads the readiness records (the collectors poll every second)
DEADLINE_SCENARIO_S: Final = 120.0  # the production default, in scenario seconds
TOKEN_S: Final = 3600


@dataclass(frozen=True)
class SimToken:
    """An azure-core token credential that hands out the simulator's bearer token (the demo has no Entra ID)."""

    token: str

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self.token, int(time.time()) + TOKEN_S)


def settings(policy: ApprovalPolicy, sim: SimServer, workdir: Path) -> CoordinatorSettings:
    """The coordinator's rules from the collectors' policy, its Azure the simulator, its leases in ``workdir``."""
    return CoordinatorSettings(
        event_types=policy.event_types,
        sources=policy.sources,
        max_duration_s=policy.max_duration_s,
        deadline_s=DEADLINE_SCENARIO_S / sim.speed,
        poll_interval=POLL_S,
        arm_endpoint=sim.base_url,
        lease_backend="local",
        lease_dir=workdir / "coordinator",
        lease_s=15,
        name=NAME,
    )


def runner(
    policy: ApprovalPolicy, sim: SimServer, workdir: Path, clickhouse: str, database: str
) -> Callable[[threading.Event], None]:
    """The coordinator's loop, to run on a thread of its own until the event given is set."""
    from ingest.coordinator_azure import Acknowledger

    own = settings(policy, sim, workdir)

    def run_until(stop: threading.Event) -> None:
        acks = Acknowledger(SimToken(sim.arm_token), own.arm_endpoint, own.api_version, name=NAME, timeout_s=5.0)
        client = connect(clickhouse)
        try:
            code = coordinator.run(own, client, database, stop, once=False, acks=acks)
        finally:
            acks.close()
            client.close()
        if code:
            raise RuntimeError(f"the demo's coordinator exited with {code}")

    return run_until
