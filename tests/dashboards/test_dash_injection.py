"""Template variables that cannot inject: hostile values in every variable's data, every panel run with them.

The VM names, subscriptions, locations and scale sets below are stored through the real ingest, as any sender
can write them: quotes, backslashes (ClickHouse reads ``\\'`` as a quote inside a literal), comment markers,
unicode, commas and braces (the glob a multi-value variable is formatted as), ``%`` and ``+`` (what the URL
decoding reads), ``$`` (Grafana's and the plugin's macro sigil) and the payload that used to return every row.

Each VM's records are also stored alone, in a database of their own. A panel with one variable set to a VM's
value, taken from the dashboard's own variable query as Grafana offers it, must run and return exactly what the
same panel returns with everything on All over that VM's database: only the rows the value names. A value a
crafted URL can carry (matching nothing) must return what the panel returns over an empty database. Variables
are substituted exactly as Grafana and the plugin do (``dashboards.templating``), macros as the plugin's backend
does (``dashboards.macros``); the only change made to a panel's SQL is the database it names.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.enrich import approval_record, impact_record
from collector.model import ApprovalOutcome, Downtime, Event, VmIdentity
from dashboards import alerts, fleet
from dashboards.filters import DB, OPTION_VALUE, VM_VARIABLES, selected
from dashboards.macros import QueryContext
from dashboards.templating import Selection, apply_conditional_all, replace_variables
from demo import synthetic
from ingest import lifecycle_store
from ingest.handler import Handler
from ingest.migrate import Target, migrate
from ingest.source import Delivery
from ingest.writer import Writer
from sevents import contract, records
from sevents.retry import Backoff
from tests.dashboards.conftest import Engine
from tests.dashboards.dash_helpers import Frame, alert_rules, all_of, context, dashboards, run
from tests.tiers import examples

# What a sender can name things. Each VM below holds a different one in each of its columns.
HOSTILE = (
    "nomatch') OR 1=1 OR vm_name IN ('",
    "\\') OR 1=1 -- /* not a comment */; SELECT 1",
    'it\'s "quoted" `ticked` back\\slash\\',
    "wëb ☃ 𝄞 日本 a,b {x} %27 %zz + $__fromTime ${vm} $vm [[vm]]",
)
PLAIN = ("plain-0", "11111111-2222-3333-4444-555555555555", "westeurope", "plain-set")
VARIABLE_COLUMNS = {name: column for name, _, column in VM_VARIABLES}
IDENTITY = {"subscription": "subscription_id", "location": "location", "scale_set": "scale_set", "vm": "vm_name"}
# Values no option offers, as a crafted URL could carry them (each a breakout in some format), per variable.
CRAFTED = (
    "zz') OR 1=1 OR 1 IN ('",
    "zz\\') OR 1=1 --",
    "zz\\",
    "1' OR '1'='1",
)
SQL_DATABASE = re.compile(rf"\b{DB}\.(?=\w)")


@dataclass
class Fleet:
    """One database with every VM, one per VM holding its records alone, one with two VMs, one empty."""

    client: Any
    everything: str
    alone: dict[str, str]  # VM name -> database
    pair: tuple[tuple[str, str], str]  # (VM names) -> database with both
    empty: str
    identities: list[dict[str, Any]]
    events: dict[str, list[str]]  # VM name -> its EventIds
    ctx: QueryContext
    _reference: dict[tuple[str, str, str, str], Any] = field(default_factory=dict)

    def rows(self, database: str, sql: str, variables: dict[str, Selection]) -> Any:
        return _rows(_run(self.client, database, sql, variables, self.ctx))

    def reference(self, database: str, uid: str, title: str, sql: str, variables: dict[str, Selection]) -> Any:
        """The panel's rows over ``database`` with the given (All) selection, as first run."""
        key = (database, uid, title, repr(sorted((name, s.values) for name, s in variables.items())))
        if key not in self._reference:
            self._reference[key] = self.rows(database, sql, variables)
        return self._reference[key]


def _identity(index: int) -> dict[str, Any]:
    """VM ``index``: the plain VM (0) or a hostile one, each column from a different hostile string."""
    base = synthetic.vm(index)
    if index == 0:
        name, subscription, location, scale_set = PLAIN
    else:
        n = len(HOSTILE)
        name, subscription, location, scale_set = (HOSTILE[(index - 1 + k) % n] for k in range(4))
    return {
        **base,
        "vm_name": name,
        "subscription_id": subscription,
        "location": location,
        "scale_set": scale_set,
        "resource_id": f"/subscriptions/x/resourceGroups/fleet/providers/Microsoft.Compute/{index}",
    }


