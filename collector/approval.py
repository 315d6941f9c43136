"""The approval policy, pure: which events this VM may approve, who approves, and the ``[approval]`` table.

Theory of operation. Nothing is ever approved unless the policy is on and covers the event; the rules are
checked in the order of ``RULES`` below and the first that fails names the decision's ``rule``. An event
that passes them all is *covered*: this VM runs its pre-approval hook (each VM drains itself), and then the
approver sends the approval: with ``approver = "first-in-resources"`` (the documented leader election) only
the VM named first in Resources, with ``"self"`` every affected VM (hosts where each VM must approve for
itself, the simulator's ``approval = "each"``). ``decide`` imports no I/O; ``collector.approver`` acts on it.

Two things are decided apart from those rules. With ``approve_user_initiated`` a Reboot or Redeploy a user
started (EventSource User) is approved at once by every VM it names, with no hook and whatever the windows say:
polling turned Scheduled Events on, and without an approval the user's own reboot would wait up to NotBefore.
Maintenance ``windows`` (UTC) are the last rule: outside them the policy leaves the event to the platform.

Events naming several VMs. One approval releases an event for every VM in its Resources, so the approver
above does not wait for the others' drains. ``multi_vm = "coordinator"`` hands such events to the central
coordinator (``sevents-ingest coordinate``): each covered VM runs its pre-hook and records ``ready``, none POSTs,
and the coordinator approves once every VM (or its quorum) is ready. That is the default: without a coordinator
running, such an event starts at its NotBefore, each VM drained, never while another still drains.
``"approve-without-waiting"`` says in so many words that the approver goes ahead alone (the old behaviour; a VM
still draining may be paused or rebooted). An event naming one VM keeps the path above whatever ``multi_vm`` says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from collector.model import Event
from collector.windows import Window, parse_window, within

SECTION: Final = "approval"
APPROVERS: Final = ("first-in-resources", "self")
COORDINATOR: Final = "coordinator"  # multi_vm: the central coordinator approves events naming several VMs
WITHOUT_WAITING: Final = "approve-without-waiting"  # multi_vm: the approver does not wait for the others
MULTI_VM: Final = (COORDINATOR, WITHOUT_WAITING)
SOURCES: Final = ("Platform", "User")
# The event types an approval can shorten (Scheduled Events docs); Terminate and Preempt have their own notice.
APPROVABLE_TYPES: Final = ("Reboot", "Redeploy", "Freeze", "Preempt", "Terminate")

# The rules, in the order they are checked; the first that fails is the decision's rule.
RULES: Final = (
    "in_resources",  # only when this VM is in Resources (the others' events get no record at all)
    "scheduled",  # only a Scheduled event can be approved (Started: too late; anything else: not ours)
    "event_type",  # the type is in event_types
    "source",  # EventSource is in sources (an absent EventSource, api-versions before 2020-07-01, passes)
    "duration",  # DurationInSeconds is known and at most max_duration_s (unset: any)
    "window",  # now (UTC) is in one of the maintenance windows (none set: any time)
)
# With approve_user_initiated, checked after in_resources and before the others: a user's own Reboot or Redeploy.
USER_INITIATED: Final = "user_initiated"
USER_INITIATED_TYPES: Final = ("Reboot", "Redeploy")  # a user's Terminate keeps its notice: never cut short
OUTPUT_CAP: Final = 2**20  # hook_output_bytes at most
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

ACT: Final = "act"  # covered and this VM is the approver: run the pre-hook, then approve
DRAIN_ONLY: Final = "drain_only"  # covered, another VM approves: run the pre-hook only
SKIP: Final = "skip"  # not covered: nothing runs, nothing is approved


@dataclass(frozen=True)
class ApprovalPolicy:
    """The ``[approval]`` table; the default (no table) approves nothing."""

    enabled: bool = False
    event_types: tuple[str, ...] = ()
    sources: tuple[str, ...] = SOURCES
    max_duration_s: int | None = None
    pre_hook: tuple[str, ...] = ()
    post_hook: tuple[str, ...] = ()
    hook_timeout_s: float = 300.0
    approver: str = "first-in-resources"
    approve_user_initiated: bool = False  # a user's Reboot/Redeploy approved at once (no hook, any time)
    windows: tuple[Window, ...] = ()  # maintenance windows, UTC; none: any time
    dry_run: bool = False  # decide and record everything, POST nothing
    dry_run_hooks: bool = False  # in a dry run, run the hooks all the same
    hook_env: tuple[str, ...] = ()  # names of the collector's environment passed on to hooks (besides the usual)
    hook_output_bytes: int = 4096  # the tail of a hook's output kept
    log_hook_output: bool = False  # that tail goes to the log (otherwise only its size)
    multi_vm: str = COORDINATOR  # events naming several VMs: wait for the coordinator, or WITHOUT_WAITING

    @property
    def runs_hooks(self) -> bool:
        """Whether covered events run their hooks (a dry run only when asked)."""
        return not self.dry_run or self.dry_run_hooks


@dataclass(frozen=True)
class Decision:
    """What to do about one event: ``action`` (ACT, DRAIN_ONLY, SKIP), the rule that decided, and who approves."""

    action: str
    rule: str
    approver: str  # the VM expected to approve ("" when nobody will)
    hooks: bool = True  # False: approved without the pre- and post-hooks (a user-initiated event)


def decide(policy: ApprovalPolicy, event: Event, vm_name: str, now: datetime) -> Decision:
    """The decision of VM ``vm_name`` about ``event`` under ``policy`` at ``now``; never ACT for an event not
    covered."""
    if not policy.enabled:
        return Decision(SKIP, "policy_off", "")
    failed = _first_failed(policy, event, vm_name, now)
    if failed == USER_INITIATED:
        return Decision(ACT, USER_INITIATED, vm_name, hooks=False)
    if failed:
        return Decision(SKIP, failed, "")
    if policy.multi_vm == COORDINATOR and is_multi_vm(event):
        return Decision(DRAIN_ONLY, COORDINATOR, COORDINATOR)  # drain, record ready; the coordinator approves
    if policy.approver == "self":
        return Decision(ACT, "self", vm_name)
    first = event.resources[0]
    if _same_vm(first, vm_name):
        return Decision(ACT, "first-in-resources", vm_name)
    return Decision(DRAIN_ONLY, "first-in-resources", first)


def is_multi_vm(event: Event) -> bool:
    """Whether ``event`` names more than one VM (names compare case-insensitively)."""
    return len({r.lower() for r in event.resources}) > 1


def in_window(policy: ApprovalPolicy, now: datetime) -> bool:
    """Whether ``now`` is in one of the policy's maintenance windows (none set: always)."""
    return within(policy.windows, now)


