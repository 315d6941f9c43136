"""The rollups of migration 0006 answer exactly what the reference views of migration 0004 answered.

The reference is 0004's own text, installed beside the rollups under other names: `event_vms` and `events`
as they were, aggregating all of ``transitions FINAL`` on every query. Random transition streams go in with
duplicates, in any order and in random batch splits; the incrementally maintained views must agree row for row.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import event_sql, lifecycle_store
from ingest.migrate import Target, load_migrations, migrate, render

# Real ClickHouse, hundreds of inserts and queries per property run: the slow tier (still run in CI).
pytestmark = pytest.mark.slow

NOW = datetime.now(UTC).replace(microsecond=0)
KINDS = ("appeared", "status_changed", "updated", "disappeared", "anomaly")
COLUMNS = (
    "transition_id", "record_id", "schema_version", "record_type", "seq", "observed_at", "api_version",
    "collector_version", "vm_id", "vm_name", "location", "subscription_id", "resource_group", "resource_id", "zone",
    "fault_domain", "update_domain", "scale_set", "event_id", "incarnation", "kind", "status", "prev_status",
    "prev_observed_at", "event_type", "resource_type", "resources", "affects_this_vm", "not_before", "description",
    "event_source", "duration_s", "changed_fields", "anomaly",
)  # fmt: skip


def install_reference(client: Any, database: str) -> None:
    """Migration 0004's views as ``ref_event_vms`` and ``ref_events`` (pure text renaming, nothing rewritten)."""
    reference = next(m for m in load_migrations() if m.version == 4)
    for statement in render(reference, Target(database=database)):
        renamed = statement.replace(f"{database}.event_vms", f"{database}.ref_event_vms")
        client.command(renamed.replace(f"{database}.events", f"{database}.ref_events"))


@pytest.fixture(scope="module")
def rollup_db(ch: Any) -> str:
    """One migrated database with the reference views beside the rollups (emptied by each example)."""
    name = "t_" + uuid.uuid4().hex[:12]
    migrate(ch, Target(database=name))
    install_reference(ch, name)
    return name


