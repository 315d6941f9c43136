"""Stable ownership across worker processes: a killed worker restarted under its owner id takes its own back."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from ingest.source import Delivery
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.azurite import Azurite
from tests.eventhubs.eh_ingest_proc import StoreService
from tests.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
EXPIRY_S = 30.0  # far longer than the test: every partition served again came back before its claim expired


class Stored:
    """What the workers stored, through the store service: numbers by partition."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.numbers: dict[str, list[int]] = {}

    def __call__(self, batch: Sequence[Delivery]) -> None:
        with self.lock:
            for d in batch:
                self.numbers.setdefault(d.position.split(":")[1], []).append(json.loads(d.payload)["n"])

    def all(self) -> set[int]:
        with self.lock:
            return {n for numbers in self.numbers.values() for n in numbers}


def _send(endpoint: EventHubsEndpoint, numbers: range) -> None:
    with EventHubProducerClient.from_connection_string(endpoint.connection_string()) as producer:
        for partition in ("0", "1", "2", "3"):
            batch = producer.create_batch(partition_id=partition)
            for n in numbers:
                if n % 4 == int(partition):
                    batch.add(EventData(json.dumps({"n": n, "record_id": str(n)})))
            producer.send_batch(batch)


def _owners(store: Any, endpoint: EventHubsEndpoint) -> dict[str, str]:
    listed = store.list_ownership(f"{endpoint.host}:{endpoint.port}", "hub", "$Default")
    return {o["partition_id"]: o.get("owner_id") or "" for o in listed}


@pytest.mark.slow
def test_a_restarted_worker_resumes_its_partitions_and_the_live_one_keeps_its_own(
    endpoint: EventHubsEndpoint, azurite: Azurite, checkpoint_store: Any
) -> None:
    """SIGKILL worker b, start it again under the same id: b's partitions go back to b, a never takes any of them.

    Nothing is lost, and every partition of b is served again long before its claims would have expired.
    """
    stored, key = Stored(), secrets.token_hex(8)
    service = StoreService(stored, key.encode())
    store = checkpoint_store()
    env = {
        **os.environ,
        "SEVENTS_TEST_HUB": endpoint.connection_string(),
        "SEVENTS_TEST_CHECKPOINTS": azurite.connection_string,
        "SEVENTS_TEST_STORE_KEY": key,
    }

    def start(owner: str) -> subprocess.Popen[bytes]:
        args = [checkpoint_store.container, owner, str(service.port), str(EXPIRY_S)]
        return subprocess.Popen([sys.executable, "-m", "tests.eventhubs.eh_ingest_proc", *args], cwd=ROOT, env=env)

    workers = {"a": start("a"), "b": start("b")}
    try:
        assert eventually(lambda: sorted(_owners(store, endpoint).values()) == ["a", "a", "b", "b"], 60)
        before = _owners(store, endpoint)
        seen: set[tuple[str, str]] = set()
        watching = threading.Event()

        def watch() -> None:
            while not watching.wait(0.1):
                seen.update(_owners(store, endpoint).items())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        _send(endpoint, range(200))
        assert eventually(lambda: stored.all() >= set(range(200)), 60)
        workers["b"].send_signal(signal.SIGKILL)
        workers["b"].wait(10)
        killed_at = time.monotonic()
        _send(endpoint, range(200, 400))
        workers["b"] = start("b")
        assert eventually(lambda: stored.all() >= set(range(400)), 60), set(range(400)) - stored.all()
        assert time.monotonic() - killed_at < EXPIRY_S
        assert _owners(store, endpoint) == before
        watching.set()
        watcher.join(5)
        assert seen == set(before.items())  # no partition ever changed hands, not even for a moment
    finally:
        for worker in workers.values():
            worker.send_signal(signal.SIGTERM)
        for worker in workers.values():
            worker.wait(30)
        service.close()
    assert all(owner == "" for owner in _owners(store, endpoint).values())  # a clean stop releases every claim
