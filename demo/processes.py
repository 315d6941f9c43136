"""Collectors as real processes, and the simulated VMs' real downtime done to them.

A VM that is down runs nothing, its collector included: while the simulator says a VM is down (``/_sim/downtime``),
``Downtimes`` makes that true of its collector. A pause (a Freeze, or one no event announced) stops the process
(SIGSTOP) and continues it (SIGCONT) when the VM runs again; a reboot (Reboot, Redeploy, a host failure) kills it
(SIGKILL), gives its VM a new boot id, and starts it again once the VM is back. The collector then measures what
it went through, as it would on a real VM.

A scenario's ``[[collector_faults]]`` end a collector while its VM runs on: ``kill`` (SIGKILL, a crash with no last
word) or ``stop`` (SIGTERM, a clean stop with its final heartbeat). Either way it stays ended, through later
downtime of its VM too.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from collector.liveness import ALIVE_FILE
from simulator import SimServer
from simulator.state import CollectorFault, DownSpan

log = logging.getLogger(__name__)

PROCESS_START_S: Final = 120.0  # dozens of Python processes starting at once on a busy two-core machine
WATCH_S: Final = 0.02  # how often the simulator's downtime is looked at (the precision of the signals)
# Around a reboot, answers no collector read: one the killed process had in flight (answered just before the
# kill, or held while the VM was down and answered as it came back), and none can reach the restarted process
# before its interpreter has started and imported the collector.
IN_FLIGHT: Final = timedelta(seconds=0.05)
RESTART_FLOOR: Final = timedelta(seconds=0.2)
BOOT_ID_FILE: Final = "boot_id"  # in each collector's state dir: the VM's boot id, as the collector reads it
LOG_FILE: Final = "collector.log"


@dataclass
class CollectorProcess:
    """One ``sevents-collector run`` process for one simulated VM."""

    vm: str
    argv: list[str]
    state_dir: Path
    process: subprocess.Popen[bytes] | None = None
    ended: str = ""  # "kill" or "stop": a scenario's collector fault ended it for good

    def start(self) -> None:
        """Start it; its log goes to ``collector.log`` in its state dir."""
        with (self.state_dir / LOG_FILE).open("ab") as log_file:
            self.process = subprocess.Popen(  # noqa: S603 -- our own interpreter and arguments, no shell
                self.argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file
            )

    def running(self) -> bool:
        """Whether the collector is up: its agent stored a first moment alive (raises if the process died)."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"collector of {self.vm} exited with {self.process.returncode}: see its collector.log")
        alive = self.state_dir / ALIVE_FILE
        return alive.exists() and alive.stat().st_size > 0

    def new_boot(self) -> None:
        """The VM rebooted: the kernel's boot id changes."""
        (self.state_dir / BOOT_ID_FILE).write_text(str(uuid.uuid4()) + "\n", encoding="ascii")

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signum)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (continued first, should it be stopped), then wait; SIGKILL past ``timeout``."""
        if self.process is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def collector_process(
    vm: str,
    imds_url: str,
    state_dir: Path,
    *,
    poll_interval: float,
    heartbeat_interval: float,
    config: Path | None = None,
) -> CollectorProcess:
    """A collector for ``vm`` with its own state dir and boot id file (not started); ``config``: its TOML file
    (the demo's holds the ``[approval]`` policy)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "collector",
        "run",
        "--imds-url",
        imds_url,
        "--state-dir",
        str(state_dir),
        "--boot-id-file",
        str(state_dir / BOOT_ID_FILE),
        "--poll-interval",
        str(poll_interval),
        "--heartbeat-interval",
        str(heartbeat_interval),
        "--min-request-interval",
        "0",
        "--first-call-timeout",
        "120",  # the first requests wait in the simulator's backlog until every collector is up and it starts
        "--request-timeout",
        "30",  # dozens of processes on two busy cores: an answer may come late without IMDS being wrong
        "--log-level",
        "warning",
        *(["--config", str(config)] if config is not None else []),
    ]
    proc = CollectorProcess(vm, argv, state_dir)
    if not (state_dir / BOOT_ID_FILE).exists():
        proc.new_boot()
    return proc


def start_collectors(
    sim: SimServer, root: Path, *, poll_interval: float, heartbeat_interval: float, config: Path | None = None
) -> list[CollectorProcess]:
    """A collector process per VM of ``sim``, each running (its first moment alive stored) when this returns.

    Call it before ``sim.start()``: the simulator's port is bound already, so the collectors' first requests wait
    in its backlog, and none misses the scenario's first seconds while Python starts.
    """
    processes = []
    for name in sim.vm_names:
        proc = collector_process(
            name,
            sim.vm_base_url(name),
            root / name,
            poll_interval=poll_interval,
            heartbeat_interval=heartbeat_interval,
            config=config,
        )
        proc.start()
        processes.append(proc)
    deadline = time.monotonic() + PROCESS_START_S
    try:
        while not all(p.running() for p in processes):
            if time.monotonic() > deadline:
                raise RuntimeError(f"collectors not running after {PROCESS_START_S:g} s: see collector.log in {root}")
            time.sleep(0.05)
    except BaseException:
        for proc in processes:
            proc.stop()
        raise
    return processes


