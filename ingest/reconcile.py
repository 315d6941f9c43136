"""``sevents-ingest reconcile``: Azure's own account of the fleet, read from Azure Resource Graph into ClickHouse.

Theory of operation. One pass (``Reconciler.once``) asks ARG, for the configured subscriptions, four queries
(``ingest.reconcile_rows``): the VM inventory (``Resources`` and, for Uniform scale-set instances,
``ComputeResources``), the Resource Health annotation changes of the last days (``HealthResourceChanges``) and
Microsoft's central scheduled events (``maintenanceresources``). Each query pages through ``$skipToken`` in pages
of up to 1,000 rows; every page is stored as it arrives (``Store.write``), so a pass killed mid-way loses at most
the page in flight. A page is stored idempotently: the stored content hash of its keys is read first and only
rows that are new or changed are inserted, so a repeated pass inserts nothing and a restarted one stores each row
once. Once both inventory queries completed, VMs stored as present for these subscriptions that ARG no longer
lists are written again with ``present = false``.

ARG is reached through its SDK (azure-mgmt-resourcegraph) with a managed or workload identity from azure-identity
(``DefaultAzureCredential``, or ``ManagedIdentityCredential`` alone). Throttling: the SDK's retry policy retries a
429 after ``Retry-After`` or, where ARG sends only its quota headers, after ``x-ms-user-quota-resets-after``
(``QuotaRetryPolicy``); and when a page leaves ``x-ms-user-quota-remaining`` at 0 the next query waits for the
reset instead of running into the 429.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlparse

from azure.core.exceptions import AzureError
from azure.core.pipeline.policies import RetryPolicy

from ingest import lifecycle_store
from ingest import reconcile_rows as rr
from ingest.azure_identity import credential_scope, make_credential
from ingest.clickhouse import CLIENT_ERRORS
from ingest.errors import IngestError
from ingest.migrate import migrate
from ingest.reconcile_rows import Table
from ingest.settings import IngestSettings
from ingest.wiring import open_client
from sevents.errors import ExitCode

log = logging.getLogger("ingest.reconcile")

PAGE_SIZE: Final = 1000  # ARG's maximum $top
QUOTA_WAIT_CAP_S: Final = 300.0  # a quota reset announced further away than this is waited for this long at most
PUBLIC_ARM: Final = "https://management.azure.com"


class ReconcileError(IngestError):
    """ARG could not be asked (credential, network, throttling beyond the retries, a refused query)."""


class Stopped(IngestError):
    """Shutdown was asked for between two pages; what was stored stays stored."""


# What fails a pass without ending a periodic reconciler: ARG, or ClickHouse.
PASS_FAILURES: Final[tuple[type[BaseException], ...]] = (ReconcileError, *CLIENT_ERRORS)


class QuotaRetryPolicy(RetryPolicy[Any, Any]):
    """azure-core's retry policy, which also retries a 429 that has no Retry-After (azure-core retries a POST, as
    every ARG query is, only after a Retry-After or a 500/503/504) and waits out ARG's quota window then."""

    def is_retry(self, settings: dict[str, Any], response: Any) -> bool:
        if response.http_response.status_code == 429 and settings["total"]:
            return True  # a query reads only: repeating it is safe
        return bool(super().is_retry(settings, response))

    def get_retry_after(self, response: Any) -> float | None:
        after = super().get_retry_after(response)
        if after is not None:
            return float(after)
        http = response.http_response
        if http.status_code != 429:
            return None
        resets = rr.duration_seconds(http.headers.get("x-ms-user-quota-resets-after"))
        if resets <= 0:
            return None  # exponential backoff, as for any 429
        log.info("ARG throttled the query (429): waiting for the quota to reset", extra={"wait_s": resets})
        return min(resets, QUOTA_WAIT_CAP_S)


