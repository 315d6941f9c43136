"""The Event Hubs benchmark's store client runs calls from several threads at once, as a ClickHouse server does."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from benchmarks.chdb_pool import PooledClient
from tests.helpers import eventually

SLOW = "SELECT sleepEachRow(0.5) FROM numbers(4) SETTINGS max_block_size = 1"  # 2 s on the engine's clock


def test_a_call_made_while_another_runs_does_not_wait_for_it(ch: Any, ch_path: Path) -> None:
    """A plain chdb client would finish the slow call first (one lock per client); the pool lends the second
    call a connection of its own, so it returns while the slow one still runs."""
    pool = PooledClient(f"chdb://{ch_path}")
    finished: list[str] = []

    def slow() -> None:
        pool.query(SLOW)
        finished.append("slow")

    try:
        thread = threading.Thread(target=slow)
        thread.start()
        assert eventually(lambda: pool.busy == 1, timeout=10)  # the slow call holds the one connection
        assert pool.query("SELECT 1").result_rows == [(1,)]
        finished.append("fast")
        thread.join()
        assert finished == ["fast", "slow"]
        assert pool.connections == 2  # the second call found the first connection busy
        # the connections are lent again, not opened per call
        for _ in range(3):
            pool.command("SELECT 1")
        assert pool.connections == 2
    finally:
        pool.close()
