"""Fault injection: which faults are armed for which VM, and which one the next request gets (thread-safe)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from simulator.scenario import FAULT_KINDS, FAULT_LIMITS, FAULT_PATHS, FaultSpec


@dataclass(frozen=True)
class Fault:
    """One armed fault: hits the next ``remaining`` matching requests of ``vm``."""

    vm: str
    kind: str
    remaining: int
    not_before: datetime
    path: str = "scheduledevents"
    retry_after_s: int = 1
    seconds: float = 1.0


def parse_fault(body: Mapping[str, Any], now: datetime, vm_names: Iterable[str]) -> tuple[list[Fault], list[str]]:
    """Faults from a ``POST /_sim/faults`` body; returns (faults, problems)."""
    problems: list[str] = []
    names = set(vm_names)
    vms = body.get("vms", [body.get("vm", "*")])
    if not isinstance(vms, list) or not all(isinstance(v, str) for v in vms):
        return [], ["vms: expected a list of VM names"]
    problems.extend(f"vms: unknown VM {v!r}" for v in vms if v != "*" and v not in names)
    kind = str(body.get("kind", ""))
    if kind not in FAULT_KINDS:
        problems.append(f"kind: {kind!r} is not one of {', '.join(FAULT_KINDS)}")
    path = str(body.get("path", "scheduledevents"))
    if path not in FAULT_PATHS:
        problems.append(f"path: {path!r} is not one of {', '.join(FAULT_PATHS)}")
    numbers: dict[str, float] = {}
    for key, default in (("count", 1), ("retry_after", 1), ("seconds", 1.0)):
        value = body.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= FAULT_LIMITS[key]:
            # Also refuses NaN and infinity (JSON bodies may carry them), which would crash int() or a wait.
            problems.append(f"{key}: expected a number from 0 to {FAULT_LIMITS[key]}")
            value = default
        numbers[key] = value
    unknown = set(body) - {"vm", "vms", "kind", "path", "count", "retry_after", "seconds"}
    problems.extend(f"unknown key {k!r}" for k in sorted(unknown))
    if problems:
        return [], problems
    targets = sorted(names) if "*" in vms else vms
    return [
        Fault(v, kind, int(numbers["count"]), now, path, int(numbers["retry_after"]), float(numbers["seconds"]))
        for v in targets
    ], []


class FaultBook:
    """Armed faults; ``take`` hands the first matching one to a request and counts it down."""

    def __init__(self, faults: Iterable[Fault] = ()) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = list(faults)
        self.injected: dict[str, int] = {}

    def arm(self, faults: Iterable[Fault]) -> None:
        with self._lock:
            self._faults.extend(faults)

    def take(self, vm: str, path: str, now: datetime) -> Fault | None:
        """The fault the current request of ``vm`` to ``path`` suffers, if any."""
        with self._lock:
            for i, f in enumerate(self._faults):
                if f.vm == vm and f.path in ("any", path) and f.not_before <= now and f.remaining > 0:
                    left = f.remaining - 1
                    if left:
                        self._faults[i] = Fault(**{**asdict(f), "remaining": left})
                    else:
                        del self._faults[i]
                    self.injected[f.kind] = self.injected.get(f.kind, 0) + 1
                    return f
        return None

    def pending(self) -> list[dict[str, Any]]:
        """The faults still armed, as JSON-ready dicts."""
        with self._lock:
            return [{**asdict(f), "not_before": f.not_before.isoformat()} for f in self._faults]


def scenario_faults(specs: Iterable[FaultSpec], start: datetime, speed: float, vm_names: Iterable[str]) -> list[Fault]:
    """The scenario's faults, armed from their scenario time on; "*" arms one per VM."""
    out: list[Fault] = []
    names = list(vm_names)
    for s in specs:
        at = start + timedelta(seconds=s.at_s / speed)
        targets = names if "*" in s.vms else s.vms
        out.extend(Fault(vm, s.kind, s.count, at, s.path, s.retry_after_s, s.seconds) for vm in targets)
    return out