@st.composite
def streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Transitions of a few events on a few VMs: any kinds and statuses, distinct times, values that change."""
    rows = []
    millis = draw(st.lists(st.integers(0, 3_000_000), min_size=1, max_size=40, unique=True))
    for index, offset in enumerate(millis):
        event = draw(st.sampled_from(("E-a", "E-b", "E-c", "")))
        vm = draw(st.integers(0, 3))
        kind = draw(st.sampled_from(KINDS))
        status = "" if kind == "disappeared" else draw(st.sampled_from(("Scheduled", "Started")))
        observed = NOW - timedelta(days=2) + timedelta(milliseconds=offset)
        not_before = draw(st.one_of(st.none(), st.integers(-600, 3600)))
        rows.append(
            {
                "transition_id": f"t{index}",
                "record_id": f"t{index}",
                "schema_version": 1,
                "record_type": "transition",
                "seq": index,
                "observed_at": observed,
                "api_version": "2020-07-01",
                "collector_version": "test",
                "vm_id": f"vm-id-{vm}",
                "vm_name": f"vm-{vm}-{draw(st.sampled_from(('x', 'y')))}",
                "location": "westeurope",
                "subscription_id": draw(st.sampled_from(("s1", "s2"))),
                "resource_group": "rg",
                "resource_id": "",
                "zone": "",
                "fault_domain": draw(st.one_of(st.none(), st.integers(0, 2))),
                "update_domain": draw(st.one_of(st.none(), st.integers(0, 4))),
                "scale_set": "",
                "event_id": event,
                "incarnation": index,
                "kind": kind,
                "status": status,
                "prev_status": "",
                "prev_observed_at": None,
                "event_type": draw(st.sampled_from(("Freeze", "Reboot", "Redeploy", ""))),
                "resource_type": "VirtualMachine",
                "resources": draw(st.lists(st.sampled_from(("vm-0-x", "vm-1-x", "vm-2-y")), max_size=3)),
                "affects_this_vm": draw(st.booleans()),
                "not_before": None if not_before is None else observed + timedelta(seconds=not_before),
                "description": draw(st.one_of(st.none(), st.sampled_from(("one", "two")))),
                "event_source": draw(st.one_of(st.none(), st.sampled_from(("Platform", "User")))),
                "duration_s": draw(st.one_of(st.none(), st.integers(-1, 30))),
                "changed_fields": [],
                "anomaly": "odd" if kind == "anomaly" else "",
            }
        )
    return rows


# each event's and each observing VM's stored lifecycle (0017, 0022): emptied with the tables they are computed from
HISTORY = ("event_history", "event_vm_history")


def refresh(client: Any, database: str, batch: list[dict[str, Any]]) -> None:
    """What the ingest does once a batch is stored: the events it touched computed again."""
    lifecycle_store.refresh(client, database, [r["event_id"] for r in batch])


def _rows(client: Any, sql: str) -> list[tuple[Any, ...]]:
    return sorted(client.query(sql).result_rows, key=repr)


# Migration 0013 takes an event's moments and outcome from all its observers: what 0004 answered, with these rules
# (no downtime or sevents approval in these streams): per (event, VM), started_at and approved_at are the event's;
# the event is approved when it started before its last NotBefore; an event no VM saw start or end is
# 'end_not_seen', not 'cancelled'. The evidence columns 0013 added are checked on their own.
EVIDENCE = "started_at_source, ended_at_source, released_by"
# Migration 0016 added Azure's account of each event (none in these streams: 'sevents', '', 'sevents')
PLATFORM = "seen_by, platform_status, outcome_source"
# Migration 0017 stores each event's lifecycle with its last activity (what events_since selects by), and 0029
# tells the month it is stored in (events only)
STORED = "last_seen_at, stored_month"


def expected_events(db: str, columns: str = "*") -> str:
    """0004's ``events`` under 0013's rules."""
    approved = "ifNull(started_at < not_before_last, 0)"
    ended = f"SELECT event_id FROM {db}.ref_event_vms WHERE ended_at IS NOT NULL"
    unseen = f"outcome = 'cancelled' AND event_id NOT IN ({ended})"
    return (
        f"SELECT {columns} FROM (SELECT * REPLACE (if({approved}, started_at, NULL) AS approved_at, "
        f"if({approved}, notice_s, NULL) AS approval_latency_s, if({unseen}, 'end_not_seen', outcome) AS outcome) "
        f"FROM {db}.ref_events)"
    )


def expected_event_vms(db: str) -> str:
    """0004's ``event_vms`` under 0013's rules."""
    window = (
        "min(started_at) OVER w AS ev_started_, "
        "argMaxIf(not_before_last, last_seen_at, not_before_last IS NOT NULL) OVER w AS ev_not_before_, "
        "max(ended_at IS NOT NULL) OVER w AS ev_end_seen_"
    )
    outcome = (
        "multiIf(outcome = 'active', 'active', ev_started_ IS NOT NULL, 'completed', ev_end_seen_, 'cancelled', "
        "'end_not_seen')"
    )
    return (
        "SELECT * EXCEPT (ev_started_, ev_not_before_, ev_end_seen_) REPLACE (ev_started_ AS started_at, "
        "if(ifNull(ev_started_ < ev_not_before_, 0), ev_started_, NULL) AS approved_at, "
        f"{outcome} AS outcome) "
        f"FROM (SELECT *, {window} FROM {db}.ref_event_vms WINDOW w AS (PARTITION BY event_id))"
    )


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(stream=streams(), data=st.data())
def test_rollups_equal_the_reference_views(ch: Any, rollup_db: str, stream: list[dict[str, Any]], data: Any) -> None:
    """Duplicates, any arrival order and any batch split give exactly the reference views' rows."""
    for table in ("transitions", "transitions_by_time", "event_vm_rollup", "event_rollup", "vm_retirements", *HISTORY):
        ch.command(f"TRUNCATE TABLE {rollup_db}.{table}")
    delivered = stream + data.draw(st.lists(st.sampled_from(stream), max_size=10), label="duplicates")
    delivered = data.draw(st.permutations(delivered), label="order")
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(delivered) - 1)), max_size=5), label="cuts"))
    for start, end in zip([0, *cuts], [*cuts, len(delivered)], strict=True):
        if start < end:
            batch = delivered[start:end]
            ch.insert(f"{rollup_db}.transitions", [[r[c] for c in COLUMNS] for r in batch], column_names=COLUMNS)
            refresh(ch, rollup_db, batch)
    first_day = f"(SELECT toDate(min(first_seen_at)) FROM {rollup_db}.event_rollup)"
    # 0008 added the measured downtime (no impacts here: NULL, 0) and 0009 the sets of the domains (tested in
    # test_ingest_fault_sets); every other column is 0004's, in its order
    sets = "availability_set, fault_sets, fault_domain_labels, update_domain_labels"
    observed = {
        "event_vms": f"observed_impact_s, vm_started_at, {EVIDENCE}",
        "events": f"observed_impact_s, impacted_vms, {sets}, {EVIDENCE}, {PLATFORM}, {STORED}",
    }
    reference = {"event_vms": expected_event_vms(rollup_db), "events": expected_events(rollup_db)}
    for view in ("event_vms", "events"):
        expected = _rows(ch, reference[view])
        ours = f"* EXCEPT ({observed[view]})"
        assert _rows(ch, f"SELECT {ours} FROM {rollup_db}.{view}") == expected
        from_first_day = f"SELECT {ours} FROM {rollup_db}.{view}_since(since_day = {first_day})"
        assert _rows(ch, from_first_day) == expected, "read from the events' first day on, nothing is missed"
        unhit = f"SELECT countIf(observed_impact_s IS NOT NULL) FROM {rollup_db}.{view}"
        assert _rows(ch, unhit) == [(0,)]
    # event_lifecycles_since (0011) is events without Resources: the same values, column for column
    lifecycles = f"SELECT * EXCEPT ({EVIDENCE}) FROM {rollup_db}.event_lifecycles_since(since_day = {first_day})"
    without_resources = expected_events(rollup_db, "* EXCEPT (affected_vms, affected_vm_count)")
    assert _rows(ch, lifecycles) == _rows(ch, without_resources)
    # with no downtime and no sevents approval: every start and end was seen; the event was released early (by
    # someone outside sevents) exactly when it was approved, and by no one until it started
    evidence = f"SELECT event_id, {EVIDENCE} FROM {rollup_db}.event_lifecycles_since(since_day = {first_day})"
    assert _rows(ch, evidence) == _rows(ch, f"SELECT event_id, {EVIDENCE} FROM {rollup_db}.events")
    released = (
        "SELECT countIf((started_at_source IS NULL) != (started_at IS NULL) "
        "OR ifNull(started_at_source != 'seen', 0) "
        "OR (ended_at_source IS NULL) != (ended_at IS NULL) OR ifNull(ended_at_source != 'seen', 0) "
        "OR (released_by IS NULL) != (started_at IS NULL) "
        "OR ifNull(released_by = 'outside', 0) != (approved_at IS NOT NULL) "
        "OR ifNull(released_by = 'no_notice', 0) != (started_at IS NOT NULL AND not_before_last IS NULL)) "
        f"FROM {rollup_db}.events"
    )
    assert _rows(ch, released) == [(0,)]
    # event_impacts_since (0012) is the Impact table's columns of events, computed on their own: the same values
    shown = (
        "event_id, event_type, event_source, duration_s, started_at, ended_at, started_to_gone_s, observed_impact_s, "
        "impacted_vms, affected_vm_count, fault_domain_labels"
    )
    impacts = f"SELECT {shown} FROM {rollup_db}.event_impacts_since(since_day = {first_day})"
    assert _rows(ch, impacts) == _rows(ch, f"SELECT {shown} FROM {rollup_db}.events")
    active = {row[0] for row in _rows(ch, f"SELECT event_id FROM {rollup_db}.ref_events WHERE outcome = 'active'")}
    assert {row[0] for row in _rows(ch, f"SELECT event_id FROM {rollup_db}.active_events")} == active
    # each event's first observation, as the audits read it from the per-event rollup (fault_domain_summary)
    first_seen = f"SELECT event_id, min(first_seen_at) FROM {rollup_db}.event_rollup GROUP BY event_id"
    assert _rows(ch, first_seen) == _rows(ch, f"SELECT event_id, first_seen_at FROM {rollup_db}.ref_events")


