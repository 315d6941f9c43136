"""SimServer: the engine, the fault book and one HTTP server for the whole fleet, wired together.

Collectors reach VM ``NAME`` at the base URL ``http://HOST:PORT/vm/NAME`` (``SimServer.vm_base_url``) and
append ``/metadata/scheduledevents?api-version=...`` or ``/metadata/instance?api-version=...`` to it.
"""

from __future__ import annotations

import logging
import secrets
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from sevents.records import format_time
from simulator import control, maintenance
from simulator.attested import AttestedDocuments
from simulator.engine import Engine
from simulator.faults import Fault, FaultBook, parse_fault, scenario_faults
from simulator.fleet import build_fleet
from simulator.http_edge import Handler
from simulator.loader import load_scenario
from simulator.protocol import (
    INSTANCE_VERSIONS,
    LATEST_PATH_VERSION,
    SCHEDULED_EVENTS_VERSIONS,
    Reply,
    bad_request,
    check_request,
    parse_start_requests,
    render_document,
    render_instance,
)
from simulator.scenario import Scenario
from simulator.state import CollectorFault, DownSpan, Happening, Served

log = logging.getLogger("simulator")


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line, never socketserver's raw traceback on stderr: a collector that hangs up mid-answer (it
        was stopped, or timed out) is normal; anything else is a warning."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            log.debug("a client closed its connection mid-request", extra={"error": repr(error)})
        else:
            log.warning("a request failed", extra={"error": repr(error)})


TICK_S = 0.01  # how often the background ticker advances the engine (wall seconds)
SERVED_KEPT = 100_000  # answer times kept per VM (a day of polls at 1 s)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _names(names: tuple[str, ...]) -> str:
    """A short list of VM names for a log line."""
    return ",".join(names) if len(names) <= 12 else ",".join(names[:10]) + f",... ({len(names)} VMs)"


