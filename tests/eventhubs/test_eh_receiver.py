"""The partition receiver: where a partition resumes, which positions get written, how its link is opened."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient

from ingest.eh_open import open_promptly
from ingest.eh_receiver import START_OF_RETENTION, CheckpointWriter, start_position
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint

SCOPE = {"fully_qualified_namespace": "ns", "eventhub_name": "hub", "consumer_group": "cg", "partition_id": "1"}


def _event(sequence_number: int) -> EventData:
    event = EventData(b"x")
    event._raw_amqp_message.annotations = {  # as the service stamps a received event
        b"x-opt-sequence-number": sequence_number,
        b"x-opt-offset": str(sequence_number * 100).encode(),
    }
    return event


def test_a_partition_resumes_after_its_checkpoint_or_from_the_beginning_of_retention() -> None:
    """The checkpoint's offset when there is one; otherwise the whole backlog, never @latest."""
    assert start_position({"offset": "4200", "sequence_number": 42}) == "4200"
    assert start_position(None) == START_OF_RETENTION
    assert start_position({"offset": None, "sequence_number": None}) == START_OF_RETENTION


def test_the_writer_writes_positions_in_order_and_the_newest_last_and_close_waits_for_it() -> None:
    """However fast batches are stored, no older position is written after a newer, and close() writes the last."""
    written: list[dict[str, Any]] = []
    started, release = threading.Event(), threading.Event()

    def write(checkpoint: dict[str, Any]) -> None:
        started.set()
        release.wait(5)  # the first write is slow: later batches are stored meanwhile
        written.append(checkpoint)

    async def scenario() -> None:
        writer = CheckpointWriter(write, SCOPE)
        writer.stored(_event(1))
        await asyncio.to_thread(started.wait, 5)  # the first write is under way
        for sequence_number in (2, 3, 4):
            writer.stored(_event(sequence_number))
        release.set()
        await writer.close()

    asyncio.run(scenario())
    numbers = [c["sequence_number"] for c in written]
    assert numbers == sorted(numbers) and numbers[-1] == 4
    assert numbers == [1, 4]  # the positions stored while a write was under way collapse into the newest
    assert all(c["partition_id"] == "1" and c["offset"] == str(c["sequence_number"] * 100) for c in written)


@pytest.mark.slow
def test_the_prompt_open_opens_a_real_consumer_and_steps_aside_for_anything_else(endpoint: EventHubsEndpoint) -> None:
    """Against the AMQP endpoint the SDK's consumer ends up open; an object it does not know is left to the SDK."""

    async def scenario() -> tuple[bool, bool, bool]:
        client = EventHubConsumerClient.from_connection_string(endpoint.connection_string(), consumer_group="$Default")

        async def ignore(events: Any) -> None:
            return None

        consumer = client._create_consumer("$Default", "0", START_OF_RETENTION, ignore, owner_level=0)
        try:
            opened = await open_promptly(consumer)
            running = bool(consumer.running)
        finally:
            await consumer.close()
            await client.close()
        return opened, running, await open_promptly(object())

    opened, running, stranger = asyncio.run(scenario())
    assert opened and running
    assert stranger is False