# more examples than the others: streams where a Terminate or Preempt decides are a small share of them
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(stream=streams(), types=st.lists(st.sampled_from(("Terminate", "Preempt", "Reboot")), min_size=3, max_size=3))
def test_active_events_are_the_events_active_terminate_and_preempt_included(
    ch: Any, rollup_db: str, stream: list[dict[str, Any]], types: list[str]
) -> None:
    """What the alerts start from (active_events, per event) is the set events calls active, where a VM whose own
    Terminate or Preempt started holds nothing open (a rule the reference views of 0004 did not have).

    The streams are as collectors write them: an event keeps its type, a VM's status only moves forward, whether
    the event affects a VM does not change, and only a disappearance may leave the type empty."""
    for table in ("transitions", "transitions_by_time", "event_vm_rollup", "event_rollup", "vm_retirements", *HISTORY):
        ch.command(f"TRUNCATE TABLE {rollup_db}.{table}")
    started: set[tuple[str, str]] = set()
    affects: dict[tuple[str, str], bool] = {}
    type_of = dict(zip(("E-a", "E-b", "E-c"), types, strict=True)) | {"": types[0]}  # one type per event
    for row in sorted(stream, key=lambda r: r["observed_at"]):
        pair = (row["event_id"], row["vm_id"])
        row["affects_this_vm"] = affects.setdefault(pair, row["affects_this_vm"])
        if row["kind"] != "disappeared" or row["event_type"]:
            row["event_type"] = type_of[row["event_id"]]
        if row["status"] == "Started":
            started.add(pair)
        elif row["status"] and pair in started:
            row["status"] = "Started"
    ch.insert(f"{rollup_db}.transitions", [[r[c] for c in COLUMNS] for r in stream], column_names=COLUMNS)
    refresh(ch, rollup_db, stream)
    active = _rows(ch, f"SELECT event_id FROM {rollup_db}.events WHERE outcome = 'active'")
    assert _rows(ch, f"SELECT event_id FROM {rollup_db}.active_events") == active


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    stream=streams(),
    sets=st.lists(st.sampled_from(("", "", "pool-a", "pool-b")), min_size=4, max_size=4),
    data=st.data(),
)
def test_event_sets_equal_the_sets_found_over_the_pairs(
    ch: Any, rollup_db: str, stream: list[dict[str, Any]], sets: list[str], data: Any
) -> None:
    """The per-event sets kept by their own rollup (events.fault_domain_labels) equal those the query layer finds
    over the event's VMs, whatever the duplicates, order and batches, with VMs in availability and scale sets.
    Each VM keeps one identity, as in Azure (the rollup keeps every name and domain it saw)."""
    for table in ("transitions", "event_vm_rollup", "event_rollup", *HISTORY):
        ch.command(f"TRUNCATE TABLE {rollup_db}.{table}")
    first: dict[str, dict[str, Any]] = {}
    for r in stream:
        identity = first.setdefault(r["vm_id"], r)
        r.update(
            vm_name=identity["vm_name"], fault_domain=identity["fault_domain"], update_domain=identity["update_domain"]
        )
        r["scale_set"] = sets[int(r["vm_id"].rsplit("-", 1)[1])]
    delivered = data.draw(st.permutations(stream + data.draw(st.lists(st.sampled_from(stream), max_size=10))))
    cut = data.draw(st.integers(0, len(delivered)))
    for batch in (delivered[:cut], delivered[cut:]):
        if batch:
            ch.insert(f"{rollup_db}.transitions", [[r[c] for c in COLUMNS] for r in batch], column_names=COLUMNS)
            refresh(ch, rollup_db, batch)
    pairs = event_sql.scoped(f"SELECT event_id FROM {rollup_db}.event_rollup", f"{rollup_db}.")
    labels = "arraySort(groupUniqArrayIf(fault_domain_label, affects_this_vm))"
    by_pairs = _rows(ch, f"SELECT event_id, {labels} FROM {pairs} GROUP BY event_id")
    assert _rows(ch, f"SELECT event_id, arraySort(fault_domain_labels) FROM {rollup_db}.events") == by_pairs
    # the identity of each event's availability set (hit_domains reads it from event_rollup): the same VM
    keys = _rows(ch, f"SELECT event_id, anyIf(fault_set_id, scale_set = '') FROM {pairs} GROUP BY event_id")
    kept = f"SELECT event_id, minIfMerge(set_key) FROM {rollup_db}.event_rollup GROUP BY event_id"
    assert _rows(ch, kept) == keys
    # the stored rows read without the views' look-up of silent holders: what the views show of them
    ids = f"SELECT event_id FROM {rollup_db}.event_rollup"
    sets = event_sql.event_sets(ids, f"{rollup_db}.", rows_after="now64(3) - INTERVAL 100 YEAR")
    assert _rows(ch, f"SELECT * FROM {sets}") == _rows(ch, f"SELECT event_id, availability_set FROM {rollup_db}.events")
    shown = "event_id, vm_id, scale_set, fault_domain, vm_name, first_seen_at, started_at, ended_at"
    vms = event_sql.stored(ids, "event_vm_history", f"{rollup_db}.", shown)
    assert _rows(ch, f"SELECT * FROM {vms}") == _rows(ch, f"SELECT {shown} FROM {rollup_db}.event_vm_lifecycles")


