"""Storage per row of every table, measured on the embedded engine, and a cluster sizing derived from it.

Run: ``.venv/bin/python benchmarks/sizing.py [--vms 2000] [--heartbeat-days 2] [--json FILE]``

The fleet benchmark's generator (``benchmarks/bench_dashboards.py``) loads ``--vms`` VMs into a fresh chDB
database through the real schema (so every materialized view fills its rollup as in production): a year of
transitions at ``--transitions-per-vm`` a VM a year (500: issue 32's 50 M a year for 100,000 VMs), with the
impacts and approvals of those events, Azure's inventory of the fleet, and ``--heartbeat-days`` days of
heartbeats at one a minute per VM (what a collector sends). Identifiers are widened to the width the collectors
send (32 hex digits: ``sevents.records`` digests; Azure vmIds and EventIds are UUIDs), since random
identifiers are most of what does not compress.

Once ClickHouse's own merges have settled, every table is merged to one part per partition (``OPTIMIZE ...
FINAL``: what a table holds once its background merges caught up, so that a rollup's rows are one per key) and
``system.parts`` gives each table's rows and compressed bytes. Each table's rows are then related to what drives
them (heartbeats, transitions, or the fleet's VMs): rows of the table per driving row and bytes per row, which
scale linearly with the fleet. The sizing table applies those to 20,000, 100,000 and 1,000,000 VMs with the
default retentions (``ingest.retention``: heartbeats 7 days, everything else 400). Queries per second come from
the provisioned dashboards (panels and refresh interval of each) and alert rules (queries and interval).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench_dashboards import (  # beside this file: run as a script
    SET_SIZE,
    Fleet,
    approvals_sql,
    heartbeats_sql,
    impacts_sql,
    inventory_sql,
    settle,
    transitions_sql,
)

from ingest.clickhouse import as_command, connect
from ingest.migrate import Target, migrate
from ingest.retention import Retention

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "dashboards" / "json"
ALERTS = ROOT / "dashboards" / "provisioning" / "alerting" / "sevents-alerts.json"
FLEETS = (20_000, 100_000, 1_000_000)
VIEWERS = (5, 50)
WORKERS = 4  # ingest workers (Event Hubs partitions read at once): each flushes its batch at least every wait
BATCH_ROWS, BATCH_WAIT_S = 10_000, 1.0  # ingest.settings: batch_max_records, batch_max_wait
# tables an insert of each record table writes a part to on every shard (itself and its views' local tables)
PARTS_PER_INSERT = {"heartbeats": 3, "transitions": 6}
DAY_S = 86_400
HEARTBEATS_PER_VM_DAY = 1440  # one a minute


@dataclass(frozen=True)
class Measured:
    """One table as loaded: rows, compressed and uncompressed bytes, parts after the load settled."""

    table: str
    rows: int
    compressed: int
    uncompressed: int
    parts_loaded: int
    partitions: int

    @property
    def bytes_per_row(self) -> float:
        return self.compressed / self.rows if self.rows else 0.0


# What drives each table's rows, and how long it keeps them (None: for good, one row per key). Tables the load
# leaves empty (dead letters, feed deliveries, annotations, attested keys) are small next to these and not sized.
DRIVERS: dict[str, tuple[str, str | None]] = {
    "heartbeats": ("heartbeats", "heartbeats"),
    "heartbeat_hours": ("vm_hours", "history"),
    "heartbeats_latest": ("vms", None),
    "transitions": ("transitions", "history"),
    "transitions_by_time": ("transitions", "history"),
    "event_vm_rollup": ("transitions", "history"),
    "event_rollup": ("transitions", "history"),
    "impacts": ("transitions", "history"),
    "approvals": ("transitions", "history"),
    "vm_retirements": ("vms", None),
    "transition_observers": ("vms", None),
    "azure_vms": ("vms", None),
}


def widened(sql: str) -> str:
    """The generator's identifiers at the width the collectors send: 32 hex digits instead of 16."""
    return sql.replace("hex(cityHash64(", "hex(sipHash128(")


def load(client: Any, fleet: Fleet, heartbeat_days: int, chunk: int) -> dict[str, float]:
    """Everything the fleet writes; seconds each kind took."""
    took: dict[str, float] = {}
    began = time.perf_counter()
    for start in range(0, fleet.events, chunk):
        count = min(chunk, fleet.events - start)
        for make in (transitions_sql, impacts_sql, approvals_sql):
            client.command(widened(make(fleet, start, count)))
    took["transitions, impacts, approvals"] = time.perf_counter() - began
    began = time.perf_counter()
    day = fleet.now - timedelta(days=heartbeat_days)
    while day < fleet.now:  # a day per INSERT: raw heartbeats are partitioned by day
        client.command(widened(heartbeats_sql(fleet, day, min(fleet.now, day + timedelta(days=1)), 60)))
        day += timedelta(days=1)
    took["heartbeats"] = time.perf_counter() - began
    client.command(widened(inventory_sql(fleet)))
    return took


