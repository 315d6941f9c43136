"""Acting on the approval policy: run each event's hooks, approve through IMDS, and store every decision.

Theory of operation. After every successful poll the agent offers the committed snapshot (``offer``). Each
event is decided once (``collector.approval.decide``): an event the policy does not cover gets a
``not_covered`` record naming the rule it failed (only events of this VM: the others are not ours to judge);
a covered one becomes a job. A job runs the pre-approval hook (each VM drains itself), then the approver POSTs
StartRequests; an event whose hook ran gets the post-event hook once it is gone from the document. Jobs run on
the ``collector-approver`` thread (``run``), so a drain that takes minutes never holds the poll loop; without
that thread (``sevents-collector once``, harnesses) they run at once in the caller's thread. Every outcome is
committed to the outbox as an ``approval`` record, alone (no snapshot), like a heartbeat.

Durable before sent. What was decided is kept in the outbox's state (``LEDGER_KEY``), written before each step
that cannot be taken back: a restart (the VM rebooting right after its approval, say) neither decides an event
again nor loses the record of an approval it sent. An approval sent whose answer the collector did not live to
hear is recorded at the next start as ``approved`` with no HTTP status. A collector stopped while a pre-hook ran
runs it again (hooks must be idempotent); one stopped while a post-hook ran does not.

Observe before acting. With ``dry_run`` every decision is made and recorded as usual, except that the approval
is never POSTed: the decision that would have sent it is recorded as ``dry_run_approved``; hooks run only with
``dry_run_hooks``. Maintenance windows are checked when the event is decided and again just before the POST
(a long drain may end after its window closed): outside them the event is left to the platform, recorded as
``not_covered`` with the rule ``window``.

Events naming several VMs. With ``multi_vm = "coordinator"`` (the default) a covered VM runs its pre-hook and records
``ready`` (hook succeeded, or none), never POSTing: the central coordinator approves once the event's VMs are
ready (``ingest/coordinator.py``). In a dry run it records ``left_to_approver`` instead, which no coordinator acts
on; ``multi_vm = "approve-without-waiting"`` lets the approver go ahead alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Optional

from collector import hooks
from collector.approval import (
    ACT,
    COORDINATOR,
    DRAIN_ONLY,
    USER_INITIATED,
    ApprovalPolicy,
    decide,
    in_window,
)
from collector.enrich import approval_record
from collector.imds import ImdsClient, ImdsError, ImdsInterrupted
from collector.model import ApprovalOutcome, Event, Snapshot, VmIdentity, event_from_json, event_to_json
from collector.outbox import Outbox, OutboxError
from sevents import records

log = logging.getLogger(__name__)

DECIDED_KEPT: Final = 4096  # event ids remembered; far more than a VM ever has at once
APPROVE_DEADLINE_S: Final = 30.0  # retries of one approval: well inside the shortest notice (Freeze: 15 min)
LEDGER_KEY: Final = "approvals"  # the outbox state key of what was decided
NOTICE_KEY: Final = "notice_scheduled_events"  # the outbox state key: the first-start notice was given
# The stages of an event in the ledger: its pre-hook may be running, its approval may have been sent, or it is done.
HOOK, SENDING, DONE = "hook", "sending", "done"


@dataclass(frozen=True)
class _Job:
    event: Event
    rule: str
    approver: str
    approve: bool  # False: drain only (another VM approves), or a post-event job
    post: bool  # the post-event hook of an event now gone
    incarnation: Optional[int]
    hooks: bool = True  # False: no hook runs for this event (user-initiated, or a dry run without hooks)


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
        on_decision: Callable[[str], None] = lambda decision: None,
        on_hook: Callable[[str, str], None] = lambda phase, outcome: None,
    ) -> None:
        self.policy = policy
        self._client, self._outbox, self._clock = client, outbox, clock
        self._version = collector_version
        self.on_fault = on_fault  # the agent counts each fault (health)
        self.on_decision = on_decision  # each decision made (metrics)
        self.on_hook = on_hook  # each hook run (metrics)
        self._decided: dict[str, bool] = {}  # event id -> whether its post-hook runs once it is gone
        self._events_seen: dict[str, Event] = {}  # events whose pre-hook ran: what their post-hook is told
        self._jobs: queue.Queue[tuple[_Job, VmIdentity] | None] = queue.Queue()  # None: look at stop now
        self._running = False
        self._lock = threading.Lock()  # the ledger: the poll thread decides, the approver thread acts
        self._ledger: dict[str, dict[str, Any]] = self._load()
        for event_id, entry in self._ledger.items():
            self._decided[event_id] = entry["hooked"] and entry.get("hooks", True)
            if entry["hooked"]:
                self._events_seen[event_id] = event_from_json(entry["event"])
        self._recovered = False

    def offer(self, snapshot: Snapshot, vm: VmIdentity, stop: threading.Event) -> None:
        """Decide about the events of ``snapshot`` not decided yet, and queue the post-hooks of those gone."""
        if not self.policy.enabled:
            return
        present = {t.event.event_id: t.event for t in snapshot.events}
        if not self._recovered:
            self._recover(vm, present)
            self._recovered = True
        for event_id, event in present.items():
            if event_id in self._decided:
                continue
            decision = decide(self.policy, event, vm.vm_name, self._clock())
            hooked = decision.action in (ACT, DRAIN_ONLY)  # a job: the hook (if any), then the approval (if ours)
            hooks = hooked and decision.hooks and self.policy.runs_hooks
            self._remember(event_id, hooks)
            if hooked:
                entry = {"stage": HOOK, "hooked": True, "hooks": hooks, "event": event_to_json(event)}
                self._note(event_id, {**entry, "rule": decision.rule, "approver": decision.approver})
                approve = decision.action == ACT
                job = _Job(event, decision.rule, decision.approver, approve, False, snapshot.incarnation, hooks)
                self._submit(job, vm, stop)
                continue
            if decision.rule != "in_resources":
                self._store(ApprovalOutcome(records.DECISION_NOT_COVERED, decision.rule, "", self._clock()), event, vm)
            self._note(event_id, {"stage": DONE, "hooked": False})
        for event_id, hooked in list(self._decided.items()):
            if event_id in present:
                continue
            self._decided[event_id] = False  # gone: nothing more to do for it, whatever happens next
            gone = self._events_seen.pop(event_id, None)
            self._note(event_id, None)
            if hooked and gone is not None and self.policy.post_hook:
                self._submit(_Job(gone, "post_hook", "", False, True, None), vm, stop)

    def run(self, stop: threading.Event) -> None:
        """Carry out queued jobs until ``stop`` (a hook running then is killed, and its decision stored)."""
        self._running = True
        try:
            while not stop.is_set():
                try:
                    item = self._jobs.get(timeout=1.0)  # ``wake`` ends the wait at shutdown
                except queue.Empty:
                    continue
                if item is not None:
                    self._perform(*item, stop)
        finally:
            self._running = False

    def wake(self) -> None:
        """End ``run``'s wait for a job now (after its ``stop`` was set); a hook running then is killed by stop."""
        self._jobs.put(None)

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
            self.on_fault("approval_internal")
            log.exception("approval job failed", extra={"event_id": job.event.event_id})
            return
        self._store(outcome, job.event, vm)
        self._perform_done(job)

    def _carry_out(self, job: _Job, vm: VmIdentity, stop: threading.Event) -> ApprovalOutcome:
        argv = (self.policy.post_hook if job.post else self.policy.pre_hook) if job.hooks else ()
        result = None
        if argv:
            result = hooks.run_hook(
                argv,
                _hook_fields(job, vm),
                timeout_s=self.policy.hook_timeout_s,
                stop=stop,
                allow_env=self.policy.hook_env,
                output_bytes=self.policy.hook_output_bytes,
            )
            _log_hook(job, result, self.policy.log_hook_output)
            outcome_of_hook = "ok" if result.ok else "timeout" if result.timed_out else "failed"
            self.on_hook("post" if job.post else "pre", outcome_of_hook)
        hook_exit = None if result is None else result.exit_code
        hook_ms = None if result is None else int(result.duration_s * 1000)

        def outcome(decision: str, http_status: int | None = None) -> ApprovalOutcome:
            return ApprovalOutcome(decision, job.rule, job.approver, self._clock(), hook_exit, hook_ms, http_status)

        if job.post:
            return outcome(records.DECISION_POST_HOOK)
        if result is not None and not result.ok:
            return outcome(records.DECISION_HOOK_TIMEOUT if result.timed_out else records.DECISION_HOOK_FAILED)
        if not job.approve:
            if job.rule == COORDINATOR and not self.policy.dry_run:
                return outcome(records.DECISION_READY)  # the coordinator approves once the event's VMs are ready
            return outcome(records.DECISION_LEFT_TO_APPROVER)
        if job.rule != USER_INITIATED and not in_window(self.policy, self._clock()):
            log.info("window closed before the approval: left to the platform", extra={"event_id": job.event.event_id})
            return ApprovalOutcome(records.DECISION_NOT_COVERED, "window", "", self._clock(), hook_exit, hook_ms)
        if self.policy.dry_run:
            log.info("dry run: event not approved", extra={"event_id": job.event.event_id, "rule": job.rule})
            return outcome(records.DECISION_DRY_RUN_APPROVED)
        sent = outcome(records.DECISION_APPROVED)  # what a restart records if no answer is heard
        entry = {"stage": SENDING, "hooked": True, "hooks": job.hooks, "event": event_to_json(job.event)}
        entry["outcome"] = _outcome_json(sent)
        self._note(job.event.event_id, entry)
        try:
            self._client.approve(stop, [job.event.event_id], job.incarnation, deadline_s=APPROVE_DEADLINE_S)
        except ImdsInterrupted:
            return outcome(records.DECISION_APPROVE_FAILED)
        except ImdsError as error:
            self.on_fault("approve_" + error.kind)
            log.error(
                "approval not accepted by IMDS",
                extra={"event_id": job.event.event_id, "kind": error.kind, "status": error.status},
            )
            return outcome(records.DECISION_APPROVE_FAILED, error.status)
        log.info("event approved", extra={"event_id": job.event.event_id, "rule": job.rule})
        return outcome(records.DECISION_APPROVED, 200)

    def _perform_done(self, job: _Job) -> None:
        if not job.post:
            with self._lock:
                entry = self._ledger.get(job.event.event_id)
            if entry is not None:  # not gone meanwhile
                self._note(job.event.event_id, {**entry, "stage": DONE, "outcome": None})

    def _load(self) -> dict[str, dict[str, Any]]:
        """The ledger as the outbox keeps it (every entry readable, or none is trusted)."""
        try:
            text = self._outbox.get_state(LEDGER_KEY)
            ledger = json.loads(text) if text else {}
            kept = {k: v for k, v in ledger.items() if v["stage"] in (HOOK, SENDING, DONE)}
            for entry in kept.values():
                if entry["hooked"]:
                    event_from_json(entry["event"])  # readable, or the whole ledger is not trusted
            return kept
        except (OutboxError, ValueError, KeyError, TypeError, AttributeError) as error:
            self.on_fault("approval_ledger")
            log.error("the approval ledger cannot be read; events are decided again", extra={"error": str(error)})
            return {}

    def _recover(self, vm: VmIdentity, present: dict[str, Event]) -> None:
        """What a restart cut short (once, at the first offer): an approval sent whose answer was not heard is
        recorded; a pre-hook cut short runs again if its event is still Scheduled, else is recorded as
        ``hook_interrupted`` (the event went on without it: the approver's release, or NotBefore)."""
        with self._lock:
            cut = [(k, v) for k, v in self._ledger.items() if v["stage"] in (SENDING, HOOK)]
        for event_id, entry in cut:
            event = event_from_json(entry["event"])
            if entry["stage"] == SENDING:
                self._store(_outcome_from_json(entry["outcome"]), event, vm)
            elif event_id in present and present[event_id].status == "Scheduled":
                del self._decided[event_id]  # decided again below: its hook runs again
                self._events_seen.pop(event_id, None)
                self._note(event_id, None)
                continue
            else:
                decision = records.DECISION_HOOK_INTERRUPTED
                self._store(ApprovalOutcome(decision, entry["rule"], entry["approver"], self._clock()), event, vm)
            self._note(event_id, {**entry, "stage": DONE, "outcome": None})

    def _note(self, event_id: str, entry: dict[str, Any] | None) -> None:
        """Keep ``entry`` for ``event_id`` (None: forget it) in the ledger, durably, before going on."""
        with self._lock:
            if entry is None:
                if self._ledger.pop(event_id, None) is None:
                    return
            else:
                self._ledger[event_id] = entry
            while len(self._ledger) > DECIDED_KEPT:
                del self._ledger[next(iter(self._ledger))]
            text = json.dumps(self._ledger, separators=(",", ":"))
            try:
                self._outbox.set_state(LEDGER_KEY, text)
            except OutboxError as error:  # the step goes on: a restart may then decide this event again
                self.on_fault("approval_ledger")
                log.error("approval ledger not stored", extra={"event_id": event_id, "error": str(error)})

    def _store(self, outcome: ApprovalOutcome, event: Event, vm: VmIdentity) -> None:
        self.on_decision(outcome.decision)  # decided, whether or not its record can be stored
        record = approval_record(
            outcome, event, vm, api_version=self._client.api_version, collector_version=self._version
        )
        try:
            self._outbox.commit([record], None)
        except OutboxError as error:  # the decision stands; only its record is lost, and the log keeps it
            self.on_fault("approval_not_stored")
            log.error(
                "approval decision not stored",
                extra={"event_id": event.event_id, "decision": outcome.decision, "error": str(error)},
            )


