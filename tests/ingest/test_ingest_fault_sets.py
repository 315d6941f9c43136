"""Per-domain audit answers group fault and update domains by their set: FD 0 of two sets is two rows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from demo import synthetic
from ingest import event_sql, lifecycle_store, queries
from ingest.handler import Handler
from ingest.migrate import load_migrations
from sevents import records

from .conftest import deliveries

BASE = synthetic.BASE_TIME
WINDOW = {"since": BASE - timedelta(hours=1), "until": BASE + timedelta(hours=6)}
# name -> (fault domain, update domain, scale set): two availability sets (as in the demo), a scale set
# and a standalone VM, every one with a VM in fault domain 0
FLEET = {
    **{f"web-{i}": (i, i, "") for i in range(3)},
    **{f"api-{i}": (i, i, "") for i in range(3)},
    **{f"pool_{i}": (i, i, "pool") for i in range(2)},
    "solo": (0, 0, ""),
    # two availability sets whose names share a stem: both are labelled "twin", and still never add up
    **{f"twin-{i}": (i % 2, 0, "") for i in range(4)},
}
# EventId -> (observing VMs: the whole set, affected VMs, hours after BASE)
EVENTS = {
    "E-web": (["web-0", "web-1", "web-2"], ["web-0"], 0),
    "E-api": (["api-0", "api-1", "api-2"], ["api-0", "api-1"], 1),
    "E-pool": (["pool_0", "pool_1"], ["pool_0"], 2),
    "E-solo": (["solo"], ["solo"], 3),
    "E-twin-a": (["twin-0", "twin-1"], ["twin-0"], 4),
    "E-twin-b": (["twin-2", "twin-3"], ["twin-2"], 5),
}


def _as(record: dict[str, Any], name: str) -> dict[str, Any]:
    """``record`` as observed by VM ``name`` of FLEET (its identity and the ids derived from it)."""
    fd, ud, scale_set = FLEET[name]
    vm_id = f"00000000-0000-4000-8000-{list(FLEET).index(name):012d}"
    tid = records.transition_id(vm_id, record["event_id"], record["incarnation"], record["kind"])
    return {
        **record,
        "vm_id": vm_id,
        "vm_name": name,
        "fault_domain": fd,
        "update_domain": ud,
        "scale_set": scale_set,
        "transition_id": tid,
        "record_id": tid,
        "affects_this_vm": name in record["resources"],
    }


def _fleet_records() -> list[dict[str, Any]]:
    out = []
    for event_id, (observers, affected, hours) in EVENTS.items():
        start = BASE + timedelta(hours=hours)
        for name in observers:
            # lifecycle() gives Scheduled -> Started (5 min) -> gone (5 min 30 s) on one VM
            for rec in synthetic.lifecycle(event_id, 0, start=start):
                out.append(_as({**rec, "resources": affected}, name))
    return out


def _stored(handler: Handler) -> None:
    handler(deliveries(_fleet_records()))


def test_fault_domain_summary_keeps_each_set_apart(ch: Any, db: str, handler: Handler) -> None:
    """FD 0 of web, api, a scale set, a standalone VM and two sets both labelled twin: six rows, not one."""
    _stored(handler)
    rows = queries.run(ch, queries.FAULT_DOMAIN_SUMMARY, db, **WINDOW).dicts()
    assert [(r["fault_set"], r["fault_domain"], r["events"], r["vms"]) for r in rows] == [
        ("api", 0, 1, 1),
        ("api", 1, 1, 1),
        ("pool", 0, 1, 1),
        ("solo", 0, 1, 1),
        ("twin", 0, 1, 1),
        ("twin", 0, 1, 1),
        ("web", 0, 1, 1),
    ]
    assert [r["fault_domain_label"] for r in rows] == [
        "api / FD 0",
        "api / FD 1",
        "pool / FD 0",
        "solo / FD 0",
        "twin / FD 0",
        "twin / FD 0",
        "web / FD 0",
    ]
    assert all(r["avg_started_to_gone_s"] == 30.0 for r in rows)


def test_one_event_per_fault_domain_names_its_set(ch: Any, db: str, handler: Handler) -> None:
    """An event's per-FD answer and per-VM answer label every domain with the set its VMs observe together."""
    _stored(handler)
    per_fd = queries.run(ch, queries.EVENT_BY_FAULT_DOMAIN, db, event_id="E-api").dicts()
    assert [(r["fault_domain_label"], r["affected_vms"], r["observing_vms"]) for r in per_fd] == [
        ("api / FD 0", 1, 1),
        ("api / FD 1", 1, 1),
        ("api / FD 2", 0, 1),
    ]
    per_vm = queries.run(ch, queries.EVENT_VMS, db, event_id="E-pool").dicts()
    assert {(r["vm_name"], r["fault_set"], r["update_domain_label"]) for r in per_vm} == {
        ("pool_0", "pool", "pool / UD 0"),
        ("pool_1", "pool", "pool / UD 1"),
    }


