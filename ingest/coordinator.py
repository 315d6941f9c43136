"""``sevents-ingest coordinate``: approve an event naming several VMs once every one of them is ready.

Theory of operation. Collectors with ``[approval] multi_vm = "coordinator"`` run their pre-hook on an event that
names several VMs and record ``ready`` (or ``hook_failed``, ``hook_timeout``, ``hook_interrupted``); none of them
approves it. Those records reach the ``approvals`` table within about a second. Every ``poll_interval`` the
coordinator reads the recent ones (``decided_at`` within ``lookback_s``: the cost follows the recent rows, not
the history) and, for each event with a ``ready`` record and no coordinator decision yet, the event's last known
Resources, EventSource and DurationInSeconds from ``transitions``. ``judge`` then applies the ``[coordinator]``
rules, in order: the event type, its source, its duration, still Scheduled, the deadline (from NotBefore minus
``deadline_s`` on the event is left to the platform), a failed hook (nothing approved, whatever the quorum), and
the quorum (``all``: every VM Resources names is ready; a number: that many of them), then the windows.

Exactly one coordinator acts per event. Each event has a lease (``lease_s``) the deciding coordinator holds: a blob
in Azure Storage (coordinator_azure.py) or, with ``lease_backend = "local"``, a SQLite row in ``lease_dir`` for
coordinators on one machine (coordinator_leases.py). The lease keeps the event's stage, written under that lease
before each step that cannot be taken back: ``sending`` (with the record to store if no answer is heard) before the
acknowledge POST, ``decided`` (with the final record) after it, ``done`` once the record is stored. A coordinator
killed at any point leaves the lease to expire; the next one to take it finds the stage and finishes: ``sending`` or
``decided`` are stored as kept (an approval sent whose answer nobody heard is recorded ``approved`` with no HTTP
status, as the collectors do), never POSTed again. A coordinator that stalled past its lease can no longer write the
stage, so it never POSTs after another took over.

Every decision is an ``approval`` record like the collectors' (``vm_id`` "coordinator", so that the same decision
stored twice is one row; ``vm_name`` and ``approver`` name the coordinator; the subscription, resource group and
resource are those of the VM the event was acknowledged on): ``approved`` (http_status 200), ``approve_failed``,
``dry_run_approved``, or ``not_covered`` with the rule that left the event to the platform (``event_type``,
``source``, ``duration``, ``scheduled``, ``deadline``, ``hook_failed``, ``window``, ``no_resource``).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

from collector.windows import within
from ingest.coordinator_settings import CoordinatorSettings
from ingest.errors import LeaseLost
from sevents import contract, records
from sevents.version import version

log = logging.getLogger("ingest.coordinator")

COORDINATOR_VM_ID: Final = "coordinator"  # the vm_id of every coordinator's records: one row per event and decision
READY: Final = records.DECISION_READY
NOT_READY: Final = (records.DECISION_HOOK_FAILED, records.DECISION_HOOK_TIMEOUT, records.DECISION_HOOK_INTERRUPTED)
APPROVE, LEAVE, WAIT = "approve", "leave", "wait"
SENDING, DECIDED, DONE = "sending", "decided", "done"


@dataclass(frozen=True)
class Report:
    """One VM's decision record about one event, as stored."""

    event_id: str
    vm_id: str
    vm_name: str
    decision: str
    event_type: str
    not_before: datetime | None
    decided_at: datetime
    subscription_id: str = ""
    resource_group: str = ""
    resource_id: str = ""
    location: str = ""


@dataclass(frozen=True)
class Facts:
    """What the collectors' transitions say of an event: its last Resources, source, duration; started or gone."""

    resources: tuple[str, ...]
    event_source: str | None
    duration_s: int | None
    over: bool


@dataclass(frozen=True)
class Verdict:
    action: str  # APPROVE, LEAVE or WAIT
    rule: str
    target: Report | None = None  # the ready VM the event is acknowledged on
    ready: tuple[str, ...] = ()


