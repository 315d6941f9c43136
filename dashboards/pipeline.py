"""Pipeline health: collector outbox depth and heartbeat age, ingest lag and write timing, dead letters."""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any

from dashboards import filters as f
from dashboards import grafana as g
from dashboards.filters import DB

LAG = "dateDiff('millisecond', observed_at, ingested_at) / 1000"
# Heartbeats by the hour (the rollup); a panel never draws finer than that.
HOURLY = "toStartOfInterval(hour, toIntervalSecond(greatest($__interval_s, 3600)))"
IN_HOURS = "hour >= toStartOfHour($__fromTime) AND hour <= $__toTime"
HEARTBEATS_PER_HOUR = 60
# A VM-hour's heartbeats: the minutes of the hour that had one (migration 0020), or the count of the heartbeat ids
# that rows older than it kept (0026), whichever counts more (an hour the raw heartbeats held then has both, whole).
# Merging the sets of ids instead built a hash set per VM-hour, empty in every row since 0020: two thirds of the
# coverage panel's time.
HEARTBEATS_RECEIVED = "greatest(bitCount(groupBitOr(heartbeat_minutes)), max(ids_counted))"
# Records stored this long after they were observed still show in "Insert timing" (an outbox drained late).
LATE_DAYS = 7


def _vm_hours(columns: str, vms: str) -> str:
    """One row per VM-hour of the range, of the VMs ``vms`` selects: ``hour``, ``vm_key`` and ``columns``
    (aggregates over that VM-hour's rows of heartbeat_hours).

    VM-hours are grouped by vm_key, the number migration 0027 gives each VM (a hash of its id, lowered): grouping by
    the id itself hashed a 36-character string per VM-hour, a third of "Heartbeat coverage" at a year of 20,000 VMs.
    """
    return (
        f"(SELECT hour, vm_key, {columns} FROM {DB}.heartbeat_hours WHERE {IN_HOURS} AND {vms} GROUP BY hour, vm_key)"
    )


