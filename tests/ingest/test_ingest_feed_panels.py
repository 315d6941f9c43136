"""The fleet overview's coverage panels (dashboards.coverage) on Azure's account beside the collectors', on chDB.

The inventory and an annotation are stored the way ``sevents-ingest reconcile`` stores them (its ``Store``), the
central feed's events through ``FeedHandler``, the collectors' heartbeats through the ingest's ``Handler``; each panel
runs as Grafana would run it (variables applied, then the macros) with the subscription on All.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from dashboards import coverage
from dashboards.generate import qualified
from demo import synthetic
from ingest import reconcile_rows as rr
from ingest.feed import FeedHandler
from ingest.handler import Handler
from ingest.reconcile import Store
from ingest.source import Delivery
from ingest.writer import Writer
from sevents.records import encode
from tests.dashboards.dash_helpers import all_of, context, dashboards, run
from tests.ingest.feed_events import RG, SUB, event_grid, resource_info

SET = "web-as"


def _inventory_vm(index: int) -> dict[str, Any]:
    """Synthetic VM ``index`` in Azure's inventory, in availability set ``web-as``."""
    vm = synthetic.vm(index)
    base = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute"
    row = rr.vm_row(
        {
            "id": f"{base}/virtualMachines/{vm['vm_name']}",
            "vmId": vm["vm_id"],
            "name": vm["vm_name"],
            "subscriptionId": SUB,
            "resourceGroup": RG,
            "availabilitySetId": f"{base}/availabilitySets/{SET}",
        },
        "Resources",
    )
    assert row is not None
    return row


def _panel(ch: Any, db: str, sql: str, now: datetime) -> list[dict[str, Any]]:
    """The panel's rows with every variable on All (the subscription, the only one these panels read, offering SUB)."""
    names = [v["name"] for v in dashboards()["sevents-timeline"]["templating"]["list"] if v["type"] != "datasource"]
    variables = {name: all_of(()) for name in names if name != "event_id"} | {"subscription": all_of((SUB,))}
    frame = run(ch, qualified("sevents").sub(f"{db}.", sql), variables, context(now - timedelta(hours=1), now))
    return [dict(zip(frame.columns, row, strict=True)) for row in frame.rows]


def test_coverage_unwatched_events_and_gaps(ch: Any, db: str) -> None:
    """Four inventory VMs, two with a reporting collector: coverage 2 of 4; the feed's event for the set names two
    VMs no collector watches (and one name the inventory lacks); a downtime annotation of a watched VM with no
    event seen is a gap, one of an unwatched VM is not."""
    now = datetime.now(UTC).replace(microsecond=0)
    store = Store(ch, db)
    store.write(rr.VMS, [_inventory_vm(i) for i in range(4)])
    Handler(Writer(ch, db), source="outbox", stop=threading.Event())(
        [Delivery(encode(synthetic.heartbeat(vm_index=i, observed_at=now)), f"outbox#{i}") for i in (0, 1)]
    )
    feed = FeedHandler(ch, db, stop=threading.Event())
    names = [synthetic.vm(i)["vm_name"] for i in range(4)]
    watched = event_grid("g-1", resource_info("E-watched", "Scheduled", names[:1]), now - timedelta(minutes=9))
    the_set = resource_info("E-set", "Started", [*names[1:], "ghost"], parent=f"availabilitySets/{SET}")
    feed(
        [
            Delivery(json.dumps([e]).encode(), f"eventhubs:0:{n}")
            for n, e in enumerate([watched, event_grid("g-2", the_set, now - timedelta(minutes=5))])
        ]
    )
    vm_base = f"/subscriptions/{SUB}/resourcegroups/{RG}/providers/microsoft.compute/virtualmachines"
    store.write(
        rr.ANNOTATIONS,
        [
            {
                "change_id": f"change-{i}",
                "resource_id": f"{vm_base}/{names[i]}",
                "vm_id": synthetic.vm(i)["vm_id"],
                "subscription_id": SUB,
                "changed_at": now,
                "change_type": "Update",
                "annotation_name": "VirtualMachineRebootInitiatedForPlannedMaintenance",
                "reason": "Planned maintenance",
                "category": "Planned",
                "context": "Platform Initiated",
                "summary": "",
                "occurred_at": None,
            }
            for i in (1, 2)
        ],
    )

    assert _panel(ch, db, coverage.COVERAGE, now) == [
        {
            "subscription_id": SUB,
            "resource_group": RG,
            "fault_set": SET,
            "inventory_vms": 4,
            "reporting": 2,
            "silent": 0,
            "retired": 0,
            "never_seen": 2,
            "covered_pct": 50.0,
        }
    ]
    unwatched = _panel(ch, db, coverage.UNWATCHED, now)
    assert sorted(
        (r["event_id"], r["vm_name"], r["vm_id"], r["fault_set"], r["platform_status"]) for r in unwatched
    ) == [
        ("E-set", "ghost", "", "", "Started"),
        ("E-set", names[2], synthetic.vm(2)["vm_id"], SET, "Started"),
        ("E-set", names[3], synthetic.vm(3)["vm_id"], SET, "Started"),
    ]
    gaps = _panel(ch, db, coverage.gaps_sql(), now + timedelta(minutes=30))
    assert [(r["vm_name"], r["collector_reporting"]) for r in gaps] == [(names[1], True)]
    # the timeline's event table lists both feed events (no collector saw either), seen by the platform only
    timeline = next(p for p in dashboards()["sevents-timeline"]["panels"] if p["title"] == "Events")
    shown = _panel(ch, db, timeline["targets"][0]["rawSql"], now + timedelta(minutes=30))
    assert sorted((r["event_id"], r["seen_by"], r["outcome"], r["affected"]) for r in shown) == [
        ("E-set", "platform", "announced", 4),
        ("E-watched", "platform", "announced", 1),
    ]
