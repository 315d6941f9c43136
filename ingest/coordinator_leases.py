"""Coordinator leases with nothing from Azure: one SQLite row per event in a directory the coordinators share.

``[coordinator] lease_backend = "local"`` with ``lease_dir``: for coordinators on one machine (the demo, a
single-host install; several machines use the blob leases of coordinator_azure.py, SQLite's locks are not to be
trusted on network file systems). A row holds the event's stage, its holder (a random token per hold) and when its
lease expires (wall clock: one machine, one clock). Taking a lease is one statement (an upsert that changes the row
only when its lease has expired), so of two coordinators exactly one gets it; every write of the stage and every
renewal is conditioned on holding it still, so a coordinator killed or stalled past its lease can no longer write
once another took over, as with a blob lease. Released at the end of the hold; a killed holder's lease expires.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from ingest.errors import LeaseLost

FILE: Final = "leases.sqlite"
_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS leases (event_id TEXT PRIMARY KEY, holder TEXT NOT NULL, "
    "expires_at REAL NOT NULL, state TEXT NOT NULL DEFAULT '{}')"
)
_TAKE: Final = (
    "INSERT INTO leases (event_id, holder, expires_at) VALUES (?, ?, ?) "
    "ON CONFLICT (event_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at "
    "WHERE leases.expires_at <= ?"
)


class LocalHeld:
    """One event's row while its lease is ours: ``read`` and ``write`` its stage, ``renew`` the lease."""

    def __init__(self, leases: LocalLeases, event_id: str, holder: str) -> None:
        self.leases, self.event_id, self.holder = leases, event_id, holder

    def read(self) -> dict[str, Any]:
        rows = self.leases.execute(
            "SELECT state FROM leases WHERE event_id = ? AND holder = ? AND expires_at > ?",
            (self.event_id, self.holder, self.leases.clock()),
        )
        if not rows:
            raise LeaseLost(f"the lease of {self.event_id} expired")
        try:
            state = json.loads(rows[0][0] or "{}")
        except ValueError:
            return {}
        return state if isinstance(state, dict) else {}

    def write(self, state: dict[str, Any]) -> None:
        self._update("state = ?", (json.dumps(state),))

    def renew(self) -> None:
        self._update("expires_at = ?", (self.leases.clock() + self.leases.lease_s,))

    def _update(self, assignment: str, values: tuple[Any, ...]) -> None:
        changed = self.leases.change(
            f"UPDATE leases SET {assignment} WHERE event_id = ? AND holder = ? AND expires_at > ?",  # noqa: S608
            (*values, self.event_id, self.holder, self.leases.clock()),
        )
        if changed != 1:
            raise LeaseLost(f"the lease of {self.event_id} expired or was taken over")


class LocalLeases:
    """``hold(event_id)`` yields the event's row while its lease is ours, or None while another holds it."""

    def __init__(self, directory: Path, lease_s: float, clock: Callable[[], float] = time.time) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path, self.lease_s, self.clock = directory / FILE, lease_s, clock
        # autocommit: every statement is its own transaction; a busy database is waited for, not an error
        self.db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self.change(_SCHEMA, ())

    def execute(self, sql: str, values: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self.db.execute(sql, values).fetchall()

    def change(self, sql: str, values: tuple[Any, ...]) -> int:
        with self._lock:
            return self.db.execute(sql, values).rowcount

    @contextmanager
    def hold(self, event_id: str) -> Iterator[LocalHeld | None]:
        holder, now = uuid.uuid4().hex, self.clock()
        self.change(_TAKE, (event_id, holder, now + self.lease_s, now))
        mine = self.execute("SELECT 1 FROM leases WHERE event_id = ? AND holder = ?", (event_id, holder))
        if not mine:  # another coordinator holds it and its lease runs
            yield None
            return
        try:
            yield LocalHeld(self, event_id, holder)
        finally:  # taken over meanwhile: nothing of ours to release
            self.change("UPDATE leases SET expires_at = 0 WHERE event_id = ? AND holder = ?", (event_id, holder))

    def close(self) -> None:
        with self._lock:
            self.db.close()