def panels() -> list[g.Panel | g.Row]:
    vms = f.vm_filter()
    return [
        g.Row("Collectors"),
        g.Panel(
            "Outbox depth",
            "timeseries",
            f"SELECT {HOURLY} AS time, max(depth) AS max_depth, round(avg(depth), 1) AS mean_vm_max_depth "
            f"FROM {_vm_hours('max(max_outbox_depth) AS depth', vms)} GROUP BY time ORDER BY time",
            format=g.FORMAT_TIME_SERIES,
            width=12,
            description="Records waiting in collector outboxes, from heartbeats (hourly): growing means shipping "
            "is stuck. Mean: of each VM's deepest outbox in the hour.",
        ),
        g.Panel(
            "Heartbeat coverage",
            "timeseries",
            f"SELECT {HOURLY} AS time, uniqExact(vm_key) AS vms_reporting, "
            f"round(100 * sum(received) / (count() * {HEARTBEATS_PER_HOUR}), 1) AS coverage_pct "
            f"FROM {_vm_hours(f'{HEARTBEATS_RECEIVED} AS received', vms)} GROUP BY time ORDER BY time",
            format=g.FORMAT_TIME_SERIES,
            width=12,
            description="VMs that sent at least one heartbeat per hour, and the share of those VMs' minutes that "
            "had a heartbeat (collectors send one a minute).",
        ),
        g.Panel(
            "Heartbeat age",
            "table",
            "SELECT vm_name, scale_set, ifNull(toString(fault_domain), '') AS fault_domain, location, "
            "state, last_heartbeat_at AS last_heartbeat, toInt64(silent_for_s) AS age_s, "
            "last_poll_ok, last_poll_error, outbox_depth, collector_version, api_version "
            f"FROM {DB}.vm_status WHERE {vms} ORDER BY state = 'retired', age_s DESC, vm_name LIMIT 1000",
            width=12,
            description="The 1,000 collectors heard from longest ago (retired VMs last); choose a VM variable to see "
            "others.",
            field_config={
                "overrides": [
                    {
                        "matcher": {"id": "byName", "options": "age_s"},
                        "properties": [
                            {"id": "custom.cellOptions", "value": {"type": "color-background"}},
                            {
                                "id": "thresholds",
                                "value": {
                                    "mode": "absolute",
                                    "steps": [
                                        {"color": "green", "value": None},
                                        {"color": "red", "value": f.SILENT_AFTER_S},
                                    ],
                                },
                            },
                        ],
                    }
                ]
            },
        ),
        g.Panel(
            "Poll errors and drops",
            "table",
            "SELECT vm_name, 'poll error' AS kind, key AS reason, value AS count "
            f"FROM {DB}.heartbeats_latest FINAL ARRAY JOIN mapKeys(poll_errors) AS key, "
            f"mapValues(poll_errors) AS value WHERE {vms} AND value > 0 "
            "UNION ALL SELECT vm_name, 'drop' AS kind, key AS reason, value AS count "
            f"FROM {DB}.heartbeats_latest FINAL ARRAY JOIN mapKeys(drops) AS key, "
            f"mapValues(drops) AS value WHERE {vms} AND value > 0 ORDER BY count DESC, vm_name, reason",
            width=24,
            height=7,
            description="Since each collector started (its latest heartbeat). Drops are records lost, by reason.",
        ),
        g.Row("Ingest"),
        g.Panel(
            "Ingest lag (observed on the VM to stored in ClickHouse)",
            "timeseries",
            # quantiles interpolate: rounded to the lag's own millisecond, a p99 never shows above the max by 1e-15
            f"SELECT $__timeInterval(observed_at) AS time, round(quantile(0.5)({LAG}), 3) AS p50_s, "
            f"round(quantile(0.99)({LAG}), 3) AS p99_s, max({LAG}) AS max_s FROM {DB}.transitions_by_time "
            f"WHERE $__timeFilter(observed_at) AND {vms} GROUP BY time ORDER BY time",
            format=g.FORMAT_TIME_SERIES,
            width=12,
            unit="s",
        ),
        g.Panel(
            "Insert timing (transitions stored per interval of ingest time)",
            "timeseries",
            "SELECT $__timeInterval(ingested_at) AS time, count() AS rows, "
            "dateDiff('millisecond', min(ingested_at), max(ingested_at)) / 1000 AS write_spread_s "
            f"FROM {DB}.transitions_by_time WHERE observed_at >= $__fromTime - INTERVAL {LATE_DAYS} DAY "
            "AND $__timeFilter(ingested_at) GROUP BY time ORDER BY time",
            format=g.FORMAT_TIME_SERIES,
            width=12,
            description="Rows stored per interval and how spread their write times were. The ingest's "
            "per-insert latency histogram is an OpenTelemetry metric (sevents.ingest.insert.duration).",
        ),
        g.Row("Dead letters"),
        g.Panel(
            "Dead letters",
            "timeseries",
            "SELECT $__timeInterval(received_at) AS time, source, count() AS dead_letters "
            f"FROM {DB}.dead_letters FINAL WHERE $__timeFilter(received_at) GROUP BY time, source ORDER BY time",
            format=g.FORMAT_TIME_SERIES,
            width=10,
            field_config={"defaults": {"custom": {"drawStyle": "bars"}}},
        ),
        g.Panel(
            "Latest dead letters",
            "table",
            "SELECT received_at, source, position, error, payload_size, substring(payload, 1, 200) AS payload_head "
            f"FROM {DB}.dead_letters FINAL WHERE $__timeFilter(received_at) "
            "ORDER BY received_at DESC, position LIMIT 200",
            width=14,
        ),
    ]


def build() -> dict[str, Any]:
    return g.dashboard(
        "sevents-pipeline",
        "Pipeline health",
        panels(),
        f.variables(),
        description="Is the pipeline keeping up: outboxes, heartbeats, ingest lag and timing, dead letters.",
        time_from="now-6h",
        refresh="30s",
    )
