"""The cluster schema (``migrate --cluster``) run for real on the embedded engine, through Distributed tables.

chDB reads a cluster definition from a config file and runs a shard whose address is this node in process, with no
server: a ``Distributed`` table over a one-shard cluster of 127.0.0.1 writes and reads its ``*_local`` table as a
Distributed table does on any shard (sharding key, per-shard query, merge on the initiator). What it cannot run
is Keeper: ``ON CLUSTER`` DDL and ``Replicated*MergeTree`` need it. So the rendered statements run with exactly
those two taken out (``on_local_shards``); the Distributed tables, their sharding keys, the ``*_local`` names, the
materialized views on the local tables, the backfills through the Distributed tables and every view are as
``migrate`` renders them for a cluster.

A second cluster, ``sevents_twin``, has two shards that are both this node: through it every local row is read
twice, once per shard, which is what a key spread over two shards looks like to a reader. It tells the reads that
merge aggregate states across shards (right wherever a key's rows are) from ``FINAL``, which dedupes per shard
only. docs/scale.md explains the design these tests check.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import clickhouse_connect
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from benchmarks import bench_dashboards
from dashboards.templating import Selection
from demo import synthetic
from ingest import lifecycle_store, queries
from ingest.decode import DEFAULT_LIMITS
from ingest.handler import prepare
from ingest.migrate import Target, migrate
from ingest.source import Delivery
from ingest.writer import Writer
from sevents import records
from sevents.records import encode

# three schemas migrated and loaded, every view, audit and panel query run on each: the slow tier (still in CI)
pytestmark = [pytest.mark.engine, pytest.mark.slow]

ONE, TWIN = "sevents_one", "sevents_twin"
# tcp_port only tells the engine which address is itself (it serves no port): a shard at 127.0.0.1:9000 is then
# local, queried and written in process, never over the network.
CONFIG = f"""<clickhouse>
  <tcp_port>9000</tcp_port>
  <remote_servers>
    <{ONE}><shard><replica><host>127.0.0.1</host><port>9000</port></replica></shard></{ONE}>
    <{TWIN}>
      <shard><replica><host>127.0.0.1</host><port>9000</port></replica></shard>
      <shard><replica><host>localhost</host><port>9000</port></replica></shard>
    </{TWIN}>
  </remote_servers>
