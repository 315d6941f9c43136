"""The shipped programs wired to Event Hubs: ``sevents-ingest run --source eventhubs`` and the collector's sink."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from collector.settings import load_settings
from collector.ship import make_sink
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.azurite import Azurite, CheckpointStores
from tests.helpers import eventually, numbered_transitions, outbox_rows

BIN = Path(sys.executable).parent
SECRET = "k3y-that-must-never-be-logged"


@pytest.fixture
def secret_endpoint() -> Any:
    """An endpoint whose SAS key is distinctive enough to search logs for."""
    with EventHubsEndpoint(key=SECRET) as server:
        yield server


def test_collector_settings_build_a_working_sink_without_logging_the_secret(
    secret_endpoint: EventHubsEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """sink=eventhubs with the connection string in the environment ships rows; no log line holds the key."""
    env = {"SEVENTS_SINK": "eventhubs", "SEVENTS_EVENTHUBS_CONNECTION_STRING": secret_endpoint.connection_string()}
    caplog.set_level(logging.DEBUG)
    settings = load_settings(env=env)
    assert SECRET not in repr(settings)
    sink = make_sink(settings)
    assert sink is not None
    sink.send(outbox_rows(numbered_transitions(0, 5, vms=8), record_seq=True))
    sink.close()
    assert secret_endpoint.store.total() == 5
    assert all(SECRET not in record.getMessage() + str(record.__dict__) for record in caplog.records)


@pytest.mark.slow
def test_ingest_cli_loads_the_hub_into_clickhouse_and_checkpoints(
    secret_endpoint: EventHubsEndpoint, azurite: Azurite, tmp_path: Path
) -> None:
    """``sevents-ingest run --source eventhubs`` stores every record, checkpoints, stops on SIGTERM, logs no key."""
    sink = make_sink(
        load_settings(
            env={
                "SEVENTS_SINK": "eventhubs",
                "SEVENTS_EVENTHUBS_CONNECTION_STRING": secret_endpoint.connection_string(),
            }
        )
    )
    assert sink is not None
    sink.send(outbox_rows(numbered_transitions(0, 60, vms=8), record_seq=True))
    sink.close()
    stores = CheckpointStores.create(azurite, "cli")
    env = {
        **os.environ,
        "SEVENTS_EVENTHUBS_CONNECTION_STRING": secret_endpoint.connection_string(),
        "SEVENTS_EVENTHUBS_NAME": "hub",
        "SEVENTS_CHECKPOINT_CONNECTION_STRING": azurite.connection_string,
        "SEVENTS_CHECKPOINT_CONTAINER": "cli",
    }
    target = f"chdb://{tmp_path / 'ch'}"
    command = [str(BIN / "sevents-ingest"), "run", "--source", "eventhubs", "--clickhouse", target]
    process = subprocess.Popen([*command, "--batch-max-wait", "0.2"], env=env, stderr=subprocess.PIPE, text=True)
    store = stores()
    last = {p: len(secret_endpoint.store.events(p)) - 1 for p in secret_endpoint.store.partition_ids}

    def checkpointed() -> bool:
        found = store.list_checkpoints(f"{secret_endpoint.host}:{secret_endpoint.port}", "hub", "sevents-ingest")
        done = {c["partition_id"]: c["sequence_number"] for c in found}
        return all(done.get(p, -1) == seq for p, seq in last.items() if seq >= 0)

    try:
        assert eventually(checkpointed, 90)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr[-2000:]
    assert SECRET not in stderr
    counts = subprocess.run(
        [str(BIN / "sevents-ingest"), "audit", "counts", "--clickhouse", target, "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = json.loads(counts.stdout)
    row = rows[0] if isinstance(rows, list) else rows
    assert row["transitions"] == 60
