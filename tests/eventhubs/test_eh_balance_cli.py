"""The consumer's partition balancing settings: validated, in ``--help``, and honoured by ``sevents-ingest run``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from collector.ship_eventhubs import EventHubsSink
from demo.synthetic import transition
from ingest.settings import load
from sevents.errors import ConfigError
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.azurite import Azurite, CheckpointStores
from tests.helpers import eventually, outbox_rows

BIN = Path(sys.executable).parent
HUB_ENV = {"SEVENTS_SOURCE": "eventhubs", "SEVENTS_EVENTHUBS_NAME": "hub", "SEVENTS_CHECKPOINT_CONTAINER": "c"}


def _env(**extra: str) -> dict[str, str]:
    return {
        **HUB_ENV,
        "SEVENTS_EVENTHUBS_CONNECTION_STRING": "Endpoint=sb://127.0.0.1/;SharedAccessKeyName=k;SharedAccessKey=v",
        "SEVENTS_CHECKPOINT_CONNECTION_STRING": "UseDevelopmentStorage=true",
        **extra,
    }


def test_balancing_defaults_and_layers() -> None:
    """Defaults are 10 s and 60 s; the environment and flags override them, flags winning."""
    settings = load(file=None, env=_env(), flags={})
    assert (settings.eventhubs_load_balancing_interval, settings.eventhubs_ownership_expiry) == (10.0, 60.0)
    env = _env(SEVENTS_EVENTHUBS_LOAD_BALANCING_INTERVAL="2", SEVENTS_EVENTHUBS_OWNERSHIP_EXPIRY="9.5")
    settings = load(file=None, env=env, flags={"eventhubs_ownership_expiry": 12.0})
    assert (settings.eventhubs_load_balancing_interval, settings.eventhubs_ownership_expiry) == (2.0, 12.0)


@pytest.mark.parametrize(
    ("interval", "expiry", "problem"),
    [
        ("0", "60", "eventhubs_load_balancing_interval must be a positive"),
        ("-1", "60", "eventhubs_load_balancing_interval must be a positive"),
        ("nan", "60", "SEVENTS_EVENTHUBS_LOAD_BALANCING_INTERVAL: expected a finite number"),
        ("10", "0", "eventhubs_ownership_expiry must be a positive"),
        ("10", "inf", "SEVENTS_EVENTHUBS_OWNERSHIP_EXPIRY: expected a finite number"),
        ("10", "10", "must be longer than eventhubs_load_balancing_interval"),
        ("ten", "60", "SEVENTS_EVENTHUBS_LOAD_BALANCING_INTERVAL: expected a number"),
    ],
)
def test_bad_balancing_values_are_refused(interval: str, expiry: str, problem: str) -> None:
    """Non-positive, non-finite or non-numeric seconds, or an expiry not above the interval, are a ConfigError."""
    env = _env(SEVENTS_EVENTHUBS_LOAD_BALANCING_INTERVAL=interval, SEVENTS_EVENTHUBS_OWNERSHIP_EXPIRY=expiry)
    with pytest.raises(ConfigError, match=problem):
        load(file=None, env=env, flags={})


def test_run_help_documents_the_balancing_flags() -> None:
    """``sevents-ingest run --help`` names both flags, their unit and their defaults."""
    out = subprocess.run(
        [str(BIN / "sevents-ingest"), "run", "--help"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    text = " ".join(out.split())
    assert "--eventhubs-load-balancing-interval SECONDS" in text and "(default 10)" in text
    assert "--eventhubs-ownership-expiry SECONDS" in text and "(default 60)" in text


def _owners(store: Any, endpoint: EventHubsEndpoint) -> dict[str, str]:
    owned = store.list_ownership(f"{endpoint.host}:{endpoint.port}", "hub", "sevents-ingest")
    return {o["partition_id"]: o.get("owner_id") or "" for o in owned}


def _ingest(target: str, env: dict[str, str], *flags: str) -> subprocess.Popen[str]:
    command = [str(BIN / "sevents-ingest"), "run", "--source", "eventhubs", "--clickhouse", target, *flags]
    return subprocess.Popen([*command, "--batch-max-wait", "0.2"], env=env, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_killed_cli_workers_partitions_are_taken_over_within_the_configured_expiry(
    endpoint: EventHubsEndpoint, azurite: Azurite, tmp_path: Path
) -> None:
    """Worker A (flags) is SIGKILLed; worker B (environment) owns every partition well before the 60 s default.

    With the default ownership expiry B could claim nothing for a minute; with 4 s and 0.5 s rounds it takes
    all four partitions in seconds, then stores what is sent afterwards and stops cleanly on SIGTERM.
    """
    stores = CheckpointStores.create(azurite, "balance")
    store = stores()
    env = {
        **os.environ,
        "SEVENTS_EVENTHUBS_CONNECTION_STRING": endpoint.connection_string(),
        "SEVENTS_EVENTHUBS_NAME": "hub",
        "SEVENTS_CHECKPOINT_CONNECTION_STRING": azurite.connection_string,
        "SEVENTS_CHECKPOINT_CONTAINER": "balance",
    }
    partitions = set(endpoint.store.partition_ids)
    target_b = f"chdb://{tmp_path / 'ch-b'}"
    first = _ingest(
        f"chdb://{tmp_path / 'ch-a'}",
        env,
        "--eventhubs-load-balancing-interval",
        "0.5",
        "--eventhubs-ownership-expiry",
        "4",
    )
    second: subprocess.Popen[str] | None = None
    try:
        assert eventually(lambda: set(_owners(store, endpoint)) == partitions, 60)
        owner_a = set(_owners(store, endpoint).values())
        assert len(owner_a) == 1
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        env_b = {**env, "SEVENTS_EVENTHUBS_LOAD_BALANCING_INTERVAL": "0.5", "SEVENTS_EVENTHUBS_OWNERSHIP_EXPIRY": "4"}
        second = _ingest(target_b, env_b)

        def b_owns_everything() -> bool:
            owners = _owners(store, endpoint)
            return (
                set(owners) == partitions
                and len(set(owners.values()) - owner_a) == 1
                and not (set(owners.values()) & owner_a)
            )

        assert eventually(b_owns_everything, 40), _owners(store, endpoint)
        sink = EventHubsSink.from_connection_string(endpoint.connection_string())
        records = [{**transition(vm_index=i % 8, event_id=f"B-{i}", incarnation=i), "seq": i + 1} for i in range(20)]
        sink.send(outbox_rows(records, record_seq=True))
        sink.close()
        last = {p: len(endpoint.store.events(p)) - 1 for p in partitions}

        def checkpointed() -> bool:
            found = store.list_checkpoints(f"{endpoint.host}:{endpoint.port}", "hub", "sevents-ingest")
            done = {c["partition_id"]: c["sequence_number"] for c in found}
            return all(done.get(p, -1) == seq for p, seq in last.items() if seq >= 0)

        assert eventually(checkpointed, 60)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        if second is not None:
            _, stderr = second.communicate(timeout=60)
            assert second.returncode == 0, stderr[-2000:]
        first.communicate(timeout=10)
    counts = subprocess.run(
        [str(BIN / "sevents-ingest"), "audit", "counts", "--clickhouse", target_b, "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = json.loads(counts.stdout)
    row = rows[0] if isinstance(rows, list) else rows
    assert row["transitions"] == 20
