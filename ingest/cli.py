"""``sevents-ingest``: migrate the schema, run the ingest worker, audit the history, render reports."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ingest import event_sql, feed_wiring, queries, retention
from ingest.clickhouse import CLIENT_ERRORS, connect, is_embedded
from ingest.errors import IngestError
from ingest.migrate import migrate
from ingest.output import FORMATS, render
from ingest.readpath import ReadServer
from ingest.settings import IngestSettings, load
from ingest.source_outbox import resolve
from ingest.wiring import build, open_client
from sevents import prometheus
from sevents.cli_types import EventTypeError, add_event_type_flag, event_types
from sevents.config import error_lines
from sevents.errors import EXIT_STATUS, ConfigError, ExitCode, exit_code
from sevents.logs import setup_logging
from sevents.telemetry import install_tracer_provider, make_meter_provider
from sevents.version import add_version_flag

log = logging.getLogger("ingest")

DISRUPTIVE_TYPES = ("Reboot", "Redeploy")  # audit disruptive without --event-type
READY_MAX_AGE_S = 60.0  # /readyz: how long ClickHouse may refuse writes before the ingest says it is not ready

EPILOG = """\
examples:
  sevents-ingest run --source 'outbox:/var/lib/sevents-collector' --clickhouse chdb:///var/lib/sevents/ch
  sevents-ingest run --source eventhubs --config /etc/sevents/ingest.toml      # workers of a consumer group
  sevents-ingest run --source eventhubs --feed-eventhub scheduled-events-feed   # and Azure's central feed beside
  sevents-ingest audit disruptive --since 7d --clickhouse chdb:///var/lib/sevents/ch
  sevents-ingest audit downtime --since 24h --format csv --clickhouse https://reader@ch.example:8443
  sevents-ingest report --since 24h --out report.html --clickhouse chdb:///var/lib/sevents/ch
  sevents-ingest reconcile --subscription <id> --clickhouse https://writer@ch.example:8443   # Azure's inventory
  sevents-ingest audit coverage --format json      # inventory VMs with a reporting/silent/retired collector or none

targets: --clickhouse chdb:///abs/dir (embedded, one process per directory; while `run` holds it, audit and
report ask it) or https://user@host:8443 (password from SEVENTS_CLICKHOUSE_PASSWORD or
clickhouse_password_file, never a flag).
Every setting can also come from --config FILE ([ingest] table) or SEVENTS_<NAME> environment variables.

"""
MIGRATE_EPILOG = """\
examples:
  sevents-ingest migrate --clickhouse chdb:///var/lib/sevents/ch
  sevents-ingest migrate --clickhouse https://admin@ch.example:8443 --cluster main