def _first_failed(policy: ApprovalPolicy, event: Event, vm_name: str, now: datetime) -> str:
    """The first rule ``event`` fails ("" none), or USER_INITIATED when the preset approves it."""
    if not any(_same_vm(r, vm_name) for r in event.resources):
        return "in_resources"  # first: another VM's event is not ours to judge, whatever its status
    if event.status != "Scheduled":
        return "scheduled"  # Started already (approved, by Azure's own policy too, or at NotBefore): never again
    if policy.approve_user_initiated and event.event_source == "User" and event.event_type in USER_INITIATED_TYPES:
        return USER_INITIATED
    if event.event_type not in policy.event_types:
        return "event_type"
    if event.event_source is not None and event.event_source not in policy.sources:
        return "source"
    limit = policy.max_duration_s
    if limit is not None and (event.duration_s is None or not 0 <= event.duration_s <= limit):
        return "duration"  # over the limit, or unknown (-1 or absent) while a limit is set
    if not in_window(policy, now):
        return "window"
    return ""


def _same_vm(resource: str, vm_name: str) -> bool:
    # Azure resource names are case-insensitive.
    return bool(vm_name) and resource.lower() == vm_name.lower()


KEYS: Final = (
    "enabled",
    "event_types",
    "sources",
    "max_duration_s",
    "pre_hook",
    "post_hook",
    "hook_timeout_s",
    "approver",
    "approve_user_initiated",
    "windows",
    "dry_run",
    "dry_run_hooks",
    "hook_env",
    "hook_output_bytes",
    "log_hook_output",
    "multi_vm",
)
_FLAGS: Final = ("enabled", "approve_user_initiated", "dry_run", "dry_run_hooks", "log_hook_output")


