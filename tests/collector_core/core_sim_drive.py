"""Drives the simulator's pure engine on a manual clock and feeds every VM's document through the collector core.

No HTTP and no sleeping: at every step of scenario time the engine advances, each VM polls (as
``SimServer.answer`` does: ``advance`` then ``poll``), its document is rendered in one api-version's shape with
``simulator.protocol.render_document``, serialised to JSON bytes, decoded by ``collector.decode`` and diffed by
``collector.transitions``. The step is half the shortest time any VM's document stays unchanged, so every
document the simulator serves is polled at least once (``Run.missed`` lists any that were not); polls fall
``PHASE`` of a step after the grid the scenario's round-second times sit on, so most changes are seen late.
"""

from __future__ import annotations

import functools
import itertools
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from collector.decode import decode_document
from collector.model import Document, Snapshot, Transition
from collector.transitions import diff
from simulator import load_scenario
from simulator.engine import Engine
from simulator.protocol import render_document
from simulator.scenario import Scenario
from simulator.state import Served

START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
PHASE = 0.3  # polls come this fraction of a step after START + k * step
MAX_STEPS = 20_000  # far beyond any built-in scenario; a run that needs more is a bug in the scenario or engine


@dataclass
class VmRun:
    """What one VM's collector core saw and emitted during a run."""

    name: str
    vm_id: str
    transitions: list[Transition] = field(default_factory=list)
    # Each distinct document polled (in order), with how many transitions had been emitted once it was diffed.
    checkpoints: list[tuple[Document, int]] = field(default_factory=list)
    repeats: int = 0  # polls whose body equalled the previous poll's
    repeat_noise: int = 0  # of those, how many emitted a transition or changed the snapshot


@dataclass(frozen=True)
class Run:
    """One scenario driven to its end in one api-version, with the simulator's ground truth of that run."""

    scenario: Scenario
    version: str
    step: timedelta
    truth: list[dict[str, Any]]
    vms: dict[str, VmRun]
    histories: dict[str, list[Served]]
    missed: dict[str, list[Served]]  # documents the simulator served that no poll saw (must be empty)

    def rows(self, vm: str) -> list[dict[str, Any]]:
        """The truth rows of the events VM ``vm`` was shown."""
        return [r for r in self.truth if r["vm_name"] == vm]


def _ids() -> Any:
    """Deterministic EventIds (GUID-shaped, upper case as IMDS writes them) instead of random ones."""
    counter = iter(range(1, 1_000_000))
    return lambda: str(uuid.UUID(int=next(counter))).upper()


def _step(scenario: Scenario) -> timedelta:
    """Half the shortest time any VM's document stays the same, from a dry run of the engine."""
    engine = Engine(scenario, start=START, speed=1.0, new_id=_ids())
    engine.advance(START + timedelta(days=60))
    gaps = [
        (b.at - a.at).total_seconds()
        for name in engine.vms
        for a, b in itertools.pairwise(engine.history(name))
        if b.at > a.at
    ]
    return timedelta(seconds=min(gaps, default=2.0) / 2)


def _missed(history: list[Served], polls: list[datetime]) -> list[Served]:
    """Served documents (lasting more than an instant) during which no poll came."""
    out = []
    for i, served in enumerate(history):
        until = history[i + 1].at if i + 1 < len(history) else None
        if until == served.at:
            continue
        if not any(served.at <= p and (until is None or p < until) for p in polls):
            out.append(served)
    return out


@functools.cache
def drive(name: str, version: str) -> Run:
    """Run built-in scenario ``name`` to its end, every VM polling at every step in api-version ``version``."""
    scenario = load_scenario(name)
    step = _step(scenario)
    engine = Engine(scenario, start=START, speed=1.0, new_id=_ids())
    vms = {n: VmRun(n, vm.view.vm_id) for n, vm in engine.vms.items()}
    snapshots = {n: Snapshot.empty() for n in vms}
    bodies: dict[str, bytes] = {}
    polls: list[datetime] = []
    for k in range(MAX_STEPS):
        now = START + (k + PHASE) * step
        polls.append(now)
        engine.advance(now)
        for n, run in vms.items():
            incarnation, events, _ = engine.poll(n, now)
            body = json.dumps(render_document(version, incarnation, events)).encode()
            document = decode_document(body)
            snapshot, out = diff(snapshots[n], document, now)
            run.transitions.extend(out)
            if body == bodies.get(n):
                run.repeats += 1
                run.repeat_noise += bool(out) or snapshot is not snapshots[n]
            else:
                run.checkpoints.append((document, len(run.transitions)))
            bodies[n], snapshots[n] = body, snapshot
        if engine.done() and all(engine.history(n)[-1].at <= now for n in vms):
            break
    else:
        raise AssertionError(f"{name} did not finish within {MAX_STEPS} steps of {step}")
    histories = {n: engine.history(n) for n in vms}
    missed = {n: _missed(h, polls) for n, h in histories.items()}
    return Run(scenario, version, step, engine.truth(), vms, histories, missed)
