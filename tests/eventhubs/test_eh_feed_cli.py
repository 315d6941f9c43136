"""``sevents-ingest run --feed-eventhub``: the central feed's hub read beside the collectors' hub, in one process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from collector.settings import load_settings
from collector.ship import make_sink
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.azurite import Azurite, CheckpointStores
from tests.eventhubs.hub_store import HubStore
from tests.helpers import eventually, numbered_transitions, outbox_rows
from tests.ingest.feed_events import cloud_event, resource_info

BIN = Path(sys.executable).parent


@pytest.mark.slow
def test_run_reads_the_feed_beside_the_collectors_hub(
    endpoint: EventHubsEndpoint, azurite: Azurite, tmp_path: Path
) -> None:
    """Collector records on their hub and a CloudEvent on the feed's own hub (its own connection string) are both
    stored by one ``run``, which stops on SIGTERM with exit 0; ``audit events`` then lists the feed's event as seen by
    the platform only."""
    sink = make_sink(
        load_settings(
            env={"SEVENTS_SINK": "eventhubs", "SEVENTS_EVENTHUBS_CONNECTION_STRING": endpoint.connection_string()}
        )
    )
    assert sink is not None
    sink.send(outbox_rows(numbered_transitions(0, 8, vms=8), record_seq=True))
    sink.close()
    now = datetime.now(UTC)
    info = resource_info("E-platform", "Scheduled", ["vm-900"], not_before="")
    with EventHubsEndpoint(HubStore("feed", 2)) as feed:
        with EventHubProducerClient.from_connection_string(feed.connection_string()) as producer:
            batch = producer.create_batch()
            batch.add(EventData(json.dumps(cloud_event("ce-9", info, now - timedelta(minutes=1)))))
            producer.send_batch(batch)
        CheckpointStores.create(azurite, "feedcli")
        env = {
            **os.environ,
            "SEVENTS_EVENTHUBS_CONNECTION_STRING": endpoint.connection_string(),
            "SEVENTS_FEED_CONNECTION_STRING": feed.connection_string(),
            "SEVENTS_CHECKPOINT_CONNECTION_STRING": azurite.connection_string,
            "SEVENTS_CHECKPOINT_CONTAINER": "feedcli",
        }
        target = f"chdb://{tmp_path / 'ch'}"
        command = [str(BIN / "sevents-ingest"), "run", "--source", "eventhubs", "--eventhubs-name", "hub"]
        command += ["--feed-eventhub", "feed", "--clickhouse", target, "--batch-max-wait", "0.2"]
        process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)

        def audit(question: str) -> list[dict[str, object]]:
            done = subprocess.run(
                [str(BIN / "sevents-ingest"), "audit", question, "--clickhouse", target, "--format", "json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else []

        try:
            # audit asks the running ingest (it holds the embedded directory)
            seen = eventually(lambda: any(r["event_id"] == "E-platform" for r in audit("events")), 90)
            stored = eventually(lambda: (audit("counts") or [{}])[0].get("transitions") == 8, 60)
        finally:
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=60)
    assert seen and stored, stderr[-3000:]
    assert process.returncode == 0, stderr[-2000:]
    platform = [r for r in audit("events") if r["event_id"] == "E-platform"]
    assert [(r["seen_by"], r["outcome"], r["affected_vms"]) for r in platform] == [
        ("platform", "announced", ["vm-900"])
    ]
