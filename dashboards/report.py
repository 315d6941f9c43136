"""``sevents-ingest report``: one self-contained HTML incident report (timeline, approval, impact, events).

The file needs nothing but a browser: charts are inline SVG, styles inline, no network. ``collect`` reads
ClickHouse (parameterised queries, reusing ``ingest.queries``); ``select`` applies the filters and
``render`` builds the page, both pure.
"""

# The lanes query is assembled from constants of ingest.queries; its values are bound server-side.
# ruff: noqa: S608

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dashboards.report_data import Filters, ReportData
from dashboards.report_html import render
from ingest import event_sql, queries
from sevents.cli_types import EventTypeError, add_event_type_flag, event_types
from sevents.errors import ExitCode
from sevents.version import add_version_flag

log = logging.getLogger(__name__)

LANES = queries.Query(
    "report_lanes",
    "Per affected VM: when each event of a window was Scheduled and Started on it, its set, and how its downtime "
    "was detected",
    """
SELECT v.event_id AS event_id, v.event_type AS event_type, v.vm_name AS vm_name, v.fault_domain AS fault_domain,
       v.fault_set AS fault_set, v.fault_set_id AS fault_set_id, v.first_seen_at AS first_seen_at,
       v.started_at AS started_at, v.ended_at AS ended_at, v.outcome AS outcome,
       v.observed_impact_s AS observed_impact_s, d.detected_by AS detected_by
FROM """
    + event_sql.scoped(event_sql.WINDOW_IDS)
    + """ AS v
LEFT JOIN (
    -- how each VM measured its downtime for the event (pause, reboot); none began a day before the window
    SELECT event_id, vm_id, arrayStringConcat(arraySort(groupUniqArray(detected_by)), ', ') AS detected_by
    FROM impacts FINAL
    WHERE event_id != '' AND began_at >= {since:DateTime64(3, 'UTC')} - INTERVAL 1 DAY
    GROUP BY event_id, vm_id
) AS d ON d.event_id = v.event_id AND d.vm_id = v.vm_id
WHERE v.affects_this_vm AND v.event_id IN (
    SELECT event_id FROM """
    + event_sql.since(event_sql.WINDOW_IDS, rows_after=event_sql.WINDOW_ROWS_AFTER)
    + """
    WHERE first_seen_at >= {since:DateTime64(3, 'UTC')} AND first_seen_at < {until:DateTime64(3, 'UTC')})
ORDER BY fault_set, fault_domain, vm_name, first_seen_at, event_id
""",
    {"since": "DateTime64", "until": "DateTime64"},
)


def _in_domain(lane: dict[str, Any], f: Filters) -> bool:
    # --fault-set and --fault-domain together name one domain of one set ("web" and 0: web / FD 0)
    if f.fault_sets and lane["fault_set"] not in f.fault_sets:
        return False
    return not f.fault_domains or lane["fault_domain"] in f.fault_domains


def _event_kept(event: dict[str, Any], f: Filters, lanes_of: dict[str, list[dict[str, Any]]]) -> bool:
    if f.event_types and event["event_type"] not in f.event_types:
        return False
    if f.event_ids and event["event_id"] not in f.event_ids:
        return False
    lanes = lanes_of.get(event["event_id"], [])
    if (f.fault_sets or f.fault_domains) and not any(_in_domain(lane, f) for lane in lanes):
        return False
    return not f.vms or any(lane["vm_name"] in f.vms for lane in lanes)


def select(data: ReportData) -> ReportData:
    """Only the events and lanes the filters ask for (pure)."""
    f = data.filters
    lanes_of: dict[str, list[dict[str, Any]]] = {}
    for lane in data.lanes:
        lanes_of.setdefault(lane["event_id"], []).append(lane)
    events = [e for e in data.events if _event_kept(e, f, lanes_of)]
    kept = {e["event_id"] for e in events}
    lanes = [
        lane
        for lane in data.lanes
        if lane["event_id"] in kept and (not f.vms or lane["vm_name"] in f.vms) and _in_domain(lane, f)
    ]
    unannounced = [d for d in data.unannounced if (not f.vms or d["vm_name"] in f.vms)]
    approvals = [a for a in data.approvals if a["event_id"] in kept and a["decision"] == "approved"]
    return ReportData(f, events, lanes, unannounced, approvals)


def collect(client: Any, filters: Filters, database: str = "sevents") -> ReportData:
    """Read the window's events and per-VM lanes from ClickHouse, then apply the filters."""
    window = {"since": filters.since, "until": filters.until}
    events = queries.run(client, queries.EVENTS_IN_WINDOW, database, **window).dicts()
    lanes = queries.run(client, LANES, database, **window).dicts()
    downtime = queries.run(client, queries.DOWNTIME, database, **window).dicts()
    # an approval comes after its event's first observation, and within the longest notice IMDS gives
    decided = {"since": filters.since, "until": filters.until + APPROVAL_REACH}
    approvals = queries.run(client, queries.APPROVALS, database, **decided).dicts()
    return select(ReportData(filters, events, lanes, [d for d in downtime if not d["event_id"]], approvals))


