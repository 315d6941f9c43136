"""The collector's state directory: one collector per directory (a lock file), and the snapshot it resumes from."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Final, Protocol

from collector.model import Snapshot

log = logging.getLogger(__name__)

if sys.platform == "win32":
    import msvcrt

    def _lock(fd: int) -> None:
        # A byte-range lock on the first byte: like flock, Windows drops it when the process dies.
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

else:
    import fcntl

    def _lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


LOCK_FILE: Final = "collector.lock"
# Opening a state file never follows a link: whoever could plant one there could make the collector (often root)
# overwrite the file it points at.
NO_FOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
BALLAST_FILE: Final = "disk-reserve"
BALLAST_BYTES: Final = 256 * 1024


class StateDirInUse(Exception):
    """Another collector holds the lock of this state directory."""


class SnapshotStore(Protocol):
    """Where the snapshot is kept (the outbox, in the same transaction as the records diffed from it)."""

    def snapshot(self) -> str | None: ...


def lock_state_dir(state_dir: Path) -> int:
    """Take the directory's lock, or raise StateDirInUse; the open descriptor (closing it releases the lock).

    Two collectors on one directory would overwrite each other's snapshot and emit each other's transitions.
    The lock is advisory (flock; msvcrt.locking on Windows) and released by the kernel when the process dies,
    so a SIGKILL leaves no stale lock behind. A directory another user owns is refused first (``check_owner``):
    its files could be swapped for links between our checks and our writes.
    """
    check_owner(state_dir)
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | NO_FOLLOW, 0o600)
    try:
        _lock(fd)
    except OSError as error:
        os.close(fd)
        raise StateDirInUse(f"state directory {state_dir} is in use by another collector") from error
    return fd


def check_owner(state_dir: Path) -> None:
    """Raise PermissionError unless ``state_dir`` belongs to this process's user; take away other users' write access.

    The collector often runs as root; a state dir that another user owns, or may write to, lets that user replace
    the outbox, the lock or the alive file with links to files the collector would then overwrite. A directory of
    our own that its group or everyone may write to (a umask of 002) is tightened, with a warning. (No check on
    Windows, where ownership is an ACL question.)
    """
    if not hasattr(os, "geteuid"):
        return
    info = os.stat(state_dir)
    if info.st_uid != os.geteuid():
        raise PermissionError(
            errno.EPERM,
            f"owned by uid {info.st_uid}, not by the collector's user (uid {os.geteuid()}): "
            "another user could swap its files for links",
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.chmod(state_dir, stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
        log.warning(
            "the state dir let other users write to it: took their write access away",
            extra={"state_dir": str(state_dir), "mode_was": stat.filemode(info.st_mode)},
        )


def keep_ballast(state_dir: Path) -> None:
    """Set aside ``BALLAST_BYTES`` in the state dir while there is plenty of room (best effort).

    SQLite cannot open a WAL database on a full disk (it must create the -wal and -shm files): a collector
    restarted then would exit at every start. Releasing the ballast gives it the room to open and poll on.
    """
    path = state_dir / BALLAST_FILE
    try:
        if path.exists():
            return
        if shutil.disk_usage(state_dir).free < 4 * BALLAST_BYTES:
            return  # too little room to set any aside: the ballast would be what fills the disk
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NO_FOLLOW, 0o600), "wb") as out:
            out.write(b"\0" * BALLAST_BYTES)
            out.flush()
            os.fsync(out.fileno())
    except OSError as error:
        log.warning("cannot set disk space aside in the state dir", extra={"error": str(error)})
        path.unlink(missing_ok=True)


def release_ballast(state_dir: Path) -> bool:
    """Free the space ``keep_ballast`` set aside; whether there was any."""
    path = state_dir / BALLAST_FILE
    if not path.exists():
        return False
    path.unlink()
    log.error("state dir filesystem full: released the space set aside", extra={"freed_bytes": BALLAST_BYTES})
    return True


def load_snapshot(store: SnapshotStore) -> Snapshot:
    """The snapshot to diff the next document against: the stored one, or empty for a new or unreadable store."""
    stored = store.snapshot()
    if stored is None:
        return Snapshot.empty()
    try:
        return Snapshot.from_json(stored)
    except ValueError as error:
        # Starting empty re-reports the current events as appeared; their transition_ids dedupe downstream.
        log.error("stored snapshot unreadable; starting from an empty one", extra={"error": str(error)})
        return Snapshot.empty()
