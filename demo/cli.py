"""``sevents-demo``: a simulated fleet, real collectors, the ingest and embedded ClickHouse, then a summary.

The simulator's ``demo`` scenario (36 VMs over three fault domains: a rolling Freeze wave, a Reboot, a Redeploy, a
cancellation, a host failure, a pause no event announces) served over loopback HTTP, one collector process per VM
polling it, the ingest loading ``<workdir>/clickhouse`` and the coordinator beside it (``demo.coordination``); then
the stored history is compared with the simulator's ground truth. The VMs' downtime is made real: a paused VM's
collector is stopped (SIGSTOP) for the pause, a rebooted VM's collector killed and started again with a new boot id
once the VM is back.

Every figure the summary prints is compared with the truth, or its table says it is not: times and durations
within one poll interval + 0.5 s of the simulator's own moments, downtime within one collector tick + 0.5 s
(``demo.compare``); each comparison counts in the closing "N of M values match", and any mismatch exits 1.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from collector.settings import CollectorSettings
from dashboards import report
from demo.compare import (
    Check,
    approval_checks,
    compare,
    compare_downtime,
    domain_label,
    domain_lags,
    fault_domain_checks,
    fault_domain_means,
    fault_domain_truth,
    first_answer_lags,
    not_before_unseen,
)
from demo.fleetrun import FleetRun, start
from demo.processes import answers_heard, down_spans
from ingest import event_sql, queries
from ingest.errors import IngestError
from ingest.output import table
from sevents import records
from sevents.errors import ExitCode, exit_code
from sevents.logs import setup_logging
from sevents.version import add_version_flag
from simulator.errors import ScenarioError

# a measured downtime is at most one collector tick longer than the real one, plus signal and scheduling delays
TICK_S = CollectorSettings().tick_interval
DOWNTIME_TOLERANCE_S = TICK_S + 0.5
# a time is seen at the first poll after it: late by up to one poll interval, plus the round trip and scheduling
SLACK_S = 0.5


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="sevents-demo",
        description="Run a simulated fleet through real collectors and the ingest into embedded ClickHouse, "
        "then print what was recorded next to the simulator's ground truth.",
        epilog="exit status: 0 every recorded value matches the ground truth, 1 some do not or the workdir "
        "cannot be used, 2 bad arguments or an unknown scenario (the shared codes of sevents.errors.ExitCode).",
    )
    add_version_flag(p)
    p.add_argument("--workdir", type=Path, default=Path("var/demo"), help="where state goes (default ./var/demo)")
    p.add_argument(
        "--speed", type=_positive, help="scenario seconds per wall second (default: the scenario's own, 20 for demo)"
    )
    p.add_argument(
        "--poll-interval", type=_positive, default=1.0, help="collector poll interval in seconds (default 1)"
    )
    p.add_argument("--scenario", default="demo", help="built-in simulator scenario or TOML file (default demo)")
    p.add_argument(
        "--timeout",
        type=_positive,
        default=300.0,
        help="seconds to wait for the scenario to end before summarising what was recorded (default 300)",
    )
    return p


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite positive number, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging("warning")
    try:
        return _demo(args)
    except KeyboardInterrupt:
        # Ctrl-C: the fleet was stopped on the way out (collectors, simulator, ingest); say so, no traceback
        print("\nsevents-demo: interrupted; the collectors, the simulator and the ingest are stopped", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)


def _demo(args: argparse.Namespace) -> int:
    began = time.monotonic()
    started_at = datetime.now(UTC)
    print(f"sevents demo: scenario {args.scenario!r}, workdir {args.workdir}")
    try:
        run = start(
            args.workdir,
            scenario=args.scenario,
            speed=args.speed,
            poll_interval=args.poll_interval,
            processes=True,
        )
    except ScenarioError as error:
        print(error.lines("sevents-demo"), file=sys.stderr)
        return exit_code(error)
    except (OSError, IngestError) as error:
        detail = error.strerror if isinstance(error, OSError) and error.strerror else error
        print(f"sevents-demo: cannot run in workdir {args.workdir}: {detail}", file=sys.stderr)
        return exit_code(error)
    try:
        print(
            f"  simulator at {run.sim.base_url} (speed {run.sim.speed:g}), {run.collectors} collector processes "
            "polling",
            flush=True,  # shown when it happens, also when stdout is a pipe or a log
        )
        if not _wait(run, args.timeout, began):
            print(f"scenario not done after {args.timeout:g} s; summarising what was recorded", file=sys.stderr)
        print("  scenario done; collectors see the last changes, then the ingest drains the outboxes")
        run.finish()
        run_end = datetime.now(UTC)  # every collector has stopped
        print(f"  {run.stored()} records stored in {time.monotonic() - began:.0f} s\n")
        ok = _summary(run, args.poll_interval, started_at, run_end)
        _report(run, args.workdir, started_at)
    finally:
        run.close()
    return 0 if ok else 1


def _wait(run: FleetRun, timeout: float, began: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run.sim.wait_done(3.0):
            return True
        events = run.sim.status()["events"]
        states = ", ".join(f"{n} {s}" for s, n in sorted(events.items()))
        print(
            f"  [{time.monotonic() - began:5.0f}s] events: {states} | stored {run.stored()} records"
            f" | waiting in outboxes {run.backlog()}",
            flush=True,
        )
    return False


def _really_done(run: FleetRun) -> dict[Any, float]:
    """How long each collector process was really stopped for its VM's downtime (span -> seconds)."""
    if run.downtimes is None:
        return {}
    return {a.span: (a.up_at - a.down_at).total_seconds() for a in run.downtimes.applied if a.up_at is not None}


