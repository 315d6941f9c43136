"""What a report covers and the rows it is drawn from: shared by the query side (report) and the HTML side."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Filters:
    """What the report covers: a window on first seen, and optional type, VM, set, fault domain and EventId lists."""

    since: datetime
    until: datetime
    event_types: tuple[str, ...] = ()
    vms: tuple[str, ...] = ()
    fault_domains: tuple[int, ...] = ()
    fault_sets: tuple[str, ...] = ()  # a scale set or an availability set's label; with fault_domains, their FDs
    event_ids: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = [f"first seen {self.since:%Y-%m-%d %H:%M:%S} to {self.until:%Y-%m-%d %H:%M:%S} UTC"]
        for label, values in (
            ("types", self.event_types),
            ("VMs", self.vms),
            ("sets", self.fault_sets),
            ("fault domains", self.fault_domains),
            ("events", self.event_ids),
        ):
            if values:
                parts.append(f"{label}: {', '.join(str(v) for v in values)}")
        return "; ".join(parts)


@dataclass(frozen=True)
class ReportData:
    """The rows a report is drawn from: one per event, one per (event, affected VM), one per unannounced downtime."""

    filters: Filters
    events: list[dict[str, Any]] = field(default_factory=list)
    lanes: list[dict[str, Any]] = field(default_factory=list)
    unannounced: list[dict[str, Any]] = field(default_factory=list)  # downtime no event of the VM announced
    approvals: list[dict[str, Any]] = field(default_factory=list)  # the approvals sevents' policy made (decisions)