def make_arg_client(credential: Any, arm_endpoint: str) -> Any:
    """A ResourceGraphClient on ``arm_endpoint`` with the quota-aware retry policy."""
    from azure.mgmt.resourcegraph import ResourceGraphClient

    return ResourceGraphClient(
        credential,
        base_url=arm_endpoint.rstrip("/"),
        credential_scopes=[credential_scope(arm_endpoint)],
        retry_policy=QuotaRetryPolicy(),
    )


@dataclass
class Pager:
    """Pages of one ARG query over the subscriptions: ``$skipToken`` paging, waits while the quota is spent."""

    client: Any
    subscriptions: Sequence[str]
    stop: threading.Event
    page_size: int = PAGE_SIZE
    enforce_https: bool = True
    wait: Callable[[float], Any] | None = None  # default: stop.wait
    _quota_wait: float = field(default=0.0, init=False)

    def pages(self, query: str) -> Iterator[list[dict[str, Any]]]:
        from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions

        token: str | None = None
        while True:
            if self._quota_wait > 0:
                log.info("ARG quota spent: waiting for it to reset", extra={"wait_s": self._quota_wait})
                (self.wait or self.stop.wait)(min(self._quota_wait, QUOTA_WAIT_CAP_S))
                self._quota_wait = 0.0
            if self.stop.is_set():
                raise Stopped("stopped between two pages")
            request = QueryRequest(
                subscriptions=list(self.subscriptions),
                query=query,
                options=QueryRequestOptions(skip_token=token, top=self.page_size, result_format="objectArray"),
            )
            try:
                answer, headers = self.client.resources(request, cls=_with_headers, enforce_https=self.enforce_https)
            except AzureError as error:
                raise ReconcileError(f"Azure Resource Graph query failed: {_first_line(error)}") from error
            self._quota_wait = rr.quota_wait(
                headers.get("x-ms-user-quota-remaining"), headers.get("x-ms-user-quota-resets-after")
            )
            data = answer.data if isinstance(answer.data, list) else []
            yield [row for row in data if isinstance(row, dict)]
            token = answer.skip_token
            if not token:
                return


def _with_headers(pipeline_response: Any, deserialized: Any, _: Any) -> tuple[Any, Mapping[str, str]]:
    return deserialized, pipeline_response.http_response.headers


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


class Store:
    """The tables of record in ``database``: each page written once, only its new or changed rows."""

    def __init__(
        self, client: Any, database: str, *, cluster: bool = False, now: Callable[[], datetime] | None = None
    ) -> None:
        self.client = client
        self.database = database
        self.now = now or (lambda: datetime.now(UTC))
        self.settings: dict[str, Any] = {"async_insert": 0}
        if cluster:  # lookups after an insert must see it on every shard
            self.settings["distributed_foreground_insert"] = 1

    def stored(self, table: Table, keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[int, datetime]]:
        """The latest stored (row_hash, first_seen_at) of each of ``keys`` that is stored."""
        if not keys:
            return {}
        where = " AND ".join(f"{k} IN {{k{i}:Array(String)}}" for i, k in enumerate(table.key))
        columns = ", ".join(table.key)
        sql = (
            f"SELECT {columns}, argMax(row_hash, reconciled_at), min(first_seen_at) "  # noqa: S608 -- our names; values bound
            f"FROM {self.database}.{table.name} WHERE {where} GROUP BY {columns}"
        )
        params = {f"k{i}": sorted({str(key[i]) for key in keys}) for i in range(len(table.key))}
        rows = self.client.query(sql, parameters=params).result_rows
        width = len(table.key)
        return {tuple(row[:width]): (int(row[width]), _aware(row[width + 1])) for row in rows}

    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> int:
        """Store the new or changed ``rows`` of one page; returns how many were inserted."""
        latest = {table.key_of(row): row for row in rows}  # a key twice in one page: its last row
        now = self.now()
        candidates = [(key, row, now, now) for key, row in latest.items()]
        out = rr.changed_rows(table, candidates, self.stored(table, list(latest)))
        if out:
            self.client.insert(
                f"{self.database}.{table.name}",
                out,
                column_names=[*table.columns, *rr.BOOKKEEPING],
                settings=self.settings,
            )
            lifecycle_store.refresh(self.client, self.database, rr.event_ids(table, out), self.settings)
        return len(out)

    def present_vms(self, subscriptions: Sequence[str]) -> list[dict[str, Any]]:
        """The VMs stored as present in ``subscriptions``, as rows of ``azure_vms``."""
        columns = ", ".join(rr.VM_COLUMNS)
        sql = (
            f"SELECT {columns} FROM {self.database}.azure_vms FINAL "  # noqa: S608 -- our names; values bound
            "WHERE present AND subscription_id IN {subs:Array(String)}"
        )
        result = self.client.query(sql, parameters={"subs": [s.lower() for s in subscriptions]})
        return [dict(zip(rr.VM_COLUMNS, row, strict=True)) for row in result.result_rows]

    def vm_ids_of(self, resource_ids: Sequence[str]) -> dict[str, str]:
        """resource id -> vmId of the stored VMs among ``resource_ids`` (present or not)."""
        if not resource_ids:
            return {}
        sql = (
            f"SELECT resource_id, argMax(vm_id, reconciled_at) FROM {self.database}.azure_vms "  # noqa: S608
            "WHERE resource_id IN {ids:Array(String)} GROUP BY resource_id"
        )
        rows = self.client.query(sql, parameters={"ids": sorted(set(resource_ids))}).result_rows
        return {str(r): str(v) for r, v in rows}


