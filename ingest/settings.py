"""The ingest's configuration: one frozen object from TOML ``[ingest]`` < ``SEVENTS_*`` env < flags.

Secrets (ClickHouse password, Event Hubs and blob connection strings) come from the environment or a file,
never from a flag or the ``--clickhouse`` target, and are kept out of ``repr``.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlparse

from cryptography import x509

from ingest.batching import BatchPolicy
from ingest.clickhouse import target_problems
from ingest.dead_letter_cap import DEFAULT_PER_HOUR
from ingest.decode import Limits
from ingest.migrate import Target
from ingest.retention import Retention
from sevents.config import build, host_port_problems, one_of

SECTION: Final = "ingest"
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class IngestSettings:
    """Everything one ingest worker needs."""

    clickhouse: str = "chdb:///var/lib/sevents/clickhouse"  # or https://user@host:8443
    clickhouse_password_file: Path | None = None
    clickhouse_password: str = field(default="", repr=False)  # env SEVENTS_CLICKHOUSE_PASSWORD only
    database: str = "sevents"
    # Seconds ``run`` waits for an embedded directory another process holds (a stopping ingest), then fails.
    clickhouse_lock_wait: float = 300.0
    cluster: str = ""  # a cluster name: Replicated tables, Distributed tables, ON CLUSTER DDL
    source: str = "outbox:/var/lib/sevents-collector"  # outbox:DIR_OR_GLOB[,DIR_OR_GLOB...] | eventhubs | feed
    batch_max_records: int = 10_000
    batch_max_bytes: int = 8 * 2**20
    batch_max_wait: float = 1.0  # seconds a partial batch may wait for more records
    poll_interval: float = 0.2  # outbox source: pause between reads when there is nothing new
    max_payload_bytes: int = 256 * 1024
    max_text_chars: int = 16 * 1024
    # Seconds after the first insert during which every insert is checked for rows a deduplication entry
    # claims but a crash lost (redeliveries come first after a restart); retries are always checked.
    verify_window: float = 120.0
    retry_initial: float = 0.5
    retry_cap: float = 30.0
    eventhubs_namespace: str = ""  # fully qualified; managed identity
    eventhubs_name: str = "scheduled-events"  # the hub infra/azure/main.bicep creates (and compose defaults)
    eventhubs_consumer_group: str = "sevents-ingest"  # the group infra/azure/main.bicep creates
    # Seconds between a worker's claim/renew rounds, and how long a claim outlives a silent (dead) owner:
    # a dead worker's partitions are taken over after about ownership_expiry + load_balancing_interval.
    eventhubs_load_balancing_interval: float = 10.0
    eventhubs_ownership_expiry: float = 60.0
    # A stable name per worker (e.g. its pod or unit instance) lets a restarted worker resume its partitions at
    # once instead of after the expiry; empty: a random id per start. Two live workers must never share one.
    eventhubs_owner_id: str = ""
    # Seconds a VM's clock may run ahead of the hub's: a record from Event Hubs observed later than its enqueued
    # time plus this is dead-lettered (reason future); an old one is fine (a backlog).
    eventhubs_clock_skew: float = 300.0
    # Records a VM can prove, the strong form (ingest/attestation_gate.py): "required" stores a record from Event
    # Hubs only if its VM's own key, pinned by an attestation (IMDS's attested document, PKCS#7 chaining to the
    # roots of attestation_ca_file, signed for attestation_signer, made at most attestation_max_age seconds before
    # it was sent), signed it. "off": nothing required; with a root file, attestations are still pinned.
    attestation: str = "off"
    attestation_ca_file: Path | None = None  # PEM roots (Azure's: the root its attested data certificate chains to)
    attestation_intermediates_file: Path | None = None  # PEM intermediates the documents do not carry
    attestation_signer: str = "metadata.azure.com"
    attestation_max_age: float = 86400.0
    eventhubs_connection_string_file: Path | None = None  # SAS fallback
    eventhubs_connection_string: str = field(default="", repr=False)  # env only
    # The central Scheduled Events feed (ingest/feed.py): the Event Hub Event Grid delivers ScheduledEventEmitted
    # to (its own hub, never the collectors': Event Grid sends under no VM's partition key), read beside the
    # source, or alone with source = "feed"; its consumer group, and a connection string of its own if the
    # collectors' one names another hub (env SEVENTS_FEED_CONNECTION_STRING or the file; else theirs, else the
    # namespace with managed identity). Empty feed_eventhub: no feed.
    feed_eventhub: str = ""
    feed_consumer_group: str = "sevents-ingest"
    feed_connection_string_file: Path | None = None
    feed_connection_string: str = field(default="", repr=False)  # env only
    checkpoint_blob_url: str = ""  # https://account.blob.core.windows.net (managed identity)
    checkpoint_container: str = "sevents-checkpoints"  # the container infra/azure/main.bicep creates
    checkpoint_connection_string_file: Path | None = None
    checkpoint_connection_string: str = field(default="", repr=False)  # env only
    log_level: str = "info"
    # ``run``: seconds between progress lines (records stored, rate, dead letters, backlog) while records are stored
    progress_interval: float = 10.0
    metrics_addr: str = ""  # HOST:PORT serving /metrics for Prometheus (run only; empty: none)
    # ``reconcile``: Azure Resource Graph (ingest/reconcile.py). Subscription ids (GUIDs) to read, seconds between
    # passes, the ARM endpoint (the cloud; plain http for a loopback test server only), the identity
    # (default: DefaultAzureCredential; managed_identity: ManagedIdentityCredential alone), a user-assigned
    # identity's client id, and how many days of Resource Health annotation changes to read (ARG keeps 14).
    reconcile_subscriptions: tuple[str, ...] = ()
    reconcile_interval: float = 900.0
    reconcile_arm_endpoint: str = "https://management.azure.com"
    reconcile_credential: str = "default"
    reconcile_client_id: str = ""
    reconcile_annotation_days: int = 14
    # How many days each kind of table keeps a row (ingest/retention.py; 0: for ever), applied as TTLs at migrate:
    # the history (transitions, impacts, approvals, their rollups), raw heartbeats, and dead letters.
    retention_days: int = 400
    heartbeat_retention_days: int = 7
    dead_letter_retention_days: int = 90
    # Dead letters one stream (an Event Hubs partition, an outbox) may store per clock hour; past it they are
    # counted as dropped (reason dead_letter_cap), not stored: a flood of poison cannot fill the disk.
    dead_letter_cap_per_hour: int = DEFAULT_PER_HOUR

    @property
    def target(self) -> Target:
        return Target(database=self.database, cluster=self.cluster)

    @property
    def retention(self) -> Retention:
        return Retention(self.retention_days, self.heartbeat_retention_days, self.dead_letter_retention_days)

    @property
    def policy(self) -> BatchPolicy:
        return BatchPolicy(self.batch_max_records, self.batch_max_bytes, self.batch_max_wait)

    @property
    def limits(self) -> Limits:
        return Limits(max_payload_bytes=self.max_payload_bytes, max_text_chars=self.max_text_chars)

    def outbox_specs(self) -> list[str]:
        """The DIR_OR_GLOB list of an ``outbox:`` source."""
        return [s for s in self.source.removeprefix("outbox:").split(",") if s.strip()]

    def password(self) -> str:
        if self.clickhouse_password:
            return self.clickhouse_password
        if self.clickhouse_password_file is not None:
            return self.clickhouse_password_file.read_text(encoding="utf-8").strip()
        return ""


def validate(s: IngestSettings) -> list[str]:
    """Every problem with an otherwise well-typed settings object."""
    problems = target_problems(s.clickhouse) + s.target.problems() + s.policy.problems()
    if s.source.startswith("outbox:"):
        if not s.outbox_specs():
            problems.append("source outbox: names no directory or glob")
    elif s.source == "feed":
        if not s.feed_eventhub:
            problems.append("source feed needs feed_eventhub (the Event Hub Event Grid delivers the feed to)")
    elif s.source == "eventhubs":
        if not s.eventhubs_name:
            problems.append("source eventhubs needs eventhubs_name")
        if not (s.eventhubs_namespace or s.eventhubs_connection_string or s.eventhubs_connection_string_file):
            problems.append(
                "source eventhubs needs eventhubs_namespace (managed identity) or a connection string "
                "(SEVENTS_EVENTHUBS_CONNECTION_STRING or eventhubs_connection_string_file)"
            )
        if not s.checkpoint_container:
            problems.append("source eventhubs needs checkpoint_container (checkpoints are never skipped)")
        if not (s.checkpoint_blob_url or s.checkpoint_connection_string or s.checkpoint_connection_string_file):
            problems.append(
                "source eventhubs needs checkpoint_blob_url or a checkpoint connection string "
                "(SEVENTS_CHECKPOINT_CONNECTION_STRING or checkpoint_connection_string_file)"
            )
    else:
        problems.append(f"source {s.source!r}: expected outbox:DIR_OR_GLOB, eventhubs or feed")
    problems += feed_problems(s)
    problems += balance_problems(s.eventhubs_load_balancing_interval, s.eventhubs_ownership_expiry)
    problems += s.retention.problems()
    if not (math.isfinite(s.eventhubs_clock_skew) and s.eventhubs_clock_skew >= 0):
        problems.append("eventhubs_clock_skew must be a number of seconds, 0 or more")
    problems += attestation_problems(s)
    for name in (
        "clickhouse_password_file",
        "eventhubs_connection_string_file",
        "checkpoint_connection_string_file",
        "feed_connection_string_file",
    ):
        path = getattr(s, name)
        if path is not None and not path.is_file():
            problems.append(f"{name} {path} is not a readable file")
    if s.max_payload_bytes < 1024:
        problems.append("max_payload_bytes must be at least 1024")
    if s.dead_letter_cap_per_hour < 1:
        problems.append("dead_letter_cap_per_hour must be a whole number of dead letters, 1 or more")
    if s.retry_initial <= 0 or s.retry_cap < s.retry_initial:
        problems.append("retry_initial must be positive and retry_cap at least retry_initial")
    if s.poll_interval <= 0:
        problems.append("poll_interval must be positive")
    if not (math.isfinite(s.progress_interval) and s.progress_interval > 0):
        problems.append("progress_interval must be a positive number of seconds")
    if s.log_level not in LOG_LEVELS:
        problems.append(f"log_level must be one of {', '.join(LOG_LEVELS)}")
    problems += host_port_problems("metrics_addr", s.metrics_addr)
    problems += reconcile_problems(s)
    return problems


def feed_problems(s: IngestSettings) -> list[str]:
    """The feed needs a hub apart from the collectors', a way to reach it and checkpoints (when it is read)."""
    if not s.feed_eventhub:
        return []
    problems = []
    if s.source == "eventhubs" and s.feed_eventhub == s.eventhubs_name:
        problems.append(
            f"feed_eventhub {s.feed_eventhub!r} is the collectors' hub: the feed needs a hub of its own (Event Grid "
            "sends under no VM's partition key, so its events would fail the collectors' provenance checks)"
        )
    reach = (
        s.eventhubs_namespace,
        s.eventhubs_connection_string,
        s.eventhubs_connection_string_file,
        s.feed_connection_string,
        s.feed_connection_string_file,
    )
    if not any(reach):
        problems.append(
            "feed_eventhub needs eventhubs_namespace (managed identity) or a connection string "
            "(SEVENTS_FEED_CONNECTION_STRING, feed_connection_string_file or the collectors' hub's)"
        )
    if not (s.checkpoint_blob_url or s.checkpoint_connection_string or s.checkpoint_connection_string_file):
        problems.append(
            "feed_eventhub needs checkpoint_blob_url or a checkpoint connection string "
            "(SEVENTS_CHECKPOINT_CONNECTION_STRING or checkpoint_connection_string_file)"
        )
    if not s.checkpoint_container:
        problems.append("feed_eventhub needs checkpoint_container (checkpoints are never skipped)")
    return problems


