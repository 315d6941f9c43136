"""A killable ingest worker process: EventHubsSource whose ``deliver`` appends record ids to a file (fsync'd).

The file plays the part of ClickHouse for this one worker: ``deliver`` returns only after the ids are on
disk, so what the file holds is what the worker stored before it died. Credentials come from the
environment (``SEVENTS_TEST_HUB``, ``SEVENTS_TEST_CHECKPOINTS``), never from the command line.
Usage: python -m tests.eventhubs.eh_worker_proc CONTAINER OUTPUT_FILE
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

from ingest.source import Delivery
from ingest.source_eventhubs import EventHubsSource


def main(argv: list[str]) -> int:
    container, output = argv[0], Path(argv[1])
    store = BlobCheckpointStore.from_connection_string(os.environ["SEVENTS_TEST_CHECKPOINTS"], container)
    source = EventHubsSource.from_connection_string(
        os.environ["SEVENTS_TEST_HUB"],
        checkpoint_store=store,
        load_balancing_interval=0.5,
        ownership_expiry=4.0,
        max_wait_time=0.2,
        max_batch_size=20,
    )
    with output.open("a", encoding="utf-8") as sink:

        def deliver(batch: Sequence[Delivery]) -> None:
            for delivery in batch:
                record_id = json.loads(delivery.payload)["record_id"]
                sink.write(json.dumps({"id": record_id, "position": delivery.position}) + "\n")
            sink.flush()
            os.fsync(sink.fileno())

        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        source.run(deliver, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
