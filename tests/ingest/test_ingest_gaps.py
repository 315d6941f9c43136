"""`sevents-ingest audit gaps`: Resource Health downtime annotations beside the scheduled events sevents saw.

Against the embedded ClickHouse: collector records go through the ingest's handler, the inventory and the
annotations through the reconciler's own store and row shapes (what `reconcile` writes), then the question is asked
through the query module and the command line.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo import synthetic
from ingest import cli, queries
from ingest import reconcile_rows as rr
from ingest.handler import Handler
from ingest.reconcile import Store

from .conftest import deliveries

BASE = synthetic.BASE_TIME  # noon UTC, about five days ago
SUB = "11111111-2222-3333-4444-555555555555"
WINDOW = {"since": BASE - timedelta(hours=6), "until": BASE + timedelta(hours=6)}
REBOOT = "VirtualMachineRebootInitiatedForPlannedMaintenance"


def resource_id(i: int) -> str:
    return f"/subscriptions/{SUB}/resourceGroups/fleet/providers/Microsoft.Compute/virtualMachines/vm-{i:03d}"


def vm_id(i: int) -> str:
    return str(synthetic.vm(i)["vm_id"])


def inventory(i: int) -> dict[str, Any]:
    row = rr.vm_row(
        {
            "id": resource_id(i),
            "vmId": vm_id(i),
            "name": f"vm-{i:03d}",
            "resourceGroup": "fleet",
            "subscriptionId": SUB,
            "location": "westeurope",
            "powerState": "PowerState/running",
        },
        "Resources",
    )
    assert row is not None
    return row


def annotation(n: int, i: int, at: datetime, name: str = REBOOT, *, known_vm: bool = True) -> dict[str, Any]:
    """Annotation change ``n`` of VM ``i`` at ``at``, as `reconcile` stores it (vmId resolved or not)."""
    target = f"{resource_id(i)}/providers/Microsoft.ResourceHealth/resourceAnnotations/current"
    row = rr.annotation_row(
        {
            "id": f"{target}/providers/Microsoft.Resources/changes/08584-{n:04d}",
            "subscriptionId": SUB,
            "changedAt": at.isoformat(),
            "targetResourceId": target,
            "changeType": "Update",
            "annotationName": name,
            "reason": "Planned maintenance",
            "category": "Planned",
            "context": "Platform Initiated",
            "summary": "",
            "occurredTime": at.isoformat(),
        },
        lambda rid: vm_id(i) if known_vm and rid == resource_id(i).lower() else "",
    )
    assert row is not None
    return row


def heartbeats(i: int, start: datetime, minutes: int) -> list[dict[str, Any]]:
    return [
        synthetic.heartbeat(vm_index=i, observed_at=start + timedelta(minutes=m), seq=1000 + m) for m in range(minutes)
    ]


@pytest.fixture
def store(ch: Any, db: str) -> Store:
    return Store(ch, db, now=lambda: BASE + timedelta(hours=7))


def gaps(ch: Any, db: str) -> list[dict[str, Any]]:
    return queries.run(ch, queries.GAPS, db, **WINDOW).dicts()


def test_downtime_without_an_event_is_a_gap_and_after_an_event_is_beside_it(
    ch: Any, db: str, handler: Handler, store: Store, ch_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """VM 1 rebooted with no scheduled event: a gap. VM 2's reboot followed the Reboot event it saw (appeared at
    12:00, Started at 12:05): shown beside E-2, no gap."""
    handler(
        deliveries([*heartbeats(1, BASE - timedelta(minutes=30), 60), *heartbeats(2, BASE - timedelta(minutes=30), 60)])
    )
    handler(deliveries(synthetic.lifecycle("E-2", 2, start=BASE), prefix="events"))
    store.write(rr.VMS, [inventory(1), inventory(2)])
    reboot_1 = BASE + timedelta(minutes=5, seconds=10)
    reboot_2 = BASE + timedelta(minutes=5, seconds=10)
    store.write(rr.ANNOTATIONS, [annotation(1, 1, reboot_1), annotation(2, 2, reboot_2)])

    rows = gaps(ch, db)
    assert [(r["vm_name"], r["vm_id"], r["annotation"], r["event_id"], r["gap"]) for r in rows] == [
        ("vm-001", vm_id(1), REBOOT, "", True),
        ("vm-002", vm_id(2), REBOOT, "E-2", False),
    ]
    assert rows[0]["changed_at"] == reboot_1
    assert rows[0]["category"] == "Planned" and rows[0]["reason"] == "Planned maintenance"
    assert all(r["collector_reporting"] for r in rows)

    # the same answer on the command line, as JSON
    window = ["--since", WINDOW["since"].isoformat(), "--until", WINDOW["until"].isoformat()]
    target = ["--clickhouse", f"chdb://{ch_path}", "--database", db]
    code = cli.main(["audit", "gaps", *window, "--format", "json", *target])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(r["vm_name"], r["event_id"], r["gap"]) for r in printed] == [
        ("vm-001", "", True),
        ("vm-002", "E-2", False),
    ]
    assert list(printed[0]) == [
        "changed_at",
        "vm_name",
        "vm_id",
        "annotation",
        "category",
        "reason",
        "event_id",
        "gap",
        "collector_reporting",
    ]


def test_what_counts_as_seen_before_and_as_downtime(ch: Any, db: str, handler: Handler, store: Store) -> None:
    """An event seen long before (or only well after) is not the one announcing the downtime; an annotation without
    downtime is listed only beside an event; the vmId comes from the inventory when the reconciler had none; a VM
    whose collector was not reporting is listed, not counted as a gap; outside the window nothing is read."""
    for i in (3, 4, 5, 6):
        handler(deliveries(heartbeats(i, BASE - timedelta(minutes=40), 70), prefix=f"hb{i}"))
    # VM 3: its event ended an hour before the reboot; VM 4: the event appears 10 minutes after the reboot
    handler(deliveries(synthetic.lifecycle("E-3", 3, start=BASE - timedelta(hours=1, minutes=30)), prefix="e3"))
    handler(deliveries(synthetic.lifecycle("E-4", 4, start=BASE + timedelta(minutes=10)), prefix="e4"))
    # VM 5: a Freeze it saw, then a freeze annotation and an informational one (both follow the event)
    handler(deliveries(synthetic.lifecycle("E-5", 5, start=BASE - timedelta(minutes=5)), prefix="e5"))
    # VM 6: an event seen by the VM but naming another VM (affects_this_vm false): not its own
    handler(
        deliveries([synthetic.transition(vm_index=6, event_id="E-6", observed_at=BASE, resources=["vm-099"])], "e6")
    )
    store.write(rr.VMS, [inventory(i) for i in (3, 4, 5, 6, 7)])
    store.write(
        rr.ANNOTATIONS,
        [
            annotation(3, 3, BASE),
            annotation(4, 4, BASE),
            annotation(5, 5, BASE + timedelta(seconds=30), "VirtualMachinePlannedFreezeSucceeded", known_vm=False),
            annotation(6, 5, BASE + timedelta(seconds=40), "VirtualMachinePlannedFreezeStarted"),
            annotation(7, 6, BASE + timedelta(minutes=1)),
            annotation(8, 7, BASE + timedelta(minutes=2), "LiveMigrationSucceeded"),  # VM 7: no collector at all
            annotation(9, 3, BASE + timedelta(minutes=3), "VirtualMachineRestarted"),  # a user's restart: not listed
            annotation(10, 3, BASE - timedelta(days=2)),  # outside the window
        ],
    )

    rows = gaps(ch, db)
    got = [(r["vm_name"], r["annotation"], r["event_id"], r["gap"], r["collector_reporting"]) for r in rows]
    assert got == [
        ("vm-003", REBOOT, "", True, True),
        ("vm-004", REBOOT, "", True, True),
        ("vm-005", "VirtualMachinePlannedFreezeSucceeded", "E-5", False, True),
        ("vm-005", "VirtualMachinePlannedFreezeStarted", "E-5", False, True),
        ("vm-006", REBOOT, "", True, True),
        ("vm-007", "LiveMigrationSucceeded", "", False, False),
    ]
    assert rows[2]["vm_id"] == vm_id(5)  # resolved through azure_vms


def test_the_downtime_set_is_plain_annotation_names() -> None:
    """The one list of downtime annotations is spliced into the SQL as literals: names only, no quotes."""
    assert REBOOT in queries.DOWNTIME_ANNOTATIONS and "LiveMigrationSucceeded" in queries.DOWNTIME_ANNOTATIONS
    assert all(name.isalnum() for name in queries.DOWNTIME_ANNOTATIONS)
    assert "VirtualMachineRestarted" not in queries.DOWNTIME_ANNOTATIONS
    assert queries.GAPS in queries.ALL
