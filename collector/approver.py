"""Acting on the approval policy: run each event's hooks, approve through IMDS, and store every decision.

Theory of operation. After every successful poll the agent offers the committed snapshot (``offer``). Each
event is decided once (``collector.approval.decide``): an event the policy does not cover gets a
``not_covered`` record naming the rule it failed (only events of this VM: the others are not ours to judge);
a covered one becomes a job. A job runs the pre-approval hook (each VM drains itself), then the approver POSTs
StartRequests; an event whose hook ran gets the post-event hook once it is gone from the document. Jobs run on
the ``collector-approver`` thread (``run``), so a drain that takes minutes never holds the poll loop; without
that thread (``sevents-collector once``, harnesses) they run at once in the caller's thread. Every outcome is
committed to the outbox as an ``approval`` record, alone (no snapshot), like a heartbeat.

Decided events are remembered in memory only: after a restart an event still Scheduled is decided again, and
its hook runs again (approving twice is harmless; hooks must be idempotent, as the README says).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Optional

from collector import hooks
from collector.approval import ACT, DRAIN_ONLY, ApprovalPolicy, decide
from collector.enrich import approval_record
from collector.imds import ImdsClient, ImdsError, ImdsInterrupted
from collector.model import ApprovalOutcome, Event, Snapshot, VmIdentity
from collector.outbox import Outbox, OutboxError
from sevents import records

log = logging.getLogger(__name__)

DECIDED_KEPT: Final = 4096  # event ids remembered; far more than a VM ever has at once
APPROVE_DEADLINE_S: Final = 30.0  # retries of one approval: well inside the shortest notice (Freeze: 15 min)


@dataclass(frozen=True)
class _Job:
    event: Event
    rule: str
    approver: str
    approve: bool  # False: drain only (another VM approves), or a post-event job
    post: bool  # the post-event hook of an event now gone
    incarnation: Optional[int]


class Approver:
    """Decides about each event once and carries out the decision; ``run(stop)`` is its worker."""

    def __init__(
        self,
        policy: ApprovalPolicy,
        client: ImdsClient,
        outbox: Outbox,
        *,
        clock: Callable[[], datetime],
        collector_version: str,
        on_fault: Callable[[str], None] = lambda kind: None,
    ) -> None:
        self.policy = policy
        self._client, self._outbox, self._clock = client, outbox, clock
        self._version = collector_version
        self._on_fault = on_fault
        self._decided: dict[str, bool] = {}  # event id -> whether its pre-hook runs (so the post-hook too)
        self._events_seen: dict[str, Event] = {}  # events whose pre-hook ran: what their post-hook is told
        self._jobs: queue.Queue[tuple[_Job, VmIdentity]] = queue.Queue()
        self._running = False

    def offer(self, snapshot: Snapshot, vm: VmIdentity, stop: threading.Event) -> None:
        """Decide about the events of ``snapshot`` not decided yet, and queue the post-hooks of those gone."""
        if not self.policy.enabled:
            return
        present = {t.event.event_id: t.event for t in snapshot.events}
        for event_id, event in present.items():
            if event_id in self._decided:
                continue
            decision = decide(self.policy, event, vm.vm_name)
            hooked = decision.action in (ACT, DRAIN_ONLY)
            self._remember(event_id, hooked)
            if hooked:
                job = _Job(event, decision.rule, decision.approver, decision.action == ACT, False, snapshot.incarnation)
                self._submit(job, vm, stop)
            elif decision.rule != "in_resources":
                self._store(ApprovalOutcome(records.DECISION_NOT_COVERED, decision.rule, "", self._clock()), event, vm)
        for event_id, hooked in list(self._decided.items()):
            if hooked and event_id not in present and self.policy.post_hook:
                self._decided[event_id] = False  # once
                gone = self._events_seen.pop(event_id, None)
                if gone is not None:
                    self._submit(_Job(gone, "post_hook", "", False, True, None), vm, stop)

    def run(self, stop: threading.Event) -> None:
        """Carry out queued jobs until ``stop`` (a hook running then is killed, and its decision stored)."""
        self._running = True
        try:
            while not stop.is_set():
                try:
                    job, vm = self._jobs.get(timeout=0.2)
                except queue.Empty:
                    continue
                self._perform(job, vm, stop)
        finally:
            self._running = False

    # -- internals ---------------------------------------------------------------------------------------
    def _remember(self, event_id: str, hooked: bool) -> None:
        self._decided[event_id] = hooked
        while len(self._decided) > DECIDED_KEPT:
            oldest = next(iter(self._decided))
            del self._decided[oldest]
            self._events_seen.pop(oldest, None)

    def _submit(self, job: _Job, vm: VmIdentity, stop: threading.Event) -> None:
        if not job.post:
            self._events_seen[job.event.event_id] = job.event
        if self._running:
            self._jobs.put((job, vm))
        else:
            self._perform(job, vm, stop)

    def _perform(self, job: _Job, vm: VmIdentity, stop: threading.Event) -> None:
        try:
            outcome = self._carry_out(job, vm, stop)
        except Exception:  # a job must never take the collector down; the log says what broke
            self._on_fault("approval_internal")
            log.exception("approval job failed", extra={"event_id": job.event.event_id})
            return
        self._store(outcome, job.event, vm)

    def _carry_out(self, job: _Job, vm: VmIdentity, stop: threading.Event) -> ApprovalOutcome:
        argv = self.policy.post_hook if job.post else self.policy.pre_hook
        result = None
        if argv:
            result = hooks.run_hook(argv, _hook_fields(job, vm), timeout_s=self.policy.hook_timeout_s, stop=stop)
            _log_hook(job, result)
        hook_exit = None if result is None else result.exit_code
        hook_ms = None if result is None else int(result.duration_s * 1000)

        def outcome(decision: str, http_status: int | None = None) -> ApprovalOutcome:
            return ApprovalOutcome(decision, job.rule, job.approver, self._clock(), hook_exit, hook_ms, http_status)

        if job.post:
            return outcome(records.DECISION_POST_HOOK)
        if result is not None and not result.ok:
            return outcome(records.DECISION_HOOK_TIMEOUT if result.timed_out else records.DECISION_HOOK_FAILED)
        if not job.approve:
            return outcome(records.DECISION_LEFT_TO_APPROVER)
        try:
            self._client.approve(stop, [job.event.event_id], job.incarnation, deadline_s=APPROVE_DEADLINE_S)
        except ImdsInterrupted:
            return outcome(records.DECISION_APPROVE_FAILED)
        except ImdsError as error:
            self._on_fault("approve_" + error.kind)
            log.error(
                "approval not accepted by IMDS",
                extra={"event_id": job.event.event_id, "kind": error.kind, "status": error.status},
            )
            return outcome(records.DECISION_APPROVE_FAILED, error.status)
        log.info("event approved", extra={"event_id": job.event.event_id, "rule": job.rule})
        return outcome(records.DECISION_APPROVED, 200)

    def _store(self, outcome: ApprovalOutcome, event: Event, vm: VmIdentity) -> None:
        record = approval_record(
            outcome, event, vm, api_version=self._client.api_version, collector_version=self._version
        )
        try:
            self._outbox.commit([record], None)
        except OutboxError as error:  # the decision stands; only its record is lost, and the log keeps it
            self._on_fault("approval_not_stored")
            log.error(
                "approval decision not stored",
                extra={"event_id": event.event_id, "decision": outcome.decision, "error": str(error)},
            )


def _hook_fields(job: _Job, vm: VmIdentity) -> dict[str, Any]:
    """What a hook learns about its event: the Scheduled Events fields, this VM, and the phase."""
    e = job.event
    return {
        "phase": "post" if job.post else "pre",
        "event_id": e.event_id,
        "event_type": e.event_type,
        "event_status": e.status,
        "resource_type": e.resource_type,
        "resources": list(e.resources),
        "not_before": None if e.not_before is None else records.format_time(e.not_before),
        "event_source": e.event_source,
        "duration_s": e.duration_s,
        "description": e.description,
        "vm_name": vm.vm_name,
        "approver": job.approver,
        "will_approve": job.approve,
    }


def _log_hook(job: _Job, result: hooks.HookResult) -> None:
    extra = {
        "event_id": job.event.event_id,
        "phase": "post" if job.post else "pre",
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 3),
    }
    if result.ok:
        log.info("hook succeeded", extra=extra)
    else:  # the tail of its output says why; it is the operator's own script's output
        log.warning(
            "hook failed" + (" (killed at its timeout)" if result.timed_out else ""),
            extra={**extra, "output": result.output[-1024:]},
        )
