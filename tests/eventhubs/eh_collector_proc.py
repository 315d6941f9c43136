"""A process of collectors, one per simulated VM, each shipping to Event Hubs through the sink its settings build.

Collectors run one per VM, each in a process of its own; the benchmark runs the fleet's collectors in a few
processes so that they do not share one interpreter lock with the simulator, the store and each other (in one
process with the rest, a transition waited for the lock on its way from the poll to the hub). Each collector
is ``collector.wiring.build_agent`` with ``sink = "eventhubs"``: the sink, the shipper and the webhook the
settings describe, as ``sevents-collector run`` builds them.

The VMs come on stdin (JSON: ``{"vms": {name: imds_url}, "state_dir": path, "poll": s, "webhook_url": url}``),
the hub's connection string from the environment (``SEVENTS_TEST_HUB``), never the command line. Prints
``sending`` once every collector has sent to the hub; on SIGTERM each stops polling, drains its outbox
(``drain_timeout``) and the process exits.
Usage: python -m tests.eventhubs.eh_collector_proc < vms.json
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from collector.process import Collector
from collector.settings import CollectorSettings
from collector.ship_eventhubs import EventHubsSink
from collector.wiring import build_agent

BASE = CollectorSettings(
    sink="eventhubs",
    heartbeat_interval=2.0,
    min_request_interval=0.0,
    first_call_timeout=10.0,
    ship_max_wait=0.0,
    drain_timeout=30.0,
)


def collectors(config: dict[str, object], hub: str) -> list[Collector]:
    vms = config["vms"]
    assert isinstance(vms, dict)
    out = []
    for name, url in vms.items():
        settings = dataclasses.replace(
            BASE,
            imds_url=str(url),
            state_dir=Path(str(config["state_dir"])) / name,
            poll_interval=float(str(config["poll"])),
            eventhubs_connection_string=hub,
            webhook_url=str(config.get("webhook_url") or ""),
        )
        out.append(build_agent(settings))
    return out


def sending(fleet: list[Collector]) -> bool:
    return all(isinstance(c.sink, EventHubsSink) and c.sink.batches_sent for c in fleet)


def main() -> int:
    logging.basicConfig(level=logging.ERROR, format="%(relativeCreated)6d ms %(name)s %(message)s")
    config = json.load(sys.stdin)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    faulthandler.register(signal.SIGUSR1)  # a harness that waits too long can ask where each thread is
    fleet = collectors(config, os.environ["SEVENTS_TEST_HUB"])
    threads = [threading.Thread(target=c.run, args=(stop,), name="collector", daemon=True) for c in fleet]
    for thread in threads:
        thread.start()
    while not sending(fleet) and not stop.wait(0.05):
        pass
    print("sending", flush=True)
    while not stop.wait(0.5):  # a wait with no timeout never returns if SIGTERM lands on another thread
        pass
    deadline = time.monotonic() + BASE.drain_timeout + 10
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    for collector in fleet:
        collector.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
