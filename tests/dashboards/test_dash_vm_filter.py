"""The VM variables filter events together: an event is shown when one VM it affects matches every VM variable
chosen (``filters.event_filter``), so a scale set and a fault domain chosen together mean that fault domain of
that set, not any VM of the set and any VM of the domain anywhere in the fleet."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from dashboards.filters import DB, VM_VARIABLES
from dashboards.templating import Selection
from demo import synthetic
from ingest.handler import Handler
from ingest.migrate import Target, migrate
from ingest.writer import Writer
from tests.dashboards.conftest import Engine
from tests.dashboards.dash_helpers import all_of, context, panel, run
from tests.ingest.conftest import deliveries

# E-1 affects vm 1 (set S1, fault domain 1) and vm 3 (set S2, fault domain 0); E-2 affects vm 6 (S1, fault domain 0)
AFFECTED = (("E-1", 1, "S1"), ("E-1", 3, "S2"), ("E-2", 6, "S1"))
OPTIONS = {
    "subscription": (synthetic.vm(0)["subscription_id"],),
    "location": ("westeurope",),
    "scale_set": ("S1", "S2"),
    "fault_domain": ("0", "1", "2"),
    "vm": tuple(synthetic.vm(i)["vm_name"] for _, i, _ in AFFECTED),
}


UPCOMING = ("sevents-fleet", "Upcoming Reboot, Redeploy, Terminate and Preempt")


def _shown(ch: Any, db: str, board: tuple[str, str] = ("sevents-timeline", "Events"), **chosen: str) -> set[str]:
    """The EventIds a panel (the timeline's Events unless ``board``) shows with ``chosen`` (variable -> one value),
    the rest All."""
    variables = {name: all_of(OPTIONS[name]) for name, _, _ in VM_VARIABLES}
    variables |= {name: Selection(values=(value,), options=OPTIONS[name]) for name, value in chosen.items()}
    variables["event_type"] = all_of(("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"))
    variables["event_id"] = Selection(values=("",), multi=False)
    sql = panel(*board).sql.replace(f"{DB}.", f"{db}.")
    at = synthetic.BASE_TIME
    rows = run(ch, sql, variables, context(at - timedelta(hours=1), at + timedelta(hours=1))).dicts()
    return {str(row["event_id"]) for row in rows}


def _stored(engine: Engine, at: datetime = synthetic.BASE_TIME) -> tuple[Any, str]:
    """A database of its own holding AFFECTED's transitions observed at ``at``, their lifecycles computed."""
    ch, db = engine.client, "vmf_" + uuid.uuid4().hex[:10]
    migrate(ch, Target(database=db))
    records = []
    for event_id, vm_index, scale_set in AFFECTED:
        record = synthetic.transition(
            vm_index=vm_index, event_id=event_id, observed_at=at, not_before=at + timedelta(minutes=15)
        )
        records.append({**record, "scale_set": scale_set})
    Handler(Writer(ch, db), source="test", stop=threading.Event())(deliveries(records))
    return ch, db


def test_set_and_fault_domain_chosen_together_mean_that_domain_of_that_set(engine: Engine) -> None:
    ch, db = _stored(engine)

    assert _shown(ch, db) == {"E-1", "E-2"}
    assert _shown(ch, db, scale_set="S1", fault_domain="0") == {"E-2"}  # E-1's VM in domain 0 is in S2
    assert _shown(ch, db, scale_set="S1") == {"E-1", "E-2"}
    assert _shown(ch, db, fault_domain="0") == {"E-1", "E-2"}
    assert _shown(ch, db, scale_set="S2", fault_domain="1") == set()
    assert _shown(ch, db, vm=synthetic.vm(3)["vm_name"], scale_set="S2") == {"E-1"}
    assert _shown(ch, db, subscription="00000000-0000-0000-0000-000000000000") == set()


def test_the_active_panels_filter_the_same_way_from_the_events_vm_rows(engine: Engine) -> None:
    """ "Upcoming" (the active set) looks the chosen VMs up in the active events' stored VM rows, not in the
    fleet's transitions, with the same meaning: one affected VM matching every variable chosen."""
    ch, db = _stored(engine, datetime.now(UTC) - timedelta(minutes=1))
    assert _shown(ch, db, UPCOMING) == {"E-1", "E-2"}
    assert _shown(ch, db, UPCOMING, scale_set="S1", fault_domain="0") == {"E-2"}
    assert _shown(ch, db, UPCOMING, scale_set="S1") == {"E-1", "E-2"}
    assert _shown(ch, db, UPCOMING, scale_set="S2", fault_domain="1") == set()
    assert _shown(ch, db, UPCOMING, vm=synthetic.vm(3)["vm_name"], scale_set="S2") == {"E-1"}
    assert _shown(ch, db, UPCOMING, vm=synthetic.vm(6)["vm_name"]) == {"E-2"}
    assert _shown(ch, db, UPCOMING, subscription="00000000-0000-0000-0000-000000000000") == set()
