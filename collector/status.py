"""``sevents-collector status``: what a state directory says about its collector, read without writing anything.

The outbox is opened read-only (through its write-ahead log while there is one, else as an immutable file), so
any user who can read the directory can ask, while the collector runs or not, and no file there is created.
Whether the collector is alive shows in the age of its last moment alive (``alive``).
"""

from __future__ import annotations

import contextlib
import errno
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from collector.liveness import load_alive
from collector.model import Snapshot
from collector.settings import OUTBOX_FILE

# Under the shipped unit the state directory belongs to the service's own user (DynamicUser, mode 0700): an
# operator's shell cannot read it, and should be told how to, not shown a traceback.
PERMISSION_HINT = "run `sevents-collector status` as the collector's service user or with sudo"


class StatusError(Exception):
    """No outbox in the state directory, it is not one, or the directory or the outbox cannot be read."""


def read_status(state_dir: Path, now: datetime) -> dict[str, Any]:
    """The state directory's outbox, snapshot and liveness as a JSON-ready dict; raises StatusError."""
    path = state_dir / OUTBOX_FILE
    try:
        is_dir = state_dir.is_dir()
        found = is_dir and path.is_file()  # in a directory one may not search, these raise rather than say False
    except OSError as error:
        raise StatusError(_cannot_read(state_dir, error)) from error
    if not found:
        raise StatusError(f"no outbox at {path}" if is_dir else f"no state directory at {state_dir}")
    try:
        with path.open("rb"):
            pass  # the system's reason (permission denied), where SQLite would only say "unable to open"
    except OSError as error:
        raise StatusError(_cannot_read(state_dir, error, path.name)) from error
    try:
        with _read_only(path) as db:
            depth, oldest = db.execute("SELECT COUNT(*), MIN(seq) FROM records").fetchone()
            by_type = dict(db.execute("SELECT record_type, COUNT(*) FROM records GROUP BY record_type"))
            counters = dict(db.execute("SELECT name, value FROM counters"))
            drops = dict(db.execute("SELECT reason, count FROM drops"))
            snapshot = _state(db, "snapshot")
    except sqlite3.Error as error:
        for companion in (Path(f"{path}-wal"), Path(f"{path}-shm")):  # read through while they exist
            try:
                with companion.open("rb"):
                    pass
            except FileNotFoundError:
                pass
            except OSError as unreadable:
                raise StatusError(_cannot_read(state_dir, unreadable, companion.name)) from error
        raise StatusError(f"cannot read the outbox {path}: {error}") from error
    alive = load_alive(state_dir)
    return {
        "state_dir": str(state_dir),
        "outbox": str(path),
        "depth": depth,
        "pending_by_type": by_type,
        "oldest_pending_seq": oldest,
        "last_seq": counters.get("last_seq", 0),
        "size_bytes": sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists()),
        "drops": drops,
        "has_snapshot": snapshot is not None,
        "snapshot": _summary(snapshot),
        "last_alive_at": None if alive is None else alive.at.isoformat(),
        "last_alive_age_s": None if alive is None else round((now - alive.at).total_seconds(), 3),
        "boot_id": None if alive is None else alive.boot_id,
    }


def _cannot_read(state_dir: Path, error: OSError, name: str = "") -> str:
    """One line: the state directory, what could not be read in it and why, and how to read it if it is access."""
    reason = error.strerror or str(error)
    hint = f"; {PERMISSION_HINT}" if error.errno in (errno.EACCES, errno.EPERM) else ""
    return f"cannot read the state directory {state_dir}: {name + ': ' if name else ''}{reason}{hint}"


def depth(state_dir: Path) -> int:
    """Records waiting in the state directory's outbox, read without writing (0 while there is none yet)."""
    path = state_dir / OUTBOX_FILE
    if not path.is_file():
        return 0
    try:
        with _read_only(path) as db:
            return int(db.execute("SELECT COUNT(*) FROM records").fetchone()[0])
    except sqlite3.Error:
        return 0  # being created


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[sqlite3.Connection]:
    # With a write-ahead log beside it (a collector running, or one that stopped without checkpointing), read
    # through it; SQLite then uses the -shm file that exists already. Without one, every row is in the file
    # itself: read it as it is, so that SQLite creates no -wal or -shm file (nothing else writes it then).
    wal = Path(f"{path}-wal").exists() and Path(f"{path}-shm").exists()
    db = sqlite3.connect(f"file:{path}?{'mode=ro' if wal else 'immutable=1'}", uri=True, timeout=5)
    try:
        yield db
    finally:
        db.close()


def _state(db: sqlite3.Connection, key: str) -> Optional[str]:
    row = db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _summary(stored: Optional[str]) -> Optional[dict[str, Any]]:
    """The last document the collector stored: its incarnation and each event's type and status."""
    if stored is None:
        return None
    try:
        snapshot = Snapshot.from_json(stored)
    except ValueError as error:
        return {"unreadable": str(error)}
    return {
        "incarnation": snapshot.incarnation,
        "api_version": snapshot.api_version,
        "observed_at": None if snapshot.observed_at is None else snapshot.observed_at.isoformat(),
        "events": [
            {"event_id": t.event.event_id, "event_type": t.event.event_type, "status": t.event.status}
            for t in snapshot.events
        ],
    }