def _vm(identity: dict[str, Any]) -> VmIdentity:
    return VmIdentity(**{name: identity[name] for name in contract.names(contract.VM)})


def _records(index: int, identity: dict[str, Any], now: datetime) -> tuple[list[dict[str, Any]], list[str]]:
    """A completed Reboot (approved by sevents, with the downtime measured), a Redeploy still Scheduled and
    heartbeats up to now, as a collector sends them, with the identity replaced."""
    done, live = f"E{index}-done'\\--{HOSTILE[index % len(HOSTILE)]}", f"E{index}-live&var-vm=x#{index}"
    name = identity["vm_name"]
    start = now - timedelta(minutes=50)
    lifecycle = [
        ("appeared", "Scheduled", "", start, start + timedelta(minutes=15)),
        ("status_changed", "Started", "Scheduled", start + timedelta(minutes=10), None),
        ("disappeared", "", "Started", start + timedelta(minutes=12), None),
    ]
    out = []
    for incarnation, (kind, status, prev, at, not_before) in enumerate(lifecycle, start=1):
        out.append(
            synthetic.transition(
                event_id=done, incarnation=incarnation, kind=kind, status=status, prev_status=prev,
                observed_at=at, not_before=not_before, resources=[name], seq=incarnation,
            )
        )  # fmt: skip
    out.append(
        synthetic.transition(
            event_id=live, event_type="Redeploy", observed_at=now - timedelta(minutes=10),
            not_before=now + timedelta(minutes=20), resources=[name], seq=4,
        )
    )  # fmt: skip
    out = [{**r, **identity, "affects_this_vm": True} for r in out]
    for r in out:  # the dedupe key names the VM that observed it
        r["transition_id"] = r["record_id"] = records.transition_id(
            identity["vm_id"], r["event_id"], r["incarnation"], r["kind"]
        )
    vm = _vm(identity)
    event = Event(
        event_id=done,
        event_type="Reboot",
        resource_type="VirtualMachine",
        resources=(name,),
        status="Scheduled",
        not_before=start + timedelta(minutes=15),
        description="",
        event_source="Platform",
        duration_s=7,
    )
    decided = start + timedelta(minutes=10) - timedelta(seconds=2)
    outcome = ApprovalOutcome("approved", "first-in-resources", name, decided, 0, 2500, 200)
    out.append({**approval_record(outcome, event, vm, api_version="2020-07-01", collector_version="test"), "seq": 5})
    down = Downtime("reboot", start + timedelta(minutes=10, seconds=5), start + timedelta(minutes=10, seconds=35))
    impact = impact_record(down, event, vm, read_at=down.ended_at, api_version="2020-07-01", collector_version="test")
    out.append({**impact, "seq": 6})
    for seq, ago in enumerate((45, 30, 15, 0.2), start=7):
        beat = synthetic.heartbeat(observed_at=now - timedelta(minutes=ago), seq=seq)
        beat = {**beat, **identity}
        beat["heartbeat_id"] = beat["record_id"] = records.heartbeat_id(identity["vm_id"], beat["observed_at"])
        out.append(beat)
    return out, [done, live]


def _store(client: Any, database: str, batch: list[dict[str, Any]]) -> None:
    """Through the real ingest: what any sender can get stored."""
    migrate(client, Target(database=database))
    handler = Handler(
        Writer(client, database), source="test", stop=threading.Event(), backoff=Backoff(initial=0.01, cap=0.05)
    )
    handler([Delivery(records.encode(r), f"hostile#{i}") for i, r in enumerate(batch)])
    assert handler.dead_letters == 0


def _copy(client: Any, source: str, database: str, vm_ids: list[str]) -> None:
    """The stored rows of ``vm_ids`` alone, as stored (the ingest time included: the ingest-lag panel reads it);
    the views and rollups follow their tables as in ``source``, and the events' stored lifecycles are computed from
    them as the ingest does."""
    migrate(client, Target(database=database))
    wanted = ", ".join(f"'{vm_id}'" for vm_id in vm_ids)  # GUIDs made here
    for table in ("transitions", "heartbeats", "impacts", "approvals"):
        client.command(f"INSERT INTO {database}.{table} SELECT * FROM {source}.{table} WHERE vm_id IN ({wanted})")
    lifecycle_store.refresh_all(client, database)


