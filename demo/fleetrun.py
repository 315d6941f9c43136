"""A whole pipeline on one machine: simulated fleet -> real collectors -> outboxes -> ingest -> chdb.

Used by ``sevents-demo``, the end-to-end tests and the latency benchmark. Every part is the real one: the
simulator serves HTTP on loopback, each collector has its own state dir and polls it over HTTP, the ingest
reads the outboxes while they are written and loads the embedded ClickHouse in ``workdir``; when the collectors
act on an approval policy, the coordinator runs beside the ingest (``demo.coordination``) and approves the events
naming several VMs through the simulator's Maintenance API once every one of them is ready. Collectors run as
threads of this process (``Collector``), or with ``processes=True`` as ``sevents-collector run`` processes that the
simulated VMs' real downtime is done to (``demo.processes``): paused, or killed and started with a new boot id;
and the scenario's collector faults: killed, or stopped cleanly, for good.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collector.process import Collector
from collector.settings import CollectorSettings, load_approval
from collector.status import depth
from collector.wiring import build_agent
from demo import coordination
from demo.processes import CollectorProcess, Downtimes, start_collectors
from ingest.clickhouse import _locked
from ingest.errors import TargetError
from ingest.settings import IngestSettings
from ingest.wiring import Pipeline, build
from simulator import SimServer, load_scenario

log = logging.getLogger(__name__)


@dataclass
class FleetRun:
    """A running simulated fleet with its collectors and ingest; ``finish()`` drains, ``close()`` releases."""

    workdir: Path
    sim: SimServer
    settings: IngestSettings
    poll_interval: float
    agents: list[Collector] = field(default_factory=list)
    processes: list[CollectorProcess] = field(default_factory=list)
    downtimes: Downtimes | None = None
    threads: list[threading.Thread] = field(default_factory=list)
    collectors_stop: threading.Event = field(default_factory=threading.Event)
    ingest_stop: threading.Event = field(default_factory=threading.Event)
    pipeline: Pipeline | None = None
    ingest_thread: threading.Thread | None = None
    coordinator_stop: threading.Event = field(default_factory=threading.Event)
    coordinator_thread: threading.Thread | None = None  # beside the ingest when the collectors act (a policy)
    failures: list[BaseException] = field(default_factory=list)

    @property
    def client(self) -> Any:
        assert self.pipeline is not None
        return self.pipeline.client

    def stored(self) -> int:
        """Records and dead letters stored so far."""
        return 0 if self.pipeline is None else self.pipeline.handler.stored

    def backlog(self) -> int:
        """Records waiting in the collectors' outboxes."""
        return sum(agent.outbox.depth() for agent in self.agents) + sum(depth(p.state_dir) for p in self.processes)

    @property
    def collectors(self) -> int:
        return len(self.agents) + len(self.processes)

    def finish(self, settle_s: float | None = None) -> None:
        """Let collectors see the last changes, stop them, stop the live ingest and drain every outbox.

        By default every collector has stored what it could know: each VM was answered twice since now (a
        collector asks again only once it committed the previous answer), however slow a loaded machine is.
        """
        if settle_s is None:
            self.wait_answered(since=datetime.now(UTC), times=2, timeout=120)
        else:
            self.collectors_stop.wait(settle_s)
        self.collectors_stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
        self._stop_processes()
        self._stop_coordinator()
        self.ingest_stop.set()
        if self.ingest_thread is not None:
            self.ingest_thread.join(timeout=60)
        drain = build(self.settings, threading.Event(), client=self.client, apply_migrations=False, until_idle=True)
        drain.run(threading.Event())
        assert self.pipeline is not None
        self.pipeline.handler.stored += drain.handler.stored
        if self.failures:
            raise RuntimeError(f"{len(self.failures)} pipeline threads failed") from self.failures[0]

    def wait_answered(self, *, since: datetime, times: int, timeout: float) -> bool:
        """Until every VM whose collector runs was answered ``times`` times after ``since`` (or ``timeout`` seconds
        passed)."""
        deadline = time.monotonic() + timeout
        ended = {p.vm for p in self.processes if p.ended}  # killed or stopped by the scenario: never asks again
        polling = [vm for vm in self.sim.vm_names if vm not in ended]
        while time.monotonic() < deadline:
            if all(sum(1 for t in self.sim.served(vm) if t > since) >= times for vm in polling):
                return True
            if self.collectors_stop.wait(min(0.05, self.poll_interval)):
                return False
        return False

    def _stop_coordinator(self) -> None:
        self.coordinator_stop.set()
        if self.coordinator_thread is not None:
            self.coordinator_thread.join(timeout=30)

    def _stop_processes(self) -> None:
        if self.downtimes is not None:
            self.downtimes.release()
        for proc in self.processes:
            proc.stop()

    def close(self) -> None:
        """Stop everything and release the outboxes, the simulator and the ClickHouse client (idempotent)."""
        self.collectors_stop.set()
        self.ingest_stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
        self._stop_processes()
        self._stop_coordinator()
        for agent in self.agents:
            agent.close()
        self.agents.clear()
        self.sim.stop()
        if self.pipeline is not None:
            self.pipeline.client.close()
            self.pipeline = None


