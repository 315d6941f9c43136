"""What a running collector answers at /healthz and /readyz of its /metrics listener (``sevents.prometheus``).

Live (/healthz): ``<state_dir>/alive`` was rewritten within the last ``LIVE_MAX_AGE_S`` seconds. That is the test
the chart's exec probe runs on the same file: the ticker rewrites it every ``tick_interval`` from a thread of its
own once the collector's state is stored (after a reboot: once the first poll is committed), so a stale file
means a stuck or dead collector, which a restart may cure.

Ready (/readyz), all of:

- a poll succeeded (IMDS answered and what changed was committed to the outbox) within ``READY_MAX_AGE_S``
  seconds: longer than the 75 s a fetch keeps retrying through an IMDS update, so such an update does not flap
  readiness, while IMDS unreachable for longer does;
- the outbox did not refuse the last poll's commit (full, or SQLite failing): the records wait in memory;
- the outbox could take a write now: its file and the state directory are writable and the filesystem has more
  free than the outbox's reserve (below it the outbox refuses commits), so a read-only remount or a full disk
  shows before the next event needs storing.

Each check reads only what is in memory or one ``stat``: the listener's thread never waits on the outbox.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from collector.liveness import ALIVE_FILE

if TYPE_CHECKING:
    from collector.agent import Agent

LIVE_MAX_AGE_S: Final = 60.0  # the chart's probes.aliveMaxAgeSeconds default
READY_MAX_AGE_S: Final = 120.0
OUTBOX_REFUSALS: Final = frozenset({"outbox_full", "outbox_error"})  # PollHealth kinds of a refused commit


def alive_problem(modified_at: float | None, now: float, max_age_s: float) -> str:
    """Why the collector is not live, from its alive file's mtime (None: no file); "" when it is."""
    if modified_at is None:
        return "no alive file yet: the collector has not stored its state"
    age = now - modified_at
    if age > max_age_s:
        return f"the alive file was last rewritten {age:.1f} s ago (more than {max_age_s:g} s): the ticker is stuck"
    return ""


def poll_problem(last_ok: float, now: float, max_age_s: float, last_error: str) -> str:
    """Why the collector is not ready as far as polling goes: no successful poll (Unix time ``last_ok``, 0: none)
    within ``max_age_s``, or a last poll whose commit the outbox refused; "" when ready."""
    because = f" (last error: {last_error})" if last_error else ""
    if last_ok <= 0:
        return f"no successful IMDS poll yet{because}"
    age = now - last_ok
    if age > max_age_s:
        return f"the last successful IMDS poll was {age:.1f} s ago (more than {max_age_s:g} s){because}"
    if last_error in OUTBOX_REFUSALS:
        return f"the outbox refused the last poll's commit ({last_error})"
    return ""


def outbox_problem(outbox: Path, reserve_bytes: int) -> str:
    """Why the outbox could not take a write now (not writable, or the filesystem below its reserve); "" if it could."""
    problems = []
    for path in (outbox.parent, outbox):
        if path.exists() and not os.access(path, os.W_OK):
            problems.append(f"{path} is not writable")
    try:
        free = shutil.disk_usage(outbox.parent).free
    except OSError as error:
        problems.append(f"cannot read the free space of {outbox.parent}: {error.strerror or error}")
    else:
        if free < reserve_bytes:
            where = outbox.parent
            problems.append(f"{free} bytes free where {where} is, below the outbox's reserve of {reserve_bytes}")
    return "; ".join(problems)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def live_check(state_dir: Path, *, wall: Callable[[], float] = time.time) -> Callable[[float | None], str]:
    """/healthz for the collector whose state directory is ``state_dir``."""
    alive = state_dir / ALIVE_FILE

    def check(max_age_s: float | None) -> str:
        return alive_problem(_mtime(alive), wall(), LIVE_MAX_AGE_S if max_age_s is None else max_age_s)

    return check


def ready_check(agent: Agent, *, wall: Callable[[], float] = time.time) -> Callable[[float | None], str]:
    """/readyz for ``agent``."""

    def check(max_age_s: float | None) -> str:
        limit = READY_MAX_AGE_S if max_age_s is None else max_age_s
        problems = [
            poll_problem(agent.metrics.last_successful_poll(), wall(), limit, agent.health.last_poll_error),
            outbox_problem(agent.outbox.path, agent.outbox.reserve_bytes),
        ]
        return "; ".join(p for p in problems if p)

    return check


def watch(agent: Agent) -> None:
    """Answer /healthz and /readyz of this process's /metrics listener for ``agent`` (``run`` with metrics_addr)."""
    from sevents import prometheus  # loaded already: the listener is serving

    prometheus.HEALTH.watch(live=live_check(agent.settings.state_dir), ready=ready_check(agent))
