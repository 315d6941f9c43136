"""Lifecycle rules shared by the scenario tests: what any VM's document sequence and any truth must obey."""

from __future__ import annotations

import itertools
from typing import Any

from simulator.state import Served


def check_history(served: list[Served], *, ended_early: bool = False) -> None:
    """The documents one VM went through obey the IMDS rules; ``ended_early``: the scenario's ``end`` came while
    events were still shown."""
    statuses: dict[str, list[str]] = {}
    for before, after in itertools.pairwise(served):
        if after.incarnation != before.incarnation + 1:  # only a Scheduled Events reset starts over
            assert after.incarnation < before.incarnation and after.events == before.events
            continue
        assert after.events != before.events
    for doc in served:
        for ev in doc.events:
            statuses.setdefault(ev.event_id, []).append(ev.status)
            assert (ev.not_before is not None) == (ev.status == "Scheduled")
    for history in statuses.values():
        assert history == sorted(history, key=["Scheduled", "Started"].index)
    if not ended_early:
        assert served[-1].events == ()


def check_truth(rows: list[dict[str, Any]]) -> None:
    """Ground-truth rows are internally consistent."""
    for r in rows:
        if r["outcome"] == "active":  # still shown when the scenario's end came
            assert r["ended_at"] is None
            continue
        assert r["outcome"] in ("completed", "cancelled")
        assert r["ended_at"] is not None and r["first_visible_at"] <= r["ended_at"]
        if r["outcome"] == "cancelled":
            assert r["started_at"] is None
        else:
            assert r["first_visible_at"] <= r["started_at"] <= r["ended_at"]
        if r["approved_at"] is not None:
            assert r["first_visible_at"] <= r["approved_at"] <= (r["started_at"] or r["ended_at"])
        assert r["first_visible_at"].tzinfo is not None
