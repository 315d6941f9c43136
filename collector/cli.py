"""``sevents-collector``: poll once, run the daemon, or show the outbox status."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from collector.agent import AgentError
from collector.approval import ApprovalPolicy
from collector.decode import DecodeError
from collector.imds import ImdsError, ImdsInterrupted
from collector.outbox import OutboxError
from collector.settings import LOG_LEVELS, SECTION, CollectorSettings, load_approval, load_settings
from collector.status import StatusError, read_status
from collector.wiring import build_agent
from sevents import records
from sevents.cli_types import EventTypeError, add_event_type_flag, event_types
from sevents.config import env_name, error_lines, read_toml_section
from sevents.errors import ConfigError, ExitCode
from sevents.logs import printable, setup_logging
from sevents.retry import Backoff, RetryInterrupted, retry
from sevents.telemetry import install_tracer_provider, make_meter_provider, otlp_configured
from sevents.version import add_version_flag

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider

    from sevents.prometheus import MetricsServer

log = logging.getLogger("collector")

# `once` is run by people and scripts waiting for an answer: unless a retry deadline is configured, each IMDS
# request gives up after this long instead of the daemon's 75 s (which rides out a ~70 s IMDS update).
ONCE_RETRY_DEADLINE = 8.0
START_RETRY = Backoff(initial=1.0, cap=30.0)
WEBHOOK_TYPES, WEBHOOK_TYPES_FLAG = "webhook_event_types", "--webhook-event-type"

_HELP = {
    "imds_url": "IMDS base URL; /metadata/... is appended (default http://169.254.169.254)",
    "state_dir": "directory for outbox.sqlite and the lock file (default /var/lib/sevents-collector)",
    "api_version": "Scheduled Events api-version, 2017-03-01 .. 2020-07-01 (default 2020-07-01)",
    "instance_api_version": "instance metadata api-version (default 2021-02-01)",
    "poll_interval": "seconds between polls (default 1)",
    "heartbeat_interval": "seconds between heartbeat records (default 60)",
    "instance_refresh": "seconds between instance metadata refreshes (default 300)",
    "request_timeout": "read timeout in seconds once IMDS has answered once (default 10)",
    "first_call_timeout": "read timeout of the first call, which may take up to 2 minutes (default 130)",
    "min_request_interval": "minimum seconds between our IMDS requests (default 0.4; IMDS allows ~5/s per VM)",
    "retry_deadline": "seconds one fetch keeps retrying 410/429/5xx/timeouts (default 75; once: 8)",
    "api_version_retry": "seconds after a refused api-version before asking for it again (default 3600)",
    "outbox_max_bytes": "bound of the outbox on disk, WAL included (default 64 MiB); heartbeats give way first",
    "discover_endpoint": "non-VNET VMs: take the IMDS address from DHCP option 245 in the lease files",
    "dhcp_lease_globs": "comma-separated lease file globs searched for option 245",
    "sink": "local (sevents-ingest reads the outbox; default) or eventhubs",
    "ship_batch": "rows per batch sent to the sink (default 2000)",
    "ship_max_wait": "seconds a partial batch may wait before it is sent (default 0: at once)",
    "drain_timeout": "seconds SIGTERM may spend shipping what is left (default 10)",
    "eventhubs_namespace": "Event Hubs namespace, fully qualified (managed identity)",
    "eventhubs_name": "event hub name",
    "eventhubs_connection_string_file": "file with a SAS connection string (or SEVENTS_EVENTHUBS_CONNECTION_STRING)",
    "log_level": "debug, info, warning or error, any case (default info)",
    "webhook_event_types": "an event type whose transitions are POSTed to webhook_url (set in the config file or "
    "SEVENTS_WEBHOOK_URL, never a flag: it holds a token); repeatable or comma-separated (default Preempt,Terminate)",
    "webhook_timeout": "seconds one webhook POST may take (default 5)",
    "boot_id_file": "file holding the kernel's boot id; a new one means the VM rebooted and the downtime is "
    "measured (default /proc/sys/kernel/random/boot_id)",
    "tick_interval": "seconds between the ticks that measure pauses of the VM (default 0.5)",
    "pause_min": "a gap between ticks at least this long is recorded as a pause of the VM (default 1.5)",
    "metrics_addr": "run: serve /metrics for Prometheus on PORT of loopback (127.0.0.1) or on HOST:PORT, e.g. 9464 "
    "or 10.0.0.4:9464 (default: none)",
}
# Settings only the daemon's loop reads: `once` still accepts them (a command line shared with `run` keeps
# working) but does not list them in its --help.
DAEMON_ONLY = frozenset(
    {
        "poll_interval",
        "heartbeat_interval",
        "instance_refresh",
        "api_version_retry",
        "ship_max_wait",
        "tick_interval",
        "pause_min",
        "metrics_addr",
    }
)

_EPILOG = """\
examples:
  sevents-collector run --config /etc/sevents/collector.toml
  sevents-collector once --state-dir /tmp/probe                 # one poll: the new records as JSON lines
  SEVENTS_SINK=eventhubs sevents-collector run --eventhubs-namespace ns.servicebus.windows.net \\
      --eventhubs-name sevents                                  # managed identity: AZURE_CLIENT_ID if several
  sevents-collector status --state-dir /var/lib/sevents-collector   # read-only