def attestation_problems(s: IngestSettings) -> list[str]:
    """The attestation mode, and trust files that hold certificates (read here, so a bad one is exit 2)."""
    problems = one_of("attestation", s.attestation, ("off", "required"))
    if s.attestation == "required" and s.attestation_ca_file is None:
        problems.append('attestation = "required" needs attestation_ca_file (the PEM root the documents chain to)')
    for name in ("attestation_ca_file", "attestation_intermediates_file"):
        path = getattr(s, name)
        if path is None:
            continue
        try:
            found = x509.load_pem_x509_certificates(path.read_bytes())
        except (OSError, ValueError) as error:
            problems.append(f"{name} {path}: not a readable PEM file of certificates ({error})")
            continue
        if not found:
            problems.append(f"{name} {path} holds no certificate")
    if not (math.isfinite(s.attestation_max_age) and s.attestation_max_age > 0):
        problems.append("attestation_max_age must be a positive number of seconds")
    return problems


RECONCILE_CREDENTIALS: Final = ("default", "managed_identity")
_GUID: Final = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def reconcile_problems(s: IngestSettings) -> list[str]:
    """The reconcile settings' problems (``reconcile`` itself also needs at least one subscription)."""
    problems = [
        f"reconcile_subscriptions: {sub!r} is not a subscription id (a GUID)"
        for sub in s.reconcile_subscriptions
        if not _GUID.match(sub)
    ]
    if not (math.isfinite(s.reconcile_interval) and s.reconcile_interval > 0):
        problems.append("reconcile_interval must be a positive number of seconds")
    if not 1 <= s.reconcile_annotation_days <= 14:
        problems.append("reconcile_annotation_days must be 1 to 14 (HealthResourceChanges keeps 14 days)")
    problems += one_of("reconcile_credential", s.reconcile_credential, RECONCILE_CREDENTIALS)
    problems += arm_endpoint_problems(s.reconcile_arm_endpoint)
    return problems


