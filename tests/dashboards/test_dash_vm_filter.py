"""The VM variables filter events together: an event is shown when one VM it affects matches every VM variable
chosen (``filters.event_filter``), so a scale set and a fault domain chosen together mean that fault domain of
that set, not any VM of the set and any VM of the domain anywhere in the fleet."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from dashboards.filters import DB, VM_VARIABLES
from dashboards.macros import QueryContext, expand
from dashboards.templating import Selection, apply
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
EVENTS = ("sevents-timeline", "Events")


def _query(db: str, board: tuple[str, str], chosen: dict[str, str]) -> tuple[str, dict[str, Selection], QueryContext]:
    """A panel's SQL, variables (``chosen``: variable -> one value, the rest All) and the hour either side of
    BASE_TIME."""
    variables = {name: all_of(OPTIONS[name]) for name, _, _ in VM_VARIABLES}
    variables |= {name: Selection(values=(value,), options=OPTIONS[name]) for name, value in chosen.items()}
    variables["event_type"] = all_of(("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"))
    variables["event_id"] = Selection(values=("",), multi=False)
    window = context(synthetic.BASE_TIME - timedelta(hours=1), synthetic.BASE_TIME + timedelta(hours=1))
    return panel(*board).sql.replace(f"{DB}.", f"{db}."), variables, window


def _shown(ch: Any, db: str, board: tuple[str, str] = EVENTS, **chosen: str) -> set[str]:
    """The EventIds a panel (the timeline's Events unless ``board``) shows with ``chosen``, the rest All."""
    return {str(row["event_id"]) for row in run(ch, *_query(db, board, chosen)).dicts()}


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


# the rest of the fleet, in the day before the range: 100,000 transitions, in granules of 8,192 rows
FLEET_VMS, FLEET_TRANSITIONS = 5_000, 100_000


def test_a_range_panel_with_a_vm_chosen_reads_that_vms_transitions_not_the_fleets(engine: Engine) -> None:
    """A range panel finds a chosen VM's events through the VMs' identities (``transition_observers``) in its own
    transitions (``transitions``, sorted by VM): a granule or two per month, not the fleet's transitions of the
    range and the lookback."""
    ch, db = _stored(engine)
    ch.command(
        f"INSERT INTO {db}.transitions (transition_id, vm_id, vm_name, subscription_id, location, scale_set, "
        "fault_domain, event_id, observed_at, affects_this_vm, kind, status, event_type) "
        "SELECT concat('F-', toString(number)), concat('fleet-vm-', toString(number % {vms:UInt32})), "
        "concat('fleet-', toString(number % {vms:UInt32})), 'sub-fleet', 'westeurope', 'S9', "
        "toUInt16(number % 3), concat('F-E-', toString(intDiv(number, 50))), "
        "{at:DateTime64(3)} - toIntervalSecond(number % 86400), true, 'status', 'Scheduled', 'Reboot' "
        "FROM numbers({rows:UInt32})",
        parameters={"vms": FLEET_VMS, "rows": FLEET_TRANSITIONS, "at": synthetic.BASE_TIME},
    )
    vm = synthetic.vm(3)["vm_name"]
    assert _shown(ch, db, vm=vm) == {"E-1"}
    assert _shown(ch, db, vm=vm, scale_set="S1") == set()  # vm 3 is in S2

    # ClickHouse counts every row the query reads, its subqueries' included, and stops it past the limit: the
    # panel's reads (the VM's granules of `transitions`, one or two in each month the range and lookback touch,
    # the identities, the events' rollup and lifecycle rows) stay under half of the fleet's transitions of the day
    sql, variables, window = _query(db, EVENTS, {"vm": vm})
    limited = ch.query(expand(apply(sql, variables), window), settings={"max_rows_to_read": FLEET_TRANSITIONS // 2})
    assert {str(row[0]) for row in limited.result_rows} == {"E-1"}
