"""The timeline's Events shows the events only Azure's account has (the central feed) that overlap its range, and
finds them without reading the lifecycles of those the feed settled before the range (``PLATFORM_OVERLAPPING``).

The end of such an event is its settling: the first time the feed published it Completed or Canceled. Every
platform event first published in the 30 days before the range is a candidate; one settled before the range
cannot overlap it, so its stored lifecycle (a granule of event_history each) is not read.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from dashboards.filters import DB, VM_VARIABLES
from dashboards.macros import expand
from dashboards.templating import Selection, apply
from demo import synthetic
from ingest import lifecycle_store
from ingest.migrate import Target, migrate
from tests.dashboards.conftest import Engine
from tests.dashboards.dash_helpers import all_of, context, panel, run

AT = synthetic.BASE_TIME  # the range is the hour either side
SETTLED_BEFORE = 5_000  # feed events settled before the range: never shown, never read
GRANULE = 256  # event_history's granule (migration 0024)

# label -> (first published, hours from AT; settled, hours from AT or None; shown)
CASES = {
    "P-settled-before": (-120, -2, False),
    "P-settled-in-range": (-72, -0.5, True),
    "P-open": (-240, None, True),
    "P-settled-after": (-48, 3, True),
    "P-before-the-lookback": (-24 * 40, -24 * 39, False),
}


def _row(event_id: str, status: str, at: datetime) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "event_status": status,
        "event_type": "Reboot",
        "resource_type": "VirtualMachine",
        "resources": ["platform-only-vm"],
        "not_before": None,
        "duration_s": None,
        "event_source": "Platform",
        "description": "",
        "resource_id": "/subscriptions/x/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/p",
        "subscription_id": "x",
        "resource_group": "rg",
        "row_hash": 0,
        "first_seen_at": at,
        "reconciled_at": at,
    }


def _feed(ch: Any, db: str) -> None:
    rows = []
    for event_id, (published, settled, _) in CASES.items():
        rows.append(_row(event_id, "Scheduled", AT + timedelta(hours=published)))
        if settled is not None:
            rows.append(_row(event_id, "Completed", AT + timedelta(hours=settled)))
    for i in range(SETTLED_BEFORE):
        published = AT - timedelta(days=20) + timedelta(minutes=5 * i)
        rows.append(_row(f"Q-{i}", "Scheduled", published))
        rows.append(_row(f"Q-{i}", "Canceled", published + timedelta(hours=1)))
    ch.insert(f"{db}.azure_scheduled_events", [list(r.values()) for r in rows], column_names=list(rows[0]))
    lifecycle_store.refresh_all(ch, db)


def _events_sql(db: str) -> tuple[str, dict[str, Selection]]:
    variables = {name: all_of(("x",)) for name, _, _ in VM_VARIABLES}
    variables["event_type"] = all_of(("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"))
    variables["event_id"] = Selection(values=("",), multi=False)
    return panel("sevents-timeline", "Events").sql.replace(f"{DB}.", f"{db}."), variables


def test_platform_events_overlapping_the_range_are_shown_and_those_settled_before_are_not_read(
    engine: Engine,
) -> None:
    ch, db = engine.client, "plat_" + uuid.uuid4().hex[:10]
    migrate(ch, Target(database=db))
    _feed(ch, db)
    sql, variables = _events_sql(db)
    window = context(AT - timedelta(hours=1), AT + timedelta(hours=1))
    rows = run(ch, sql, variables, window).dicts()
    assert {str(r["event_id"]) for r in rows} == {label for label, (_, _, shown) in CASES.items() if shown}
    assert {str(r["seen_by"]) for r in rows} == {"platform"}

    # the plan's index analysis leaves the shown events' granules of event_history (two at most each: a key at a
    # granule's boundary reads its neighbour), not the 5,000 settled ones'
    planned = ch.query(f"EXPLAIN ESTIMATE {expand(apply(sql, variables), window)}").result_rows
    read = sum(int(row[3]) for row in planned if row[1] == "event_history")
    assert 0 < read <= 3 * 2 * GRANULE, planned