def test_backfill_covers_rows_stored_before_the_migration(ch: Any) -> None:
    """Rows stored before migration 0006 are in its rollups; running its statements again changes nothing."""
    database = "t_" + uuid.uuid4().hex[:12]
    early = [m for m in load_migrations() if m.version < 6]
    migrate(ch, Target(database=database), early)
    ch.command(
        f"INSERT INTO {database}.transitions (transition_id, observed_at, vm_id, vm_name, event_id, kind, status, "
        "event_type, resources, affects_this_vm) VALUES "
        "('a', now64(3) - 60, 'v1', 'vm-1', 'E-1', 'appeared', 'Scheduled', 'Reboot', ['vm-1'], true), "
        "('b', now64(3) - 30, 'v1', 'vm-1', 'E-1', 'status_changed', 'Started', 'Reboot', ['vm-1'], true)"
    )
    # up to the last migration before 0018 (which adds the rollup's stored_at): 0009 is run again below as it was
    migrate(ch, Target(database=database), [m for m in load_migrations() if m.version < 18])
    query = f"SELECT event_id, outcome, affected_vm_count, transitions FROM {database}.events"
    assert ch.query(query).result_rows == [("E-1", "active", 1, 2)]
    assert ch.query(f"SELECT event_id FROM {database}.active_events").result_rows == [("E-1",)]
    # the latest migration that makes event_rollup's view anew (0009, which added the sets) backfills everything again
    for statement in render(next(m for m in load_migrations() if m.version == 9), Target(database=database)):
        ch.command(statement)
    assert ch.query(query).result_rows == [("E-1", "active", 1, 2)], "a second run is harmless"
    migrate(ch, Target(database=database))
    assert ch.query(query).result_rows == [("E-1", "active", 1, 2)], "and so is every migration since"
    labels = f"SELECT fault_domain_labels FROM {database}.events"
    assert ch.query(labels).result_rows == [(["vm-1 / FD ?"],)], "rows stored before 0009 have their sets"