def _stopped(run: FleetRun, run_end: datetime) -> tuple[dict[str, datetime], dict[str, datetime]]:
    """When each VM's collector stopped for good (a scenario's collector fault at its moment, the others at the
    run's end), and those ended by a fault that the pipeline does not count as silent yet."""
    faulted = {f.vm_name: f.at for f in ([] if run.downtimes is None else run.downtimes.faulted)}
    silent_from = datetime.now(UTC) - timedelta(seconds=event_sql.SILENT_AFTER_S)
    return {vm: run_end for vm in run.sim.vm_names} | faulted, {
        vm: at for vm, at in faulted.items() if at > silent_from
    }


@dataclass(frozen=True)
class Truth:
    """What the simulator says happened, and what the collectors could know of it."""

    rows: list[dict[str, Any]]
    groups: dict[str, str]  # VM name -> the set its fault domain belongs to (a standalone VM is its own)
    served: dict[str, list[datetime]]  # the answers each collector read
    stopped: dict[str, datetime]  # when each collector stopped for good
    not_silent: dict[str, datetime]  # those a scenario ended early, not silent yet for the pipeline
    done: dict[Any, float]  # DownSpan -> seconds its collector was really stopped
    down: dict[str, list[tuple[datetime, datetime]]]  # VM -> when its collector was really stopped


def _truth(run: FleetRun, run_end: datetime) -> Truth:
    rows = run.sim.truth()
    served = {vm: run.sim.served(vm) for vm in run.sim.vm_names}
    if run.downtimes is not None:
        served = answers_heard(served, run.downtimes.applied)
    groups = {row["vm_name"]: row["fault_set"] for row in rows}
    down = down_spans(run.downtimes.applied) if run.downtimes is not None else {}
    return Truth(rows, groups, served, *_stopped(run, run_end), _really_done(run), down)


