"""The durable outbox: records and the snapshot they were diffed against, in one SQLite file.

Theory of operation. Every write is one ``BEGIN IMMEDIATE`` transaction in WAL mode with
``synchronous=FULL``, so a record is on disk before anyone is told it exists, and the snapshot moves
forward only together with the records diffed from it. ``seq`` comes from a counter row that is never
decremented, so a number is never handed out twice, even after its row was removed. Rows leave only
through ``remove`` once the sink (or ``sevents-ingest``) confirmed them. A second process (the ingest)
may read and remove at the same time: writers serialise on SQLite's lock, waiting up to the busy timeout.

Policy when full. What counts is what is on disk: the database's pages in use plus the WAL, which is
checkpointed (and truncated) after a commit that grew it past ``WAL_LIMIT``, so it cannot grow unchecked
beside a small cap. A commit is also refused while the filesystem has less than ``reserve_bytes`` free, so
the cap engages before SQLite meets a full disk (which is retryable too: ``OutboxIOError`` says so).

1. Heartbeats give way first: the oldest stored heartbeats are evicted to make room (``heartbeat_evicted``),
   and a new heartbeat that still does not fit is not stored (``heartbeat_rejected``).
2. A transition is never evicted and never dropped silently: a commit whose transitions do not fit raises
   ``OutboxFull`` and writes nothing, the snapshot included. The caller counts the refusal
   (``count_drop("transitions_deferred", n)``), keeps the records and commits them with a later poll.

Every drop is counted by reason in the ``drops`` table of the same file.

Errors::

    OutboxError
    ├── OutboxFull      retryable: no room for the transitions of one commit (cap, or filesystem nearly full)
    └── OutboxIOError   SQLite failed: disk full, I/O error, corrupt file. The collector keeps polling and
                        retries (its snapshot did not move); a one-shot tool stops loudly
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from sevents.records import RECORD_HEARTBEAT, RECORD_ORIGINAL, encode, original_row

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES: Final = 64 * 2**20
DEFAULT_RESERVE_BYTES: Final = 256 * 1024  # free space left on the filesystem for SQLite's own needs
WAL_LIMIT: Final = 16 * 1024
BUSY_TIMEOUT_S: Final = 30.0
# SQLite's page cache (its default: 2 MiB). Rows are appended and read in order, so a small cache costs a
# re-read from the OS's cache now and then, where the default grows to 2 MiB of the collector's 34 MiB budget.
CACHE_KIB: Final = 256
# Rows encoded and inserted at a time: a commit of 1,000 transitions does not hold all their payloads at once.
INSERT_CHUNK: Final = 100

DROP_HEARTBEAT_EVICTED: Final = "heartbeat_evicted"
DROP_HEARTBEAT_REJECTED: Final = "heartbeat_rejected"
DROP_TRANSITIONS_DEFERRED: Final = "transitions_deferred"
DROP_ORIGINAL_REJECTED: Final = "original_rejected"  # no room for what a made-safe record's fields held

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY,
    record_type TEXT NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_type ON records (record_type, seq);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS drops (reason TEXT PRIMARY KEY, count INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (name, value) VALUES ('last_seq', 0), ('payload_bytes', 0);
"""


class OutboxError(Exception):
    """Base of the outbox errors."""


class OutboxFull(OutboxError):
    """The transitions of a commit do not fit; nothing was written."""


class OutboxIOError(OutboxError):
    """SQLite failed in a way that retrying cannot fix; stop the process loudly."""


@dataclass(frozen=True)
class OutboxRow:
    """One stored record: its sequence number, type and canonical JSON bytes (with ``seq``)."""

    seq: int
    record_type: str
    payload: bytes