@pytest.fixture(scope="module")
def hostile(engine: Engine) -> Iterator[Fleet]:
    now = datetime.now(UTC).replace(microsecond=0)
    identities = [_identity(i) for i in range(len(HOSTILE) + 1)]
    batches, events = {}, {}
    for index, identity in enumerate(identities):
        batches[identity["vm_name"]], events[identity["vm_name"]] = _records(index, identity, now)
    tag = uuid.uuid4().hex[:8]
    everything = f"hostile_{tag}_all"
    _store(engine.client, everything, [r for batch in batches.values() for r in batch])
    stored = engine.client.query(f"SELECT DISTINCT vm_name FROM {everything}.heartbeats_latest FINAL").result_rows
    assert {r[0] for r in stored} == set(batches), "every hostile name is stored as written"
    vm_id = {identity["vm_name"]: identity["vm_id"] for identity in identities}
    alone = {}
    for index, name in enumerate(batches):
        alone[name] = f"hostile_{tag}_{index}"
        _copy(engine.client, everything, alone[name], [vm_id[name]])
    pair = (HOSTILE[-1], HOSTILE[0])
    pair_db = f"hostile_{tag}_pair"
    _copy(engine.client, everything, pair_db, [vm_id[pair[0]], vm_id[pair[1]]])
    empty = f"hostile_{tag}_empty"
    _copy(engine.client, everything, empty, [])
    ctx = context(now - timedelta(hours=2), now + timedelta(hours=1), 60)
    yield Fleet(engine.client, everything, alone, (pair, pair_db), empty, identities, events, ctx)
    for database in (everything, *alone.values(), pair_db, empty):
        engine.client.command(f"DROP DATABASE IF EXISTS {database}")


def _run(client: Any, database: str, sql: str, variables: dict[str, Selection], ctx: QueryContext) -> Frame:
    """The panel as Grafana runs it, over ``database`` instead of sevents (renamed before any substitution)."""
    return run(client, SQL_DATABASE.sub(f"{database}.", sql), variables, ctx)


def _rows(frame: Frame) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """Columns and rows in a stable order (ties of an ORDER BY may come in any order)."""

    def norm(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, 6)
        if isinstance(value, list | tuple):
            return tuple(norm(v) for v in value)
        return value

    return frame.columns, sorted((tuple(norm(v) for v in row) for row in frame.rows), key=repr)


def _all(model: dict[str, Any], options: dict[str, tuple[str, ...]]) -> dict[str, Selection]:
    out = {name: all_of(values) for name, values in options.items()}
    if any(v["name"] == "event_id" for v in model["templating"]["list"]):
        out["event_id"] = Selection(values=("",), multi=False)
    return out