def start(
    workdir: Path,
    *,
    scenario: str = "demo",
    speed: float | None = None,
    poll_interval: float = 1.0,
    heartbeat_interval: float = 5.0,
    batch_max_wait: float = 0.5,
    fresh: bool = True,
    clickhouse: str | None = None,
    database: str = "sevents",
    processes: bool = False,
    approval: Path | None = None,
) -> FleetRun:
    """Start the simulator, one collector per VM (threads, or ``processes``), and the ingest thread; returns at once.

    ``clickhouse`` defaults to ``chdb://<workdir>/clickhouse``; a process can hold one chdb directory only, so
    tests pass the one they already use (with their own ``database``). ``approval`` is a collector TOML file whose
    ``[approval]`` table every collector acts on (None: nothing is approved by sevents).
    """
    workdir = workdir.resolve()
    if fresh and clickhouse is None and _locked(workdir / "clickhouse"):
        # Starting fresh deletes the directory: never pull it from under a running ingest or demo.
        raise TargetError(
            f"the embedded ClickHouse directory {workdir / 'clickhouse'} is open in another process "
            "(a running sevents-ingest or demo?): stop it first, or use another workdir"
        )
    if fresh:
        for part in ("clickhouse", "collectors"):
            shutil.rmtree(workdir / part, ignore_errors=True)
    (workdir / "collectors").mkdir(parents=True, exist_ok=True)
    sim = SimServer(load_scenario(scenario), speed=speed)
    if sim.scenario.collector_faults and not processes:
        log.warning("the scenario's collector faults are done to collector processes only: ignored")
    if approval is None and sim.scenario.collector_approval is not None:
        approval = write_approval_config(workdir / "collector.toml", sim.scenario.collector_approval)
    settings = IngestSettings(
        clickhouse=clickhouse or f"chdb://{workdir / 'clickhouse'}",
        database=database,
        source=f"outbox:{workdir / 'collectors'}/*",
        batch_max_wait=batch_max_wait,
        poll_interval=min(0.2, batch_max_wait) or 0.05,
    )
    run = FleetRun(workdir, sim, settings, poll_interval)
    try:
        if processes:
            _start_processes(run, workdir / "collectors", heartbeat_interval, approval)
        sim.start()
        if processes:
            _follow_downtime(run)
        base = CollectorSettings()
        policy = load_approval(approval)
        for name in [] if processes else sim.vm_names:
            collector = dataclasses.replace(
                base,
                imds_url=sim.vm_base_url(name),
                state_dir=workdir / "collectors" / name,
                poll_interval=poll_interval,
                heartbeat_interval=heartbeat_interval,
                min_request_interval=0.0,
                first_call_timeout=10.0,
            )
            run.agents.append(build_agent(collector, approval=policy))
        run.pipeline = build(settings, run.ingest_stop)  # migrated: the coordinator reads its tables
        if policy.enabled:  # the collectors act: events naming several VMs wait for the coordinator
            coordinate = coordination.runner(policy, sim, workdir, settings.clickhouse, database)
            run.coordinator_thread = _thread(run, lambda: coordinate(run.coordinator_stop), "coordinator")
        for agent in run.agents:
            run.threads.append(_thread(run, lambda a=agent: a.run(run.collectors_stop), "collector"))
        pipeline = run.pipeline
        run.ingest_thread = _thread(run, lambda: pipeline.run(run.ingest_stop), "ingest")
    except BaseException:
        run.close()
        raise
    return run


def write_approval_config(path: Path, table: Mapping[str, Any]) -> Path:
    """A collector TOML file holding ``table`` as its ``[approval]`` (``{python}`` in an argv: this interpreter)."""

    def value(v: Any) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, str):
            return json.dumps(v.replace("{python}", sys.executable))  # a JSON string is a TOML basic string
        return json.dumps(v)  # numbers, true/false

    lines = ["[collector]", "", "[approval]", *(f"{k} = {value(v)}" for k, v in table.items())]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _start_processes(run: FleetRun, root: Path, heartbeat_interval: float, config: Path | None) -> None:
    run.processes.extend(
        start_collectors(
            run.sim, root, poll_interval=run.poll_interval, heartbeat_interval=heartbeat_interval, config=config
        )
    )


def _follow_downtime(run: FleetRun) -> None:
    """Do the simulated VMs' downtime to their collector processes, from now on."""
    run.downtimes = Downtimes(run.sim, {p.vm: p for p in run.processes})
    downtimes = run.downtimes
    run.threads.append(_thread(run, lambda: downtimes.run(run.collectors_stop), "downtimes"))


def _thread(run: FleetRun, target: Any, name: str) -> threading.Thread:
    def work() -> None:
        try:
            target()
        except BaseException as error:
            log.exception("pipeline thread failed", extra={"thread": name})
            run.failures.append(error)

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    return thread