def _summary(run: FleetRun, poll_interval: float, started_at: datetime, run_end: datetime) -> bool:
    """Print every figure next to its check; True when every check passed."""
    window = {"since": started_at - timedelta(minutes=5), "until": datetime.now(UTC) + timedelta(minutes=5)}
    tolerance = poll_interval + SLACK_S
    truth = _truth(run, run_end)
    events = queries.run(run.client, queries.EVENTS_IN_WINDOW, run.settings.database, **window).dicts()
    downtime = queries.run(run.client, queries.DOWNTIME, run.settings.database, **window).dicts()
    checks = compare(
        events,
        truth.rows,
        tolerance,
        served=truth.served,
        groups=truth.groups,
        stopped=truth.stopped,
        not_silent=truth.not_silent,
        down=truth.down,
        slack_s=SLACK_S,
    )
    unannounced = [d for d in run.sim.downtime() if not d.event_id]
    measured = [d for d in downtime if not d["event_id"]]
    down_checks = compare_downtime(events, truth.rows, measured, unannounced, DOWNTIME_TOLERANCE_S, truth.done)
    checks += [c for c in down_checks if c.event_id]
    labels = {c.event_id: c.label for c in checks}
    _events_table(events, checks, labels, tolerance)
    checks += _fault_domains(run, window, truth, tolerance)
    checks += _pauses([c for c in down_checks if not c.event_id], measured)
    checks += _approvals(run, window, labels, truth, tolerance)
    bad = [c for c in checks if not c.ok]
    for c in bad:
        print(f"  MISMATCH {c.label or c.event_id} {c.field}: recorded {_show(c.ours)}, truth {_show(c.truth)}")
    print(
        f"{len(checks) - len(bad)} of {len(checks)} values match the ground truth (times and durations within "
        f"{tolerance:g} s of the simulator's own moments: one {poll_interval:g} s poll + {SLACK_S:g} s, or on a "
        f"loaded machine no later than the first answer a running collector read, + {SLACK_S:g} s; downtime "
        f"within {DOWNTIME_TOLERANCE_S:g} s)"
    )
    return not bad


def _events_table(events: list[dict[str, Any]], checks: list[Check], labels: dict[str, str], tolerance: float) -> None:
    rows = [
        [
            labels.get(e["event_id"]) or "?",
            e["event_type"],
            e["outcome"],
            str(e["affected_vm_count"]),
            ", ".join(e["fault_domain_labels"]),
            _secs(e["notice_s"]),
            _secs(e["approval_latency_s"]),
            _secs(e["duration_s"] if (e["duration_s"] or -1) >= 0 else None),
            _secs(e["observed_impact_s"]),
            _gone_by(e),
            _verdict([c for c in checks if c.event_id == e["event_id"]]),
        ]
        for e in events
    ]
    print(
        "Events recorded (seconds; announced: DurationInSeconds, down: the longest downtime a VM measured on itself, "
        "started: Started until gone, <= when the end is the first poll after the VM's own downtime; every column "
        f"compared with the simulator's ground truth: times within {tolerance:g} s, down within "
        f"{DOWNTIME_TOLERANCE_S:g} s)"
    )
    cols = ["event", "type", "outcome", "VMs", "FDs", "notice", "approval", "announced", "down", "started", "truth"]
    print(table(cols, rows).rstrip("\n"))
    for c in checks:
        if c.note:  # a value other than the truth's, right by a rule: say which
            print(f"  {c.label} {c.field}: recorded {c.ours}, truth {c.truth}; accepted: {c.note}")
    print()


def _fault_domains(run: FleetRun, window: dict[str, datetime], truth: Truth, tolerance: float) -> list[Check]:
    """The per-FD table, each domain's event count and means compared with the truth."""
    per_fd = queries.run(run.client, queries.FAULT_DOMAIN_SUMMARY, run.settings.database, **window).dicts()
    unknowable = not_before_unseen(truth.rows, truth.served)
    real = fault_domain_truth(truth.rows, truth.groups, done=truth.done, unknowable=unknowable)
    checks = fault_domain_checks(per_fd, truth.rows, truth.groups)
    lags = domain_lags(truth.rows, truth.groups, first_answer_lags(truth.rows, truth.served, truth.down), SLACK_S)
    checks += fault_domain_means(per_fd, real, tolerance, DOWNTIME_TOLERANCE_S, lags)
    rows = []
    for fd in per_fd:
        want = real.get((fd["fault_set"], fd["fault_domain"]), {})
        label = domain_label(fd["fault_set"], fd["fault_domain"])
        rows.append(
            [
                fd["fault_domain_label"],
                f"{fd['events']} / {want.get('events', '-')}",
                f"{_secs(fd['avg_approval_latency_s'])} / {_secs(want.get('avg_approval_latency_s'))}",
                f"{_secs(fd['avg_observed_impact_s'])} / {_secs(want.get('avg_observed_impact_s'))}",
                _verdict([c for c in checks if c.label == label]),
            ]
        )
    print(
        "Per fault domain of each set (affected VMs; recorded / truth; approval latency within "
        f"{tolerance:g} s, downtime within {DOWNTIME_TOLERANCE_S:g} s)"
    )
    print(table(["set / FD", "events", "mean approval latency", "mean downtime", "truth"], rows))
    return checks


