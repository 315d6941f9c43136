"""Every panel and alert query with each template variable set to a concrete value, not All, on pipeline data.

Each dashboard's variables are filled from their own queries, in order (Grafana's cascade: each option list is
narrowed by the values already picked), so the SQL every filter produces for a real selection runs on the real
engine: the scale set included, where a filter that only ever saw All can hide a query ClickHouse rejects.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dashboards.templating import Selection, apply
from tests.dashboards.conftest import Seeded, around
from tests.dashboards.dash_helpers import alert_rules, all_of, context, dashboards, run
from tests.dashboards.test_dash_panels import _check_shape

KEYS = ("event_id", "vm_name")  # the columns naming what a table row is about


def _concrete(seeded: Seeded, model: dict[str, Any], pick: int) -> dict[str, Selection]:
    """One value of each variable, from the dashboard's own variable queries run with the values picked before:
    option ``pick`` (0 first, -1 last); of the scale sets a named one (availability-set VMs have an empty one)."""
    start, end = around(seeded)
    chosen: dict[str, Selection] = {}
    for variable in model["templating"]["list"]:
        name = variable["name"]
        if variable["type"] == "query":
            frame = run(seeded.client, variable["query"]["rawSql"], chosen, context(start, end))
            options = tuple(str(row[0]) for row in frame.rows)
        elif variable["type"] == "custom":
            options = tuple(o["value"] for o in variable["options"])
        else:
            continue  # the data source; the EventId textbox is filled from the events the selection shows
        candidates = [o for o in options if o != ""]
        assert candidates, f"{model['uid']}: variable {name} offers no value for {chosen}"
        chosen[name] = Selection(values=(candidates[pick],), options=options)
    return chosen


def _all(model: dict[str, Any], concrete: dict[str, Selection]) -> dict[str, Selection]:
    """The same dashboard with every multi-value variable on All (the EventId textbox unchanged)."""
    return {name: all_of(s.options) if s.multi else s for name, s in concrete.items()}


def _with_event(seeded: Seeded, uid: str, variables: dict[str, Selection]) -> dict[str, Selection]:
    """The drill-down's EventId as a user reaches it: the first event the selection's event table lists."""
    model = dashboards()[uid]
    if not any(v["name"] == "event_id" for v in model["templating"]["list"]):
        return variables
    events = next(p for p in model["panels"] if p["title"] == "Events")["targets"][0]["rawSql"]
    start, end = around(seeded)
    rows = run(seeded.client, events, variables, context(start, end)).dicts()
    assert rows, f"{uid}: the concrete selection shows no event to drill into"
    return {**variables, "event_id": Selection(values=(rows[0]["event_id"],), multi=False)}


def _keys(columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> set[tuple[Any, ...]] | None:
    where = [columns.index(k) for k in KEYS if k in columns]
    return {tuple(row[i] for i in where) for row in rows} if where else None


@pytest.mark.parametrize("pick", [0, -1], ids=["first", "last"])
def test_every_panel_runs_with_concrete_variables(seeded: Seeded, pick: int) -> None:
    """Every panel of every dashboard runs with each variable on one value from its own query, its columns suit
    its format, and a table's rows (by EventId, VM) are some of the rows it lists with everything on All."""
    start, end = around(seeded)
    ran: dict[str, int] = {}
    rows_seen = 0
    for uid, model in dashboards().items():
        concrete = _with_event(seeded, uid, _concrete(seeded, model, pick))
        everything = _all(model, concrete)
        for item in model["panels"]:
            for target in item.get("targets", []):
                sql = target["rawSql"]
                try:
                    frame = run(seeded.client, sql, concrete, context(start, end))
                except Exception as error:
                    raise AssertionError(f"{uid} / {item['title']} with {concrete}: {error}") from error
                _check_shape(item["type"], target["format"], frame)
                rows_seen += len(frame.rows)
                ran[uid] = ran.get(uid, 0) + 1
                mine = _keys(frame.columns, frame.rows)
                if target["format"] == 1 and item["type"] == "table" and mine is not None:
                    whole = run(seeded.client, sql, everything, context(start, end))
                    assert mine <= (_keys(whole.columns, whole.rows) or set()), (uid, item["title"])
    assert set(ran) == {"sevents-fleet", "sevents-timeline", "sevents-approval", "sevents-impact", "sevents-pipeline"}
    assert sum(ran.values()) >= 25
    assert rows_seen > 0, "a concrete selection that shows nothing anywhere tests no filter"


def test_scale_set_selection_keeps_its_events(seeded: Seeded) -> None:
    """With the scale set picked, the timeline's events are the ones affecting a VM of that scale set."""
    model = dashboards()["sevents-timeline"]
    concrete = _concrete(seeded, model, 0)
    scale_set = concrete["scale_set"].values[0]
    variables = {**_all(model, concrete), "scale_set": concrete["scale_set"]}
    events = next(p for p in model["panels"] if p["title"] == "Events")["targets"][0]["rawSql"]
    start, end = around(seeded)
    got = {r["event_id"] for r in run(seeded.client, events, variables, context(start, end)).dicts()}
    members = {vm for vm, group in seeded.groups.items() if group == scale_set}
    expected = {e for e, t in seeded.events().items() if set(t["resources"]) & members}
    assert got == expected and got


def test_every_alert_query_runs_whatever_the_variables(seeded: Seeded) -> None:
    """Alert queries name no template variable (Grafana evaluates them without a dashboard): any selection leaves
    them as they are, and each runs over its own relative time range."""
    model = dashboards()["sevents-fleet"]
    concrete = _concrete(seeded, model, 0)
    now = datetime.now(UTC)
    count = 0
    for rule in alert_rules():
        for query in rule["data"]:
            if "rawSql" not in query["model"]:
                continue  # a server-side expression (reduce, threshold)
            sql = query["model"]["rawSql"]
            assert apply(sql, concrete) == sql == apply(sql, _all(model, concrete)), rule["uid"]
            window = query["relativeTimeRange"]["from"]
            frame = run(seeded.client, sql, concrete, context(now - timedelta(seconds=window), now))
            assert frame.columns, (rule["uid"], query["refId"])
            count += 1
    assert count >= 5
