"""The collectors' side of a coordinated event, as wire records: the VMs of a set, an event's appeared transitions
and their readiness decisions. Also run as a program on an embedded ClickHouse directory of its own (a coordinator
subprocess holds one directory each): ``seed DIR FILE`` stores the records of FILE (JSON lines) through the
ingest's handler, ``dump DIR`` prints the coordinators' decisions as JSON lines.
"""

from __future__ import annotations

import json
import sys
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from collector.enrich import approval_record, transition_record
from collector.model import ApprovalOutcome, Event, Transition, VmIdentity
from sevents import records

SUB = "00000000-0000-0000-0000-0000000000aa"
RG = "rg-web"


def vm(name: str) -> VmIdentity:
    return VmIdentity(
        vm_id=str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
        vm_name=name,
        location="westeurope",
        subscription_id=SUB,
        resource_group=RG,
        resource_id=f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/{name}",
    )


def event(event_id: str, names: tuple[str, ...], not_before: datetime) -> Event:
    return Event(event_id, "Reboot", "VirtualMachine", names, "Scheduled", not_before, "", "Platform", 30)


def appeared(e: Event, name: str, at: datetime) -> dict[str, Any]:
    t = Transition("appeared", e.event_id, 1, "Scheduled", "", at, None, e)
    return {**transition_record(t, vm(name), api_version="2020-07-01", collector_version="test"), "seq": 1}


def decided(
    e: Event, name: str, decision: str, at: datetime, hook_s: float, hook_exit: int | None = 0
) -> dict[str, Any]:
    outcome = ApprovalOutcome(decision, "coordinator", "coordinator", at, hook_exit, int(hook_s * 1000))
    return {**approval_record(outcome, e, vm(name), api_version="2020-07-01", collector_version="test"), "seq": 2}


def decisions(client: Any, db: str) -> list[dict[str, Any]]:
    """The coordinators' records (vm_id "coordinator") in ``db``, deduplicated."""
    columns = ("event_id", "decision", "rule", "approver", "vm_name", "resource_id", "http_status", "decided_at")
    rows = client.query(
        f"SELECT {', '.join(columns)} FROM {db}.approvals FINAL WHERE vm_id = 'coordinator' ORDER BY decided_at"
    ).result_rows
    return [dict(zip(columns, row, strict=True)) for row in rows]


def _main(argv: list[str]) -> int:
    from ingest.clickhouse import connect
    from ingest.handler import Handler
    from ingest.migrate import Target, migrate
    from ingest.source import Delivery
    from ingest.writer import Writer

    client = connect(f"chdb://{argv[1]}")
    try:
        if argv[0] == "seed":
            migrate(client, Target(database="sevents"))
            lines = open(argv[2], encoding="utf-8").read().splitlines()  # noqa: SIM115
            handler = Handler(Writer(client, "sevents"), source="test", stop=threading.Event())
            handler([Delivery(line.encode(), f"seed#{i}") for i, line in enumerate(lines)])
        else:
            for row in decisions(client, "sevents"):
                at = row["decided_at"]
                at = at if at is None or at.tzinfo else at.replace(tzinfo=UTC)
                print(json.dumps({**row, "decided_at": records.format_time(at) if at else None}))
    finally:
        client.close()
    return 0


def moment(base: datetime, seconds: float) -> datetime:
    return base + timedelta(seconds=seconds)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