def measure(client: Any, database: str) -> dict[str, Measured]:
    """Each table's rows and bytes once merged to one part per partition; parts as the load left them."""
    loaded = {
        str(table): (int(parts), int(partitions))
        for table, parts, partitions in client.query(
            "SELECT table, count(), uniqExact(partition) FROM system.parts WHERE database = {db:String} AND active "
            "GROUP BY table",
            parameters={"db": database},
        ).result_rows
    }
    for table in loaded:
        client.command(f"OPTIMIZE TABLE {database}.{table} FINAL")  # our own names
    found = {}
    for table, rows, compressed, uncompressed in client.query(
        "SELECT table, sum(rows), sum(data_compressed_bytes), sum(data_uncompressed_bytes) FROM system.parts "
        "WHERE database = {db:String} AND active GROUP BY table",
        parameters={"db": database},
    ).result_rows:
        parts, partitions = loaded.get(str(table), (0, 0))
        found[str(table)] = Measured(str(table), int(rows), int(compressed), int(uncompressed), parts, partitions)
    return found


# How heartbeat_hours could count an hour's heartbeats (issue 32's sizing): name -> (column type, state, count).
# Before migration 0020 it kept a uniqExact state of heartbeat ids, a 16-byte hash per heartbeat, which does not
# compress; it now keeps a bit per minute of the hour. Each counts the same heartbeats at one a minute (the seconds
# of the hour are as distinct as the ids) and, like the set, is unchanged by a repeated row.
COVERAGE_STATES = {
    "uniqExact(heartbeat_id) (before 0020)": (
        "AggregateFunction(uniqExact, String)",
        "uniqExactState(heartbeat_id)",
        "finalizeAggregation(heartbeats)",
    ),
    "uniqExact(cityHash64(heartbeat_id))": (
        "AggregateFunction(uniqExact, UInt64)",
        "uniqExactState(cityHash64(heartbeat_id))",
        "finalizeAggregation(heartbeats)",
    ),
    "groupBitmap(millisecond of the hour)": (
        "AggregateFunction(groupBitmap, UInt32)",
        "groupBitmapState(toUInt32(toUnixTimestamp64Milli(observed_at) % 3600000))",
        "finalizeAggregation(heartbeats)",
    ),
    "groupBitmap(second of the hour)": (
        "AggregateFunction(groupBitmap, UInt16)",
        "groupBitmapState(toUInt16(toUnixTimestamp(observed_at) % 3600))",
        "finalizeAggregation(heartbeats)",
    ),
    "groupBitOr(minute of the hour) (today)": (
        "SimpleAggregateFunction(groupBitOr, UInt64)",
        "groupBitOr(bitShiftLeft(toUInt64(1), toMinute(observed_at)))",
        "bitCount(heartbeats)",
    ),
}


def coverage_states(client: Any) -> dict[str, dict[str, float]]:
    """Bytes per VM-hour of each way of counting an hour's heartbeats, from the loaded heartbeats (merged), and
    the largest count it gives (60 for every way: the same heartbeats)."""
    client.command("CREATE DATABASE IF NOT EXISTS sizing_scratch")
    found = {}
    for index, (name, (kind, state, count)) in enumerate(COVERAGE_STATES.items()):
        table = f"sizing_scratch.coverage_{index}"
        client.command(
            f"CREATE TABLE {table} (hour DateTime('UTC'), vm_id String, heartbeats {kind}) "
            "ENGINE = AggregatingMergeTree ORDER BY (hour, vm_id)"
        )
        client.command(
            f"INSERT INTO {table} SELECT toStartOfHour(observed_at), vm_id, {state} FROM sevents.heartbeats "
            "GROUP BY 1, 2"
        )
        client.command(f"OPTIMIZE TABLE {table} FINAL")
        rows, compressed = client.query(
            "SELECT sum(rows), sum(data_compressed_bytes) FROM system.parts WHERE database = 'sizing_scratch' "
            "AND table = {t:String} AND active",
            parameters={"t": f"coverage_{index}"},
        ).result_rows[0]
        most = client.query(f"SELECT max({count}) FROM {table}").result_rows[0][0]
        found[name] = {"bytes_per_row": int(compressed) / int(rows), "most_in_an_hour": int(most)}
    return found