def test_cluster_rendering_backfills_through_distributed_tables() -> None:
    """On a cluster the rollups are Replicated with Distributed tables, and the backfill reads every shard."""
    rollups = next(m for m in load_migrations() if m.version == 6)
    statements = render(rollups, Target(database="sevents", cluster="c1"))
    inserts = [s for s in statements if s.startswith("INSERT INTO")]
    assert len(inserts) == 5 and all("_local" not in s for s in inserts)
    assert any("ReplicatedAggregatingMergeTree" in s and "event_vm_rollup_local" in s for s in statements)
    assert any("ENGINE = Distributed('c1', 'sevents', 'event_rollup_local'" in s for s in statements)
    assert all("ON CLUSTER 'c1'" in s for s in statements if s.startswith(("CREATE", "ALTER", "DROP")))


def test_rows_stored_before_the_cheaper_columns_give_the_same_events(ch: Any) -> None:
    """0012's twins (last_mark, affected_keys) of rows stored before it: computed on read, then written by its
    mutation and by merges, the views give the reference's rows all along."""
    database = "t_" + uuid.uuid4().hex[:12]
    migrate(ch, Target(database=database), [m for m in load_migrations() if m.version < 12])
    install_reference(ch, database)
    base = {c: "" for c in COLUMNS} | {"schema_version": 1, "seq": 0, "incarnation": 0, "changed_fields": []}
    base |= {"prev_observed_at": None, "not_before": None, "description": None, "event_source": None}
    base |= {"fault_domain": 0, "update_domain": 0, "duration_s": None, "affects_this_vm": True}
    start = NOW - timedelta(hours=1)
    rows = [
        # E-1: vm-a saw it start and go; vm-b still sees it, so it is active
        ("t1", "a", "E-1", "appeared", "Scheduled", 0, ["vm-a", "vm-b"]),
        ("t2", "a", "E-1", "status_changed", "Started", 60, ["vm-a", "vm-b"]),
        ("t3", "a", "E-1", "disappeared", "", 120, []),
        ("t4", "b", "E-1", "appeared", "Scheduled", 5, ["vm-a", "vm-b", "vm-c"]),
        # E-2: gone on its only VM, so completed, ended when it went
        ("t5", "a", "E-2", "appeared", "Scheduled", 10, ["vm-a"]),
        ("t6", "a", "E-2", "status_changed", "Started", 20, ["vm-a"]),
        ("t7", "a", "E-2", "disappeared", "", 30, []),
    ]
    batch = []
    for tid, vm, event, kind, status, second, resources in rows:
        row = base | {"transition_id": tid, "record_id": tid, "vm_id": f"id-{vm}", "vm_name": f"vm-{vm}"}
        row |= {"event_id": event, "kind": kind, "status": status, "resources": resources, "event_type": "Reboot"}
        batch.append(row | {"observed_at": start + timedelta(seconds=second)})
    ch.insert(f"{database}.transitions", [[r[c] for c in COLUMNS] for r in batch], column_names=COLUMNS)
    expected = _rows(ch, f"SELECT * FROM {database}.ref_events")
    assert [(r[0], r[12]) for r in expected] == [("E-1", "active"), ("E-2", "completed")]
    ours = "* EXCEPT (observed_impact_s, impacted_vms, availability_set, fault_sets, fault_domain_labels, "
    ours += f"update_domain_labels, {EVIDENCE}, {PLATFORM}, {STORED})"
    migrate(ch, Target(database=database))
    assert _rows(ch, f"SELECT {ours} FROM {database}.events") == expected, "whether or not the mutation has run"
    for table in ("event_vm_rollup", "event_rollup"):
        ch.command(f"OPTIMIZE TABLE {database}.{table} FINAL")
    assert _rows(ch, f"SELECT {ours} FROM {database}.events") == expected, "written and merged"
    stored = f"SELECT count() FROM system.parts_columns WHERE database = '{database}' AND column = 'last_mark'"
    assert _rows(ch, stored + " AND active") != [(0,)]
