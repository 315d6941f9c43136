"""The edges of downtime measurement: the steady tick, the boot id, and the last-alive file in the state dir.

The tick runs on its own thread, apart from polling, so a slow IMDS answer is never taken for a pause. It reads
``CLOCK_BOOTTIME`` where there is one: that clock keeps counting while the VM is paused or suspended, so the
gap between two ticks is how long the VM did not run. Each tick also writes the moment and the boot id to
``<state_dir>/alive`` (one small overwrite in place, synced every few seconds): after a reboot, that is the last
moment the VM was known running. What the collector makes of both is decided in ``collector.downtime``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

from collector.downtime import pause
from collector.model import Alive, Downtime
from collector.statedir import NO_FOLLOW
from sevents import records

log = logging.getLogger(__name__)

ALIVE_FILE: Final = "alive"
DEFAULT_BOOT_ID_FILE: Final = Path("/proc/sys/kernel/random/boot_id")
SYNC_EVERY_S: Final = 5.0  # an unsynced moment may be lost with the VM: at most this much downtime is overstated
_RECORD_BYTES: Final = 96  # boot id (36) + wire time (24) + separators, padded: one fixed-size overwrite


def counting_clock() -> float:
    """Seconds on a clock that keeps counting while the VM is paused or suspended (monotonic elsewhere)."""
    if hasattr(time, "CLOCK_BOOTTIME"):
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()


def read_boot_id(path: Path) -> str:
    """The kernel's boot id ("" when it cannot be read: reboots are then not measured, which is logged)."""
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()[:64]
    except OSError as error:
        log.warning(
            "cannot read the boot id: reboots will not be measured", extra={"path": str(path), "error": str(error)}
        )
        return ""


def load_alive(state_dir: Path) -> Alive | None:
    """The last moment alive stored by the previous run (None when there is none or it is unreadable)."""
    try:
        text = (state_dir / ALIVE_FILE).read_text(encoding="ascii").strip()
        boot_id, moment = text.split()[:2]
        return Alive(boot_id, records.parse_time(moment))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def running_since(last: Alive | None, now: datetime) -> datetime:
    """The first moment after a reboot this collector can vouch for: when its process started, or ``now`` where
    that cannot be read or precedes ``last`` (a collector restarted inside a long-lived process, as in tests)."""
    started = process_started_at(now)
    return started if last is None or started > last.at else now


def process_started_at(now: datetime) -> datetime:
    """When this process started (Linux: from /proc); ``now`` where that cannot be read."""
    try:
        fields = Path("/proc/self/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in ticks since boot
        return now - timedelta(seconds=max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started_s))
    except (OSError, ValueError, IndexError, AttributeError):
        return now


class AliveFile:
    """``<state_dir>/alive``: the boot id and the last moment alive, overwritten in place at every tick."""

    def __init__(self, state_dir: Path, boot_id: str, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = state_dir / ALIVE_FILE
        self.boot_id = boot_id
        self._monotonic = monotonic
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | NO_FOLLOW, 0o600)
        self._synced = float("-inf")

    def beat(self, now: datetime) -> None:
        """Store ``now`` as the last moment alive (best effort: a full disk costs precision, never a poll)."""
        line = f"{self.boot_id} {records.format_time(now)}\n".ljust(_RECORD_BYTES).encode("ascii", "replace")
        try:
            os.pwrite(self._fd, line, 0)
            if self._monotonic() - self._synced >= SYNC_EVERY_S:
                os.fsync(self._fd)
                self._synced = self._monotonic()
        except OSError as error:
            log.debug("cannot store the last moment alive", extra={"error": str(error)})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.fsync(self._fd)
        os.close(self._fd)


class Ticker:
    """The steady tick: every ``period_s``, look for a gap (a pause) and keep the alive file fresh."""

    def __init__(
        self,
        *,
        period_s: float,
        pause_min_s: float,
        clock: Callable[[], datetime],
        counting: Callable[[], float] = counting_clock,
        on_pause: Callable[[Downtime], None] = lambda downtime: None,
    ) -> None:
        self.period_s, self.pause_min_s = period_s, pause_min_s
        self._clock, self._counting = clock, counting
        self.on_pause = on_pause  # each pause found (the downtime ledger holds it until a poll stores it)
        self._alive: AliveFile | None = None
        self._lock = threading.Lock()

    def keep_alive_file(self, alive: AliveFile) -> None:
        """Start keeping ``alive`` fresh (only once an earlier run's downtime is stored: until then it is the proof)."""
        with self._lock:
            self._alive = alive
        alive.beat(self._clock())

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop``, then once more: a pause the stop came at the end of is found too (the stop that
        wakes this wait may come before its timeout), and the last moment alive is stored one more time."""
        last = self._counting()
        stopping = False
        while not stopping:
            stopping = stop.wait(self.period_s)
            now_counting, now = self._counting(), self._clock()
            found = pause(now, now_counting - last, pause_min_s=self.pause_min_s)
            last = now_counting
            if found is not None:
                log.warning(
                    "the VM was paused",
                    extra={"began_at": records.format_time(found.began_at), "duration_ms": found.duration_ms},
                )
                self.on_pause(found)
            with self._lock:
                if self._alive is not None:
                    self._alive.beat(now)