def per_driver(found: dict[str, Measured], fleet: Fleet) -> dict[str, dict[str, Any]]:
    """Each sized table: rows per driving unit and bytes per row."""
    drivers = {
        "heartbeats": found["heartbeats"].rows,
        "vm_hours": found["heartbeat_hours"].rows,  # one row per VM and hour, by its key
        "transitions": found["transitions"].rows,
        "vms": fleet.vms,
    }
    out = {}
    for table, (driver, retention) in DRIVERS.items():
        if table not in found or not found[table].rows:
            continue
        out[table] = {
            "driver": driver,
            "retention": retention,
            "rows_per_driver": found[table].rows / drivers[driver],
            "bytes_per_row": found[table].bytes_per_row,
            "compression": found[table].uncompressed / max(1, found[table].compressed),
        }
    return out


def sized(costs: dict[str, dict[str, Any]], vms: int, transitions_per_vm: float) -> dict[str, Any]:
    """Rows kept, bytes kept and rows written a second for a fleet of ``vms``, with the default retentions."""
    keep = Retention()
    daily = {
        "heartbeats": vms * HEARTBEATS_PER_VM_DAY,
        "vm_hours": vms * 24,
        "transitions": vms * transitions_per_vm / 365,
    }
    tables = {}
    for table, cost in costs.items():
        driver, retention = cost["driver"], cost["retention"]
        if retention is None:
            rows, per_s = vms * cost["rows_per_driver"], 0.0
        else:
            per_day = daily[driver] * cost["rows_per_driver"]
            rows, per_s = per_day * keep.days(retention), per_day / DAY_S
        tables[table] = {"rows": rows, "bytes": rows * cost["bytes_per_row"], "rows_per_s": per_s}
    heartbeats_per_s = vms * HEARTBEATS_PER_VM_DAY / DAY_S
    return {
        "vms": vms,
        "heartbeats_per_s": heartbeats_per_s,
        "inserts": insert_load(heartbeats_per_s, vms * transitions_per_vm / 365 / DAY_S),
        "transitions_per_year": vms * transitions_per_vm,
        "tables": tables,
        "total_bytes": sum(t["bytes"] for t in tables.values()),
    }


def insert_load(heartbeats_per_s: float, transitions_per_s: float) -> dict[str, float]:
    """Inserts and new parts a second on each shard. A Distributed insert is split into one block per shard, so
    every batch reaches every shard: the rate per shard is that of the whole ingest, whatever the shard count."""
    per_worker = (heartbeats_per_s + transitions_per_s) / WORKERS
    batches = WORKERS * max(1 / BATCH_WAIT_S, per_worker / BATCH_ROWS)
    # a batch holds heartbeats (always, at these rates) and transitions when one arrived during it
    with_transitions = min(1.0, transitions_per_s / batches)
    parts = batches * (PARTS_PER_INSERT["heartbeats"] + with_transitions * PARTS_PER_INSERT["transitions"])
    return {"batches_per_s": batches, "parts_per_s_per_shard": parts, "rows_per_batch": per_worker * WORKERS / batches}


def _seconds(interval: str) -> int:
    return int(interval[:-1]) * {"s": 1, "m": 60, "h": 3600}[interval[-1]]


def query_load() -> dict[str, Any]:
    """Queries a second: each dashboard's panels every refresh per viewer, each alert rule's queries every
    evaluation interval (once, whoever looks)."""
    dashboards = {}
    for path in sorted(DASHBOARDS.glob("*.json")):
        model = json.loads(path.read_text(encoding="utf-8"))
        panels = sum(len(p.get("targets", [])) for p in model.get("panels", []) if p.get("type") != "row")
        variables = sum(1 for v in model.get("templating", {}).get("list", []) if v.get("type") == "query")
        refresh = _seconds(model["refresh"])
        dashboards[model["uid"]] = {
            "panels": panels,
            "variables": variables,
            "refresh_s": refresh,
            "per_viewer_qps": panels / refresh,
        }
    alerts = json.loads(ALERTS.read_text(encoding="utf-8"))
    alert_qps = sum(
        sum(1 for rule in group["rules"] for item in rule["data"] if "rawSql" in item.get("model", {}))
        / _seconds(group["interval"])
        for group in alerts["groups"]
    )
    every = sum(d["per_viewer_qps"] for d in dashboards.values())
    return {
        "dashboards": dashboards,
        "alert_qps": alert_qps,
        "qps": {str(v): v * every + alert_qps for v in VIEWERS},
        "largest_burst": max(d["panels"] for d in dashboards.values()),
    }