"""
MIGRATE_EPILOG += textwrap.fill(EXIT_STATUS.replace("(ClickHouse,", "(ClickHouse unreachable or in use,"), 100) + "\n"
EPILOG += EXIT_STATUS.replace("(ClickHouse,", "(ClickHouse unreachable, in use or without schema,") + "\n"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="TOML file with an [ingest] table")
    parser.add_argument(
        "--clickhouse", help="chdb:///abs/dir or https://user@host:8443 (default chdb:///var/lib/sevents/clickhouse)"
    )
    parser.add_argument("--database", help="database name (default sevents)")
    parser.add_argument("--cluster", help="cluster name: Replicated + Distributed tables, ON CLUSTER DDL")
    parser.add_argument(
        "--log-level", type=str.lower, choices=["debug", "info", "warning", "error"], help="any case (default info)"
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="sevents-ingest",
        description="Load collector records into ClickHouse and query the maintenance history.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version_flag(top)
    sub = top.add_subparsers(dest="command", required=True)

    # Its own epilog, kept as written (the command's examples reflowed into one paragraph read as garbage).
    p = sub.add_parser(
        "migrate",
        allow_abbrev=False,
        help="create or update the schema (idempotent)",
        description="Create the database and tables, or apply the migrations they lack; running it again\n"
        "changes nothing. `run` migrates at start too, unless --no-migrate.",
        epilog=MIGRATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p)

    p = sub.add_parser(
        "run", allow_abbrev=False, help="ingest records until stopped (SIGTERM/SIGINT) or, with --until-idle, drained"
    )
    _common(p)
    p.add_argument(
        "--source",
        help="outbox:DIR_OR_GLOB[,DIR_OR_GLOB...] (collector state dirs), eventhubs, or feed (the central feed alone)",
    )
    p.add_argument("--until-idle", action="store_true", help="drain every outbox, then exit")
    p.add_argument("--batch-max-records", type=int, help="records per insert at most (default 10000)")
    p.add_argument("--batch-max-wait", type=float, help="seconds a partial batch waits for more (default 1)")
    p.add_argument("--no-migrate", action="store_true", help="do not apply migrations at start")
    p.add_argument("--metrics-addr", metavar="HOST:PORT", help="serve /metrics for Prometheus there, e.g. 0.0.0.0:9465")
    p.add_argument(
        "--clickhouse-lock-wait",
        type=float,
        help="seconds to wait for an embedded directory another process holds, then exit 1 (default 300)",
    )
    # the same names as the collector's (and the settings'); secrets (connection strings) come from files or the
    # environment only, never a command line
    p.add_argument("--eventhubs-namespace", help="eventhubs source: the namespace, fully qualified (managed identity)")
    p.add_argument(
        "--eventhubs-name", help="eventhubs source: the event hub (default scheduled-events, as Bicep makes it)"
    )
    p.add_argument("--eventhubs-consumer-group", help="eventhubs source: the consumer group (default sevents-ingest)")
    p.add_argument(
        "--checkpoint-blob-url", help="eventhubs source: https://ACCOUNT.blob.core.windows.net (managed identity)"
    )
    p.add_argument(
        "--checkpoint-container", help="eventhubs source: the checkpoints' blob container (default sevents-checkpoints)"
    )
    p.add_argument(
        "--feed-eventhub",
        metavar="NAME",
        help="also read Microsoft's central Scheduled Events feed from this Event Hub (Event Grid's "
        "ScheduledEventEmitted, Event Grid schema or CloudEvents; a hub of its own, same namespace) into "
        "azure_scheduled_events",
    )
    p.add_argument("--feed-consumer-group", help="the feed hub's consumer group (default sevents-ingest)")
    p.add_argument(
        "--eventhubs-load-balancing-interval",
        type=float,
        metavar="SECONDS",
        help="eventhubs source: seconds between partition claim/renew rounds (default 10)",
    )
    p.add_argument(
        "--eventhubs-ownership-expiry",
        type=float,
        metavar="SECONDS",
        help="eventhubs source: seconds a dead worker's partitions stay claimed before others take them "
        "over; longer than the load balancing interval (default 60)",
    )

    p = sub.add_parser(
        "reconcile",
        allow_abbrev=False,
        help="read Azure Resource Graph (inventory, annotations, central scheduled events) into ClickHouse",
        description="Every interval (or once), read the subscriptions' VM inventory, Resource Health annotation "
        "changes and central scheduled events from Azure Resource Graph with a managed or workload identity "
        "(Reader), and store what is new or changed (ingest/README.md, Reconcile).",
    )
    _common(p)
    p.add_argument(
        "--subscription",
        action="append",
        metavar="ID",
        help="subscription id to read; repeatable or comma-separated (default: reconcile_subscriptions)",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit (default: a pass every interval)")
    p.add_argument("--interval", type=float, metavar="SECONDS", help="seconds between passes (default 900)")
    p.add_argument(
        "--arm-endpoint",
        metavar="URL",
        help="Azure Resource Manager of the cloud (default https://management.azure.com); plain http only on "
        "a loopback address (a test server)",
    )
    p.add_argument("--no-migrate", action="store_true", help="do not apply migrations at start")

    p = sub.add_parser(
        "coordinate",
        allow_abbrev=False,
        help="approve events naming several VMs once their collectors report them ready (ingest/coordinator.py)",
        description='Watch the collectors\' readiness records ([approval] multi_vm = "coordinator") and approve '
        "each event through Azure's Maintenance API once its VMs are ready, under the [coordinator] table of "
        "--config (ingest/README.md, Coordinator).",
    )
    _common(p)
    p.add_argument("--once", action="store_true", help="one look at the recent decisions, then exit")
    p.add_argument("--name", help="this coordinator in its records and logs (default coordinator@HOST:PID)")
    p.add_argument("--no-migrate", action="store_true", help="do not apply migrations at start")

    p = sub.add_parser("audit", allow_abbrev=False, help="answer audit questions from the history")
    audit = p.add_subparsers(dest="question", required=True)
    a = audit.add_parser("vm", allow_abbrev=False, help="what happened to a VM between two times")
    a.add_argument("vm", nargs="?", help="VM name or vmId (or --vm, as sevents-report spells it)")
    a.add_argument("--vm", dest="vm_flag", metavar="VM", help="the same as the positional VM")
    _window(a)
    a = audit.add_parser("event", allow_abbrev=False, help="everything an EventId touched, per fault domain of its set")
    a.add_argument("event_id")
    a.add_argument("--per-vm", action="store_true", help="one row per VM (with its set) instead of per fault domain")
    a = audit.add_parser(
        "disruptive", allow_abbrev=False, help="Reboot and Redeploy events in a window: approval latency, impact"
    )
    _window(a)
    add_event_type_flag(
        a, "only this event type; repeatable or comma-separated (default Reboot,Redeploy)", old=("--types",)
    )
    a = audit.add_parser(
        "user-waits",
        allow_abbrev=False,
        help="user-initiated events (EventSource User) in a window, per VM: how long each waited for its approval "
        "or start (polling switches Scheduled Events on; [approval] approve_user_initiated makes it ~0)",
    )
    _window(a)
    a = audit.add_parser("silent", allow_abbrev=False, help="VMs whose collector went quiet or whose last poll failed")
    a.add_argument(
        "--threshold",
        type=_positive_int,
        default=event_sql.SILENT_AFTER_S,
        help=f"seconds without a heartbeat (default {event_sql.SILENT_AFTER_S}: the dashboards' and the alert's)",
    )
    a = audit.add_parser("events", allow_abbrev=False, help="every event first seen in a window")
    _window(a)
    a = audit.add_parser(
        "fault-domains", allow_abbrev=False, help="approval latency and impact per fault domain of each set in a window"
    )
    _window(a)
    a = audit.add_parser(
        "downtime",
        allow_abbrev=False,
        help="downtime the VMs measured on themselves in a window (pauses and reboots), announced or not",
    )
    _window(a)
    audit.add_parser("counts", allow_abbrev=False, help="rows per table after deduplication")
    audit.add_parser(
        "coverage",
        allow_abbrev=False,
        help="inventory VMs (sevents-ingest reconcile) with a reporting, silent or retired collector, or none, "
        "per subscription, resource group and set",
    )
    a = audit.add_parser(
        "gaps",
        allow_abbrev=False,
        help="Resource Health downtime annotations (reconcile) with no scheduled event seen before them, and "
        "annotations beside the event they followed",
    )
    _window(a)
    for choice in audit.choices.values():
        _common(choice)
        choice.add_argument("--format", choices=FORMATS, default="table", help="table (default), json or csv")

    sub.add_parser(
        "report",
        allow_abbrev=False,
        help="render the HTML incident report (dashboards.report); see report --help",
        add_help=False,
    )
    return top


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _window(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", default="24h", help="ISO 8601 time or an age like 90m, 24h, 7d (default 24h)")
    p.add_argument("--until", default="now", help="ISO 8601 time, an age, or now (default)")


def parse_when(text: str, now: datetime) -> datetime:
    """``now``, an age (``90s``, ``15m``, ``24h``, ``7d``) before now, or an ISO 8601 time (UTC if no zone)."""
    if text == "now":
        return now
    match = re.fullmatch(r"(\d+)([smhd])", text)
    if match:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        try:
            moment = now - timedelta(**{unit: int(match.group(1))})
        except OverflowError:
            moment = datetime.min.replace(tzinfo=UTC)
        if moment.year < 1970:  # before any record can be (contract.TIME_YEARS): an age that long is a mistake
            raise ValueError(f"{text!r} reaches back before 1970, before any record; use a shorter age or a time")
        return moment
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use ISO 8601 (2026-11-21T10:00:00Z), now, or 90m/24h/7d") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _settings(args: argparse.Namespace) -> IngestSettings:
    flags = {
        name: getattr(args, name, None)
        for name in (
            "clickhouse",
            "database",
            "cluster",
            "log_level",
            "source",
            "batch_max_records",
            "batch_max_wait",
            "clickhouse_lock_wait",
            "eventhubs_load_balancing_interval",
            "eventhubs_ownership_expiry",
            "eventhubs_namespace",
            "eventhubs_name",
            "eventhubs_consumer_group",
            "checkpoint_blob_url",
            "checkpoint_container",
            "metrics_addr",
            "feed_eventhub",
            "feed_consumer_group",
        )
    }
    flags["reconcile_interval"] = getattr(args, "interval", None)
    flags["reconcile_arm_endpoint"] = getattr(args, "arm_endpoint", None)
    subscriptions = getattr(args, "subscription", None)
    if subscriptions:
        flags["reconcile_subscriptions"] = tuple(p.strip() for a in subscriptions for p in a.split(",") if p.strip())
    return load(file=args.config, env=os.environ, flags=flags)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "report":
        return _report(argv[1:])
    args = parser().parse_args(argv)
    if getattr(args, "question", None) == "vm":
        named = {v for v in (args.vm, args.vm_flag) if v}
        if len(named) != 1:
            print("sevents-ingest: audit vm: name one VM, as VM or --vm VM", file=sys.stderr)
            return 2
        args.vm = named.pop()
    try:
        settings = _settings(args)
    except ConfigError as error:
        print(error_lines("sevents-ingest", error), file=sys.stderr)
        return exit_code(error)
    setup_logging(settings.log_level)
    # The ClickHouse driver and urllib3 log a warning for the very failure our own one-line error then reports.
    for driver in ("clickhouse_connect", "urllib3"):
        logging.getLogger(driver).setLevel(logging.ERROR)
    try:
        if args.command == "migrate":
            client = open_client(settings)
            applied = migrate(client, settings.target)
            changed = retention.apply(client, settings.target, settings.retention)
            print(f"schema up to date; applied {applied or 'nothing'}; retention changed on {changed or 'nothing'}")
            return 0
        if args.command == "run":
            return _run(settings, args)
        if args.command == "reconcile":
            return _reconcile(settings, args)
        if args.command == "coordinate":
            return _coordinate(settings, args)
        return _audit(settings, args)
    except IngestError as error:
        print(f"sevents-ingest: {error}", file=sys.stderr)
        return exit_code(error)


def _stop_on_signals() -> threading.Event:
    """The event a long-running command stops on: set by SIGTERM or SIGINT (logged), never a traceback."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def _run(settings: IngestSettings, args: argparse.Namespace) -> int:
    stop = _stop_on_signals()
    metrics_server = None
    if settings.metrics_addr:
        try:
            metrics_server = prometheus.serve(settings.metrics_addr)
        except OSError as error:
            print(f"sevents-ingest: cannot serve /metrics on {settings.metrics_addr}: {error}", file=sys.stderr)
            return int(ExitCode.FAILED)
    if args.until_idle and settings.source not in ("eventhubs", "feed"):
        # A drain of nothing is a typo, not a success: every named outbox must exist.
        missing = [spec for spec in settings.outbox_specs() if not resolve([spec])]
        if missing:
            print(
                f"sevents-ingest: no outbox matches {', '.join(missing)} (give a collector's state directory, its "
                "outbox.sqlite, or a glob of them)",
                file=sys.stderr,
            )
            return int(ExitCode.INVALID)
    provider = make_meter_provider("sevents-ingest", readers=[] if metrics_server is None else [metrics_server.reader])
    tracing = install_tracer_provider("sevents-ingest")  # spans over OTLP only when an endpoint is set
    try:
        if settings.source == "feed":  # the central feed alone (ingest/feed.py)
            with _answering_reads(settings):
                return feed_wiring.run_feed(
                    settings, open_client(settings, stop), stop, apply_migrations=not args.no_migrate
                )
        pipeline = build(
            settings, stop, meter_provider=provider, until_idle=args.until_idle, apply_migrations=not args.no_migrate
        )
        handler = pipeline.handler  # /healthz: the process answers; /readyz: ClickHouse takes its writes
        prometheus.HEALTH.watch(live=lambda _: "", ready=lambda age: handler.store_problem(age or READY_MAX_AGE_S))
        log.info("ingest running", extra={"source": settings.source, "until_idle": args.until_idle})
        with _answering_reads(settings), feed_wiring.beside(settings, pipeline.client, stop):
            pipeline.run(stop)
        log.info("ingest stopped", extra={"stored": pipeline.handler.stored})
    finally:
        if tracing is not None:
            tracing.shutdown()  # sends what is buffered
        provider.shutdown()
        if metrics_server is not None:
            metrics_server.close()
    return 0


