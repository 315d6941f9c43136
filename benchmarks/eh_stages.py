"""Where each transition's time goes on its way through Event Hubs, stage by stage (for bench_eventhubs.py).

Every stage boundary is a wall-clock moment on this one machine:

| boundary       | taken where                                                                        |
|----------------|------------------------------------------------------------------------------------|
| change         | the simulator's ground truth                                                       |
| observed       | ``observed_at``: the collector's poll that saw it returned                         |
| enqueued       | the local hub stored the event (its enqueued time)                                 |
| handed over    | the worker's ``deliver`` was called with the batch (the SDK's callback + a thread) |
| sent           | the worker's connection to the store was free and the batch went out               |
| arrived        | the store service read the batch                                                   |
| ingested       | ``ingested_at``: ClickHouse's ``now64()`` as the row was inserted                 |
| stored         | the store service's ``deliver`` returned (after any verification)                  |

A transition stored twice counts with its first delivery: a batch a killed worker stored but had not yet
checkpointed comes again from its successor, and ``ReplacingMergeTree(ingested_at)`` keeps the later copy's
``ingested_at``, while the row was in ClickHouse (and could alert) from the first insert. So "ingested" is
the earlier of ``ingested_at`` and the moment the first batch that carried the transition was stored.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

BOUNDARIES = ("change", "observed", "enqueued", "handed_over", "sent", "arrived", "ingested", "stored")
STAGES = tuple(f"{a}->{b}" for a, b in itertools.pairwise(BOUNDARIES))


@dataclass(frozen=True)
class Journey:
    """One transition's moments (seconds since the epoch), in ``BOUNDARIES`` order, and where it went."""

    transition_id: str
    position: str  # eventhubs:<partition>:<sequence number>
    moments: tuple[float, ...]

    @property
    def total(self) -> float:
        """Change to ingested: the end-to-end latency the benchmark reports."""
        return self.moments[BOUNDARIES.index("ingested")] - self.moments[0]

    def stages(self) -> dict[str, float]:
        return {name: b - a for name, (a, b) in zip(STAGES, itertools.pairwise(self.moments), strict=True)}


def journeys(
    timed: Iterable[tuple[str, datetime, datetime, datetime]],
    hub_events: Mapping[str, tuple[str, float]],
    timings: Sequence[Any],
) -> list[Journey]:
    """Join the stored transitions (``bench_latency.timed``), the hub's events (record id -> (position,
    enqueued time)) and the store service's batch timings (``BatchTiming``) into one journey each."""
    first_batch: dict[str, Any] = {}
    for timing in timings:
        for position in timing.positions:
            first_batch.setdefault(position, timing)
    out = []
    for transition_id, changed, observed, ingested in timed:
        found = hub_events.get(transition_id)
        batch = first_batch.get(found[0]) if found else None
        if found is None or batch is None:
            continue
        moments = (
            changed.timestamp(),
            observed.timestamp(),
            found[1],
            batch.called_at,
            batch.sent_at,
            batch.arrived_at,
            min(ingested.timestamp(), batch.stored_at),
            batch.stored_at,
        )
        out.append(Journey(transition_id, found[0], moments))
    return out


def summary(found: Sequence[Journey], percentile: Any) -> list[list[str]]:
    """One row per stage: p50, p99 and max seconds (``percentile(values, q)`` as the benchmark computes it)."""
    rows = []
    for name in STAGES:
        values = [j.stages()[name] for j in found]
        rows.append([name, f"{statistics.median(values):.3f}", f"{percentile(values, 0.99):.3f}", f"{max(values):.3f}"])
    return rows


def slowest(found: Sequence[Journey], count: int) -> list[list[str]]:
    """The ``count`` slowest journeys, stage by stage, with their position and the moment of the change."""
    rows = []
    for journey in sorted(found, key=lambda j: j.total, reverse=True)[:count]:
        stages = journey.stages()
        rows.append(
            [f"{journey.total:.3f}", journey.position, f"{journey.moments[0]:.3f}"]
            + [f"{stages[name]:.3f}" for name in STAGES]
        )
    return rows