Settings come from defaults < the [collector] table of --config < SEVENTS_<NAME> environment variables
< flags. The Event Hubs connection string is read only from SEVENTS_EVENTHUBS_CONNECTION_STRING or a file.
IMDS is always reached directly: HTTP(S)_PROXY and NO_PROXY are ignored.

Polling turns Scheduled Events on for the VM: a Reboot or Redeploy a user starts then waits up to its
NotBefore (about 15 minutes) unless approved. `approve_user_initiated = true` in the config file's [approval]
table approves those at once; `dry_run = true` there records every decision of the policy and sends nothing.

exit status: 0 ok, 1 the poll failed or its changes could not be stored (once), 2 invalid configuration
(every problem is listed), 3 the state directory cannot be used: in use or unusable, the outbox cannot be
opened (once), no outbox there or it cannot be read (status), or --metrics-addr cannot be bound (run),
130 interrupted (once). `run` never exits for IMDS, its answers or a full disk: it retries.
"""


def _settings_flags(parser: argparse.ArgumentParser, *, daemon: bool) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML file with a [collector] table (and an [approval] table to act on events)",
    )
    for field in dataclasses.fields(CollectorSettings):
        if field.name not in _HELP:
            continue  # secrets have no flag
        flag = "--" + field.name.replace("_", "-")
        text = _HELP[field.name] if daemon or field.name not in DAEMON_ONLY else argparse.SUPPRESS
        if field.name == WEBHOOK_TYPES:
            # the one event-type filter spelling (sevents.cli_types); the old plural still works, with a note
            add_event_type_flag(parser, text, flag=WEBHOOK_TYPES_FLAG, old=(flag,), dest=field.name)
        elif field.type in (bool, "bool"):
            parser.add_argument(flag, action="store_const", const=True, default=None, help=text)
        elif field.name == "log_level":
            parser.add_argument(flag, default=None, type=str.lower, choices=LOG_LEVELS, help=text)
        else:
            parser.add_argument(flag, default=None, metavar="VALUE", help=text)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="sevents-collector",
        description="Collect Azure Scheduled Events from IMDS into a durable outbox (and ship them).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version_flag(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    once = commands.add_parser(
        "once",
        allow_abbrev=False,
        help="poll once, commit, print the new transitions as JSON lines",
        description=(
            "Poll IMDS once, commit what changed to the outbox in --state-dir, and print the new transition\n"
            "records (with seq) as JSON lines on stdout. Repeated runs behave like the daemon's loop.\n\n"
            "Each retry is logged on stderr with what failed and when this run gives up: unless\n"
            "--retry-deadline (or SEVENTS_RETRY_DEADLINE, or the config file) says otherwise, each IMDS\n"
            f"request gives up after {ONCE_RETRY_DEADLINE:g} s of retries instead of the daemon's 75 s. An IMDS\n"
            "that accepts the connection but is slow to answer is waited for up to --first-call-timeout (the\n"
            "first call on a VM may take 2 minutes), with a log line every 10 s. Ctrl-C stops it at once (exit 130)."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _settings_flags(once, daemon=False)
    run = commands.add_parser(
        "run",
        allow_abbrev=False,
        help="the daemon: poll loop, heartbeats, shipping; SIGTERM drains and exits",
        description="Poll IMDS every --poll-interval seconds, write a heartbeat every --heartbeat-interval, ship "
        "the outbox to the sink, and on SIGTERM or SIGINT finish the current poll, drain and exit 0.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _settings_flags(run, daemon=True)
    status = commands.add_parser(
        "status",
        allow_abbrev=False,
        help="print the state of --state-dir as JSON (read-only)",
        description="Print what --state-dir says about its collector, as JSON: rows waiting to be shipped (depth, "
        "by record type), bytes, last seq, drops by reason, the last document stored (incarnation, each event's "
        "type and status), and the last moment the collector knew its VM running, with its age (a few seconds "
        "while it runs). Read-only: it needs read access only and changes nothing, while the collector runs or not.",
        epilog="exit status: 0 ok, 3 the state cannot be read: no outbox in --state-dir, or the directory or its "
        "outbox cannot be read (permission denied: the shipped unit's state directory is its service user's alone, "
        "so run status as that user or with sudo) or is not an outbox.",
    )
    status.add_argument("--state-dir", type=Path, required=True, metavar="DIR", help="the collector's state dir")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sevents-collector``."""
    args = build_parser().parse_args(argv)
    if args.command == "status":
        try:
            return _status(args.state_dir)
        except OutboxError as error:
            print(f"sevents-collector: fatal: {error}", file=sys.stderr)
            return ExitCode.NO_STATE
    flags = {k: v for k, v in vars(args).items() if k not in ("command", "config")}
    if flags.get(WEBHOOK_TYPES) is not None:
        try:
            flags[WEBHOOK_TYPES] = event_types(flags[WEBHOOK_TYPES], WEBHOOK_TYPES_FLAG)
        except EventTypeError as error:
            print(f"sevents-collector: {error}", file=sys.stderr)
            return ExitCode.INVALID
    problems: list[str] = []
    try:
        settings = load_settings(file=args.config, flags=flags)
    except ConfigError as error:
        problems += error.problems
    else:
        problems += _imds_url_problems(settings.imds_url)
    try:
        approval = load_approval(args.config)
    except ConfigError as error:  # a bad policy refuses to start: never a silent approve-all, nor approve-none
        problems += error.problems
    if problems:
        # both tables come from one file: a problem with the file itself is said once
        print(error_lines("sevents-collector", ConfigError(list(dict.fromkeys(problems)))), file=sys.stderr)
        return ExitCode.INVALID
    if args.command == "once" and not _configured("retry_deadline", args.config, flags):
        settings = dataclasses.replace(settings, retry_deadline=ONCE_RETRY_DEADLINE)
    setup_logging(settings.log_level)
    try:
        return _once(settings, approval) if args.command == "once" else _run(settings, approval)
    except (AgentError, OutboxError) as error:
        print(f"sevents-collector: fatal: {error}", file=sys.stderr)  # one line: not a log record as well
        return ExitCode.NO_STATE