def _reconcile(settings: IngestSettings, args: argparse.Namespace) -> int:
    from ingest import reconcile  # the Azure SDKs load only for this command

    stop = _stop_on_signals()
    return reconcile.run(settings, stop, once=args.once, apply_migrations=not args.no_migrate)


def _coordinate(settings: IngestSettings, args: argparse.Namespace) -> int:
    from ingest import coordinator, coordinator_settings  # the Azure SDKs load only for this command

    try:
        own = coordinator_settings.load(file=args.config, env=os.environ, flags={"name": args.name})
    except ConfigError as error:
        print(error_lines("sevents-ingest", error), file=sys.stderr)
        return exit_code(error)
    stop = _stop_on_signals()
    client = open_client(settings, stop)
    if not args.no_migrate:
        migrate(client, settings.target)
    return coordinator.run(own, client, settings.database, stop, once=args.once)


@contextlib.contextmanager
def _answering_reads(settings: IngestSettings) -> Iterator[None]:
    """While the ingest holds an embedded directory, audit and report ask it (ingest.readpath)."""
    if not is_embedded(settings.clickhouse):
        yield
        return
    directory = Path(urlparse(settings.clickhouse).path)
    server = ReadServer(directory, connect(settings.clickhouse))
    try:
        yield
    finally:
        server.close()


