"""A whole pipeline through Event Hubs in one process: simulator -> collectors -> hub -> ingest workers -> chdb.

The Event Hubs twin of ``demo.fleetrun``. Every part is the real one: the simulator on loopback, one
collector ``Collector`` per VM with an ``EventHubsSink``, the local AMQP endpoint, ``EventHubsSource`` workers
with Azurite checkpoints, and the ingest ``Handler`` writing to embedded ClickHouse.

Why the workers are threads sharing one handler: chdb admits one process per data directory, so workers
that must land in the same ClickHouse live in this process. Each worker has its own
``EventHubConsumerClient`` (its own AMQP connection and ownership claims), exactly as separate processes
would; only the final ``deliver`` is shared, behind a lock because one chdb client serves them all.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.process import Collector
from collector.settings import CollectorSettings
from collector.ship_eventhubs import EventHubsSink
from collector.wiring import build_agent
from ingest.handler import Handler
from ingest.source import Delivery
from ingest.source_eventhubs import EventHubsSource
from ingest.writer import Writer
from sevents.retry import Backoff
from simulator import SimServer, load_scenario
from tests.eventhubs.amqp_codec import split_sections
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.helpers import eventually

FAST_BALANCE = {"load_balancing_interval": 0.5, "ownership_expiry": 4.0, "max_wait_time": 0.2}


class SharedDeliver:
    """One ``deliver`` for every worker thread: serialises calls into the handler and notes what it stored."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.lock = threading.Lock()
        self.record_ids: set[str] = set()
        self.calls = 0

    def __call__(self, batch: Sequence[Delivery]) -> None:
        with self.lock:
            self.handler(batch)
            self.calls += 1
            for delivery in batch:
                try:
                    self.record_ids.add(str(json.loads(delivery.payload)["record_id"]))
                except (ValueError, KeyError, TypeError):
                    self.record_ids.add(delivery.position)


@dataclass
class Worker:
    source: EventHubsSource
    stop: threading.Event
    thread: threading.Thread


@dataclass
class EhFleet:
    """A running fleet; ``add_worker`` starts an ingest worker, ``stop_collectors`` drains the shippers."""

    sim: SimServer
    endpoint: EventHubsEndpoint
    deliver: SharedDeliver
    checkpoint_store: Callable[[], Any]
    agents: list[Collector] = field(default_factory=list)
    sinks: list[EventHubsSink] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    collectors_stop: threading.Event = field(default_factory=threading.Event)
    workers: list[Worker] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)

    def add_worker(self) -> Worker:
        source = EventHubsSource.from_connection_string(
            self.endpoint.connection_string(),
            checkpoint_store=self.checkpoint_store(),
            backoff=Backoff(initial=0.1, cap=0.5),
            **FAST_BALANCE,
        )
        stop = threading.Event()
        thread = _thread(self, lambda: source.run(self.deliver, stop), "ingest-worker")
        worker = Worker(source, stop, thread)
        self.workers.append(worker)
        return worker

    def stop_collectors(self, settle_s: float) -> None:
        """Let collectors see the last changes, then stop them (each drains its outbox into the hub)."""
        self.collectors_stop.wait(settle_s)
        self.collectors_stop.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def hub_records(self) -> dict[str, str]:
        """record id -> record type of every event the hub holds (duplicates collapse)."""
        return hub_records(self.endpoint)

    def balanced(self, workers: int) -> bool:
        """Whether every partition has an owner and ``workers`` distinct workers own them."""
        store = self.checkpoint_store()
        owned = store.list_ownership(f"{self.endpoint.host}:{self.endpoint.port}", self.endpoint.store.name, "$Default")
        owners = [o["owner_id"] for o in owned if o.get("owner_id")]
        return len(owners) == len(self.endpoint.store.partition_ids) and len(set(owners)) == workers

    def backlog(self) -> int:
        return sum(agent.outbox.depth() for agent in self.agents)

    def stop_workers(self) -> None:
        for worker in self.workers:
            worker.stop.set()
        for worker in self.workers:
            worker.thread.join(timeout=60)

    def close(self) -> None:
        self.collectors_stop.set()
        self.stop_workers()
        for agent in self.agents:
            agent.close()
        self.sim.stop()


def hub_records(endpoint: EventHubsEndpoint) -> dict[str, str]:
    """record id -> record type of every event ``endpoint`` holds; undecodable events keyed by position."""
    found = {}
    for partition in endpoint.store.partition_ids:
        for event in endpoint.store.events(partition):
            body = b"".join(bytes(v) for code, v, _ in split_sections(event.sections) if code == 0x75)
            try:
                record = json.loads(body)
                found[str(record["record_id"])] = str(record["record_type"])
            except (ValueError, KeyError, TypeError):
                found[f"eventhubs:{partition}:{event.sequence_number}"] = "poison"
    return found


def hub_positions(endpoint: EventHubsEndpoint) -> dict[str, tuple[str, float]]:
    """record id -> (position, enqueued time in seconds) of the first event that carried it."""
    found: dict[str, tuple[str, float]] = {}
    for partition in endpoint.store.partition_ids:
        for event in endpoint.store.events(partition):
            body = b"".join(bytes(v) for code, v, _ in split_sections(event.sections) if code == 0x75)
            try:
                record_id = str(json.loads(body)["record_id"])
            except (ValueError, KeyError, TypeError):
                continue
            position = f"eventhubs:{partition}:{event.sequence_number}"
            if record_id not in found or event.enqueued_ms / 1000 < found[record_id][1]:
                found[record_id] = (position, event.enqueued_ms / 1000)
    return found


def start_fleet(
    workdir: Path,
    endpoint: EventHubsEndpoint,
    client: Any,
    database: str,
    checkpoint_store: Callable[[], Any],
    *,
    scenario: str,
    speed: float | None = None,
    poll_interval: float = 0.5,
    workers: int = 0,
) -> EhFleet:
    """Start ``workers`` ingest workers and wait until they share the partitions, then the simulator and one
    collector per VM shipping to ``endpoint`` (more workers may be added later)."""
    sim = SimServer(load_scenario(scenario), speed=speed)
    handler = Handler(Writer(client, database), source="eventhubs", stop=threading.Event(), backoff=Backoff(0.05, 0.5))
    fleet = EhFleet(sim, endpoint, SharedDeliver(handler), checkpoint_store)
    try:
        for _ in range(workers):
            fleet.add_worker()
        if workers and not eventually(lambda: fleet.balanced(workers), 60):
            raise RuntimeError("the ingest workers did not settle on a share of the partitions")
        sim.start()
        base = CollectorSettings(sink="eventhubs")
        for name in sim.vm_names:
            settings = dataclasses.replace(
                base,
                imds_url=sim.vm_base_url(name),
                state_dir=workdir / "collectors" / name,
                poll_interval=poll_interval,
                heartbeat_interval=2.0,
                min_request_interval=0.0,
                first_call_timeout=10.0,
                ship_max_wait=0.0,
                drain_timeout=30.0,
            )
            sink = EventHubsSink.from_connection_string(endpoint.connection_string(), send_timeout=2)
            fleet.sinks.append(sink)
            fleet.agents.append(build_agent(settings, sink=sink))
        for agent in fleet.agents:
            fleet.threads.append(_thread(fleet, lambda a=agent: a.run(fleet.collectors_stop), "collector"))
    except BaseException:
        fleet.close()
        raise
    return fleet


def _thread(fleet: EhFleet, target: Callable[[], None], name: str) -> threading.Thread:
    def work() -> None:
        try:
            target()
        except BaseException as error:
            fleet.failures.append(error)
            raise

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    return thread