def _aware(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.now(UTC)


@dataclass
class Tally:
    """What one query of a pass did: pages read, rows ARG gave, rows inserted (new or changed)."""

    pages: int = 0
    fetched: int = 0
    stored: int = 0


@dataclass
class Summary:
    """One pass: a tally per table, and the VMs marked gone."""

    vms: Tally = field(default_factory=Tally)
    annotations: Tally = field(default_factory=Tally)
    scheduled_events: Tally = field(default_factory=Tally)
    vms_gone: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        def part(name: str, t: Tally) -> str:
            return f"{t.fetched} {name} ({t.stored} new or changed, {t.pages} pages)"

        return (
            f"reconciled {part('VMs', self.vms)}, {self.vms_gone} VMs gone, "
            f"{part('annotation changes', self.annotations)}, "
            f"{part('scheduled events', self.scheduled_events)} in {self.seconds:.1f} s"
        )


@dataclass
class Reconciler:
    """One pass over ARG into the store (``once``); the CLI repeats it every interval."""

    pager: Pager
    store: Store
    subscriptions: Sequence[str]
    annotation_days: int = rr.MAX_ANNOTATION_DAYS

    def once(self) -> Summary:
        started = time.monotonic()
        summary = Summary()
        seen: dict[str, str] = {}  # resource id -> vmId, of every VM ARG listed in this pass
        for query, source in ((rr.VMS_QUERY, "Resources"), (rr.SCALE_SET_VMS_QUERY, "ComputeResources")):
            self._pages(
                query, rr.VMS, summary.vms, functools.partial(rr.vm_row, source_table=source), on_row=seen.__setitem__
            )
        summary.vms_gone = self._mark_gone(seen)
        resolve = _Resolver(seen, self.store)
        self._pages(
            rr.annotations_query(self.annotation_days),
            rr.ANNOTATIONS,
            summary.annotations,
            lambda item: rr.annotation_row(item, resolve),
            before_page=resolve.prefetch,
        )
        self._pages(rr.SCHEDULED_EVENTS_QUERY, rr.SCHEDULED_EVENTS, summary.scheduled_events, rr.event_row)
        summary.seconds = time.monotonic() - started
        return summary

    def _pages(
        self,
        query: str,
        table: Table,
        tally: Tally,
        convert: Callable[[dict[str, Any]], dict[str, Any] | None],
        *,
        on_row: Callable[[str, str], Any] | None = None,
        before_page: Callable[[list[dict[str, Any]]], Any] | None = None,
    ) -> None:
        for page in self.pager.pages(query):
            if before_page is not None:
                before_page(page)
            rows = [row for row in map(convert, page) if row is not None]
            if on_row is not None:
                for row in rows:
                    on_row(row["resource_id"], row["vm_id"])
            stored = self.store.write(table, rows)
            tally.pages += 1
            tally.fetched += len(rows)
            tally.stored += stored
            extra = {"table": table.name, "page": tally.pages, "rows": len(rows), "stored": stored}
            log.info("reconcile page stored", extra={**extra, "skipped": len(page) - len(rows)})

    def _mark_gone(self, seen: Mapping[str, str]) -> int:
        """VMs stored as present that this complete inventory no longer lists: written again as not present."""
        vm_ids = set(seen.values())
        present = self.store.present_vms(self.subscriptions)
        if not vm_ids and present:
            log.warning(
                "ARG listed no VM in the subscriptions: not marking the %d stored VMs gone (check the Reader role)",
                len(present),
            )
            return 0
        gone = [{**row, "present": False} for row in present if row["vm_id"] not in vm_ids]
        return self.store.write(rr.VMS, gone) if gone else 0


class _Resolver:
    """resource id -> vmId for annotations: the VMs of this pass, else those stored (one lookup per page)."""

    def __init__(self, seen: Mapping[str, str], store: Store) -> None:
        self.known = dict(seen)
        self.store = store

    def prefetch(self, page: list[dict[str, Any]]) -> None:
        wanted = {rr.vm_resource_id(rr.text(item.get("targetResourceId"))) for item in page}
        missing = sorted(r for r in wanted if r and r not in self.known)
        found = self.store.vm_ids_of(missing)
        self.known.update({r: found.get(r, "") for r in missing})

    def __call__(self, resource_id: str) -> str:
        return self.known.get(resource_id, "")


def run(settings: IngestSettings, stop: threading.Event, *, once: bool, apply_migrations: bool = True) -> int:
    """``sevents-ingest reconcile``: one pass (``once``) or a pass every ``reconcile_interval`` seconds until
    ``stop``. Returns the exit code: 0, 1 when a pass failed (``once``), 2 without subscriptions."""
    if not settings.reconcile_subscriptions:
        print(
            "sevents-ingest: reconcile needs at least one subscription: --subscription ID (repeatable), "
            "reconcile_subscriptions in the [ingest] table of --config, or SEVENTS_RECONCILE_SUBSCRIPTIONS",
            file=sys.stderr,
        )
        return int(ExitCode.INVALID)
    client = open_client(settings, stop)
    if apply_migrations:
        applied = migrate(client, settings.target)
        if applied:
            log.info("schema migrated", extra={"versions": applied})
    endpoint = settings.reconcile_arm_endpoint
    arg = make_arg_client(make_credential(settings.reconcile_credential, settings.reconcile_client_id), endpoint)
    subscriptions = [s.lower() for s in settings.reconcile_subscriptions]
    reconciler = Reconciler(
        Pager(arg, subscriptions, stop, enforce_https=urlparse(endpoint).scheme == "https"),
        Store(client, settings.database, cluster=bool(settings.cluster)),
        subscriptions,
        settings.reconcile_annotation_days,
    )
    log.info(
        "reconcile running",
        extra={"subscriptions": len(subscriptions), "arm_endpoint": endpoint, "once": once},
    )
    try:
        while not stop.is_set():
            try:
                summary = reconciler.once()
            except Stopped:
                break
            except PASS_FAILURES as error:
                if once:
                    print(f"sevents-ingest: reconcile failed: {_first_line(error)}", file=sys.stderr)
                    return int(ExitCode.FAILED)
                log.error("reconcile pass failed; next pass at the interval", extra={"error": _first_line(error)})
            else:
                log.info(summary.line())
                if once:
                    print(summary.line())
                    return 0
            stop.wait(settings.reconcile_interval)
    finally:
        arg.close()
    log.info("reconcile stopped")
    return 0