def judge(s: CoordinatorSettings, reports: Sequence[Report], facts: Facts | None, now: datetime) -> Verdict:
    """What to do about one event now, from its VMs' latest records and its transitions."""
    latest: dict[str, Report] = {}
    for r in sorted(reports, key=lambda r: r.decided_at):
        latest[r.vm_name.lower()] = r
    ready = {name: r for name, r in latest.items() if r.decision == READY}
    failed = sorted(name for name, r in latest.items() if r.decision in NOT_READY)
    first = next(iter(ready.values()), None) or next(iter(latest.values()), None)
    if first is None:
        return Verdict(WAIT, "")
    if first.event_type not in s.event_types:
        return Verdict(LEAVE, "event_type", first)
    if facts is not None and facts.event_source is not None and facts.event_source not in s.sources:
        return Verdict(LEAVE, "source", first)
    limit = s.max_duration_s
    if facts is not None and limit is not None and (facts.duration_s is None or not 0 <= facts.duration_s <= limit):
        return Verdict(LEAVE, "duration", first)
    if facts is not None and facts.over:
        return Verdict(LEAVE, "scheduled", first)  # Started or gone: too late to approve
    not_before = min((r.not_before for r in latest.values() if r.not_before is not None), default=None)
    if not_before is None or now >= not_before - timedelta(seconds=s.deadline_s):
        return Verdict(LEAVE, "hook_failed" if failed else "deadline", first, tuple(sorted(ready)))
    if failed or facts is None:
        return Verdict(WAIT, "hook_failed" if failed else "resources")  # until the deadline
    affected = [r for r in dict.fromkeys(x.lower() for x in facts.resources)]
    ready_affected = [name for name in affected if name in ready]
    needed = len(affected) if s.needed is None else min(s.needed, len(affected))
    if not affected or len(ready_affected) < needed:
        return Verdict(WAIT, "quorum", None, tuple(ready_affected))
    if not within(s.parsed_windows, now):
        return Verdict(LEAVE, "window", ready[ready_affected[0]], tuple(ready_affected))
    return Verdict(APPROVE, "coordinator", ready[ready_affected[0]], tuple(ready_affected))


class Store:
    """The coordinator's reads of ``approvals`` and ``transitions``, and its writes of its own records."""

    def __init__(self, client: Any, database: str) -> None:
        self.client, self.database = client, database

    def recent(self, since: datetime) -> tuple[dict[str, list[Report]], set[str]]:
        """Per event, the collectors' readiness records decided since ``since``; and the events a coordinator
        already decided about."""
        sql = (
            "SELECT event_id, vm_id, vm_name, decision, event_type, not_before, decided_at, subscription_id, "  # noqa: S608
            f"resource_group, resource_id, location FROM {self.database}.approvals "
            "WHERE decided_at >= fromUnixTimestamp64Milli({since:Int64}, 'UTC') "
            "AND (decision IN {decisions:Array(String)} OR vm_id = {coordinator:String})"
        )
        params = {
            "since": int(since.timestamp() * 1000),
            "decisions": [READY, *NOT_READY],
            "coordinator": COORDINATOR_VM_ID,
        }
        per_event: dict[str, list[Report]] = {}
        decided: set[str] = set()
        for row in self.client.query(sql, parameters=params).result_rows:
            report = Report(
                str(row[0]),
                str(row[1]),
                str(row[2]),
                str(row[3]),
                str(row[4]),
                _aware(row[5]),
                _aware(row[6]) or since,
                *(str(v) for v in row[7:]),
            )
            if report.vm_id == COORDINATOR_VM_ID:
                decided.add(report.event_id)
            else:
                per_event.setdefault(report.event_id, []).append(report)
        return per_event, decided

    def facts(self, event_ids: Iterable[str], since: datetime) -> dict[str, Facts]:
        ids = sorted(set(event_ids))
        if not ids:
            return {}
        sql = (
            "SELECT event_id, argMaxIf(resources, observed_at, notEmpty(resources)), "  # noqa: S608
            "argMax(event_source, observed_at), argMax(duration_s, observed_at), "
            "max(status = 'Started' OR kind = 'disappeared') "
            f"FROM {self.database}.transitions "
            "WHERE observed_at >= fromUnixTimestamp64Milli({since:Int64}, 'UTC') "
            "AND event_id IN {ids:Array(String)} AND kind != 'anomaly' GROUP BY event_id"
        )
        params = {"since": int(since.timestamp() * 1000), "ids": ids}
        rows = self.client.query(sql, parameters=params).result_rows
        return {str(r[0]): Facts(tuple(r[1]), None if r[2] is None else str(r[2]), r[3], bool(r[4])) for r in rows}

    def write(self, record: Mapping[str, Any]) -> None:
        """Store one of the coordinator's records in ``approvals``, with the columns the ingest gives them."""
        row = []
        for f in contract.APPROVAL:
            value = record[f.name]
            row.append(records.parse_time(value) if f.kind == "time" and value is not None else value)
        self.client.insert(
            f"{self.database}.approvals",
            [row],
            column_names=list(records.APPROVAL_FIELDS),
            settings={"async_insert": 0},
        )