@dataclass
class Applied:
    """One downtime done to a collector: the simulator's span, and when the process was really stopped and resumed."""

    span: DownSpan
    down_at: datetime
    up_at: datetime | None = None


@dataclass
class Downtimes:
    """Follows the simulator's downtime and collector faults and does them to the collectors; ``applied`` lists the
    downtime it did, ``faulted`` the collector faults."""

    sim: SimServer
    collectors: dict[str, CollectorProcess]
    applied: list[Applied] = field(default_factory=list)
    faulted: list[CollectorFault] = field(default_factory=list)
    _open: dict[tuple[str, str, datetime], Applied | None] = field(default_factory=dict)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(WATCH_S):
            self._collector_faults()
            now = datetime.now(UTC)
            for span in self.sim.downtime():
                key = (span.vm_name, span.label, span.began_at)
                collector = self.collectors.get(span.vm_name)
                if collector is None:
                    continue
                if key not in self._open and span.ended_at <= now:  # over before it was seen: a stalled machine
                    log.warning("VM downtime missed", extra={"vm": span.vm_name, "label": span.label})
                    self._open[key] = None
                elif key not in self._open:
                    self._open[key] = self._begin(span, collector)
                elif (applied := self._open[key]) is not None and span.ended_at <= now:
                    self._end(applied, collector)
                    self._open[key] = None

    def _collector_faults(self) -> None:
        """End the collectors the scenario kills or stops now (never waited for: a paused one ends once continued)."""
        for fault in self.sim.collector_faults():
            collector = self.collectors.get(fault.vm_name)
            if fault in self.faulted or collector is None or collector.ended:
                continue
            collector.ended = fault.kind
            collector.signal(signal.SIGKILL if fault.kind == "kill" else signal.SIGTERM)
            self.faulted.append(fault)
            log.info("collector ended", extra={"vm": fault.vm_name, "kind": fault.kind})

    def _begin(self, span: DownSpan, collector: CollectorProcess) -> Applied:
        if collector.ended:  # nothing left to stop: the VM is down all the same
            return Applied(span, datetime.now(UTC))
        if span.how == "reboot":
            collector.signal(signal.SIGKILL)
            if collector.process is not None:
                collector.process.wait()
            collector.new_boot()
        else:
            collector.signal(signal.SIGSTOP)
        applied = Applied(span, datetime.now(UTC))
        self.applied.append(applied)
        log.info("VM down", extra={"vm": span.vm_name, "how": span.how, "down_s": span.down_s})
        return applied

    def _end(self, applied: Applied, collector: CollectorProcess) -> None:
        applied.up_at = datetime.now(UTC)
        if collector.ended:  # a killed or stopped collector stays ended, even once its VM is back
            collector.signal(signal.SIGCONT)  # a stop (SIGTERM) pending while it was paused goes through
        elif applied.span.how == "reboot":
            collector.start()
        else:
            collector.signal(signal.SIGCONT)

    def release(self) -> None:
        """End every downtime still going on (the demo is stopping)."""
        for (vm, _, _), applied in self._open.items():
            if applied is not None:
                self._end(applied, self.collectors[vm])
        self._open.clear()


def down_spans(applied: Iterable[Applied]) -> dict[str, list[tuple[datetime, datetime]]]:
    """VM -> when its collector was really stopped (a downtime still going on runs to the end of time)."""
    spans: dict[str, list[tuple[datetime, datetime]]] = {}
    for a in applied:
        back = a.up_at if a.up_at is not None else datetime.max.replace(tzinfo=UTC)
        spans.setdefault(a.span.vm_name, []).append((a.down_at, back))
    return spans


def answers_heard(served: Mapping[str, Sequence[datetime]], applied: Iterable[Applied]) -> dict[str, list[datetime]]:
    """``served`` (VM -> when the simulator answered it) without the answers a rebooted VM's collector never read.

    What a collector could know is bounded by the answers it read; an answer that went to a killed process
    would otherwise make a later observation look late. Dropping one only widens a window, never narrows it.
    """
    lost: dict[str, list[tuple[datetime, datetime]]] = {}
    for a in applied:
        if a.span.how == "reboot":
            back = a.up_at if a.up_at is not None else datetime.max.replace(tzinfo=UTC) - RESTART_FLOOR
            lost.setdefault(a.span.vm_name, []).append((a.down_at - IN_FLIGHT, back + RESTART_FLOOR))
    return {
        vm: [t for t in times if not any(low <= t <= high for low, high in lost.get(vm, ()))]
        for vm, times in served.items()
    }