def _options(fleet: Fleet, model: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """(value, text) of each variable's options, from its own query with everything upstream on All."""
    out: dict[str, list[tuple[str, str]]] = {}
    chosen: dict[str, Selection] = {}
    for variable in model["templating"]["list"]:
        name = variable["name"]
        if variable["type"] == "query":
            frame = _run(fleet.client, fleet.everything, variable["query"]["rawSql"], chosen, fleet.ctx)
            # the plugin's convention: one column is value and text, two are value then text
            out[name] = [(str(row[0]), str(row[-1])) for row in frame.rows]
        elif variable["type"] == "custom":
            out[name] = [(o["value"], o["text"]) for o in variable["options"]]
        else:
            continue
        chosen[name] = all_of(tuple(value for value, _ in out[name]))
    return out


def _uses(sql: str, names: set[str]) -> bool:
    return any(re.search(rf"\$\{{?{re.escape(name)}\b", sql) for name in names)


def _panels(model: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for item in model["panels"]:
        for target in item.get("targets", []):
            yield item["title"], target["rawSql"]


def _compare(
    fleet: Fleet,
    uid: str,
    variables: dict[str, Selection],
    changed: set[str],
    reference: str,
    everything_on_all: dict[str, Selection],
) -> int:
    """Every panel that reads a changed variable returns over the whole fleet what it returns with All over
    ``reference``; how many of them showed rows."""
    model = dashboards()[uid]
    shown = 0
    for title, sql in _panels(model):
        if not _uses(sql, changed):
            continue
        try:
            got = fleet.rows(fleet.everything, sql, variables)
        except Exception as error:
            raise AssertionError(f"{uid} / {title} with {changed} = {_chosen(variables, changed)}: {error}") from error
        if got != fleet.reference(reference, uid, title, sql, everything_on_all):
            # a figure that follows now() (seconds to NotBefore) moved on: run the reference just before and
            # just after the panel, which must then read as one of them
            before = fleet.rows(reference, sql, everything_on_all)
            got = fleet.rows(fleet.everything, sql, variables)
            after = fleet.rows(reference, sql, everything_on_all)
            assert got in (before, after), (
                f"{uid} / {title}: {changed} = {_chosen(variables, changed)} differs from what the value names alone"
            )
        shown += bool(got[1])
    return shown


def _chosen(variables: dict[str, Selection], changed: set[str]) -> dict[str, tuple[str, ...]]:
    return {name: variables[name].values for name in sorted(changed)}


@pytest.mark.parametrize("variable", sorted(IDENTITY))
def test_a_hostile_option_selects_only_its_vm(hostile: Fleet, variable: str) -> None:
    """Each VM's value of ``variable``, as the variable's query offers it: every panel that reads the variable
    runs and shows what it shows for that VM alone, on every dashboard."""
    column = IDENTITY[variable]
    for uid, model in dashboards().items():
        options = _options(hostile, model)
        everything = _all(model, {name: tuple(v for v, _ in values) for name, values in options.items()})
        by_text = {text: value for value, text in options[variable]}
        shown = 0
        for identity in hostile.identities:
            value = by_text[str(identity[column])]
            variables = {**everything, variable: Selection(values=(value,), options=everything[variable].options)}
            shown += _compare(hostile, uid, variables, {variable}, hostile.alone[identity["vm_name"]], everything)
        assert shown, f"{uid}: no panel showed a row for any single {variable}: the test tests nothing"


def test_several_hostile_vms_at_once(hostile: Fleet) -> None:
    """Two VMs chosen together (one name holding a comma and braces): exactly their rows, nothing more."""
    (first, second), database = hostile.pair
    for uid, model in dashboards().items():
        options = _options(hostile, model)
        everything = _all(model, {name: tuple(v for v, _ in values) for name, values in options.items()})
        by_text = {text: value for value, text in options["vm"]}
        both = Selection(values=(by_text[first], by_text[second]), options=everything["vm"].options)
        assert _compare(hostile, uid, {**everything, "vm": both}, {"vm"}, database, everything), uid


def test_every_variable_of_one_vm_at_once(hostile: Fleet) -> None:
    """The cascade as a user walks it: subscription, location, scale set, fault domain, then the VM, each
    picked from options narrowed by the ones before; the drill-down on the VM's completed event."""
    for identity in hostile.identities[1:]:
        for uid, model in dashboards().items():
            chosen: dict[str, Selection] = {}
            for variable in model["templating"]["list"]:
                name = variable["name"]
                if variable["type"] == "custom":
                    chosen[name] = all_of(tuple(o["value"] for o in variable["options"]))
                if variable["type"] != "query":
                    continue
                frame = _run(hostile.client, hostile.everything, variable["query"]["rawSql"], chosen, hostile.ctx)
                options = [(str(row[0]), str(row[-1])) for row in frame.rows]
                want = str(identity[IDENTITY[name]]) if name in IDENTITY else str(identity["fault_domain"])
                (value,) = [v for v, text in options if text == want]
                chosen[name] = Selection(values=(value,), options=tuple(v for v, _ in options))
            everything = {name: all_of(s.options) for name, s in chosen.items()}
            changed = set(VARIABLE_COLUMNS)
            if any(v["name"] == "event_id" for v in model["templating"]["list"]):
                event = Selection(values=(hostile.events[identity["vm_name"]][0],), multi=False)
                chosen["event_id"] = event
                everything["event_id"] = event
                changed.add("event_id")
            database = hostile.alone[identity["vm_name"]]
            _compare(hostile, uid, chosen, changed, database, everything)


@pytest.mark.parametrize("variable", [*VARIABLE_COLUMNS, "event_type", "event_id"])
def test_a_crafted_value_matches_nothing_and_breaks_nothing(hostile: Fleet, variable: str) -> None:
    """A value no option offers, as a URL can carry it: every panel that reads the variable runs and shows what
    it shows over an empty database."""
    for uid, model in dashboards().items():
        if not any(v["name"] == variable for v in model["templating"]["list"]):
            continue
        options = _options(hostile, model)
        everything = _all(model, {name: tuple(v for v, _ in values) for name, values in options.items()})
        crafted = (*CRAFTED, *(f"zz{h}" for h in HOSTILE))
        # a multi-value variable holds them all at once (one literal for all); the textbox one at a time
        if variable == "event_id":
            choices = [Selection(values=(c,), multi=False) for c in crafted]
        else:
            choices = [Selection(values=crafted)]
        for choice in choices:
            _compare(hostile, uid, {**everything, variable: choice}, {variable}, hostile.empty, everything)


def test_the_drill_down_shows_only_its_event(hostile: Fleet) -> None:
    """The EventId textbox holding a hostile EventId (quote, backslash, comment, & and #): its rows only."""
    model = dashboards()["sevents-timeline"]
    options = _options(hostile, model)
    everything = _all(model, {name: tuple(v for v, _ in values) for name, values in options.items()})
    for identity in hostile.identities:
        for event_id in hostile.events[identity["vm_name"]]:
            one = Selection(values=(event_id,), multi=False)
            shown = _compare(
                hostile,
                "sevents-timeline",
                {**everything, "event_id": one},
                {"event_id"},
                hostile.alone[identity["vm_name"]],
                {**everything, "event_id": one},
            )
            assert shown >= 2, event_id


def test_the_fixture_can_tell_one_vm_from_all(hostile: Fleet) -> None:
    """With All, the whole fleet shows more than any one VM's database: a filter that let everything through
    would fail the comparisons above."""
    model = dashboards()["sevents-timeline"]
    sql = next(sql for title, sql in _panels(model) if title == "Events")
    options = _options(hostile, model)
    everything = _all(model, {name: tuple(v for v, _ in values) for name, values in options.items()})
    whole = _rows(_run(hostile.client, hostile.everything, sql, everything, hostile.ctx))[1]
    assert len(whole) == 2 * len(hostile.identities)
    for database in hostile.alone.values():
        assert len(_rows(_run(hostile.client, database, sql, everything, hostile.ctx))[1]) == 2


# --- how variables are written into the SQL --------------------------------------------------------------------

_REFERENCE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}")


def _queries() -> Iterator[tuple[str, str, set[str]]]:
    for uid, model in dashboards().items():
        names = {v["name"] for v in model["templating"]["list"] if v["type"] != "datasource"}
        for variable in model["templating"]["list"]:
            if variable["type"] == "query":
                yield uid, variable["query"]["rawSql"], names
        for _, sql in _panels(model):
            yield uid, sql, names


def test_every_variable_reaches_sql_percent_encoded_inside_one_literal() -> None:
    """Once ``$__conditionalAll`` is resolved for a real choice, each variable reference left in any query is
    ``decodeURLComponent('${name:percentencode}')``: no format that lets a quote or a backslash through."""
    seen = set()
    for uid, sql, names in _queries():
        chosen = {name: Selection(values=("x",), multi=name != "event_id") for name in names}
        resolved = apply_conditional_all(sql, chosen)
        for match in _REFERENCE.finditer(resolved):
            name = match.group(1) or match.group(2) or match.group(4)
            if name not in names:
                continue
            seen.add(name)
            assert match.group(0) == f"${{{name}:percentencode}}", (uid, match.group(0))
            before = resolved[: match.start()]
            assert before.endswith("decodeURLComponent('") and resolved[match.end() :].startswith("')"), uid
    assert seen == {*VARIABLE_COLUMNS, "event_type", "event_id"}


def test_links_carry_values_url_encoded() -> None:
    """Data links percent-encode what they carry (Grafana's default for links, uriencode, keeps & = # +);
    the alerts' drill-down link query-escapes the EventId."""
    assert "${__value.raw:percentencode}" in fleet.TIMELINE_LINK
    for uid, model in dashboards().items():
        for panel_json in model["panels"]:
            for override in panel_json.get("fieldConfig", {}).get("overrides", []):
                for prop in override["properties"]:
                    for link in prop["value"] if prop["id"] == "links" else []:
                        for match in _REFERENCE.finditer(link["url"]):
                            if match.group(4) == "__url_time_range":
                                continue
                            assert match.group(6) == "percentencode", (uid, link["url"])
    assert "{{ urlquery $labels.event_id }}" in alerts.DRILL_DOWN
    for rule in alert_rules():
        for text in rule["annotations"].values():
            for url in re.findall(r"var-event_id=\{\{[^}]*\}\}", text):
                assert url == "var-event_id={{ urlquery $labels.event_id }}", (rule["uid"], url)


def test_conditional_all_still_turns_all_into_nothing() -> None:
    """All (and no choice) still costs nothing: the filter is 1=1, no percent-encoded value is left."""
    for _, sql, names in _queries():
        everything = {name: all_of(("a",)) if name != "event_id" else Selection(("",), multi=False) for name in names}
        resolved = replace_variables(apply_conditional_all(sql, everything), everything)
        chosen_values = "'%FF'"  # in every filters.selected: the glob's commas, replaced before the split
        if any(f"${{{name}:percentencode}}" in sql for name in names if name != "event_id"):
            assert chosen_values in sql
        assert chosen_values not in resolved


def test_no_condition_holds_a_javascript_replacement_pattern() -> None:
    """The plugin puts a kept condition back with String.replace, which reads $&, $', $` and $$ in it: none of
    ours may hold one (the model expands them as JavaScript does)."""
    for uid, sql, _ in _queries():
        assert not re.search(r"\$[$&'`]", sql), uid
    chosen = {"v": Selection(values=("a",))}
    assert apply_conditional_all("x AND $__conditionalAll(y = '$$' OR z = '<$'>', $v) AND w", chosen) == (
        "x AND y = '$' OR z = '< AND w>' AND w"
    )


def test_grafana_formats_as_modelled() -> None:
    """percentencode joins a list as a glob before encoding it; singlequote and sqlstring leave backslashes."""
    several = {"v": Selection(values=("a b", "it's", "x,y"))}
    assert replace_variables("${v:percentencode}", several) == "%7Ba%20b%2Cit%27s%2Cx%2Cy%7D"
    assert replace_variables("${v:percentencode}", {"v": Selection(("é/\\",), multi=False)}) == "%C3%A9%2F%5C"
    assert replace_variables("${v:singlequote}", several) == "'a b','it\\'s','x,y'"
    assert replace_variables("${v:sqlstring}", several) == "'a b','it''s','x,y'"


@pytest.mark.parametrize("fmt", ["singlequote", "sqlstring"])
def test_grafanas_quoting_formats_would_inject_in_clickhouse(engine: Engine, fmt: str) -> None:
    """Why neither is used: a backslash before the escaped quote ends ClickHouse's literal, and the rest is SQL.
    The same value through ``filters.selected`` matches nothing, and a plain one what it names."""
    value = "\\') OR 1=1 --"
    where = "SELECT count() FROM numbers(10) WHERE toString(number) IN"
    quoted = replace_variables(f"{where} (${{v:{fmt}}})", {"v": Selection((value,))})
    assert engine.client.query(quoted).result_rows == [(10,)], "every row"
    for chosen, count in ((value, 0), ("7", 1), ("%37", 1)):  # "%37": an option value, URL-encoded
        safe = replace_variables(f"{where} ({selected('v')})", {"v": Selection((chosen,))})
        assert engine.client.query(safe).result_rows == [(count,)], chosen


# what the glob, the encodings and the split read, mixed with any character a stored name can hold (UTF-8: no
# lone surrogate)
GLOB_TEXT = st.text(st.one_of(st.sampled_from(",{}%+\\'\"\x00 ~$"), st.characters(codec="utf-8")))


@settings(max_examples=examples(100), deadline=None)
@given(values=st.lists(GLOB_TEXT, min_size=1, max_size=4), multi=st.booleans())
def test_any_options_chosen_come_out_of_sql_as_they_are(engine: Engine, values: list[str], multi: bool) -> None:
    """Whatever the options hold (commas and braces of the glob, percent signs, NUL, any unicode), ``selected``
    yields exactly the values chosen: each option URL-encoded by ClickHouse as the variable queries do
    (``OPTION_VALUE``), formatted and encoded as Grafana does, decoded in SQL."""
    multi = multi or len(values) > 1
    encode = f"SELECT {OPTION_VALUE.format(column='{v:String}')}"
    options = tuple(engine.client.query(encode, parameters={"v": value}).result_rows[0][0] for value in values)
    sql = replace_variables(f"SELECT {selected('v')}", {"v": Selection(options, multi=multi)})
    assert engine.client.query(sql).result_rows == [(values,)]