class SimServer:
    """A simulated IMDS for a whole fleet; ``start()`` serves it on a background thread."""

    def __init__(
        self,
        scenario: Scenario | str | Path,
        *,
        speed: float | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], datetime] = _utcnow,
        new_id: Callable[[], str] | None = None,
        attested: AttestedDocuments | None = None,
    ) -> None:
        self.scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        self.speed = float(speed) if speed is not None else self.scenario.speed
        if not 0 < self.speed < float("inf"):  # also refuses NaN
            raise ValueError("speed must be a finite positive number")
        self._clock = clock
        self._new_id = new_id
        self._vm_names = [vm.name for vm in build_fleet(self.scenario.fleet)]
        self.default_vm = self._vm_names[0]
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._engine: Engine | None = None
        self.faults = FaultBook()
        self._http = _Server((host, port), Handler)
        self._http.daemon_threads = True
        self._http.fleet = self  # type: ignore[attr-defined]  # read by Handler.fleet
        self._threads: list[threading.Thread] = []
        self._recent: dict[str, deque[float]] = {}  # request times per VM, for the rate limit
        # when each VM was answered a Scheduled Events document: what its collector could know, and when
        self._served: dict[str, deque[datetime]] = {}
        self.rate_limited = 0
        self.arm_token = secrets.token_urlsafe(32)  # the bearer token its Maintenance API accepts
        # /metadata/attested/document, signed by a test authority in Azure's place (generated at the first request)
        self.attested_documents = attested or AttestedDocuments()

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> SimServer:
        """Start the scenario clock and serve in background threads."""
        now = self._clock()
        kwargs = {"new_id": self._new_id} if self._new_id else {}
        self._engine = Engine(self.scenario, start=now, speed=self.speed, **kwargs)
        self.faults.arm(scenario_faults(self.scenario.faults, now, self.speed, self._vm_names))
        log.info(
            "simulator started",
            extra={
                "scenario": self.scenario.name,
                "speed": self.speed,
                "vms": len(self._vm_names),
                "url": self.base_url,
            },
        )
        for target, name in ((self._serve, "sim-http"), (self._tick, "sim-ticker")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop serving; waits for the threads, releases the port."""
        self._stop.set()
        if self._threads:
            self._http.shutdown()
        self._http.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()

    def __enter__(self) -> SimServer:
        return self.start() if self._engine is None else self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _serve(self) -> None:
        # A short poll interval makes stop() quick; the cost is a few wakeups per second.
        self._http.serve_forever(poll_interval=0.05)

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            self.advance()

    # -- state ------------------------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise RuntimeError("SimServer.start() has not been called")
        return self._engine

    def advance(self) -> None:
        """Apply what is due now and log it."""
        with self._lock:
            happened = self.engine.advance(self._clock())
            self._log(happened)
            if self.engine.done() and not self._done.is_set():
                self._done.set()
                log.info("scenario done", extra={"scenario": self.scenario.name, "events": len(self.scenario.events)})

    def _log(self, happened: list[Happening]) -> None:
        for h in happened:
            if h.kind == "reset":
                log.info("scheduled events reset", extra={"at": format_time(h.at), "vms": _names(h.vms)})
                continue
            extra = {
                "at": format_time(h.at),  # when it happened in the scenario; the log line may come a tick later
                "label": h.label,
                "event_id": h.event_id,
                "event_type": h.event_type,
                "resources": _names(h.resources),
                **({"approved_by": h.vms[0]} if h.kind == "approved" else {"seen_by": len(h.vms)}),
                **({"not_before": format_time(h.not_before)} if h.not_before else {}),
            }
            log.info(f"event {h.kind}", extra=extra)

    @property
    def base_url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    def vm_base_url(self, name: str) -> str:
        """The IMDS base URL a collector on VM ``name`` uses."""
        return f"{self.base_url}/vm/{name}"

    @property
    def vm_names(self) -> list[str]:
        return list(self._vm_names)

    def done(self) -> bool:
        """True once every scenario event has ended (completed or cancelled), or the scenario's ``end`` passed."""
        self.advance()
        return self._done.is_set()

    def wait_done(self, timeout: float) -> bool:
        """Block until done or ``timeout`` wall seconds passed; returns done()."""
        return self._done.wait(timeout)

    def truth(self) -> list[dict[str, Any]]:
        """Ground truth, one dict per (event_id, vm_name); see Engine.truth."""
        with self._lock:
            self.advance()
            return self.engine.truth()

    def history(self, name: str) -> list[Served]:
        """Every document VM ``name`` went through, oldest first."""
        with self._lock:
            self.advance()
            return self.engine.history(name)

    def served(self, name: str) -> list[datetime]:
        """When VM ``name`` was answered a Scheduled Events document (the state as of that moment), oldest first."""
        with self._lock:
            return list(self._served.get(name, ()))

    def approvals(self) -> list[tuple[datetime, str, str, str]]:
        """Every approval received: (at, vm, event_id, "http" | "maintenance" | "script")."""
        with self._lock:
            return list(self.engine.approval_log)

    # -- the Fleet protocol used by the HTTP handler ----------------------------------------------------

    def has_vm(self, name: str) -> bool:
        return name in self.engine.vms

    def take_fault(self, vm: str, path: str) -> Fault | None:
        now = self._clock()
        if self._over_rate_limit(vm):
            return Fault(vm, "429", 1, now, path, retry_after_s=1)
        fault = self.faults.take(vm, path, now)
        if fault is not None:
            log.info("fault injected", extra={"vm": vm, "kind": fault.kind, "path": path})
        return fault

    def _over_rate_limit(self, vm: str) -> bool:
        """IMDS throttles a VM above about 5 requests/s (all agents together); off unless fleet.rate_limit."""
        limit = self.scenario.fleet.rate_limit
        if limit <= 0:
            return False
        now = time.monotonic()
        with self._lock:
            recent = self._recent.setdefault(vm, deque())
            while recent and recent[0] <= now - 1.0:
                recent.popleft()
            if len(recent) >= limit:
                self.rate_limited += 1
                return True
            recent.append(now)
            return False

    def wait(self, seconds: float) -> bool:
        return self._stop.wait(seconds)

    def check(self, path: str, headers: dict[str, str], query: dict[str, list[str]]) -> Reply | str:
        """IMDS's request rules for ``path``: the api-version, or the 400 that IMDS would send."""
        if path.rstrip("/") == "/metadata/instance":
            return check_request(headers, query, INSTANCE_VERSIONS)
        checked = check_request(headers, query, SCHEDULED_EVENTS_VERSIONS)
        if isinstance(checked, str) and ("/latest/" in path) != (checked == LATEST_PATH_VERSION):
            return bad_request(f"api-version {checked} does not use this path.", SCHEDULED_EVENTS_VERSIONS)
        return checked

    def answer(self, vm: str, method: str, path: str, version: str, body: bytes) -> Reply:
        """Answer one valid IMDS request of VM ``vm`` (once the VM runs again, if it is down)."""
        self._while_down(vm)
        if path.rstrip("/") == "/metadata/instance":
            if method != "GET":
                return Reply(405, {"error": "Method not allowed"})
            return Reply(200, render_instance(version, self.engine.vms[vm].view))
        delay = self.scenario.fleet.first_call_delay
        if method == "GET" and delay > 0:
            with self._lock:
                switching_on = not self.engine.switched_on(vm, self._clock())
            if switching_on:  # the first call enables Scheduled Events and is slow (up to 2 minutes in Azure)
                self.wait(delay)
        with self._lock:
            now = self._clock()
            self._log(self.engine.advance(now))
            if method == "POST":
                ids = parse_start_requests(body)
                if ids is None:
                    return bad_request("The request body is not a valid StartRequests document.")
                unknown, happened = self.engine.approve(vm, ids, now)
                self._log(happened)
                if unknown:
                    return bad_request("Unknown EventId: " + ", ".join(i[:64] for i in unknown))
                return Reply(200, None)
            incarnation, events, happened = self.engine.poll(vm, now)
            self._log(happened)
            self._served.setdefault(vm, deque(maxlen=SERVED_KEPT)).append(now)
            return Reply(200, render_document(version, incarnation, events))

    def attested(self, vm: str, headers: dict[str, str], query: dict[str, list[str]]) -> Reply:
        """IMDS's attested data document of VM ``vm`` (simulator/attested.py), once the VM runs."""
        self._while_down(vm)
        return self.attested_documents.answer(vm, self.engine.vms[vm].view, headers, query, self._clock())

    def acknowledge(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> Reply:
        """Azure's Maintenance API acknowledge for the fleet (simulator/maintenance.py), with ``arm_token`` as its
        bearer token: the approval releases the event as a POST of StartRequests by that VM would."""
        if method != "POST":
            return maintenance.error(405, "MethodNotAllowed", "the acknowledge is a POST")
        request = maintenance.parse(path, query, headers, (self.arm_token,))
        if isinstance(request, Reply):
            return request
        resource_ids = {name: vm.view.resource_id for name, vm in self.engine.vms.items()}

        def approve(vm: str, event_id: str) -> bool:
            with self._lock:
                now = self._clock()
                self._log(self.engine.advance(now))
                unknown, happened = self.engine.approve(vm, [event_id], now, "maintenance")
                self._log(happened)
                return not unknown

        return maintenance.acknowledge(request, lambda r: maintenance.vms_of(r, resource_ids), approve)

    def _while_down(self, vm: str) -> None:
        """Hold a request of a VM that is down (paused or rebooting) until it runs again, as a real VM would."""
        for _ in range(100):  # downtimes back to back: each one waited out, never forever
            with self._lock:
                now = self._clock()
                self._log(self.engine.advance(now))
                up = self.engine.down_until(vm, now)
            if up is None or self.wait((up - now).total_seconds()):
                return

    def downtime(self) -> list[DownSpan]:
        """Every stretch a VM was really down so far (ground truth of observed impact)."""
        with self._lock:
            self.advance()
            return self.engine.downtime(self._clock())

    def collector_faults(self) -> list[CollectorFault]:
        """The scenario's collector faults due so far (``demo.processes`` does them to real collectors)."""
        with self._lock:
            self.advance()
            return self.engine.collector_faults(self._clock())

    def control(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> Reply:
        """The ``/_sim/...`` control and inspection endpoints (see simulator/control.py)."""
        return control.handle(self, method, path, query, body)

    def arm_faults(self, doc: dict[str, Any]) -> tuple[int, list[str]]:
        """Arm faults described like a ``POST /_sim/faults`` body; returns (how many armed, problems)."""
        faults, problems = parse_fault(doc, self._clock(), self._vm_names)
        if not problems:
            self.faults.arm(faults)
            log.info("faults armed", extra={"kind": doc.get("kind"), "vms": len(faults)})
        return len(faults), problems

    def status(self) -> dict[str, Any]:
        """A summary for people and scripts: scenario, speed, done, events by state, faults injected."""
        with self._lock:
            return {
                "scenario": self.scenario.name,
                "speed": self.speed,
                "started_at": format_time(self.engine.start),
                "done": self.engine.done(),
                "events": self.engine.events_summary(),
                "vms": len(self._vm_names),
                "faults_injected": dict(self.faults.injected),
                "rate_limited": self.rate_limited,
            }
