"""``sevents-demo``: a simulated fleet, real collectors, the ingest and embedded ClickHouse, then a summary.

The simulator's ``demo`` scenario (36 VMs over three fault domains: a rolling Freeze wave, a Reboot, a Redeploy,
a cancellation, a host failure, a pause no event announces) served over loopback HTTP, one collector process per
VM polling it, the ingest loading ``<workdir>/clickhouse``; then the stored history is compared with the
simulator's ground truth. The VMs' downtime is made real: a paused VM's collector is stopped (SIGSTOP) for the
pause, a rebooted VM's collector killed and started again with a new boot id once the VM is back.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from collector.settings import CollectorSettings
from dashboards import report
from demo.compare import Check, compare, compare_downtime, fault_domain_checks, fault_domain_truth
from demo.fleetrun import FleetRun, start
from demo.processes import answers_heard
from ingest import queries
from ingest.errors import IngestError
from ingest.output import table
from sevents import records
from sevents.errors import ExitCode, exit_code
from sevents.logs import setup_logging
from simulator.errors import ScenarioError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="sevents-demo",
        description="Run a simulated fleet through real collectors and the ingest into embedded ClickHouse, "
        "then print what was recorded next to the simulator's ground truth.",
        epilog="exit status: 0 every recorded value matches the ground truth, 1 some do not or the workdir "
        "cannot be used, 2 bad arguments or an unknown scenario (the shared codes of sevents.errors.ExitCode).",
    )
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
        print(f"sevents-demo: {error}", file=sys.stderr)
        return exit_code(error)
    except (OSError, IngestError) as error:
        detail = error.strerror if isinstance(error, OSError) and error.strerror else error
        print(f"sevents-demo: cannot run in workdir {args.workdir}: {detail}", file=sys.stderr)
        return exit_code(error)
    try:
        print(
            f"  simulator at {run.sim.base_url} (speed {run.sim.speed:g}), {run.collectors} collector processes polling"
        )
        if not _wait(run, args.timeout, began):
            print(f"scenario not done after {args.timeout:g} s; summarising what was recorded", file=sys.stderr)
        print("  scenario done; collectors see the last changes, then the ingest drains the outboxes")
        run.finish()
        print(f"  {run.stored()} records stored in {time.monotonic() - began:.0f} s\n")
        ok = _summary(run, args.poll_interval, started_at)
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


def _summary(run: FleetRun, poll_interval: float, started_at: datetime) -> bool:
    window = {"since": started_at - timedelta(minutes=5), "until": datetime.now(UTC) + timedelta(minutes=5)}
    events = queries.run(run.client, queries.EVENTS_IN_WINDOW, run.settings.database, **window).dicts()
    truth = run.sim.truth()
    served = {vm: run.sim.served(vm) for vm in run.sim.vm_names}
    if run.downtimes is not None:
        served = answers_heard(served, run.downtimes.applied)
    # each VM's availability set or scale set as the simulator built the fleet: the truth of the scoped FDs
    groups = {vm.name: vm.group for vm in run.sim.engine.vms.values()}
    checks = compare(events, truth, tolerance_s=poll_interval + 0.25, served=served, groups=groups)
    downtime = queries.run(run.client, queries.DOWNTIME, run.settings.database, **window).dicts()
    unannounced = [d for d in run.sim.downtime() if not d.event_id]
    checks += compare_downtime(
        events,
        truth,
        [d for d in downtime if not d["event_id"]],
        unannounced,
        tolerance_s=TICK_S + 0.5,
        done=_really_done(run),
    )
    labels = {c.event_id: c.label for c in checks}
    rows = [
        [
            labels.get(e["event_id"], "?"),
            e["event_type"],
            e["outcome"],
            str(e["affected_vm_count"]),
            ", ".join(e["fault_domain_labels"]),
            _secs(e["notice_s"]),
            _secs(e["approval_latency_s"]),
            _secs(e["duration_s"] if (e["duration_s"] or -1) >= 0 else None),
            _secs(e["observed_impact_s"]),
            _secs(e["started_to_gone_s"]),
            _verdict([c for c in checks if c.event_id == e["event_id"]]),
        ]
        for e in events
    ]
    print(
        "Events recorded (seconds; announced: DurationInSeconds, down: the longest downtime a VM measured on itself, "
        "started: Started until gone; compared with the simulator's ground truth)"
    )
    cols = ["event", "type", "outcome", "VMs", "FDs", "notice", "approval", "announced", "down", "started", "truth"]
    print(table(cols, rows))
    per_fd = queries.run(run.client, queries.FAULT_DOMAIN_SUMMARY, run.settings.database, **window).dicts()
    truth_fd = fault_domain_truth(truth, groups)
    fd_rows = []
    for fd in per_fd:
        real = truth_fd.get((fd["fault_set"], fd["fault_domain"]), {})
        fd_rows.append(
            [
                fd["fault_domain_label"],
                str(fd["events"]),
                f"{_secs(fd['avg_approval_latency_s'])} / {_secs(real.get('avg_approval_latency_s'))}",
                f"{_secs(fd['avg_observed_impact_s'])} / {_secs(real.get('avg_observed_impact_s'))}",
            ]
        )
    print("Per fault domain of each set (affected VMs; recorded / truth)")
    print(table(["set / FD", "events", "mean approval latency", "mean downtime"], fd_rows))
    checks += fault_domain_checks(per_fd, truth, groups)
    for d in unannounced:
        ours = [r for r in downtime if not r["event_id"] and r["vm_name"] == d.vm_name]
        measured = ", ".join(f"{r['duration_s']:.1f}" for r in ours) or "nothing"
        print(f"Unannounced pause of {d.vm_name}: {d.down_s:.1f} s; measured {measured}")
    _approvals(run, window, labels)
    bad = [c for c in checks if not c.ok]
    for c in bad:
        print(f"  MISMATCH {c.label or c.event_id} {c.field}: recorded {_show(c.ours)}, truth {_show(c.truth)}")
    print(
        f"{len(checks) - len(bad)} of {len(checks)} values match the ground truth "
        f"(each time seen at the first {poll_interval:g} s poll after it)"
    )
    return not bad


def _approvals(run: FleetRun, window: dict[str, datetime], labels: dict[str, str]) -> None:
    rows = queries.run(run.client, queries.APPROVALS, run.settings.database, **window).dicts()
    shown = [
        [
            labels.get(a["event_id"], "?"),
            a["event_type"],
            a["vm_name"],
            a["decision"],
            a["rule"],
            "-" if a["hook_exit"] is None else str(a["hook_exit"]),
            _secs(a["hook_s"]),
            "-" if a["http_status"] is None else str(a["http_status"]),
            _secs(a["notice_saved_s"]),
        ]
        for a in rows
    ]
    print("Approval policy decisions (the collectors' [approval] table; notice saved: NotBefore minus the approval)")
    print(table(["event", "type", "VM", "decision", "rule", "hook exit", "hook s", "HTTP", "notice saved"], shown))


# a measured downtime is at most one collector tick longer than the real one, plus signal and scheduling delays
TICK_S = CollectorSettings().tick_interval


def _report(run: FleetRun, workdir: Path, started_at: datetime) -> None:
    out = workdir.resolve() / "report.html"
    since = records.format_time(started_at - timedelta(minutes=5))
    until = records.format_time(datetime.now(UTC) + timedelta(minutes=5))
    argv = ["--clickhouse", run.settings.clickhouse, "--since", since, "--until", until, "--out", str(out)]
    if report.main(argv) == 0:
        print(f"incident report: {out}")


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _show(value: object) -> str:
    return records.format_time(value) if isinstance(value, datetime) else repr(value)


def _verdict(checks: list[Check]) -> str:
    bad = [c.field for c in checks if not c.ok]
    return "yes" if not bad else "no: " + ",".join(bad)