def parse_policy(table: Mapping[str, Any], where: str) -> tuple[ApprovalPolicy, list[str]]:
    """The policy an ``[approval]`` table describes, and every problem with it (any problem: nothing approved)."""
    problems: list[str] = [f"{where}: unknown setting {key!r}" for key in table if key not in KEYS]
    flags = {name: table.get(name, name == "enabled") for name in _FLAGS}  # writing the table turns it on
    problems += [f"{where}: {k} must be true or false, got {v!r}" for k, v in flags.items() if type(v) is not bool]
    types = _texts(table, "event_types", where, problems)
    if "event_types" not in table and flags["approve_user_initiated"] is not True:
        problems.append(
            f'{where}: event_types is required (e.g. ["Reboot", "Redeploy"]) unless approve_user_initiated = true; '
            "nothing is approved by default"
        )
    problems += [
        f"{where}: event_types: {t!r} is not one of {', '.join(APPROVABLE_TYPES)}"
        for t in types
        if t not in APPROVABLE_TYPES
    ]
    sources = _texts(table, "sources", where, problems) if "sources" in table else SOURCES
    problems += [f"{where}: sources: {s!r} is not one of {', '.join(SOURCES)}" for s in sources if s not in SOURCES]
    if "sources" in table and not sources:
        problems.append(f"{where}: sources must name at least one of {', '.join(SOURCES)}")
    max_duration = table.get("max_duration_s")
    if max_duration is not None and (type(max_duration) is not int or max_duration < 0):
        problems.append(f"{where}: max_duration_s must be a whole number of seconds >= 0, got {max_duration!r}")
    pre_hook = _argv(table, "pre_hook", where, problems)
    post_hook = _argv(table, "post_hook", where, problems)
    timeout = table.get("hook_timeout_s", ApprovalPolicy.hook_timeout_s)
    if type(timeout) not in (int, float) or not 0 < timeout <= 3600:
        problems.append(f"{where}: hook_timeout_s must be a number of seconds in (0, 3600], got {timeout!r}")
    approver = table.get("approver", ApprovalPolicy.approver)
    if approver not in APPROVERS:
        problems.append(f"{where}: approver must be one of {', '.join(APPROVERS)}, got {approver!r}")
    windows = _windows(table, where, problems)
    hook_env = _texts(table, "hook_env", where, problems)
    problems += [
        f"{where}: hook_env: {n!r} is not an environment variable name" for n in hook_env if not _ENV_NAME.match(n)
    ]
    cap = table.get("hook_output_bytes", ApprovalPolicy.hook_output_bytes)
    if type(cap) is not int or not 0 <= cap <= OUTPUT_CAP:
        problems.append(f"{where}: hook_output_bytes must be a whole number of bytes in [0, {OUTPUT_CAP}], got {cap!r}")
    multi_vm = table.get("multi_vm", COORDINATOR)
    if multi_vm not in MULTI_VM:
        problems.append(f"{where}: multi_vm must be one of {', '.join(MULTI_VM)}, got {multi_vm!r}")
    if problems:
        return ApprovalPolicy(), problems
    return (
        ApprovalPolicy(
            enabled=flags["enabled"],
            event_types=tuple(types),
            sources=tuple(sources),
            max_duration_s=max_duration,
            pre_hook=pre_hook,
            post_hook=post_hook,
            hook_timeout_s=float(timeout),
            approver=str(approver),
            approve_user_initiated=flags["approve_user_initiated"],
            windows=windows,
            dry_run=flags["dry_run"],
            dry_run_hooks=flags["dry_run_hooks"],
            hook_env=tuple(hook_env),
            hook_output_bytes=cap,
            log_hook_output=flags["log_hook_output"],
            multi_vm=str(multi_vm),
        ),
        [],
    )


def _windows(table: Mapping[str, Any], where: str, problems: list[str]) -> tuple[Window, ...]:
    texts = _texts(table, "windows", where, problems)
    if "windows" in table and not texts and not any(p.startswith(f"{where}: windows") for p in problems):
        problems.append(f'{where}: windows must name at least one window (e.g. ["Mon-Fri 02:00-05:00"]) or be left out')
    parsed = [parse_window(t) for t in texts]
    problems += [f"{where}: windows: {p} (UTC)" for p in parsed if isinstance(p, str)]
    return tuple(w for w in parsed if isinstance(w, Window))


def _texts(table: Mapping[str, Any], name: str, where: str, problems: list[str]) -> list[str]:
    value = table.get(name, [])
    if type(value) is not list or not all(isinstance(v, str) for v in value):
        problems.append(f"{where}: {name} must be a list of strings, got {value!r}")
        return []
    return list(value)


def _argv(table: Mapping[str, Any], name: str, where: str, problems: list[str]) -> tuple[str, ...]:
    """A hook is an argv list, run without a shell: a plain string would be split by nobody, so it is refused."""
    if name not in table:
        return ()
    argv = _texts(table, name, where, problems)
    if name in table and not argv and not any(p.startswith(f"{where}: {name}") for p in problems):
        problems.append(f'{where}: {name} must name a program (an argv list such as ["/usr/local/bin/drain"])')
    if any(not a or "\x00" in a for a in argv):
        problems.append(f"{where}: {name} has an empty or NUL-containing argument")
    return tuple(argv)