def _audit(settings: IngestSettings, args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    q = args.question
    params: dict[str, Any] = {}
    if q in ("vm", "disruptive", "events", "fault-domains", "downtime", "gaps", "user-waits"):
        try:
            params = {"since": parse_when(args.since, now), "until": parse_when(args.until, now)}
        except ValueError as error:
            print(f"sevents-ingest: bad --since/--until: {error}", file=sys.stderr)
            return 2
        if params["since"] >= params["until"]:
            print(f"sevents-ingest: --since {args.since} must be before --until {args.until}", file=sys.stderr)
            return 2
    if q == "vm":
        query, params = queries.VM_HISTORY, {**params, "vm": args.vm}
    elif q == "event":
        query = queries.EVENT_VMS if args.per_vm else queries.EVENT_BY_FAULT_DOMAIN
        params = {"event_id": args.event_id}
    elif q == "disruptive":
        query = queries.DISRUPTIVE_EVENTS
        try:
            params["types"] = list(event_types(args.event_type or DISRUPTIVE_TYPES))
        except EventTypeError as error:
            print(f"sevents-ingest: {error}", file=sys.stderr)
            return int(ExitCode.INVALID)
    elif q == "user-waits":
        query = queries.USER_WAITS
    elif q == "silent":
        query, params = queries.SILENT_VMS, {"now": now, "threshold_s": args.threshold}
    elif q == "events":
        query = queries.EVENTS_IN_WINDOW
    elif q == "fault-domains":
        query = queries.FAULT_DOMAIN_SUMMARY
    elif q == "downtime":
        query = queries.DOWNTIME
    elif q == "coverage":
        query = queries.COVERAGE
    elif q == "gaps":
        query = queries.GAPS
    else:
        query = queries.COUNTS
    try:
        result = queries.run(open_client(settings, create=False), query, settings.database, **params)
    except CLIENT_ERRORS as error:
        # A missing database is the usual first-hour mistake (wrong --database, nothing ingested yet): say so.
        hint = " (run `sevents-ingest migrate` or check --database)" if "UNKNOWN_DATABASE" in str(error) else ""
        print(f"sevents-ingest: audit {q} failed on database {settings.database}{hint}: {error}", file=sys.stderr)
        return 1
    if args.format == "table":
        print(f"# {query.title}")
    sys.stdout.write(render(result, args.format))
    if not result.rows and q in ("vm", "event"):
        # An empty answer about one named thing is usually a typo or a window too short; stderr keeps json/csv clean.
        if q == "vm":
            hint = f"VM {args.vm!r} between {args.since} and {args.until}; check the VM name or vmId and --since"
        else:
            hint = f"EventId {args.event_id!r}; check the id (audit events lists them)"
        print(f"sevents-ingest: no records for {hint}", file=sys.stderr)
    return 0


def _report(argv: list[str]) -> int:
    # The report belongs to the dashboards package, which reads through the ingest's queries: importing it here
    # would point an arrow back up. The command stays for users and runs the report's own entry point.
    command = [sys.executable, "-m", "dashboards.report", *argv]
    return subprocess.run(command, check=False).returncode  # noqa: S603 (our own interpreter and module)


if __name__ == "__main__":
    sys.exit(main())
