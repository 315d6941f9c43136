"""Failure cases across workers: a worker killed with SIGKILL, and a poison message on one partition."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from azure.eventhub import EventData, EventHubProducerClient

from collector.ship_eventhubs import EventHubsSink
from ingest import queries
from ingest.handler import Handler
from ingest.source import Delivery
from ingest.source_eventhubs import EventHubsSource
from ingest.writer import Writer
from sevents.retry import Backoff
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.azurite import Azurite
from tests.eventhubs.eh_fleet import FAST_BALANCE
from tests.helpers import eventually, numbered_transitions, outbox_rows

ROOT = Path(__file__).resolve().parents[2]


def _ship(endpoint: EventHubsEndpoint, records: list[dict[str, Any]]) -> set[str]:
    sink = EventHubsSink.from_connection_string(endpoint.connection_string())
    sink.send(outbox_rows(records, record_seq=True))
    sink.close()
    return {r["record_id"] for r in records}


class Collected:
    def __init__(self) -> None:
        self.items: list[Delivery] = []
        self.lock = threading.Lock()

    def __call__(self, batch: Sequence[Delivery]) -> None:
        with self.lock:
            self.items.extend(batch)

    def ids(self) -> set[str]:
        with self.lock:
            return {json.loads(d.payload)["record_id"] for d in self.items}


def _owners(store: Any, endpoint: EventHubsEndpoint) -> list[str]:
    owned = store.list_ownership(f"{endpoint.host}:{endpoint.port}", "hub", "$Default")
    return [o["owner_id"] for o in owned if o.get("owner_id")]


def test_killed_worker_partitions_are_taken_over_and_nothing_is_lost(
    endpoint: EventHubsEndpoint, azurite: Azurite, checkpoint_store: Any, tmp_path: Path
) -> None:
    """SIGKILL one worker process mid-stream: the survivor claims its partitions after expiry, nothing is lost.

    The killed worker is a real subprocess whose store is an fsync'd file (its own "ClickHouse"); the
    survivor runs in this process. Every record must be in the killed worker's file or reach the survivor.
    """
    store = checkpoint_store()
    container = checkpoint_store.container
    sent = _ship(endpoint, numbered_transitions(0, 200, vms=16))
    out = tmp_path / "killed.jsonl"
    env = {
        **os.environ,
        "SEVENTS_TEST_HUB": endpoint.connection_string(),
        "SEVENTS_TEST_CHECKPOINTS": azurite.connection_string,
    }
    victim = subprocess.Popen(
        [sys.executable, "-m", "tests.eventhubs.eh_worker_proc", container, str(out)], cwd=ROOT, env=env
    )
    try:
        assert eventually(lambda: out.exists() and len(out.read_text().splitlines()) >= 50, 60)
        survivor = Collected()
        source = EventHubsSource.from_connection_string(
            endpoint.connection_string(), checkpoint_store=checkpoint_store(), **FAST_BALANCE
        )
        stop = threading.Event()
        thread = threading.Thread(target=source.run, args=(survivor, stop), daemon=True)
        thread.start()
        assert eventually(lambda: len(set(_owners(store, endpoint))) == 2, 40)
        sent |= _ship(endpoint, numbered_transitions(200, 200, vms=16))
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        sent |= _ship(endpoint, numbered_transitions(400, 200, vms=16))
        stored_by_victim = {json.loads(line)["id"] for line in out.read_text().splitlines() if line.strip()}
        assert eventually(lambda: (stored_by_victim | survivor.ids()) >= sent, 60), len(
            sent - stored_by_victim - survivor.ids()
        )
        assert eventually(lambda: len(set(_owners(store, endpoint))) == 1, 30)
        stop.set()
        thread.join(30)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    partitions_of_survivor = {d.position.split(":")[1] for d in survivor.items}
    assert partitions_of_survivor == {"0", "1", "2", "3"}
    assert stored_by_victim, "the killed worker had stored part of the stream before it died"


def test_poison_message_on_one_partition_does_not_stop_the_others(
    endpoint: EventHubsEndpoint, ch: Any, db: str, checkpoint_store: Any
) -> None:
    """An undecodable event becomes a dead letter; every valid record on every partition is stored."""
    records = numbered_transitions(0, 120, vms=16)
    poison_partition = endpoint.store.partition_for_key(records[0]["vm_id"])
    with EventHubProducerClient.from_connection_string(endpoint.connection_string()) as producer:
        batch = producer.create_batch(partition_id=poison_partition)
        batch.add(EventData(b"\xff not json at all"))
        batch.add(EventData(json.dumps({"record_type": "transition", "schema_version": 99}).encode()))
        producer.send_batch(batch)
    sent = _ship(endpoint, records)
    handler = Handler(Writer(ch, db), source="eventhubs", stop=threading.Event(), backoff=Backoff(0.05, 0.5))
    source = EventHubsSource.from_connection_string(
        endpoint.connection_string(), checkpoint_store=checkpoint_store(), **FAST_BALANCE
    )
    stop = threading.Event()
    thread = threading.Thread(target=source.run, args=(handler, stop), daemon=True)
    thread.start()

    def counts() -> dict[str, Any]:
        return queries.run(ch, queries.COUNTS, db).dicts()[0]

    assert eventually(lambda: counts()["transitions"] == len(sent) and counts()["dead_letters"] == 2, 60), counts()
    stop.set()
    thread.join(30)
    assert source.failures == 0
    positions = ch.query(f"SELECT position FROM {db}.dead_letters").result_rows
    assert {p[0].split(":")[1] for p in positions} == {poison_partition}
    assert uuid.UUID(records[0]["vm_id"])