def _outcome_json(o: ApprovalOutcome) -> dict[str, Any]:
    return {
        "decision": o.decision,
        "rule": o.rule,
        "approver": o.approver,
        "decided_at": records.format_time(o.decided_at),
        "hook_exit": o.hook_exit,
        "hook_ms": o.hook_ms,
        "http_status": o.http_status,
    }


def _outcome_from_json(d: dict[str, Any]) -> ApprovalOutcome:
    return ApprovalOutcome(
        d["decision"],
        d["rule"],
        d["approver"],
        records.parse_time(d["decided_at"]),
        d["hook_exit"],
        d["hook_ms"],
        d["http_status"],
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


def _log_hook(job: _Job, result: hooks.HookResult, with_output: bool) -> None:
    """One line per hook run; its output (the kept tail) only when the policy asks: a hook may print secrets of
    its own, and the log goes further than the VM."""
    extra: dict[str, Any] = {
        "event_id": job.event.event_id,
        "phase": "post" if job.post else "pre",
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 3),
    }
    if with_output:
        extra["output"] = result.output
    else:
        extra["output_chars"] = len(result.output)  # kept out of the log: log_hook_output = true shows it
    if result.ok:
        log.info("hook succeeded", extra=extra)
    else:
        log.warning("hook failed" + (" (killed at its timeout)" if result.timed_out else ""), extra=extra)


def first_start_notice(outbox: Outbox, policy: ApprovalPolicy) -> bool:
    """Say once per state directory (the outbox remembers) that polling turns Scheduled Events on, and what that
    does to reboots users start; whether it was said now."""
    try:
        if outbox.get_state(NOTICE_KEY) is not None:
            return False
    except OutboxError:
        return False
    approves = policy.enabled and policy.approve_user_initiated and not policy.dry_run
    then = (
        "[approval] approve_user_initiated = true approves them at the first poll that sees them"
        if approves
        else "set [approval] approve_user_initiated = true to approve them at once (or Azure's "
        "scheduledEventsPolicy userInitiatedReboot/userInitiatedRedeploy automaticallyApprove)"
    )
    log.warning(
        "polling turns Scheduled Events on for this VM (until 24 h without a poll): from now on a Reboot or Redeploy "
        "a user starts (portal, CLI, API) waits up to its NotBefore, about 15 minutes, unless it is approved; "
        + then
        + " (said once per state directory)"
    )
    with contextlib.suppress(OutboxError):  # not stored: said again at the next start, better twice than never
        outbox.set_state(NOTICE_KEY, "1")
    return True
