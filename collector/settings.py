"""The collector's configuration: one frozen object from TOML ``[collector]`` < ``SEVENTS_*`` env < flags.

Durations are in seconds. Secrets (the Event Hubs connection string) come only from the environment or a
file, never from a flag, and are kept out of ``repr``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Optional
from urllib.parse import urlsplit

from collector.approval import SECTION as APPROVAL_SECTION
from collector.approval import ApprovalPolicy, parse_policy
from collector.dhcp import DEFAULT_LEASE_GLOBS
from collector.imds import DEFAULT_BASE_URL
from collector.imds_policy import DEFAULT_API_VERSION, DEFAULT_INSTANCE_API_VERSION, SCHEDULED_EVENTS_VERSIONS
from collector.webhook import FORMATS as WEBHOOK_FORMATS
from sevents import records
from sevents.config import build, host_port_problems, one_of, read_toml_document, read_toml_section
from sevents.errors import ConfigError

SECTION: Final = "collector"
SINKS: Final = ("local", "eventhubs")
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
OUTBOX_FILE: Final = "outbox.sqlite"
ENV_ONLY_FIELD: Final = "eventhubs_connection_string"  # only from the environment (or its _file setting)
_FIELD_IN_FILE_PROBLEM: Final = (
    "config file {file}: eventhubs_connection_string must not be written in the config file (other users can "
    "read it); use SEVENTS_EVENTHUBS_CONNECTION_STRING or eventhubs_connection_string_file (mode 0600)"
)


@dataclass(frozen=True)
class CollectorSettings:
    """Everything one collector needs; see ``infra/systemd/collector.toml`` for a commented example."""

    imds_url: str = DEFAULT_BASE_URL  # base URL; /metadata/... is appended
    state_dir: Path = Path("/var/lib/sevents-collector")  # holds outbox.sqlite and the lock file
    api_version: str = DEFAULT_API_VERSION  # Scheduled Events api-version (negotiated down if IMDS refuses)
    instance_api_version: str = DEFAULT_INSTANCE_API_VERSION
    poll_interval: float = 1.0  # Microsoft recommends polling once per second
    heartbeat_interval: float = 60.0
    instance_refresh: float = 300.0  # instance metadata rarely changes
    request_timeout: float = 10.0  # read timeout once IMDS has answered once
    first_call_timeout: float = 130.0  # the first call may take up to 2 minutes
    min_request_interval: float = 0.4  # spacing of our requests: IMDS allows ~5/s per VM, shared by all agents
    retry_deadline: float = 75.0  # one fetch retries 410/429/5xx this long (410 lasts up to ~70 s)
    api_version_retry: float = 3600.0  # after IMDS refused api_version, ask for it again this often
    outbox_max_bytes: int = 64 * 2**20
    discover_endpoint: bool = False  # non-VNET VMs: take the IMDS address from DHCP option 245
    dhcp_lease_globs: tuple[str, ...] = DEFAULT_LEASE_GLOBS
    sink: str = "local"  # local: sevents-ingest reads the outbox; eventhubs: ship to Event Hubs
    # Rows go as soon as they are committed; rows committed while a send is in flight go together with the
    # next one, up to ship_batch rows (the Event Hubs sink packs them into batches of up to 1 MB).
    ship_batch: int = 2000
    ship_max_wait: float = 0.0  # >0: let a partial batch wait this long for more rows (fewer, larger sends)
    drain_timeout: float = 10.0  # on SIGTERM, how long shipping may take to empty the outbox
    eventhubs_namespace: str = ""  # fully qualified, e.g. myns.servicebus.windows.net (managed identity)
    eventhubs_name: str = ""
    eventhubs_connection_string_file: Optional[Path] = None  # SAS fallback; or env SEVENTS_EVENTHUBS_CONNECTION_STRING
    eventhubs_connection_string: str = field(default="", repr=False)  # env only (never a flag)
    # sink eventhubs: sign every event with the VM's own key, proven by IMDS's attested document (issue 29;
    # collector/attestation.py); the ingest requires it with [ingest] attestation = "required"
    attestation: bool = False
    log_level: str = "info"
    # a POST per transition of these event types (collector/webhook.py); the URL holds a token for most chat
    # tools: from the config file (mode 0600) or SEVENTS_WEBHOOK_URL, never a flag
    webhook_url: str = field(default="", repr=False)
    webhook_event_types: tuple[str, ...] = ("Preempt", "Terminate")
    webhook_timeout: float = 5.0
    webhook_format: str = "json"  # json (the wire record), slack or teams: the body the receiver accepts
    boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id")  # a new boot id: the VM rebooted
    tick_interval: float = 0.5  # the steady tick that measures pauses and keeps the last moment alive
    pause_min: float = 1.5  # a gap between ticks this long is a pause of the VM (a Freeze), not a slow thread
    # HOST:PORT serving /metrics for Prometheus (run only; empty: none). A port alone (``9464`` or ``:9464``)
    # means loopback, 127.0.0.1: only local scrapers (a node agent) reach it unless a host is named.
    metrics_addr: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.metrics_addr, str):
            object.__setattr__(self, "metrics_addr", metrics_address(self.metrics_addr))

    @property
    def outbox_path(self) -> Path:
        """``<state_dir>/outbox.sqlite``."""
        return self.state_dir / OUTBOX_FILE

    def connection_string(self) -> str | None:
        """The Event Hubs connection string from the environment or the file, or None (managed identity)."""
        if self.eventhubs_connection_string:
            return self.eventhubs_connection_string
        if self.eventhubs_connection_string_file is not None:
            return self.eventhubs_connection_string_file.read_text(encoding="utf-8").strip()
        return None


METRICS_HOST: Final = "127.0.0.1"  # where /metrics listens when metrics_addr names only a port


def metrics_address(text: str) -> str:
    """``9464`` or ``:9464`` -> ``127.0.0.1:9464``: loopback unless a host is named; anything else as given."""
    port = text.strip().removeprefix(":")
    return f"{METRICS_HOST}:{port}" if re.fullmatch(r"[0-9]{1,5}", port) else text


def validate(s: CollectorSettings) -> list[str]:
    """Every problem with an otherwise well-typed settings object."""
    problems: list[str] = []
    url = urlsplit(s.imds_url)
    if url.scheme != "http" or not url.hostname:
        problems.append(f"imds_url must be an http:// URL (IMDS is plain HTTP), got {s.imds_url!r}")
    problems += one_of("api_version", s.api_version, SCHEDULED_EVENTS_VERSIONS)
    positive = (
        "poll_interval",
        "heartbeat_interval",
        "instance_refresh",
        "request_timeout",
        "first_call_timeout",
        "tick_interval",
    )
    for name in positive:
        if getattr(s, name) <= 0:
            problems.append(f"{name} must be positive, got {getattr(s, name)}")
    for name in ("min_request_interval", "retry_deadline", "api_version_retry", "ship_max_wait", "drain_timeout"):
        if getattr(s, name) < 0:
            problems.append(f"{name} must not be negative, got {getattr(s, name)}")
    if s.pause_min <= 2 * s.tick_interval:
        problems.append(
            f"pause_min must be more than twice tick_interval ({s.tick_interval}), got {s.pause_min}: "
            "a late tick would be taken for a pause"
        )
    if s.outbox_max_bytes < 64 * 1024:
        problems.append(f"outbox_max_bytes must be at least 65536, got {s.outbox_max_bytes}")
    if s.ship_batch < 1:
        problems.append(f"ship_batch must be at least 1, got {s.ship_batch}")
    problems += one_of("sink", s.sink, SINKS)
    problems += one_of("log_level", s.log_level.lower(), LOG_LEVELS)
    if s.sink == "eventhubs":
        problems += _eventhubs_problems(s)
    elif s.attestation:
        problems.append('attestation signs what the Event Hubs sink sends: it needs sink = "eventhubs"')
    if s.webhook_url:
        hook = urlsplit(s.webhook_url)
        if hook.scheme not in ("http", "https") or not hook.hostname:
            problems.append("webhook_url must be an http:// or https:// URL (value not shown)")
        for name in s.webhook_event_types:
            problems += one_of("webhook_event_types", name, records.EVENT_TYPES)
    problems += one_of("webhook_format", s.webhook_format, WEBHOOK_FORMATS)
    if s.webhook_timeout <= 0:
        problems.append(f"webhook_timeout must be positive, got {s.webhook_timeout}")
    if host_port_problems("metrics_addr", s.metrics_addr):
        problems.append(
            "metrics_addr: expected PORT (served on 127.0.0.1) or HOST:PORT (e.g. 9464, 127.0.0.1:9464 or "
            f"[::1]:9464), got {s.metrics_addr!r}"
        )
    return problems


def _eventhubs_problems(s: CollectorSettings) -> list[str]:
    problems: list[str] = []
    file = s.eventhubs_connection_string_file
    if file is not None and not file.is_file():
        problems.append(f"eventhubs_connection_string_file {file} does not exist")
    has_secret = bool(s.eventhubs_connection_string) or file is not None
    if s.eventhubs_connection_string:
        problems += _connection_string_problems("SEVENTS_EVENTHUBS_CONNECTION_STRING", s.eventhubs_connection_string)
    elif file is not None and file.is_file():
        try:
            secret = file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            problems.append(f"eventhubs_connection_string_file {file} cannot be read: {error}")
        else:
            problems += _connection_string_problems(f"eventhubs_connection_string_file {file}", secret)
    if not has_secret and "." not in s.eventhubs_namespace:
        problems.append(
            "sink eventhubs needs eventhubs_namespace (fully qualified, e.g. myns.servicebus.windows.net) "
            "or a connection string (SEVENTS_EVENTHUBS_CONNECTION_STRING or eventhubs_connection_string_file)"
        )
    if not s.eventhubs_name and not (has_secret and "EntityPath=" in s.eventhubs_connection_string):
        problems.append("sink eventhubs needs eventhubs_name")
    return problems


def _connection_string_problems(where: str, secret: str) -> list[str]:
    """What is wrong with an Event Hubs connection string, said without showing it (it is a secret)."""
    parts = {k.strip().lower(): v.strip() for k, _, v in (p.partition("=") for p in secret.split(";")) if v.strip()}
    signed = {"sharedaccesskeyname", "sharedaccesskey"} <= parts.keys() or "sharedaccesssignature" in parts
    if parts.get("endpoint", "").lower().startswith("sb://") and signed:
        return []
    return [
        f"{where} is not an Event Hubs connection string (value not shown): it needs Endpoint=sb://NAMESPACE/ and "
        "SharedAccessKeyName=...;SharedAccessKey=... (or SharedAccessSignature=...)"
    ]


def load_settings(
    *, file: Path | None = None, flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> CollectorSettings:
    """Build the settings from the layers; raises ``sevents.errors.ConfigError`` listing every problem."""
    flags = dict(flags or {})
    flags.pop(ENV_ONLY_FIELD, None)  # secrets never come from a command line
    # Nor from the config file, which is usually readable by every local user; the value is never echoed.
    table, _ = read_toml_section(file, SECTION)
    problems = [] if ENV_ONLY_FIELD not in table else [_FIELD_IN_FILE_PROBLEM.format(file=file)]
    try:
        settings = build(
            CollectorSettings,
            file=file,
            section=SECTION,
            env=os.environ if env is None else env,
            flags=flags,
            validate=validate,
        )
    except ConfigError as error:
        raise ConfigError(problems + error.problems) from None
    if problems:
        raise ConfigError(problems)
    return settings


def load_approval(file: Path | None) -> ApprovalPolicy:
    """The approval policy of the ``[approval]`` table of ``file`` (none: approve nothing); ConfigError lists
    every problem, so a bad policy stops the collector at start rather than approving what it should not."""
    document, problems = read_toml_document(file)
    if problems:
        raise ConfigError(problems)
    table = document.get(APPROVAL_SECTION)
    if table is None:
        return ApprovalPolicy()
    if not isinstance(table, dict):
        raise ConfigError([f"config file {file}: [{APPROVAL_SECTION}] is not a table"])
    policy, problems = parse_policy(table, f"config file {file} [{APPROVAL_SECTION}]")
    if problems:
        raise ConfigError(problems)
    return policy
