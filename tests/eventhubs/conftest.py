"""Fixtures: the local Event Hubs endpoint (in-process, free port) and Azurite for blob checkpoints."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.chdb_fixtures import ch, ch_path, db
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.azurite import Azurite, CheckpointStores, running_azurite
from tests.eventhubs.hub_store import HubStore


@pytest.fixture
def endpoint() -> Iterator[EventHubsEndpoint]:
    """A fresh four-partition hub named ``hub`` on 127.0.0.1 with a free port."""
    server = EventHubsEndpoint(HubStore("hub", 4, consumer_groups=("$Default", "audit", "sevents-ingest"))).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """One Azurite blob service for the whole session (each test uses its own container)."""
    with running_azurite(tmp_path_factory.mktemp("azurite")) as running:
        yield running


@pytest.fixture
def checkpoint_store(azurite: Azurite) -> CheckpointStores:
    """A factory of checkpoint stores on a fresh container (one per test)."""
    return CheckpointStores.create(azurite, f"ckpt-{uuid.uuid4().hex[:12]}")
