"""Downtime the collector observed on its own VM, and the event it belongs to (pure).

Two ways a collector can tell that its VM stopped running:

- a **pause**: a Freeze (or a live migration's blackout) stops every process of the VM, the collector's
  included, while the clock it reads keeps counting. A steady tick that finds a gap far above its period
  (``pause``) has seen one, from its last tick to now.
- a **reboot**: the kernel's boot id differs from the one stored with the last moment the collector knew the VM
  running (``reboot``). The downtime runs from that moment to the first moment after boot the collector can
  vouch for. Redeploy and a host failure look the same from inside the VM; a Preempt or Terminate ends the VM,
  so nothing is left on it to report.

An observation belongs to the event of this VM that was Started across it (``event_for``): Started in the
snapshot before it or in the one after, or gone in between (it started and ended while the VM was down). With
none, the VM was down with no event announcing it (an unannounced pause), and the record says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final

from collector.enrich import affects
from collector.model import STATUS_STARTED, Alive, Downtime, Event, Snapshot, Tracked
from sevents import records

PAUSE: Final = records.DETECTED_PAUSE
REBOOT: Final = records.DETECTED_REBOOT
# The event types that cause each kind of downtime, preferred when several events could explain one.
CAUSES: Final = {PAUSE: ("Freeze",), REBOOT: ("Reboot", "Redeploy", "Preempt", "Terminate")}


def pause(now: datetime, gap_s: float, *, pause_min_s: float) -> Downtime | None:
    """The pause a tick ``gap_s`` seconds after the previous one reveals, or None for a gap below ``pause_min_s``.

    ``gap_s`` comes from a clock that counts through a pause; the wall time of its start is derived from it,
    so a clock step (NTP) meanwhile cannot stretch or shrink the figure.
    """
    if gap_s < pause_min_s:
        return None
    return Downtime(PAUSE, now - timedelta(seconds=gap_s), now)


def reboot(last: Alive | None, boot_id: str, back_at: datetime) -> Downtime | None:
    """The downtime across a reboot: ``last`` alive in another boot, running again at ``back_at``; else None.

    Without a stored moment or a boot id there is nothing to compare, and a moment after ``back_at`` (a clock
    set back) cannot be the start of a downtime that ended then.
    """
    if last is None or not boot_id or not last.boot_id or last.boot_id == boot_id or last.at >= back_at:
        return None
    return Downtime(REBOOT, last.at, back_at)


def event_for(downtime: Downtime, before: Snapshot, after: Snapshot, vm_name: str) -> Event | None:
    """The event of VM ``vm_name`` that was Started across ``downtime``, or None when no event announced it.

    ``before`` is the last snapshot committed before the downtime began, ``after`` one diffed after it ended.
    Among several candidates, one of a type that causes this kind of downtime wins, then the surest evidence.
    """
    then, now = before.by_id(), after.by_id()
    ranked: list[tuple[bool, int, tuple[int, ...], Event]] = []
    for event_id in then.keys() | now.keys():
        first, later = then.get(event_id), now.get(event_id)
        tracked = later if later is not None else first
        assert tracked is not None  # the id came from one of the two
        event = tracked.event
        if not affects(event, vm_name):
            continue
        evidence = _started_evidence(first, later)
        if evidence:
            fits = event.event_type in CAUSES.get(downtime.detected_by, ())
            ranked.append((fits, evidence, _reverse(event_id), event))
    return max(ranked, key=lambda r: r[:3])[3] if ranked else None


def _started_evidence(first: Tracked | None, later: Tracked | None) -> int:
    """How surely an event was Started across the downtime: 3 Started after it, 2 Started before it, 1 gone after
    it (started and ended meanwhile, or cancelled: the weakest), 0 not Started at all."""
    if later is not None and later.event.status == STATUS_STARTED:
        return 3
    if first is not None and first.event.status == STATUS_STARTED:
        return 2
    return 1 if later is None else 0


def _reverse(text: str) -> tuple[int, ...]:
    # max() with the smallest EventId first among equals: a deterministic choice, whatever the document order
    return tuple(-ord(ch) for ch in text)


def snapshot_before(history: Iterable[tuple[datetime, Snapshot]], moment: datetime) -> Snapshot | None:
    """The last snapshot of ``history`` ((committed at, snapshot), oldest first) committed at or before ``moment``."""
    chosen = None
    for at, snapshot in history:
        if at > moment:
            break
        chosen = snapshot
    return chosen
