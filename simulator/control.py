"""The ``/_sim/...`` endpoints: ground truth, status, VMs, document history and fault injection over HTTP."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Protocol

from sevents.records import format_time
from simulator.engine import Engine
from simulator.faults import FaultBook
from simulator.protocol import Reply
from simulator.state import DownSpan, Served


class ControlTarget(Protocol):
    """What the control endpoints read and arm on the running simulator (the server, which imports this module)."""

    default_vm: str
    faults: FaultBook

    @property
    def engine(self) -> Engine: ...
    def truth(self) -> list[dict[str, Any]]: ...
    def downtime(self) -> list[DownSpan]: ...
    def status(self) -> dict[str, Any]: ...
    def history(self, name: str) -> list[Served]: ...
    def approvals(self) -> list[tuple[datetime, str, str, str]]: ...
    def has_vm(self, name: str) -> bool: ...
    def arm_faults(self, doc: dict[str, Any]) -> tuple[int, list[str]]: ...


def jsonable(value: Any) -> Any:
    """Datetimes as wire-contract strings, recursively."""
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def handle(sim: ControlTarget, method: str, path: str, query: dict[str, list[str]], body: bytes) -> Reply:
    """Answer one control request."""
    if method == "GET":
        if path == "/_sim/truth":
            return Reply(200, jsonable(sim.truth()))
        if path == "/_sim/downtime":
            spans = [{**vars(d), "down_s": d.down_s} for d in sim.downtime()]
            return Reply(200, jsonable(spans))
        if path == "/_sim/status":
            return Reply(200, sim.status())
        if path == "/_sim/vms":
            vms = [{**vars(vm.view), "group": vm.group, "fault_set": vm.fault_set} for vm in sim.engine.vms.values()]
            return Reply(200, [{**vm, "base_path": f"/vm/{vm['name']}"} for vm in vms])
        if path == "/_sim/history":
            return _history(sim, (query.get("vm") or [sim.default_vm])[0])
        if path == "/_sim/faults":
            return Reply(200, sim.faults.pending())
        if path == "/_sim/approvals":
            keys = ("at", "vm", "event_id", "source")
            return Reply(200, jsonable([dict(zip(keys, a, strict=True)) for a in sim.approvals()]))
    if method == "POST" and path == "/_sim/faults":
        return _post_faults(sim, body)
    return Reply(404, {"error": "Not found"})


def _history(sim: ControlTarget, name: str) -> Reply:
    if not sim.has_vm(name):
        return Reply(404, {"error": f"unknown VM {name[:64]!r}"})
    docs = [
        {"at": s.at, "incarnation": s.incarnation, "events": [vars(e) for e in s.events]} for s in sim.history(name)
    ]
    return Reply(200, jsonable(docs))


def _post_faults(sim: ControlTarget, body: bytes) -> Reply:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return Reply(400, {"error": "body is not JSON", "problems": []})
    if not isinstance(doc, dict):
        return Reply(400, {"error": "body must be a JSON object", "problems": []})
    armed, problems = sim.arm_faults(doc)
    if problems:
        return Reply(400, {"error": "invalid fault", "problems": problems})
    return Reply(200, {"armed": armed})