</clickhouse>
"""
_ON_CLUSTER = re.compile(r"\s+ON CLUSTER '\w+'")
_REPLICATED = re.compile(
    r"Replicated(\w*MergeTree)\('/clickhouse/tables/\{shard\}/\{database\}/\{table\}', '\{replica\}',? ?"
)
# the tables sharded by VM: every record of a VM, and every rollup keyed by VM, on the VM's shard
BY_VM = {
    "transitions", "heartbeats", "heartbeats_latest", "event_vm_rollup", "vm_retirements", "transitions_by_time",
    "heartbeat_hours", "impacts", "approvals", "attested_keys", "azure_vms", "transition_observers",
}  # fmt: skip
NOW = datetime.now(UTC).replace(microsecond=0)
GLOBAL = {"distributed_product_mode": "global"}
QUIET_VIEWS = {"retired_vms"}  # views the test fleet leaves empty
CLOCK_COLUMN = re.compile(r"(?i)^(silent_for_s|silent_s|age_s)$")  # seconds since the last heartbeat, now64()


def on_local_shards(statement: str) -> str:
    """A statement rendered for a cluster, without what needs Keeper: ON CLUSTER and the Replicated engines."""
    return _REPLICATED.sub(r"\1(", _ON_CLUSTER.sub("", statement))


class LocalShards:
    """The engine's client with ``on_local_shards`` applied to every DDL statement ``migrate`` sends."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def command(self, statement: str, *args: Any, **kwargs: Any) -> Any:
        return self.client.command(on_local_shards(statement), *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


@pytest.fixture(scope="package")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The embedded engine with the two cluster definitions (its own directory: one per process at a time)."""
    home = tmp_path_factory.mktemp("cluster")
    config = home / "config.xml"
    config.write_text(CONFIG, encoding="utf-8")
    options = {"interface": "chdb", "path": str(home / "data"), "chdb_options": {"config-file": str(config)}}
    client = clickhouse_connect.get_client(**options)
    # what the profiles of a cluster's users set (docs/scale.md): the twin cluster's migrations and writer use it
    client.profiled = clickhouse_connect.get_client(**options, settings=GLOBAL)
    yield client
    client.profiled.close()
    client.close()


def fleet_records() -> list[dict[str, Any]]:
    """Six VMs in the last hours: two events seen by three VMs each (one over, one under way), a Terminate
    that retired VM 5, minute heartbeats of every VM (VM 4 silent for two hours), an impact and an approval."""
    out: list[dict[str, Any]] = []
    start = NOW - timedelta(hours=3)
    for vm in range(3):
        out += synthetic.lifecycle("E-over", vm, start=start + timedelta(seconds=vm))
    for vm in range(3, 6):
        out.append(synthetic.transition(vm_index=vm, event_id="E-live", observed_at=NOW - timedelta(minutes=20)))
    terminate = synthetic.transition(
        vm_index=5, event_id="E-end", event_type="Terminate", kind=records.KIND_STATUS_CHANGED, status="Started",
        prev_status="Scheduled", incarnation=2, observed_at=NOW - timedelta(minutes=90),
    )  # fmt: skip
    out.append(terminate)
    for vm in range(6):
        last = NOW - timedelta(hours=2 if vm in (4, 5) else 0, minutes=1)
        out += [synthetic.heartbeat(vm_index=vm, observed_at=last - timedelta(minutes=m), seq=m) for m in range(5)]
    base = {k: v for k, v in synthetic.heartbeat(vm_index=0).items() if k not in ("heartbeat_id", "record_type")}
    for name in ("last_incarnation", "last_poll_ok", "last_poll_error", "polls", "poll_errors", "active_events"):
        base.pop(name)
    for name in ("outbox_depth", "drops", "started_at", "record_id"):
        base.pop(name)
    began = records.format_time(start + timedelta(minutes=5, seconds=2))
    impact_id = records.impact_id(base["vm_id"], "reboot", began)
    out.append(
        {
            **base, "record_type": records.RECORD_IMPACT, "record_id": impact_id, "impact_id": impact_id,
            "detected_by": "reboot", "began_at": began, "duration_ms": 40_000, "event_id": "E-over",
            "event_type": "Reboot", "observed_at": records.format_time(start + timedelta(minutes=6)),
        }
    )  # fmt: skip
    approval_id = records.approval_id(base["vm_id"], "E-over", "approved")
    decided = records.format_time(start + timedelta(minutes=4))
    out.append(
        {
            **base, "record_type": records.RECORD_APPROVAL, "record_id": approval_id, "approval_id": approval_id,
            "event_id": "E-over", "decision": "approved", "rule": "first-in-resources", "approver": "vm-000",
            "event_type": "Reboot", "not_before": records.format_time(start + timedelta(minutes=15)),
            "hook_exit": 0, "hook_ms": 2500, "http_status": 200, "decided_at": decided, "observed_at": decided,
        }
    )  # fmt: skip
    return out


def store(
    client: Any,
    database: str,
    recs: list[dict[str, Any]],
    *,
    cluster: bool,
    refresh_every: float = 0.0,
    writer: Writer | None = None,
) -> Writer:
    """``recs`` decoded as the ingest decodes a delivery and stored by its writer (on a cluster: into the
    Distributed tables); a refusal fails the test at once instead of being retried as the handler would."""
    batch, rejected = prepare(
        [Delivery(encode(r), f"p#{i}") for i, r in enumerate(recs)],
        source="test",
        limits=DEFAULT_LIMITS,
        received_at=datetime.now(UTC),
    )
    assert not rejected and not batch.dead_letters
    writer = writer or Writer(client, database, cluster=cluster, refresh_every=refresh_every)
    writer.store(batch)
    return writer


@pytest.fixture(scope="package")
def databases(engine: Any) -> dict[str, str]:
    """The same records in three schemas: single node, one-shard cluster, two-shards-of-one-node cluster."""
    names = {kind: f"t_{kind}_{uuid.uuid4().hex[:8]}" for kind in ("single", ONE, TWIN)}
    migrate(engine, Target(database=names["single"]))
    migrate(LocalShards(engine), Target(database=names[ONE], cluster=ONE))
    migrate(LocalShards(engine.profiled), Target(database=names[TWIN], cluster=TWIN))
    recs = fleet_records()
    store(engine, names["single"], recs, cluster=False)
    store(engine, names[ONE], recs, cluster=True)
    store(engine.profiled, names[TWIN], recs, cluster=True)
    return names


def rows(client: Any, sql: str) -> list[tuple[Any, ...]]:
    return sorted(client.query(sql).result_rows, key=repr)


def differences(client: Any, one: str, other: str, settings: dict[str, Any] | None = None) -> tuple[int, int, int]:
    """Rows of ``one``, rows of ``other``, and rows in one but not the other, leaving out the columns that read
    the clock (each shard's query reads its own now64(), a few milliseconds apart)."""
    columns = [str(row[0]) for row in client.query(f"DESCRIBE ({one})").result_rows]
    clocks = [c for c in columns if CLOCK_COLUMN.search(c)]
    if clocks:
        kept = ", ".join(f"`{c}`" for c in columns if c not in clocks)
        one, other = f"SELECT {kept} FROM ({one})", f"SELECT {kept} FROM ({other})"
    found = client.query(
        f"SELECT (SELECT count() FROM ({one})), (SELECT count() FROM ({other})), "
        f"(SELECT count() FROM ((SELECT * FROM ({one})) EXCEPT (SELECT * FROM ({other})))) "
        f"+ (SELECT count() FROM ((SELECT * FROM ({other})) EXCEPT (SELECT * FROM ({one}))))",
        settings=settings or {},
    ).result_rows[0]
    return int(found[0]), int(found[1]), int(found[2])


def test_cluster_schema_puts_every_table_under_a_distributed_one_sharded_as_designed(
    engine: Any, databases: dict[str, str]
) -> None:
    """Every stored table is a ``*_local`` table under a Distributed table of its plain name; what a VM writes
    (its records and the rollups keyed by VM) is sharded by ``cityHash64(vm_id)``, and every materialized view
    reads and writes local tables, so a shard's rollups hold exactly its own rows."""
    db = databases[ONE]
    tables = {
        str(name): (str(engine_name), str(full), str(create))
        for name, engine_name, full, create in engine.query(
            "SELECT name, engine, engine_full, create_table_query FROM system.tables WHERE database = {db:String}",
            parameters={"db": db},
        ).result_rows
    }
    distributed = {n: full for n, (kind, full, _) in tables.items() if kind == "Distributed"}
    local = {n.removesuffix("_local") for n, (kind, _, _) in tables.items() if n.endswith("_local")}
    assert local == set(distributed)
    assert all(f"'{ONE}', '{db}', '{n}_local'" in full for n, full in distributed.items())
    sharded_by_vm = {n for n, full in distributed.items() if full.endswith("cityHash64(vm_id))")}
    assert sharded_by_vm == BY_VM
    views = {n: create for n, (kind, _, create) in tables.items() if kind == "MaterializedView"}
    assert views
    for name, create in views.items():
        target = re.search(r"\bTO (\S+)", create)
        sources = re.findall(rf"\bFROM {db}\.(\w+)", create)
        assert target and target.group(1).endswith("_local"), name
        assert sources and all(s.endswith("_local") for s in sources), name


def test_every_view_answers_through_distributed_tables_as_on_one_node(engine: Any, databases: dict[str, str]) -> None:
    """The same records stored by the ingest into Distributed tables and into a single node: every view, audit
    query and Grafana panel and alert query gives the same rows."""
    single, clustered = databases["single"], databases[ONE]
    views = [
        str(v)
        for (v,) in engine.query(
            "SELECT name FROM system.tables WHERE database = {db:String} AND engine = 'View' ORDER BY name",
            parameters={"db": single},
        ).result_rows
    ]
    assert "events" in views and "event_vms" in views
    for view in views:
        since = "(since_day = today() - 7)" if view.endswith("_since") else ""
        counted, again, differ = differences(
            engine, f"SELECT * FROM {single}.{view}{since}", f"SELECT * FROM {clustered}.{view}{since}"
        )
        assert (again, differ) == (counted, 0), view
        assert counted or view in QUIET_VIEWS, view
    params = {
        "vm": "vm-000", "since": NOW - timedelta(days=7), "until": NOW + timedelta(minutes=1), "event_id": "E-over",
        "types": ["Reboot", "Redeploy"], "now": NOW, "threshold_s": 300,
    }  # fmt: skip
    for query in queries.ALL:
        bound = {k: params[k] for k in query.params}
        on_one = queries.run(engine, query, single, **bound)
        assert queries.run(engine, query, clustered, **bound) == on_one, query.name
    engine.database = None
    answered: set[str] = set()
    # every panel and alert with All, then the panels with one VM chosen (vm 0, which saw E-over): the range
    # panels find its events through transition_observers and its transitions, on its shard
    vm_0 = Selection(values=(synthetic.vm(0)["vm_name"],), options=("x",))
    chosen = {**bench_dashboards.all_placeholder(), "vm": vm_0}
    concrete = bench_dashboards.dashboard_panels(NOW, dict.fromkeys(bench_dashboards.dashboard_models(), chosen))
    picked = {f"{name} (vm 0)": q for board in concrete.values() for name, q in board.items()}
    assert sum("transition_observers" in sql for sql, _ in picked.values()) >= 5
    for name, (sql, _ctx) in {**bench_dashboards.grafana_queries(NOW), **picked}.items():
        if "ingested_at" in sql:  # ingest lag: the two databases stored the records at different moments
            continue
        counted, again, differ = differences(
            engine, sql.replace("sevents.", f"{single}."), sql.replace("sevents.", f"{clustered}.")
        )
        assert (again, differ) == (counted, 0), name
        if counted:
            answered.add(name)
    assert len(answered) > 10  # the fleet gives most panels something to show
    assert "panel sevents-timeline: Events (vm 0)" in answered  # E-over, found through vm 0's own transitions


def test_a_retried_batch_is_deduplicated_on_the_shard_through_the_distributed_table(
    engine: Any, databases: dict[str, str]
) -> None:
    """The writer's retry of a stored batch (same tokens, ``distributed_foreground_insert``) adds no row to a
    record table's local table, and the token itself is what the shard dedupes by: other rows under a used token
    are dropped. (The rollups' local tables may take the retried block again, as on one node: their states are
    unchanged by a repeated row, so every answer stays the same.)"""
    single, db = databases["single"], databases[ONE]
    record_tables = ("transitions_local", "heartbeats_local", "impacts_local", "approvals_local")

    def local_rows() -> dict[str, int]:
        found = engine.query(
            "SELECT table, sum(rows) FROM system.parts WHERE database = {db:String} AND active GROUP BY table",
            parameters={"db": db},
        ).result_rows
        return {str(t): int(n) for t, n in found if t in record_tables}

    before = local_rows()
    assert before == {"transitions_local": 13, "heartbeats_local": 30, "impacts_local": 1, "approvals_local": 1}
    store(engine, db, fleet_records(), cluster=True)
    assert local_rows() == before
    for view in ("events", "event_vms", "vm_status"):
        one, other = f"SELECT * FROM {single}.{view}", f"SELECT * FROM {db}.{view}"
        counted, again, differ = differences(engine, one, other)
        assert (again, differ) == (counted, 0), view
    settings = {"insert_deduplicate": 1, "distributed_foreground_insert": 1, "insert_deduplication_token": "t-1"}
    first = [synthetic.heartbeat(vm_index=9, observed_at=NOW - timedelta(minutes=m)) for m in range(2)]
    columns = ["heartbeat_id", "vm_id", "observed_at", "started_at"]
    for recs in (first[:1], first[1:]):  # different rows, the same token
        values = [[r["heartbeat_id"], r["vm_id"], NOW, NOW] for r in recs]
        engine.insert(f"{db}.heartbeats", values, column_names=columns, settings=settings)
    assert local_rows()["heartbeats_local"] == before["heartbeats_local"] + 1


def test_with_a_deduplication_window_the_rollups_drop_a_retried_block_too(
    engine: Any, databases: dict[str, str]
) -> None:
    """Replicated tables keep a deduplication window by default (replicated_deduplication_window), the rollups'
    local tables included; given one here, the retried batch leaves every local table, rollups too, as it was."""
    db = databases[ONE]
    tables = [
        str(name)
        for (name,) in engine.query(
            "SELECT name FROM system.tables WHERE database = {db:String} AND name LIKE '%\\_local'",
            parameters={"db": db},
        ).result_rows
    ]
    for table in tables:
        engine.command(f"ALTER TABLE {db}.{table} MODIFY SETTING non_replicated_deduplication_window = 10000")
    recs = [synthetic.heartbeat(vm_index=8, observed_at=NOW - timedelta(minutes=m), seq=m) for m in range(3)]
    store(engine, db, recs, cluster=True)
    count = "SELECT table, sum(rows) FROM system.parts WHERE database = {db:String} AND active GROUP BY table"
    before = dict(engine.query(count, parameters={"db": db}).result_rows)
    store(engine, db, recs, cluster=True)
    assert dict(engine.query(count, parameters={"db": db}).result_rows) == before


def test_views_over_two_shards_need_a_distributed_product_mode(engine: Any, databases: dict[str, str]) -> None:
    """Every view joins or filters one Distributed table by a subquery over another (silent and retired VMs,
    retirements): on more than one shard ClickHouse refuses that by default (distributed_product_mode = 'deny').
    Readers on a cluster set 'global': the subquery runs once and its result goes to every shard."""
    twin = databases[TWIN]
    with pytest.raises(DatabaseError, match="DISTRIBUTED_IN_JOIN_SUBQUERY_DENIED"):
        engine.query(f"SELECT * FROM {twin}.vm_status")
    assert len(engine.query(f"SELECT * FROM {twin}.vm_status", settings=GLOBAL).result_rows) == 2 * 6  # see below


def test_rollups_merge_across_shards_and_final_does_not(engine: Any, databases: dict[str, str]) -> None:
    """Through two shards that each hold every row (a key's rows on both): reads that only merge aggregate
    states (the events' lifecycles computed from the rollups, the hourly heartbeat coverage) still give the
    one-node answer, while FINAL, which collapses versions inside one shard only, sees each row twice (the stored
    lifecycles ``events`` reads included). So a FINAL read is right only when every version of a key lives on one
    shard (its sharding key decides by a column of the sorting key, or one that follows from it), while a -Merge
    read is right wherever the rows are."""
    single, twin = databases["single"], databases[TWIN]
    # (less the longest downtime, a sum over impacts FINAL: a per-VM FINAL read, co-located on a real cluster)
    computed = "* EXCEPT (observed_impact_s) FROM {}.event_evidence_since(since_day = today() - 7)"
    one, two = f"SELECT {computed.format(single)}", f"SELECT {computed.format(twin)}"
    counted, again, differ = differences(engine, one, two, GLOBAL)
    assert (again, differ) == (counted, 0) and counted
    stored = "SELECT count() FROM {}.events"
    twice = engine.query(stored.format(twin), settings=GLOBAL).result_rows[0][0]
    assert twice == 2 * engine.query(stored.format(single), settings=GLOBAL).result_rows[0][0] > 0
    coverage = (
        "SELECT vm_id, hour, bitCount(groupBitOr(heartbeat_minutes)), max(last_at) FROM {}.heartbeat_hours GROUP BY ALL"
    )
    assert rows(engine, coverage.format(twin)) == rows(engine, coverage.format(single))
    count = "SELECT count() FROM {}.transitions FINAL"
    assert rows(engine, count.format(twin))[0][0] == 2 * rows(engine, count.format(single))[0][0]
    latest = "SELECT vm_id, count() FROM {}.heartbeats_latest FINAL GROUP BY vm_id"
    assert {n for _, n in rows(engine, latest.format(twin))} == {2}


def test_a_query_for_one_vm_reads_only_its_shard_when_asked(engine: Any, databases: dict[str, str]) -> None:
    """optimize_skip_unused_shards: a condition on vm_id, the sharding key's column, sends the query to the one
    shard that holds the VM (here: one of the twins, so its rows count once instead of twice)."""
    twin = databases[TWIN]
    vm = synthetic.vm(0)["vm_id"]
    sql = f"SELECT count() FROM {twin}.transitions WHERE vm_id = {{vm:String}}"
    everywhere = engine.query(sql, parameters={"vm": vm}).result_rows[0][0]
    pruned = engine.query(sql, parameters={"vm": vm}, settings={"optimize_skip_unused_shards": 1}).result_rows[0][0]
    assert (everywhere, pruned) == (6, 3)  # vm-000's lifecycle of E-over: three transitions


def test_a_refresh_put_off_is_marked_and_swept_through_distributed_tables(
    engine: Any, databases: dict[str, str]
) -> None:
    """The ingest's put-off refreshes (ingest.lifecycle_refresher) on two shards: the INSERT through the
    Distributed tables marks the events on their shards, the sweep finds the ones whose stored lifecycle is older
    than their mark, and refreshing them leaves nothing stale."""
    db = databases[TWIN]
    client = engine.profiled
    writer = store(client, db, synthetic.lifecycle("E-put-off", 1), cluster=True, refresh_every=3600)
    assert lifecycle_store.stale(client, db) == []  # the first batch is refreshed at once
    store(client, db, synthetic.lifecycle("E-put-off", 2), cluster=True, writer=writer)
    assert lifecycle_store.stale(client, db) == ["E-put-off"]
    assert writer.lifecycles.sweep() == 1
    assert lifecycle_store.stale(client, db) == []