def _human(value: float, unit: str = "") -> str:
    for scale, suffix in ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(value) >= scale:
            return f"{value / scale:.1f}{suffix}{unit}"
    return f"{value:.0f} {unit}".rstrip() if value >= 10 else f"{value:.1f} {unit}".rstrip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--vms", type=int, default=2000, help="VMs loaded (default 2,000)")
    parser.add_argument("--heartbeat-days", type=int, default=2, help="days of minute heartbeats (default 2)")
    parser.add_argument("--transitions-per-vm", type=float, default=500, help="a VM's transitions a year (500)")
    parser.add_argument("--chunk", type=int, default=2000, help="events per INSERT (default 2,000)")
    parser.add_argument("--settle", type=float, default=120, help="seconds to wait at most for merges (120)")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args(argv)
    if args.vms < SET_SIZE or args.heartbeat_days < 1 or args.transitions_per_vm <= 0:
        print(
            f"sizing: --vms at least {SET_SIZE}, --heartbeat-days at least 1, --transitions-per-vm above 0",
            file=sys.stderr,
        )
        return 2
    events = max(20, int(args.vms * args.transitions_per_vm / (3 * SET_SIZE)))
    fleet = Fleet(args.vms, events, datetime.now(UTC).replace(microsecond=0))
    workdir = Path(tempfile.mkdtemp(prefix="sizing-"))
    client = connect(f"chdb://{workdir}")
    try:
        migrate(client, Target())
        took = load(client, fleet, args.heartbeat_days, args.chunk)
        settled = settle(client, args.settle)
        found = measure(client, "sevents")
        states = coverage_states(client)
    finally:
        client.close()
        shutil.rmtree(workdir, ignore_errors=True)
    costs = per_driver(found, fleet)
    fleets = [sized(costs, vms, args.transitions_per_vm) for vms in FLEETS]
    load_ = query_load()
    print(f"loaded {args.vms:,} VMs: {events:,} events over a year, {args.heartbeat_days} days of minute heartbeats")
    print("load: " + ", ".join(f"{k} {v:.0f} s" for k, v in took.items()) + f"; {settled}")
    print(f"{'table':22} {'rows':>11} {'B/row':>7} {'ratio':>6} {'parts':>6} {'parts.':>6}  rows per driver")
    for table, m in sorted(found.items(), key=lambda kv: -kv[1].compressed):
        if not m.rows:
            continue
        cost = costs.get(table)
        per = f"{cost['rows_per_driver']:.4g} per {cost['driver'][:-1]}" if cost else "not sized"
        print(
            f"{table:22} {m.rows:11,} {m.bytes_per_row:7.1f} {m.uncompressed / m.compressed:6.1f} "
            f"{m.parts_loaded:6} {m.partitions:6}  {per}"
        )
    print()
    print(f"{'fleet (VMs)':22} " + " ".join(f"{f['vms']:>12,}" for f in fleets))
    print(f"{'heartbeats a second':22} " + " ".join(f"{f['heartbeats_per_s']:>12,.0f}" for f in fleets))
    print(f"{'transitions a year':22} " + " ".join(f"{_human(f['transitions_per_year']):>12}" for f in fleets))
    for table in costs:
        print(f"{table + ' rows':22} " + " ".join(f"{_human(f['tables'][table]['rows']):>12}" for f in fleets))
    for table in costs:
        cells = " ".join(f"{_human(f['tables'][table]['bytes'], 'B'):>12}" for f in fleets)
        print(f"{table + ' bytes':22} {cells}")
    print(f"{'all tables, bytes':22} " + " ".join(f"{_human(f['total_bytes'], 'B'):>12}" for f in fleets))
    for key, label in (("batches_per_s", "batches a second"), ("rows_per_batch", "rows a batch")):
        print(f"{label:22} " + " ".join(f"{f['inserts'][key]:>12,.1f}" for f in fleets))
    print(
        f"{'parts a second/shard':22} " + " ".join(f"{f['inserts']['parts_per_s_per_shard']:>12,.1f}" for f in fleets)
    )
    print(f"(ingest: {WORKERS} workers, batches of at most {BATCH_ROWS:,} records or {BATCH_WAIT_S:g} s)")
    for name, state in states.items():
        print(
            f"heartbeat_hours as {name}: {state['bytes_per_row']:.1f} B per VM-hour (most {state['most_in_an_hour']})"
        )
    for uid, d in load_["dashboards"].items():
        print(f"dashboard {uid}: {d['panels']} panels every {d['refresh_s']} s, {d['variables']} variables on load")
    print(
        f"alerts: {load_['alert_qps']:.2f} queries a second; every dashboard open: "
        + ", ".join(f"{v} viewers {q:.1f} queries a second" for v, q in load_["qps"].items())
    )
    if args.json:
        document = {
            "args": {k: str(v) for k, v in vars(args).items()},
            "events": events,
            "load_s": took,
            "settled": settled,
            "measured": {t: {**asdict(m), "bytes_per_row": m.bytes_per_row} for t, m in found.items()},
            "costs": costs,
            "fleets": fleets,
            "queries": load_,
            "coverage_states": states,
        }
        args.json.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(as_command(main)())  # the embedded engine closed before the interpreter exits
