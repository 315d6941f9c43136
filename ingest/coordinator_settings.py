"""The ``[coordinator]`` table of ``sevents-ingest coordinate`` (ingest/coordinator.py), and its problems.

Every setting also comes from ``SEVENTS_COORDINATOR_<NAME>`` (the lease connection string only from there, or a
file named by ``lease_connection_string_file``). The policy's rules mirror the collectors' ``[approval]`` table:
``event_types`` (required), ``sources``, ``max_duration_s``; then the coordinator's own: ``quorum`` (``all``, or how
many of the event's VMs must be ready), ``deadline_s`` (seconds before NotBefore after which the event is left to
the platform) and ``windows`` (UTC maintenance windows, as the collector's). Leases: ``lease_backend = "blob"`` (the
default, Azure Storage) or ``"local"`` (a SQLite file in ``lease_dir``, for coordinators on one machine).
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from collector.approval import APPROVABLE_TYPES, SOURCES
from collector.windows import Window, parse_window
from sevents.config import build, one_of

SECTION: Final = "coordinator"
PREFIX: Final = "SEVENTS_COORDINATOR_"
CREDENTIALS: Final = ("default", "managed_identity")
LEASE_BACKENDS: Final = ("blob", "local")  # coordinator_azure.BlobLeases, coordinator_leases.LocalLeases
# The acknowledge API's versions run from 2023-10-01-preview to 2025-11-01 (shared/DESIGN.md); the newest stable.
API_VERSION: Final = "2025-11-01"


@dataclass(frozen=True)
class CoordinatorSettings:
    event_types: tuple[str, ...] = ()
    sources: tuple[str, ...] = SOURCES
    max_duration_s: int | None = None
    quorum: str = "all"  # "all", or a whole number of the event's VMs
    deadline_s: float = 120.0  # from NotBefore minus this on, the event is left to the platform
    windows: tuple[str, ...] = ()  # UTC maintenance windows ("Mon-Fri 02:00-05:00"); none: any time
    dry_run: bool = False  # decide and record, POST nothing
    poll_interval: float = 1.0  # seconds between two reads of the recent decisions
    lookback_s: float = 3600.0  # how far back (decided_at) decisions are read; longer than any notice
    arm_endpoint: str = "https://management.azure.com"
    api_version: str = API_VERSION
    credential: str = "default"  # default (DefaultAzureCredential) or managed_identity
    client_id: str = ""  # a user-assigned identity's client id
    lease_backend: str = "blob"  # blob (Azure Storage: coordinators anywhere) or local (lease_dir, one machine)
    lease_dir: Path | None = None  # local: the directory the coordinators of this machine share
    lease_blob_url: str = ""  # https://account.blob.core.windows.net (with the identity above)
    lease_container: str = "sevents-coordinator"
    lease_connection_string_file: Path | None = None
    lease_connection_string: str = field(default="", repr=False)  # SEVENTS_COORDINATOR_LEASE_CONNECTION_STRING
    lease_s: int = 30  # an event's lease, renewed while it is worked on (Azure Storage: 15 to 60 s)
    name: str = ""  # this coordinator in its records and logs (default host:pid)

    @property
    def coordinator_name(self) -> str:
        return self.name or f"coordinator@{socket.gethostname()}:{os.getpid()}"

    @property
    def needed(self) -> int | None:
        """How many ready VMs the quorum asks for (None: all of them)."""
        return None if self.quorum == "all" else int(self.quorum)

    @property
    def parsed_windows(self) -> tuple[Window, ...]:
        return tuple(w for w in (parse_window(t) for t in self.windows) if isinstance(w, Window))

    def connection_string(self) -> str:
        if self.lease_connection_string:
            return self.lease_connection_string
        if self.lease_connection_string_file is not None:
            return self.lease_connection_string_file.read_text(encoding="utf-8").strip()
        return ""


def problems(s: CoordinatorSettings) -> list[str]:
    from ingest.settings import arm_endpoint_problems

    found = [f"event_types: {t!r} is not one of {', '.join(APPROVABLE_TYPES)}" for t in s.event_types]
    found = [p for p, t in zip(found, s.event_types, strict=True) if t not in APPROVABLE_TYPES]
    if not s.event_types:
        found.append('event_types is required (e.g. ["Reboot", "Redeploy"]): nothing is approved by default')
    found += [f"sources: {x!r} is not one of {', '.join(SOURCES)}" for x in s.sources if x not in SOURCES]
    if not s.sources:
        found.append(f"sources must name at least one of {', '.join(SOURCES)}")
    if s.max_duration_s is not None and s.max_duration_s < 0:
        found.append("max_duration_s must be a whole number of seconds >= 0")
    if s.quorum != "all" and not (s.quorum.isdigit() and int(s.quorum) >= 1):
        found.append(f'quorum must be "all" or a whole number >= 1, got {s.quorum!r}')
    if not (math.isfinite(s.deadline_s) and s.deadline_s >= 0):
        found.append("deadline_s must be a number of seconds >= 0")
    found += [f"windows: {p} (UTC)" for p in (parse_window(t) for t in s.windows) if isinstance(p, str)]
    if not 0.05 <= s.poll_interval <= 60:
        found.append("poll_interval must be 0.05 to 60 seconds")
    if not 60 <= s.lookback_s <= 7 * 86400:
        found.append("lookback_s must be 60 s to 7 days")
    found += [p.replace("reconcile_arm_endpoint", "arm_endpoint") for p in arm_endpoint_problems(s.arm_endpoint)]
    found += one_of("credential", s.credential, CREDENTIALS)
    if not 15 <= s.lease_s <= 60:
        found.append("lease_s must be 15 to 60 seconds (Azure Storage's lease durations)")
    found += one_of("lease_backend", s.lease_backend, LEASE_BACKENDS)
    if s.lease_backend == "local" and s.lease_dir is None:
        found.append('lease_backend = "local" needs lease_dir: the directory this machine\'s coordinators share')
    blob = s.lease_blob_url or s.lease_connection_string or s.lease_connection_string_file
    if s.lease_backend == "blob" and not blob:
        found.append(
            "the coordinator needs its leases: lease_blob_url (with the identity) or a connection string "
            f'({PREFIX}LEASE_CONNECTION_STRING or lease_connection_string_file), or lease_backend = "local" '
            "with lease_dir for coordinators on one machine"
        )
    if s.lease_backend == "blob" and not s.lease_container:
        found.append("lease_container must name a blob container")
    return found


def load(*, file: Path | None, env: Mapping[str, str], flags: Mapping[str, Any]) -> CoordinatorSettings:
    """The coordinator's settings from flags, ``SEVENTS_COORDINATOR_*`` and the file's ``[coordinator]`` table."""
    return build(
        CoordinatorSettings, file=file, section=SECTION, env=env, flags=flags, prefix=PREFIX, validate=problems
    )