def _imds_url_problems(url: str) -> list[str]:
    """A full Scheduled Events URL pasted as ``imds_url`` (its path and api-version would be appended to): say
    what to pass instead, rather than letting IMDS refuse the doubled path as a bad api-version."""
    parts = urlsplit(url)
    segments = parts.path.split("/")
    if not (parts.query or parts.fragment or "metadata" in segments):
        return []
    path = "/".join(segments[: segments.index("metadata")]) if "metadata" in segments else parts.path
    base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    versions = [v for k, _, v in (p.partition("=") for p in parts.query.split("&")) if k == "api-version" and v]
    version = f" and --api-version {versions[0]}" if versions else " (and --api-version for the api-version)"
    return [
        f"imds_url must be the IMDS base URL, without /metadata/... or ?query (the collector appends them), got "
        f"{url!r}: pass --imds-url {base}{version}"
    ]


def _configured(name: str, file: Path | None, flags: Mapping[str, Any]) -> bool:
    """Whether a flag, the environment or the config file sets ``name`` (rather than its default)."""
    if flags.get(name) is not None or env_name("SEVENTS_", name) in os.environ:
        return True
    table, _ = read_toml_section(file, SECTION)
    return name in table


def _once(settings: CollectorSettings, approval: ApprovalPolicy) -> int:
    stop = threading.Event()
    _stop_on_signals(stop)
    agent = build_agent(settings, approval=approval)
    try:
        log.info(
            "polling IMDS once",
            extra={"imds_url": agent.client.base_url, "retry_deadline_s": settings.retry_deadline},
        )
        try:
            with _without_poll_failed_log():
                new = agent.poll_once(stop)
        except ImdsInterrupted:
            print("sevents-collector: interrupted; nothing was committed by this poll", file=sys.stderr)
            return ExitCode.INTERRUPTED
        except (ImdsError, DecodeError) as error:
            # the one line saying so (the health log's "poll failed" record is left out: it would say it twice)
            print(f"sevents-collector: poll failed: {printable(str(error))}", file=sys.stderr)
            return ExitCode.FAILED
        if not agent.last_poll_ok:
            # Read, but the outbox refused the commit (full, or a full disk): nothing was stored.
            print(f"sevents-collector: not stored: {printable(agent.health.last_poll_error)}", file=sys.stderr)
            return ExitCode.FAILED
        out = sys.stdout
        for record in new:
            out.write(records.encode(record).decode() + "\n")
        out.flush()
        if agent.sink is not None:
            agent.flush(settings.drain_timeout)
        return ExitCode.OK
    finally:
        agent.close()