def test_events_carry_scoped_domains_beside_the_bare_numbers(ch: Any, db: str, handler: Handler) -> None:
    """events_in_window keeps fault_domains and adds fault_sets and the set-scoped labels of the affected VMs."""
    _stored(handler)
    events = {r["event_id"]: r for r in queries.run(ch, queries.EVENTS_IN_WINDOW, db, **WINDOW).dicts()}
    assert events["E-api"]["fault_domains"] == [0, 1]
    assert events["E-api"]["fault_sets"] == ["api"]
    assert events["E-api"]["fault_domain_labels"] == ["api / FD 0", "api / FD 1"]
    assert events["E-web"]["update_domain_labels"] == ["web / UD 0"]
    assert events["E-solo"]["fault_domain_labels"] == ["solo / FD 0"]
    summary = queries.run(ch, queries.EVENT_SUMMARY, db, event_id="E-pool").dicts()
    assert summary[0]["fault_domain_labels"] == ["pool / FD 0"]


def test_the_events_view_labels_sets_by_the_query_layers_rule() -> None:
    """The migration that last made the view computing each event's lifecycle (``event_evidence_since`` since 0017)
    pastes the one label rule (``event_sql.set_label``) into it: they cannot drift."""
    computes = ("CREATE VIEW ${db}.events_since ", "CREATE VIEW IF NOT EXISTS ${db}.event_evidence_since ")
    latest = [m for m in load_migrations() if any(c in m.template for c in computes)][-1]
    assert latest.version >= 17
    assert event_sql.set_label("set_first_", "set_last_") in latest.template


def test_a_filter_on_one_vm_keeps_its_sets_label(ch: Any, db: str, handler: Handler) -> None:
    """The set is found over every observer before a caller filters rows: web-1 alone is still in "web"."""
    _stored(handler)
    ch.database = db
    sql = f"SELECT fault_set, fault_domain_label FROM {event_sql.scoped(event_sql.ONE_ID)} WHERE vm_name = 'web-1'"
    assert ch.query(sql, parameters={"event_id": "E-web"}).result_rows == [("web", "web / FD 1")]


def test_set_label_rule(ch: Any) -> None:
    """Common prefix without trailing digits or separators; a lone VM or members with no common prefix: a name."""
    cases = [
        (["web-0", "web-1", "web-12"], "web"),
        (["web-10", "web-11"], "web"),
        (["db1", "db2"], "db"),
        (["solo-7"], "solo-7"),
        (["alpha", "beta"], "alpha"),
        (["web-0", "web-0x"], "web"),
    ]
    sql = f"SELECT {event_sql.set_label('a', 'b')} FROM (SELECT {{a:String}} AS a, {{b:String}} AS b)"
    for names, label in cases:
        found = ch.query(sql, parameters={"a": min(names), "b": max(names)}).result_rows
        assert found == [(label,)], names


def _hit(ch: Any, db: str, names: list[str], seconds: float) -> None:
    """Each VM of ``names`` measured ``seconds`` of downtime in each event it is affected by (and twice in one)."""
    rows = []
    for event_id, (_, affected, hours) in EVENTS.items():
        for name in affected:
            if name not in names:
                continue
            identity = _as({"event_id": event_id, "incarnation": 1, "kind": "appeared", "resources": affected}, name)
            for n in range(1 + (event_id == "E-api")):
                began = BASE + timedelta(hours=hours, minutes=5, seconds=n * 30)
                iid = f"{event_id}-{name}-{n}"
                rows.append(
                    [
                        iid,
                        identity["vm_id"],
                        name,
                        identity["scale_set"],
                        identity["fault_domain"],
                        "pause",
                        began,
                        int(seconds * 1000),
                        event_id,
                        "Freeze",
                    ]
                )
    columns = [
        "impact_id",
        "vm_id",
        "vm_name",
        "scale_set",
        "fault_domain",
        "detected_by",
        "began_at",
        "duration_ms",
        "event_id",
        "event_type",
    ]
    ch.insert(f"{db}.impacts", rows, column_names=columns)
    lifecycle_store.refresh(ch, db, [row[columns.index("event_id")] for row in rows])


def test_hit_domains_keep_each_set_apart(ch: Any, db: str, handler: Handler) -> None:
    """The per-(event, set, domain) rows the impact panels sum: twin sets stay two groups, a VM hit twice in one
    event counts once with its downtime summed, and only the downtime ``keep`` selects counts."""
    _stored(handler)
    _hit(ch, db, [name for _, affected, _ in EVENTS.values() for name in affected], 2.0)
    ch.database = db
    groups = event_sql.hit_domains("began_at < {until:DateTime64(3, 'UTC')}")
    sql = (
        f"SELECT fault_set, domain_label, count() AS events, sum(kept_) AS vms, sum(impact_) AS seconds, "
        f"max(max_) AS longest FROM {groups} "
        "GROUP BY fault_set_id, fault_set, domain_label ORDER BY fault_set, domain_label, fault_set_id"
    )
    assert ch.query(sql, parameters={"until": BASE + timedelta(hours=6)}).result_rows == [
        ("api", "api / FD 0", 1, 1, 4.0, 4.0),
        ("api", "api / FD 1", 1, 1, 4.0, 4.0),
        ("pool", "pool / FD 0", 1, 1, 2.0, 2.0),
        ("solo", "solo / FD 0", 1, 1, 2.0, 2.0),
        ("twin", "twin / FD 0", 1, 1, 2.0, 2.0),
        ("twin", "twin / FD 0", 1, 1, 2.0, 2.0),
        ("web", "web / FD 0", 1, 1, 2.0, 2.0),
    ]
    # the range ends before the pool's event: its downtime is not shown
    labels = ch.query(sql, parameters={"until": BASE + timedelta(hours=2)}).result_rows
    assert [row[1] for row in labels] == ["api / FD 0", "api / FD 1", "web / FD 0"]
