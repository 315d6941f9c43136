"""The subscription on event_vms (migration 0004) and the dashboards' subscription filter that reads it."""

from __future__ import annotations

from dashboards.filters import event_vm_filter, selected
from dashboards.templating import Selection
from ingest.migrate import Target, load_migrations, render
from tests.dashboards.conftest import Seeded, around
from tests.dashboards.dash_helpers import all_of, context, panel, run

IMPACT = ("sevents-impact", "Impact per fault domain")


def _selections(seeded: Seeded, subscription: tuple[str, ...]) -> dict[str, Selection]:
    """Every VM variable on All but the subscription, which is set to ``subscription``."""
    fleet = tuple(
        str(r[0]) for r in seeded.client.query("SELECT DISTINCT subscription_id FROM sevents.transitions").result_rows
    )
    vms = tuple(seeded.vm_names)
    out = {
        "location": all_of(("westeurope",)),
        "scale_set": all_of(("",)),
        "fault_domain": all_of(("0", "1", "2")),
        "vm": all_of(vms),
        "event_type": all_of(("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")),
        "event_id": Selection(values=("",), multi=False),
    }
    out["subscription"] = Selection(values=subscription, options=(*fleet, "00000000-0000-0000-0000-000000000000"))
    return out


def test_event_vms_carries_each_vms_latest_subscription_and_resource_group(seeded: Seeded) -> None:
    """Every event_vms row has the subscription and resource group its VM last reported in transitions."""
    latest = {
        str(vm): (str(sub), str(rg))
        for vm, sub, rg in seeded.client.query(
            "SELECT vm_id, argMax(subscription_id, observed_at), argMax(resource_group, observed_at) "
            "FROM sevents.transitions FINAL GROUP BY vm_id"
        ).result_rows
    }
    rows = seeded.client.query("SELECT vm_id, subscription_id, resource_group FROM sevents.event_vms").result_rows
    assert rows
    assert all(latest[str(vm)] == (str(sub), str(rg)) for vm, sub, rg in rows)
    assert all(sub for _, sub, _ in rows), "the simulated VMs report a subscription"
    events = seeded.client.query("SELECT subscription_ids FROM sevents.events WHERE affected_vm_count > 0").result_rows
    assert events and all(list(subs) == sorted({s for _, s, _ in rows}) for (subs,) in events)


def test_the_event_vms_subscription_filter_needs_no_subquery() -> None:
    """The filter for event_vms reads the view's own subscription column instead of a subquery on transitions
    (its only subquery decodes the chosen values: ``filters.selected``)."""
    sql = event_vm_filter()
    assert " FROM " not in sql
    assert f"$__conditionalAll(subscription_id IN ({selected('subscription')}), $subscription)" in sql


def test_impact_panel_follows_the_subscription_choice(seeded: Seeded) -> None:
    """Choosing the fleet's subscription shows the same impact as All; another subscription shows none."""
    start, end = around(seeded)
    sql = panel(*IMPACT).sql
    fleet = tuple(
        str(r[0]) for r in seeded.client.query("SELECT DISTINCT subscription_id FROM sevents.transitions").result_rows
    )
    everything = _selections(seeded, fleet)
    everything["subscription"] = all_of(everything["subscription"].options)
    every_row = run(seeded.client, sql, everything, context(start, end)).rows
    chosen = run(seeded.client, sql, _selections(seeded, fleet), context(start, end)).rows
    other = run(seeded.client, sql, _selections(seeded, ("00000000-0000-0000-0000-000000000000",)), context(start, end))
    assert every_row and chosen == every_row
    assert other.rows == []


def test_migration_0004_creates_both_views_on_one_node_and_on_a_cluster() -> None:
    """0004 renders to idempotent CREATE VIEW IF NOT EXISTS statements, with ON CLUSTER on a cluster only."""
    migration = next(m for m in load_migrations() if m.version == 4)
    for target, on_cluster in ((Target(database="hist"), False), (Target(database="hist", cluster="prod"), True)):
        statements = render(migration, target)
        heads = [s.split(" AS", 1)[0].strip() for s in statements]
        assert heads[0].startswith("CREATE VIEW IF NOT EXISTS hist.event_vms")
        assert heads[1].startswith("CREATE VIEW IF NOT EXISTS hist.events")
        assert len(statements) == 2
        assert all(("ON CLUSTER 'prod'" in h) == on_cluster for h in heads)
        assert all("FROM hist." in s for s in statements)