class _DropPollFailed(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "poll failed"


@contextlib.contextmanager
def _without_poll_failed_log() -> Iterator[None]:
    """`once` prints its own ``poll failed`` line on stderr; the health log's record would repeat it."""
    health_log, drop = logging.getLogger("collector.agent"), _DropPollFailed()  # collector.health's logger
    health_log.addFilter(drop)
    try:
        yield
    finally:
        health_log.removeFilter(drop)


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop`` (the current IMDS wait ends at once) instead of raising mid-write."""

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)


def _run(settings: CollectorSettings, approval: ApprovalPolicy) -> int:
    stop = threading.Event()
    _stop_on_signals(stop)
    metrics_server = _metrics_server(settings.metrics_addr)
    # Without an OTLP endpoint or /metrics no figure would leave the process: the agent records into the API's
    # no-op provider then, and the SDK (megabytes of a daemon meant to be small) is never imported.
    readers = [] if metrics_server is None else [metrics_server.reader]
    provider = make_meter_provider("sevents-collector", readers=readers) if readers or otlp_configured() else None
    tracing = install_tracer_provider("sevents-collector")  # spans over OTLP only when an endpoint is set
    try:
        return _run_agent(settings, approval, stop, provider)
    finally:
        if tracing is not None:
            tracing.shutdown()  # sends what is buffered
        if provider is not None:
            provider.shutdown()
        if metrics_server is not None:
            metrics_server.close()


def _metrics_server(addr: str) -> MetricsServer | None:
    """The /metrics endpoint when ``metrics_addr`` is set; an address that cannot be bound is fatal at start."""
    if not addr:
        return None
    from sevents import prometheus  # the SDK and prometheus_client only when asked for

    try:
        return prometheus.serve(addr)
    except OSError as error:
        raise AgentError(f"cannot serve /metrics on {addr}: {error.strerror or error}") from error


def _run_agent(
    settings: CollectorSettings, approval: ApprovalPolicy, stop: threading.Event, provider: MeterProvider | None
) -> int:
    try:
        # An outbox that cannot be opened (a full disk) is waited out, never a reason to exit: a supervisor
        # restarting us would find the same disk, and meanwhile nobody would try again.
        agent = retry(
            lambda: build_agent(settings, meter_provider=provider, approval=approval),
            backoff=START_RETRY,
            stop=stop,
            retryable=lambda error: isinstance(error, OutboxError),
            on_retry=lambda note: log.error("cannot open the outbox; trying again", extra={"error": str(note.error)}),
        )
    except RetryInterrupted:
        return ExitCode.OK
    try:
        agent.run(stop)
    except ImdsInterrupted:
        pass
    finally:
        agent.close()
    return ExitCode.OK


def _status(state_dir: Path) -> int:
    try:
        status = read_status(state_dir, datetime.now(timezone.utc))
    except StatusError as error:
        print(f"sevents-collector: {error}", file=sys.stderr)
        return ExitCode.NO_STATE
    except OSError as error:  # whatever else the file system refuses: still one line and the status exit code
        reason = error.strerror or error
        print(f"sevents-collector: cannot read the state directory {state_dir}: {reason}", file=sys.stderr)
        return ExitCode.NO_STATE
    print(json.dumps(status, indent=2))
    return ExitCode.OK