def _aware(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return records.parse_time(str(value))


def coordinator_record(
    s: CoordinatorSettings,
    event_id: str,
    verdict: Verdict,
    decision: str,
    decided_at: datetime,
    *,
    http_status: int | None = None,
    resource: str = "",
) -> dict[str, Any]:
    """The ``approval`` record of one coordinator decision (the collectors' fields; vm_id "coordinator")."""
    target = verdict.target
    name = s.coordinator_name
    record_id = records.approval_id(COORDINATOR_VM_ID, event_id, decision)
    at = records.format_time(decided_at)
    return {
        "schema_version": records.SCHEMA_VERSION,
        "record_type": records.RECORD_APPROVAL,
        "record_id": record_id,
        "seq": int(decided_at.timestamp() * 1000),
        "observed_at": at,
        "api_version": s.api_version,
        "collector_version": version(),
        "vm_id": COORDINATOR_VM_ID,
        "vm_name": name,
        "location": target.location if target else "",
        "subscription_id": target.subscription_id if target else "",
        "resource_group": target.resource_group if target else "",
        "resource_id": resource,
        "zone": "",
        "fault_domain": None,
        "update_domain": None,
        "scale_set": "",
        "approval_id": record_id,
        "event_id": event_id,
        "decision": decision,
        "rule": verdict.rule,
        "approver": name if decision != records.DECISION_NOT_COVERED else "",
        "event_type": target.event_type if target else "",
        "not_before": None if target is None or target.not_before is None else records.format_time(target.not_before),
        "hook_exit": None,
        "hook_ms": None,
        "http_status": http_status,
        "decided_at": at,
    }


class Acks(Protocol):
    def acknowledge(self, resource: str, event_id: str) -> tuple[int | None, str]: ...


class Leases(Protocol):
    def hold(self, event_id: str) -> Any: ...


@dataclass
class Coordinator:
    settings: CoordinatorSettings
    store: Store
    acks: Acks
    leases: Leases
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    done: set[str] = field(default_factory=set)  # events decided (by anyone): never looked at again

    def once(self) -> int:
        """One look at the recent decisions; returns how many events were decided (here or resumed)."""
        now = self.clock()
        since = now - timedelta(seconds=self.settings.lookback_s)
        per_event, decided = self.store.recent(since)
        self.done |= decided
        waiting = {
            e: reports
            for e, reports in per_event.items()
            if e not in self.done and any(r.decision == READY for r in reports)
        }
        facts = self.store.facts(waiting, since) if waiting else {}
        acted = 0
        for event_id, reports in waiting.items():
            verdict = judge(self.settings, reports, facts.get(event_id), self.clock())
            if verdict.action == WAIT:
                continue
            if self._decide(event_id, verdict):
                acted += 1
        return acted

    def _decide(self, event_id: str, verdict: Verdict) -> bool:
        from ingest.coordinator_azure import ack_resource

        with self.leases.hold(event_id) as held:
            if held is None:
                return False  # another coordinator holds it; it is looked at again at the next poll
            try:
                state = held.read()
                stage = state.get("stage")
                if stage == DONE:
                    self.done.add(event_id)
                    return False
                if stage in (SENDING, DECIDED):  # another coordinator stopped mid-way: finish its decision
                    log.warning(
                        "resuming a decision another coordinator did not finish",
                        extra={"event_id": event_id, "stage": stage, "decision": state["record"]["decision"]},
                    )
                    self._store(held, event_id, state["record"])
                    return True
                now = self.clock()
                target = verdict.target
                resource = (
                    ack_resource(target.resource_id, target.subscription_id, target.resource_group, target.vm_name)
                    if target
                    else ""
                )
                if verdict.action == APPROVE and not resource:
                    verdict = Verdict(LEAVE, "no_resource", target, verdict.ready)
                if verdict.action == LEAVE:
                    record = coordinator_record(self.settings, event_id, verdict, records.DECISION_NOT_COVERED, now)
                    log.info("event left to the platform", extra={"event_id": event_id, "rule": verdict.rule})
                elif self.settings.dry_run:
                    record = coordinator_record(
                        self.settings, event_id, verdict, records.DECISION_DRY_RUN_APPROVED, now, resource=resource
                    )
                    log.info("dry run: event not approved", extra={"event_id": event_id, "ready": len(verdict.ready)})
                else:
                    record = self._approve(held, event_id, verdict, resource)
                held.write({"stage": DECIDED, "record": record})
                self._store(held, event_id, record)
                return True
            except LeaseLost as error:
                log.warning(
                    "lease lost: another coordinator finishes this event",
                    extra={"event_id": event_id, "error": str(error)},
                )
                return False

    def _approve(self, held: Any, event_id: str, verdict: Verdict, resource: str) -> dict[str, Any]:
        unheard = coordinator_record(
            self.settings, event_id, verdict, records.DECISION_APPROVED, self.clock(), resource=resource
        )
        held.write({"stage": SENDING, "record": unheard})  # from here on, nobody POSTs this event again
        status, answer = self.acks.acknowledge(resource, event_id)
        held.renew()  # still ours: the answer is ours to record
        if status is None:
            log.error("acknowledge unanswered: recorded as approved", extra={"event_id": event_id, "error": answer})
            return unheard
        decision = records.DECISION_APPROVED if 200 <= status < 300 else records.DECISION_APPROVE_FAILED
        extra = {"event_id": event_id, "status": status, "ready": list(verdict.ready), "resource": resource}
        if decision == records.DECISION_APPROVED:
            log.info("event approved", extra=extra)
        else:
            log.error("acknowledge refused", extra={**extra, "answer": answer})
        return coordinator_record(
            self.settings, event_id, verdict, decision, self.clock(), http_status=status, resource=resource
        )

    def _store(self, held: Any, event_id: str, record: Mapping[str, Any]) -> None:
        self.store.write(record)
        held.write({"stage": DONE, "record": record})
        self.done.add(event_id)


def run(
    settings: CoordinatorSettings,
    client: Any,
    database: str,
    stop: threading.Event,
    *,
    once: bool,
    acks: Acks | None = None,
    leases: Leases | None = None,
) -> int:
    """``sevents-ingest coordinate``: look every ``poll_interval`` (or once) until ``stop``; the exit code.
    ``acks``, ``leases``: given by the caller (the demo's simulator), else built from ``settings``."""
    name = settings.coordinator_name
    own_acks = acks or _acknowledger(settings)
    own_leases = leases or make_leases(settings)
    coordinator = Coordinator(settings, Store(client, database), own_acks, own_leases)
    log.info("coordinator running", extra={"coordinator": name, "once": once, "quorum": settings.quorum})
    try:
        while not stop.is_set():
            try:
                coordinator.once()
            except Exception as error:  # ClickHouse, Azure (storage, identity): the next pass tries again
                if once:
                    print(f"sevents-ingest: coordinate failed: {str(error).splitlines()[0]}", file=sys.stderr)
                    return 1
                log.exception("coordinator pass failed; next at the interval")
            if once:
                return 0
            stop.wait(settings.poll_interval)
    finally:
        for thing in (own_acks, own_leases):
            closer = getattr(thing, "close", None)
            if closer is not None and thing not in (acks, leases):
                closer()
    log.info("coordinator stopped")
    return 0


def _acknowledger(settings: CoordinatorSettings) -> Acks:
    from ingest.azure_identity import make_credential
    from ingest.coordinator_azure import Acknowledger

    credential = make_credential(settings.credential, settings.client_id)
    name = settings.coordinator_name
    return Acknowledger(
        credential, settings.arm_endpoint, settings.api_version, name=name, timeout_s=settings.lease_s / 3
    )


def make_leases(settings: CoordinatorSettings) -> Leases:
    """The leases ``lease_backend`` names: a blob per event in Azure Storage, or a row per event in ``lease_dir``."""
    if settings.lease_backend == "local":
        from ingest.coordinator_leases import LocalLeases

        assert settings.lease_dir is not None  # the settings' problems say so first
        return LocalLeases(settings.lease_dir, settings.lease_s)
    from ingest.azure_identity import make_credential
    from ingest.coordinator_azure import BlobLeases

    return BlobLeases.from_settings(
        settings.connection_string(),
        settings.lease_blob_url,
        settings.lease_container,
        make_credential(settings.credential, settings.client_id),
        settings.lease_s,
    )