class Outbox:
    """The SQLite outbox of one collector; thread-safe, and safe with a second process on the same file."""

    def __init__(
        self, path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, reserve_bytes: int = DEFAULT_RESERVE_BYTES
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.reserve_bytes = reserve_bytes
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # SQLite follows links: one planted in the state dir would make the collector write where it points
            for file in (
                self.path,
                self.path.with_name(self.path.name + "-wal"),
                self.path.with_name(self.path.name + "-shm"),
            ):
                if file.is_symlink():
                    raise OSError(f"{file.name} is a link, not the outbox's own file")
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so a transaction is exactly what we say.
            self._db = sqlite3.connect(
                str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            self._db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT}")
            self._db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
            with self._transaction():
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    self._db.execute(statement)
            self._checkpoint()
        except (sqlite3.Error, OSError) as error:
            raise OutboxIOError(f"cannot open outbox {self.path}: {error}") from error

    # -- lifecycle ---------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (SQLite checkpoints the WAL when the last connection closes)."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            raise _translate(error) from error
        try:
            yield self._db
            self._db.execute("COMMIT")
        except BaseException as error:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(error, sqlite3.Error):
                raise _translate(error) from error
            raise

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as error:
                raise _translate(error) from error

    # -- writes ------------------------------------------------------------------------------------------
    def commit(self, records: Sequence[Mapping[str, Any]], snapshot: str | None) -> list[int]:
        """Store the records (each gets the next ``seq``) and the snapshot in one transaction; their seqs."""
        with self._lock:
            seqs = self._commit(records, snapshot)
            self._checkpoint()
        return seqs

    def _commit(self, records: Sequence[Mapping[str, Any]], snapshot: str | None) -> list[int]:
        free = self._free_bytes()
        with self._transaction() as db:
            last_seq = stored_before = _counter(db, "last_seq")
            used = _counter(db, "payload_bytes")
            # Pages, indexes and WAL beyond the payload count against the cap as well: that is the disk used.
            overhead = max(0, self._live_bytes(db) - used)
            cap = min(self.max_bytes - overhead, used + free - self.reserve_bytes)
            rows: list[tuple[int, str, bytes]] = []
            seqs: list[int] = []
            rejected = originals_rejected = 0
            for record in records:
                seq = last_seq + 1
                payload = encode({**record, "seq": seq})
                record_type = str(record.get("record_type", ""))
                if used + len(payload) > cap:
                    # Evicted pages are reused by SQLite, so they count as room under both limits.
                    used -= _evict_heartbeats(db, used + len(payload) - cap, stored_before)
                if used + len(payload) > cap:
                    if record_type != RECORD_HEARTBEAT:
                        raise OutboxFull(
                            f"outbox {self.path} is full ({used + overhead} of {self.max_bytes} bytes on disk, "
                            f"{max(0, free)} bytes free on its filesystem): {len(records)} records not stored"
                        )
                    rejected += 1
                    continue
                last_seq = seq
                used += len(payload)
                rows.append((seq, record_type, payload))
                seqs.append(seq)
                original = original_row(record, last_seq + 1)  # what fields made safe held, beside the record
                if original is not None and used + len(original) > cap:
                    originals_rejected += 1  # the record itself is stored: only the long original is given up
                elif original is not None:
                    last_seq += 1
                    used += len(original)
                    rows.append((last_seq, RECORD_ORIGINAL, original))
                if len(rows) >= INSERT_CHUNK:
                    _insert(db, rows)
            _insert(db, rows)
            db.execute("UPDATE counters SET value = ? WHERE name = 'last_seq'", (last_seq,))
            db.execute("UPDATE counters SET value = ? WHERE name = 'payload_bytes'", (used,))
            if rejected:
                _add_drop(db, DROP_HEARTBEAT_REJECTED, rejected)
            if originals_rejected:
                _add_drop(db, DROP_ORIGINAL_REJECTED, originals_rejected)
            if snapshot is not None:
                db.execute("INSERT OR REPLACE INTO state (key, value) VALUES ('snapshot', ?)", (snapshot,))
        return seqs

    def _live_bytes(self, db: sqlite3.Connection) -> int:
        """Pages in use plus the WAL file: what this outbox holds on disk now."""
        pages = int(db.execute("PRAGMA page_count").fetchone()[0]) - int(
            db.execute("PRAGMA freelist_count").fetchone()[0]
        )
        return pages * int(db.execute("PRAGMA page_size").fetchone()[0]) + _file_size(self._wal)

    def _free_bytes(self) -> int:
        try:
            return shutil.disk_usage(self.path.parent).free  # statvfs's f_bavail; also on Windows
        except OSError:
            return 2**62  # unknown: let SQLite be the judge

    def _checkpoint(self) -> None:
        """Copy the WAL into the database and cut it off once it outgrew ``WAL_LIMIT`` (best effort, never waiting).

        TRUNCATE waits, through the busy handler, for a reader in the middle of a transaction (the ingest); a
        commit must never wait for that, so the busy timeout is 0 for the checkpoint: with such a reader it
        copies what it can and the WAL is cut at a later commit. A WAL held back meanwhile counts against the
        cap. Errors here are not the commit's: it is already durable.
        """
        if _file_size(self._wal) <= WAL_LIMIT:
            return
        try:
            self._db.execute("PRAGMA busy_timeout = 0")
            try:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        except sqlite3.Error as error:
            log.warning("outbox WAL checkpoint failed; retried at the next commit", extra={"error": str(error)})

    @property
    def _wal(self) -> Path:
        return self.path.with_name(self.path.name + "-wal")

    def remove(self, seqs: Iterable[int]) -> int:
        """Delete the given rows (acknowledged by the sink or the ingest); how many were still there."""
        wanted = sorted(set(seqs))
        if not wanted:
            return 0
        removed = 0
        freed = 0
        with self._lock, self._transaction() as db:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                (count, size) = db.execute(
                    f"SELECT COUNT(*), COALESCE(SUM(length(payload)), 0) FROM records WHERE seq IN ({marks})",  # noqa: S608 -- only '?' marks
                    chunk,
                ).fetchone()
                db.execute(f"DELETE FROM records WHERE seq IN ({marks})", chunk)  # noqa: S608 -- only '?' marks
                removed += count
                freed += size
            db.execute("UPDATE counters SET value = value - ? WHERE name = 'payload_bytes'", (freed,))
        with self._lock:
            self._checkpoint()
        return int(removed)

    def count_drop(self, reason: str, count: int = 1) -> None:
        """Persist ``count`` more drops for ``reason`` (for drops the caller decides, e.g. deferred commits)."""
        with self._lock, self._transaction() as db:
            _add_drop(db, reason, count)

    def set_state(self, key: str, value: str) -> None:
        """Save a small piece of collector state (e.g. the cached instance identity) durably."""
        with self._lock, self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)", (key, value))

    # -- reads -------------------------------------------------------------------------------------------
    def snapshot(self) -> str | None:
        """The snapshot JSON saved with the last commit that carried one, or None for a new outbox."""
        return self.get_state("snapshot")

    def get_state(self, key: str) -> str | None:
        """A value saved with ``set_state`` (or the snapshot under ``"snapshot"``)."""
        rows = self._read("SELECT value FROM state WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def pending(self, limit: int = 1000, after_seq: int = 0) -> list[OutboxRow]:
        """Up to ``limit`` stored rows with ``seq > after_seq``, oldest first."""
        rows = self._read(
            "SELECT seq, record_type, payload FROM records WHERE seq > ? ORDER BY seq LIMIT ?",
            (after_seq, limit),
        )
        return [OutboxRow(int(seq), str(kind), bytes(payload)) for seq, kind, payload in rows]

    def depth(self) -> int:
        """How many records wait for acknowledgement."""
        return int(self._read("SELECT COUNT(*) FROM records")[0][0])

    def size_bytes(self) -> int:
        """Bytes this outbox holds on disk (pages in use plus the WAL): the quantity ``max_bytes`` bounds."""
        with self._lock:
            try:
                return self._live_bytes(self._db)
            except sqlite3.Error as error:
                raise _translate(error) from error

    def payload_bytes(self) -> int:
        """Payload bytes of the waiting records."""
        return int(self._read("SELECT value FROM counters WHERE name = 'payload_bytes'")[0][0])

    def last_seq(self) -> int:
        """The highest seq ever handed out (0 for a new outbox)."""
        return int(self._read("SELECT value FROM counters WHERE name = 'last_seq'")[0][0])

    def drops(self) -> dict[str, int]:
        """Persisted drop counts by reason, over the whole life of this outbox file."""
        return {str(r): int(c) for r, c in self._read("SELECT reason, count FROM drops ORDER BY reason")}


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _insert(db: sqlite3.Connection, rows: list[tuple[int, str, bytes]]) -> None:
    """Insert ``rows`` and empty the list (a refused commit rolls the whole transaction back)."""
    db.executemany("INSERT INTO records (seq, record_type, payload) VALUES (?, ?, ?)", rows)
    rows.clear()


def _counter(db: sqlite3.Connection, name: str) -> int:
    return int(db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()[0])


def _add_drop(db: sqlite3.Connection, reason: str, count: int) -> None:
    db.execute(
        "INSERT INTO drops (reason, count) VALUES (?, ?) "
        "ON CONFLICT (reason) DO UPDATE SET count = count + excluded.count",
        (reason, count),
    )


def _evict_heartbeats(db: sqlite3.Connection, need: int, up_to_seq: int) -> int:
    """Delete the oldest heartbeats until ``need`` payload bytes are free (or none is left); bytes freed.

    Only those up to ``up_to_seq``: a commit inserting in chunks never evicts a heartbeat of its own.
    """
    freed = 0
    evicted: list[int] = []
    rows = db.execute(
        "SELECT seq, length(payload) FROM records WHERE record_type = ? AND seq <= ? ORDER BY seq",
        (RECORD_HEARTBEAT, up_to_seq),
    )
    for seq, size in rows:
        if freed >= need:
            break
        evicted.append(int(seq))
        freed += int(size)
    db.executemany("DELETE FROM records WHERE seq = ?", [(s,) for s in evicted])
    if evicted:
        _add_drop(db, DROP_HEARTBEAT_EVICTED, len(evicted))
    return freed


def _translate(error: sqlite3.Error) -> OutboxError:
    """Every SQLite error becomes OutboxIOError; the caller decides whether to retry.

    The collector's poll loop retries (a full disk empties again; its snapshot did not move, so nothing seen
    meanwhile is lost); one-shot tools (``status``) stop loudly.
    """
    return OutboxIOError(f"outbox SQLite error: {error}")