def arm_endpoint_problems(url: str) -> list[str]:
    """An ARM endpoint is https (any cloud), or plain http on a loopback address (a test server) only."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    if parsed.scheme == "https" and host:
        return []
    if parsed.scheme == "http" and host and _loopback(host):
        return []
    if parsed.scheme == "http" and host:
        return [
            f"reconcile_arm_endpoint {url}: plain http is accepted for loopback addresses only (127.0.0.0/8, ::1, "
            "localhost: a test server); Azure Resource Manager is https, e.g. https://management.azure.com"
        ]
    return [f"reconcile_arm_endpoint {url!r}: expected an https URL such as https://management.azure.com"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def balance_problems(interval: float, expiry: float) -> list[str]:
    """Partition balancing: a live worker renews its claims every ``interval``, so they must outlast it."""
    problems = []
    interval_ok = math.isfinite(interval) and interval > 0
    if not interval_ok:
        problems.append("eventhubs_load_balancing_interval must be a positive number of seconds")
    if not (math.isfinite(expiry) and expiry > 0):
        problems.append("eventhubs_ownership_expiry must be a positive number of seconds")
    elif interval_ok and expiry <= interval:
        problems.append(
            "eventhubs_ownership_expiry must be longer than eventhubs_load_balancing_interval "
            "(otherwise live workers lose their partitions between two renewals)"
        )
    return problems


def load(*, file: Path | None, env: Mapping[str, str], flags: Mapping[str, Any]) -> IngestSettings:
    """Build and validate; raises sevents.errors.ConfigError listing every problem."""
    return build(IngestSettings, file=file, section=SECTION, env=env, flags=flags, validate=validate)