def _pauses(checks: list[Check], measured: list[dict[str, Any]]) -> list[Check]:
    """One line per pause no event announced: the measurement compared with it, and any other one not compared."""
    for c in checks:
        vm = c.label.split()[-1]
        others = [r["duration_s"] for r in measured if r["vm_name"] == vm and r["duration_s"] != c.ours]
        extra = f"; also measured {', '.join(f'{s:.1f}' for s in others)} (not compared)" if others else ""
        verdict = "yes" if c.ok else "no"
        print(
            f"Unannounced pause of {vm}: {c.truth:.1f} s; measured {_secs(c.ours)} "
            f"(within {DOWNTIME_TOLERANCE_S:g} s: {verdict}){extra}"
        )
    return checks


def _approvals(
    run: FleetRun, window: dict[str, datetime], labels: dict[str, str], truth: Truth, tolerance: float
) -> list[Check]:
    """The approvals table; each approved row compared with the approval the simulator received."""
    rows = queries.run(run.client, queries.APPROVALS, run.settings.database, **window).dicts()
    checks = approval_checks(rows, run.sim.approvals(), truth.rows, tolerance)
    by_pair = {(c.event_id, c.label.split()[-1]): c for c in checks}  # labelled "<event> <VM>"
    shown = [
        [
            labels.get(a["event_id"]) or "?",
            a["event_type"],
            a["vm_name"],
            a["decision"],
            a["rule"],
            "-" if a["hook_exit"] is None else str(a["hook_exit"]),
            _secs(a["hook_s"]),
            "-" if a["http_status"] is None else str(a["http_status"]),
            _secs(a["notice_saved_s"]),
            _verdict([by_pair[(a["event_id"], a["vm_name"])]]) if a["decision"] == "approved" else "not compared",
        ]
        for a in rows
    ]
    print(
        "Approval policy decisions (the collectors' [approval] table, and the coordinator's for events naming "
        "several VMs; notice saved: NotBefore minus the approval; an approved row is compared with the approval the "
        f"simulator received (through IMDS, or the Maintenance API), notice saved within {tolerance:g} s; other "
        "decisions and the rule, hook and HTTP columns are not compared)"
    )
    cols = ["event", "type", "VM", "decision", "rule", "hook exit", "hook s", "HTTP", "notice saved", "truth"]
    print(table(cols, shown))
    return checks


def _report(run: FleetRun, workdir: Path, started_at: datetime) -> None:
    out = workdir.resolve() / "report.html"
    since = records.format_time(started_at - timedelta(minutes=5))
    until = records.format_time(datetime.now(UTC) + timedelta(minutes=5))
    argv = ["--clickhouse", run.settings.clickhouse, "--since", since, "--until", until, "--out", str(out)]
    if report.main(argv) == 0:
        print(f"incident report: {out}")


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _gone_by(event: dict[str, Any]) -> str:
    """Started to gone, marked ``<=`` when the end is only a bound (the first poll after the VM's own downtime)."""
    bound = "<=" if event.get("ended_at_source") == "after_downtime" and event["started_to_gone_s"] is not None else ""
    return bound + _secs(event["started_to_gone_s"])


def _show(value: object) -> str:
    return records.format_time(value) if isinstance(value, datetime) else repr(value)


def _verdict(checks: list[Check]) -> str:
    bad = [c.field for c in checks if not c.ok]
    return "yes" if not bad else "no: " + ",".join(bad)