APPROVAL_REACH = timedelta(days=8)  # IMDS announces at most about 7 days ahead
_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_moment(text: str, now: datetime) -> datetime:
    """``now``, a duration before now (``30m``, ``24h``, ``7d``) or ISO 8601 (naive means UTC)."""
    text = text.strip()
    if text == "now":
        return now
    relative = _RELATIVE.match(text)
    if relative:
        return now - timedelta(seconds=int(relative.group(1)) * _UNIT_S[relative.group(2)])
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use ISO 8601 (2026-11-21T10:00:00Z), now, or 30m/24h/7d") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="sevents-report",
        description="Write one self-contained HTML incident report (timeline, approval latency, impact, "
        "event table) for the events first seen in a window. Opens offline in any browser.",
        epilog="exit status: 0 written, 1 ClickHouse failed or --out cannot be written, "
        "2 invalid configuration or arguments (a time that is not one, --since not before --until, "
        "an unknown --event-type).",
    )
    add_version_flag(parser)
    parser.add_argument("--config", type=Path, help="TOML file with an [ingest] table, as for the other commands")
    parser.add_argument(
        "--clickhouse",
        help="chdb:///abs/dir (embedded) or https://user@host:8443; else from the ingest settings "
        "(SEVENTS_CLICKHOUSE, --config). Password: SEVENTS_CLICKHOUSE_PASSWORD or clickhouse_password_file",
    )
    parser.add_argument("--database", help="database holding the sevents schema (default sevents)")
    parser.add_argument("--since", default="24h", help="window start: ISO 8601, or 30m/24h/7d before now")
    parser.add_argument("--until", default="now", help="window end: ISO 8601, now, or a duration before now")
    add_event_type_flag(parser, "only this event type; repeatable or comma-separated (default: every type)")
    parser.add_argument("--vm", action="append", default=[], help="only events affecting this VM (repeatable)")
    parser.add_argument(
        "--fault-set",
        action="append",
        default=[],
        help="only this set: a scale set, or an availability set by its label (the common prefix of its VM "
        "names, e.g. web); with --fault-domain, that domain of that set (repeatable)",
    )
    parser.add_argument(
        "--fault-domain", action="append", type=int, default=[], help="only this fault domain number (repeatable)"
    )
    parser.add_argument("--event-id", action="append", default=[], help="only this EventId (repeatable)")
    parser.add_argument(
        "--out", type=Path, default=Path("sevents-report.html"), help="HTML file to write (default sevents-report.html)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``sevents-report`` (and ``sevents-ingest report``); exit codes from sevents.errors."""
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)  # --help and --version need no ClickHouse

    from ingest.clickhouse import CLIENT_ERRORS, connect
    from ingest.errors import TargetError
    from ingest.settings import load
    from sevents.errors import ConfigError, exit_code

    try:
        types = event_types(args.event_type) if args.event_type is not None else ()
    except EventTypeError as error:
        print(f"sevents-report: {error}", file=sys.stderr)
        return int(ExitCode.INVALID)
    now = datetime.now(UTC)
    try:
        filters = Filters(
            since=parse_moment(args.since, now),
            until=parse_moment(args.until, now),
            event_types=types,
            vms=tuple(args.vm),
            fault_domains=tuple(args.fault_domain),
            fault_sets=tuple(args.fault_set),
            event_ids=tuple(args.event_id),
        )
    except ValueError as error:
        parser.error(str(error))
    if filters.since >= filters.until:
        parser.error("--since must be before --until")
    try:
        flags = {"clickhouse": args.clickhouse, "database": args.database}
        settings = load(file=args.config, env=os.environ, flags=flags)
        client = connect(settings.clickhouse, password=settings.password(), create=False)
        try:
            data = collect(client, filters, settings.database)
        finally:
            client.close()
    except (ConfigError, TargetError) as error:
        print(f"sevents-report: {error}", file=sys.stderr)
        return exit_code(error)
    except CLIENT_ERRORS as error:
        hint = " (run `sevents-ingest migrate` or check --database)" if "UNKNOWN_DATABASE" in str(error) else ""
        print(f"sevents-report: reading database {settings.database} failed{hint}: {error}", file=sys.stderr)
        return exit_code(error)
    html = render(data, generated_at=now)
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(html, encoding="utf-8")
    except OSError as error:
        print(f"sevents-report: cannot write --out {args.out}: {error.strerror or error}", file=sys.stderr)
        return exit_code(error)
    log.info("report written", extra={"path": str(args.out), "events": len(data.events)})
    print(f"wrote {args.out} ({len(data.events)} events, {len(data.lanes)} VM lanes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
