"""Every panel, variable and alert query from the generated JSON, run like Grafana against the seeded pipeline."""

from __future__ import annotations

import pytest

from dashboards.templating import Selection
from tests.dashboards.conftest import Seeded, around
from tests.dashboards.dash_helpers import (
    Frame,
    all_of,
    context,
    dashboards,
    observed_in,
    panel,
    panel_queries,
    run,
)

VM_VARS = ("subscription", "location", "scale_set", "fault_domain", "vm")
NUMERIC = ("Int", "UInt", "Float", "Decimal", "Nullable(Int", "Nullable(UInt", "Nullable(Float", "Bool")
DESTRUCTIVE = ("Reboot", "Redeploy", "Terminate", "Preempt")


def _options(seeded: Seeded) -> dict[str, tuple[str, ...]]:
    """Each variable's options, from its own query with everything upstream on All (Grafana's first load)."""
    model = dashboards()["sevents-fleet"]
    start, end = around(seeded)
    options: dict[str, tuple[str, ...]] = {}
    selections: dict[str, Selection] = {}
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":
            frame = run(seeded.client, variable["query"]["rawSql"], selections, context(start, end))
            options[variable["name"]] = tuple(str(row[0]) for row in frame.rows)
        elif variable["type"] == "custom":
            options[variable["name"]] = tuple(o["value"] for o in variable["options"])
        else:
            continue
        selections[variable["name"]] = all_of(options[variable["name"]])
    return options


@pytest.fixture(scope="module")
def options(seeded: Seeded) -> dict[str, tuple[str, ...]]:
    return _options(seeded)


def selections(options: dict[str, tuple[str, ...]], **chosen: tuple[str, ...]) -> dict[str, Selection]:
    out = {name: all_of(values) for name, values in options.items()}
    for name, values in chosen.items():
        out[name] = Selection(values=values, options=options.get(name, ()))
    out.setdefault("event_id", Selection(values=("",), multi=False))
    return out


ONE = {"vm": ("web-0",), "fault_domain": ("0",), "event_type": ("Reboot",)}
SEVERAL = {
    "vm": ("web-0", "web-1", "pool_2"),
    "fault_domain": ("0", "1"),
    "event_type": ("Reboot", "Redeploy", "Terminate"),
}


def _numeric(type_name: str) -> bool:
    return type_name.startswith(NUMERIC)


def _check_shape(kind: str, fmt: int, frame: Frame) -> None:
    assert frame.columns, "no columns"
    assert len(set(frame.columns)) == len(frame.columns), f"duplicate column names {frame.columns}"
    if fmt == 0:
        assert frame.columns[0] == "time" and frame.types[0].startswith("DateTime"), frame.columns
        assert any(_numeric(t) for t in frame.types[1:]), f"a time series needs a numeric column: {frame.types}"
        times = [row[0] for row in frame.rows]
        assert times == sorted(times), "time series rows must be in time order"
    if kind in ("stat", "bargauge", "piechart", "barchart"):
        assert any(_numeric(t) for t in frame.types), f"{kind} needs a numeric column: {frame.types}"
    if kind == "state-timeline":
        assert fmt == 0 and "state" in frame.columns


@pytest.mark.parametrize("choice", ["all", "one", "several"])
def test_every_panel_runs_with_suitable_columns(
    seeded: Seeded, options: dict[str, tuple[str, ...]], choice: str
) -> None:
    """Each panel's SQL runs for All, one value and several values, and its columns suit its format."""
    chosen = {"all": {}, "one": ONE, "several": SEVERAL}[choice]
    event_id = next(iter(seeded.events())) if choice != "all" else ""
    variables = selections(options, **chosen)
    variables["event_id"] = Selection(values=(event_id,), multi=False)
    start, end = around(seeded)
    count = 0
    for query in panel_queries():
        frame = run(seeded.client, query.sql, variables, context(start, end))
        _check_shape(query.kind, query.fmt, frame)
        count += 1
    assert count >= 25


def test_variable_options_are_the_fleet(seeded: Seeded, options: dict[str, tuple[str, ...]]) -> None:
    """The VM, fault domain and location pickers list exactly what the simulated fleet has."""
    assert sorted(options["vm"]) == sorted(seeded.vm_names)
    assert options["fault_domain"] == ("0", "1", "2")
    assert options["location"] == ("westeurope",)
    assert len(options["subscription"]) == 1
    assert options["event_type"] == ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")


def test_variable_cascade_narrows(seeded: Seeded, options: dict[str, tuple[str, ...]]) -> None:
    """Choosing fault domain 1 narrows the VM picker to the VMs of that fault domain."""
    vm_var = next(v for v in dashboards()["sevents-fleet"]["templating"]["list"] if v["name"] == "vm")
    start, end = around(seeded)
    frame = run(seeded.client, vm_var["query"]["rawSql"], selections(options, fault_domain=("1",)), context(start, end))
    truth_fd1 = {row["vm_name"] for row in seeded.truth if row["fault_domain"] == 1}
    assert {row[0] for row in frame.rows} == truth_fd1 | {"pool_1"} >= truth_fd1


def _expected_events(seeded: Seeded, chosen: dict[str, tuple[str, ...]]) -> set[str]:
    """Truth's answer to the filter rule: the type matches, and per VM variable some affected VM matches."""
    out = set()
    fd_of = {row["vm_name"]: row["fault_domain"] for row in seeded.truth}
    for event_id, row in seeded.events().items():
        if "event_type" in chosen and row["event_type"] not in chosen["event_type"]:
            continue
        affected = row["resources"]
        if "vm" in chosen and not set(affected) & set(chosen["vm"]):
            continue
        if "fault_domain" in chosen and not {str(fd_of[v]) for v in affected} & set(chosen["fault_domain"]):
            continue
        out.add(event_id)
    return out


@pytest.mark.parametrize("choice", ["all", "one", "several"])
def test_events_table_equals_truth(seeded: Seeded, options: dict[str, tuple[str, ...]], choice: str) -> None:
    """The timeline's event table lists the true events for the selection, with true outcome, VMs and times."""
    chosen = {"all": {}, "one": ONE, "several": SEVERAL}[choice]
    start, end = around(seeded)
    frame = run(
        seeded.client, panel("sevents-timeline", "Events").sql, selections(options, **chosen), context(start, end)
    )
    rows = {row["event_id"]: row for row in frame.dicts()}
    assert set(rows) == _expected_events(seeded, chosen)
    fd_of = {row["vm_name"]: row["fault_domain"] for row in seeded.truth}
    for event_id, row in rows.items():
        truth = seeded.events()[event_id]
        assert row["event_type"] == truth["event_type"]
        assert row["source"] == truth["event_source"]
        assert row["outcome"] == truth["outcome"]
        assert row["vms"] == ", ".join(sorted(truth["resources"]))
        scoped = sorted({(seeded.groups[v], fd_of[v]) for v in truth["resources"]})
        assert row["fault_domains"] == ", ".join(f"{group} / FD {fd}" for group, fd in scoped)
        assert row["affected"] == len(truth["resources"])
        window = seeded.windows()
        assert observed_in(row["first_seen_at"], truth["first_visible_at"], window.get((event_id, "first_seen_at")))
        assert observed_in(row["started_at"], truth["started_at"], window.get((event_id, "started_at")))
        assert observed_in(row["ended_at"], truth["ended_at"], window.get((event_id, "ended_at")))
        assert row["not_before"] == truth["not_before"] or (truth["not_before"] is None and row["not_before"] is None)
