"""An ingest process that stops dead after its first stored batch, before acknowledging it (for SIGKILL tests).

Usage: python ingest_killable.py OUTBOX_GLOB CHDB_DIR MARKER_FILE
It stores one batch in ClickHouse, writes MARKER_FILE, then waits to be killed; the outbox rows of that
batch are never removed.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from ingest.rows import Batch
from ingest.settings import IngestSettings
from ingest.wiring import build


def main() -> None:
    pattern, directory, marker = sys.argv[1:4]
    settings = IngestSettings(clickhouse=f"chdb://{directory}", source=f"outbox:{pattern}", batch_max_records=4)

    def stored_then_hang(batch: Batch) -> None:
        Path(marker).write_text(str(len(batch)))
        time.sleep(600)

    stop = threading.Event()
    pipeline = build(settings, stop, on_stored=stored_then_hang)
    pipeline.run(stop)


if __name__ == "__main__":
    main()
