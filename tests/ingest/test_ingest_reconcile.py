"""`sevents-ingest reconcile` and `audit coverage` against a loopback Azure Resource Graph, through the real SDKs.

The ARG server (tests/ingest/fake_arg.py) speaks the REST protocol (bearer token, $skipToken paging, 429 with the
quota headers, objectArray results); the token comes from a loopback endpoint speaking the App Service
managed-identity protocol, which azure-identity's DefaultAzureCredential picks from IDENTITY_ENDPOINT and
IDENTITY_HEADER. Nothing in the product knows it is a test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo import synthetic
from ingest import cli
from ingest import reconcile_rows as rr
from ingest.handler import Handler
from ingest.settings import arm_endpoint_problems
from tests.helpers import wait_for

from .conftest import deliveries, scalar
from .fake_arg import FakeArg

SUB_A = "aaaaaaaa-0000-4000-8000-000000000001"
SUB_B = "bbbbbbbb-0000-4000-8000-000000000002"
SUB_OTHER = "cccccccc-0000-4000-8000-000000000003"  # not configured: never read
RESOURCES_VMS = 2300  # 3 pages of ARG's 1,000
UNIFORM_VMS = 200  # ComputeResources
TOTAL_VMS = RESOURCES_VMS + UNIFORM_VMS
SET_SIZE = 50
CLI = [sys.executable, "-m", "ingest.cli"]


def vm_id(i: int) -> str:
    return synthetic.vm(i)["vm_id"]  # the synthetic collectors' vmIds: heartbeat(vm_index=i) is VM i


def placement(i: int) -> tuple[str, str, str, str]:
    """(subscription, resource group, kind, set name) of inventory VM ``i``."""
    if i < 1000:
        return SUB_A, "rg-web", "availability", f"WEB-AS-{i // SET_SIZE}"
    if i < 1600:
        return SUB_A, "rg-api", "flexible", f"flex-{(i - 1000) // SET_SIZE}"
    if i < RESOURCES_VMS:
        return SUB_B, "rg-misc", "standalone", ""
    return SUB_B, "rg-batch", "uniform", f"uni-{(i - RESOURCES_VMS) // SET_SIZE}"


def resource_id(i: int) -> str:
    sub, rg, kind, name = placement(i)
    base = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute"
    if kind == "uniform":
        return f"{base}/virtualMachineScaleSets/{name}/virtualMachines/{(i - RESOURCES_VMS) % SET_SIZE}"
    return f"{base}/virtualMachines/vm-{i:04d}"


def arg_vm(i: int) -> dict[str, Any]:
    """VM ``i`` as the reconciler's queries project it."""
    sub, rg, kind, name = placement(i)
    base = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute"
    return {
        "id": resource_id(i),
        "vmId": vm_id(i),
        "name": f"{name}_{(i - RESOURCES_VMS) % SET_SIZE}" if kind == "uniform" else f"vm-{i:04d}",
        "resourceGroup": rg,
        "subscriptionId": sub,
        "location": "westeurope",
        "zone": str(1 + i % 3) if kind != "availability" else "",
        "availabilitySetId": f"{base}/availabilitySets/{name}" if kind == "availability" else "",
        "scaleSetId": f"{base}/virtualMachineScaleSets/{name}" if kind == "flexible" else "",
        "vmSize": "Standard_D4s_v5",
        "powerState": "PowerState/running",
        "faultDomain": i % 3 if kind in ("flexible", "uniform") else None,
        "updateDomain": None,
    }


def annotation(n: int, now: datetime) -> dict[str, Any]:
    i = n * 37 % TOTAL_VMS
    return {
        "id": f"{resource_id(i)}/providers/Microsoft.ResourceHealth/resourceAnnotations/current"
        f"/providers/Microsoft.Resources/changes/08584-{n:04d}",
        "subscriptionId": placement(i)[0],
        "changedAt": (now - timedelta(hours=n)).isoformat(),
        "targetResourceId": f"{resource_id(i)}/providers/Microsoft.ResourceHealth/resourceAnnotations/current",
        "changeType": "Update",
        "annotationName": "VirtualMachineRebootInitiatedForPlannedMaintenance" if n % 2 else "LiveMigrationSucceeded",
        "reason": "Planned maintenance",
        "category": "Planned" if n % 3 else "Unplanned",
        "context": "Platform Initiated",
        "summary": "",
        "occurredTime": (now - timedelta(hours=n, minutes=1)).isoformat(),
    }


def scheduled_event(n: int) -> dict[str, Any]:
    status = ["Scheduled", "Started", "Completed", "Canceled"][n % 4]
    sub, rg, _, _ = placement(n * SET_SIZE)
    return {
        "id": f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Maintenance/scheduledevents/E-{n}",
        "name": f"E-{n}",
        "subscriptionId": sub,
        "resourceGroup": rg,
        "properties": {
            "EventId": f"E-{n}",
            "EventType": "Reboot" if n % 2 else "Freeze",
            "EventStatus": status,
            "NotBefore": "Mon, 23 Nov 2026 18:29:47 GMT" if status == "Scheduled" else "",
            "Resources": [f"vm-{n * SET_SIZE + k:04d}" for k in range(3)],
            "ResourceType": "VirtualMachine",
            "DurationInSeconds": -1 if n % 2 else 9,
            "EventSource": "Platform",
            "Description": "Host server is undergoing maintenance.",
        },
    }


def arg_tables(now: datetime) -> dict[str, list[dict[str, Any]]]:
    resources = [arg_vm(i) for i in range(RESOURCES_VMS)]
    resources.insert(700, {**arg_vm(0), "id": resource_id(0) + "-creating", "vmId": ""})  # no vmId yet: left out
    resources.append({**arg_vm(5), "id": "/subscriptions/other/x", "vmId": "ffff", "subscriptionId": SUB_OTHER})
    return {
        "Resources": resources,
        "ComputeResources": [arg_vm(i) for i in range(RESOURCES_VMS, TOTAL_VMS)],
        "HealthResourceChanges": [annotation(n, now) for n in range(1, 41)],
        "maintenanceresources": [scheduled_event(n) for n in range(8)],
    }


# What the collectors of inventory VM i did: by i % 10 (and a few collectors of VMs outside the inventory).
def collector_state(i: int) -> str:
    return {0: "reporting", 1: "reporting", 2: "reporting", 3: "reporting", 4: "reporting", 5: "silent"}.get(
        i % 10, {6: "retired", 7: "retired"}.get(i % 10, "never_seen")
    )


def heartbeats(now: datetime) -> list[dict[str, Any]]:
    out = []
    for i in [*range(TOTAL_VMS), 9000, 9001]:  # 9000, 9001: collectors of VMs no inventory lists
        kind = i % 10
        if kind in (8, 9):
            continue
        at = {5: now - timedelta(minutes=20), 6: now - timedelta(minutes=20), 7: now - timedelta(days=5)}.get(
            kind, now - timedelta(seconds=20)
        )
        record = synthetic.heartbeat(vm_index=i, observed_at=at)
        if kind == 6:
            record["final"] = True  # a clean stop: retired once silent
        out.append(record)
    return out


def expected_coverage() -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], Counter[str]] = {}
    for i in range(TOTAL_VMS):
        sub, rg, _, name = placement(i)
        groups.setdefault((sub, rg, name), Counter())[collector_state(i)] += 1
    return [
        {
            "subscription_id": sub,
            "resource_group": rg,
            "fault_set": name,
            "inventory_vms": sum(c.values()),
            "reporting": c["reporting"],
            "silent": c["silent"],
            "retired": c["retired"],
            "never_seen": c["never_seen"],
        }
        for (sub, rg, name), c in sorted(groups.items())
    ]


@pytest.fixture
def restore_signals() -> Iterator[None]:
    """cli.main installs SIGTERM/SIGINT handlers for its worker; put pytest's back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.fixture
def identity(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No other credential source than the fake's managed identity."""
    for name in list(os.environ):
        if name.startswith(("AZURE_", "IDENTITY_", "MSI_")):
            monkeypatch.delenv(name)
    yield


def table_state(ch: Any, db: str) -> dict[str, Any]:
    """Every row of the three tables (raw, not FINAL): what a second pass must leave as it is."""
    state = {}
    for table in ("azure_vms", "azure_annotations", "azure_scheduled_events"):
        rows = ch.query(f"SELECT * FROM {db}.{table} ORDER BY row_hash, reconciled_at").result_rows
        state[table] = rows
    return state


def reconcile(fake: FakeArg, ch_path: Path, db: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    args = ["reconcile", "--once", "--subscription", SUB_A, "--subscription", SUB_B, "--arm-endpoint", fake.url]
    code = cli.main([*args, "--clickhouse", f"chdb://{ch_path}", "--database", db])
    out, err = capsys.readouterr()
    return code, out, err


def test_reconcile_stores_the_inventory_and_coverage_counts_every_vm_exactly(
    ch: Any,
    ch_path: Path,
    db: str,
    handler: Handler,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    identity: None,
    restore_signals: None,
) -> None:
    """2,500 VMs (3 pages of Resources, a 429 in the middle, plus Uniform instances): every VM stored once; coverage
    counts reporting, silent, retired and never-seen VMs per subscription, resource group and set; a second pass
    stores nothing."""
    now = datetime.now(UTC)
    handler(deliveries(heartbeats(now)))
    # request 2 (page 2 of Resources) is throttled; request 4 (page 3) leaves the quota spent
    fake = FakeArg(arg_tables(now), throttle=[2], quota_spent_after=[4]).start()
    try:
        for name, value in fake.identity_env.items():
            monkeypatch.setenv(name, value)
        code, out, err = reconcile(fake, ch_path, db, capsys)
        assert code == 0, err
        assert f"reconciled {TOTAL_VMS} VMs ({TOTAL_VMS} new or changed, 4 pages)" in out
        assert "40 annotation changes (40 new or changed" in out and "8 scheduled events (8 new or changed" in out

        requests = fake.arg_requests()
        assert [(r["table"], r["status"]) for r in requests] == [
            ("resources", 200),
            ("resources", 429),
            ("resources", 200),  # the SDK's retry, after the quota reset
            ("resources", 200),
            ("computeresources", 200),
            ("healthresourcechanges", 200),
            ("maintenanceresources", 200),
        ]
        assert all(r["top"] == 1000 for r in requests)
        assert [bool(r["skip_token"]) for r in requests[:4]] == [False, True, True, True]
        assert requests[2]["at"] - requests[1]["at"] >= 0.9  # waited out x-ms-user-quota-resets-after (1 s)
        assert requests[4]["at"] - requests[3]["at"] >= 0.9  # quota left at 0: waited before the next query
        assert fake.log.unauthorized == 0 and fake.log.tokens_issued >= 1

        assert scalar(ch, f"SELECT count() FROM {db}.azure_vms") == TOTAL_VMS  # raw: no row twice
        assert scalar(ch, f"SELECT uniqExact(vm_id) FROM {db}.azure_vms FINAL WHERE present") == TOTAL_VMS
        uniform = ch.query(
            f"SELECT scale_set, name, source_table, fault_domain FROM {db}.azure_vms FINAL WHERE vm_id = %(v)s",
            parameters={"v": vm_id(RESOURCES_VMS + 51)},
        ).result_rows
        assert uniform == [("uni-1", "uni-1_1", "ComputeResources", (RESOURCES_VMS + 51) % 3)]
        web = ch.query(
            f"SELECT availability_set, scale_set, power_state, zone FROM {db}.azure_vms FINAL WHERE vm_id = %(v)s",
            parameters={"v": vm_id(120)},
        ).result_rows
        assert web == [("WEB-AS-2", "", "running", "")]
        assert scalar(ch, f"SELECT count() FROM {db}.azure_annotations FINAL WHERE vm_id != ''") == 40
        statuses = ch.query(
            f"SELECT event_status, count() FROM {db}.azure_scheduled_events FINAL GROUP BY event_status ORDER BY 1"
        ).result_rows
        assert statuses == [("Canceled", 2), ("Completed", 2), ("Scheduled", 2), ("Started", 2)]

        code = cli.main(
            ["audit", "coverage", "--format", "json", "--clickhouse", f"chdb://{ch_path}", "--database", db]
        )
        out = capsys.readouterr().out
        assert code == 0
        rows = json.loads(out)
        assert [{k: r[k] for k in expected_coverage()[0]} for r in rows] == expected_coverage()
        assert len(rows) == 20 + 12 + 1 + 4  # availability sets, Flexible sets, the standalone VMs, Uniform sets
        totals = Counter({k: sum(r[k] for r in rows) for k in ("reporting", "silent", "retired", "never_seen")})
        assert totals == Counter(reporting=1250, silent=250, retired=500, never_seen=500)
        assert all(r["covered_pct"] == round(100 * r["reporting"] / r["inventory_vms"], 1) for r in rows)

        before = table_state(ch, db)
        code, out, err = reconcile(fake, ch_path, db, capsys)
        assert code == 0, err
        assert f"reconciled {TOTAL_VMS} VMs (0 new or changed" in out and "0 VMs gone" in out
        assert table_state(ch, db) == before
    finally:
        fake.close()


def test_a_vm_gone_from_the_inventory_is_marked_and_leaves_coverage(
    ch: Any,
    ch_path: Path,
    db: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    identity: None,
    restore_signals: None,
) -> None:
    """A VM deleted in Azure is kept as not present after the next complete pass; a resized one is updated."""
    tables = {"Resources": [arg_vm(i) for i in range(3)], "ComputeResources": []}
    fake = FakeArg(tables).start()
    try:
        for name, value in fake.identity_env.items():
            monkeypatch.setenv(name, value)
        assert reconcile(fake, ch_path, db, capsys)[0] == 0
        fake.tables["resources"] = [arg_vm(0), {**arg_vm(1), "vmSize": "Standard_D8s_v5"}]
        code, out, _ = reconcile(fake, ch_path, db, capsys)
        assert code == 0 and "reconciled 2 VMs (1 new or changed, 2 pages), 1 VMs gone" in out
        rows = ch.query(f"SELECT vm_id, vm_size, present FROM {db}.azure_vms FINAL ORDER BY vm_id").result_rows
        assert rows == [
            (vm_id(0), "Standard_D4s_v5", True),
            (vm_id(1), "Standard_D8s_v5", True),
            (vm_id(2), "Standard_D4s_v5", False),
        ]
        first_seen = ch.query(
            f"SELECT DISTINCT first_seen_at FROM {db}.azure_vms WHERE vm_id = %(v)s", parameters={"v": vm_id(1)}
        ).result_rows
        assert len(first_seen) == 1  # a change keeps the VM's first sighting
        assert (
            cli.main(["audit", "coverage", "--format", "csv", "--clickhouse", f"chdb://{ch_path}", "--database", db])
            == 0
        )
        lines = capsys.readouterr().out.splitlines()
        assert (
            lines[0]
            == "subscription_id,resource_group,fault_set,inventory_vms,reporting,silent,retired,never_seen,covered_pct"
        )
        assert lines[1:] == [f"{SUB_A},rg-web,WEB-AS-0,2,0,0,0,2,0.0"]
    finally:
        fake.close()


def test_plain_http_is_refused_off_loopback(capsys: pytest.CaptureFixture[str]) -> None:
    """--arm-endpoint: https anywhere, plain http on a loopback address only (exit 2, one clear line)."""
    assert arm_endpoint_problems("https://management.usgovcloudapi.net") == []
    assert arm_endpoint_problems("http://127.0.0.1:8080") == [] and arm_endpoint_problems("http://[::1]:1") == []
    code = cli.main(["reconcile", "--once", "--subscription", SUB_A, "--arm-endpoint", "http://10.1.2.3:8080"])
    err = capsys.readouterr().err
    assert code == 2
    assert "plain http is accepted for loopback addresses only" in err
    assert cli.main(["reconcile", "--once", "--subscription", "not-a-guid"]) == 2
    assert "is not a subscription id" in capsys.readouterr().err


def test_reconcile_without_a_subscription_says_how_to_give_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_signals: None
) -> None:
    code = cli.main(["reconcile", "--once", "--clickhouse", f"chdb://{tmp_path / 'ch'}"])
    assert code == 2
    assert "--subscription" in capsys.readouterr().err


def test_rows_survive_odd_answers() -> None:
    """What ARG leaves out or sends oddly becomes an empty value; NotBefore in RFC 1123 or ISO."""
    assert rr.vm_row({"id": "/x", "vmId": None}, "Resources") is None
    row = rr.vm_row({"id": "/S/virtualMachineScaleSets/ss/virtualMachines/3", "vmId": "ABC", "faultDomain": "x"}, "C")
    assert row is not None and (row["vm_id"], row["scale_set"], row["fault_domain"]) == ("abc", "ss", None)
    event = rr.event_row(
        {"name": "E-9", "properties": {"eventStatus": "Completed", "NotBefore": "junk", "Resources": 3}}
    )
    assert event is not None and (event["event_id"], event["event_status"], event["not_before"]) == (
        "E-9",
        "Completed",
        None,
    )
    assert event["resources"] == []
    assert rr.parse_time("Mon, 19 Sep 2016 18:29:47 GMT") == datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)
    assert rr.quota_wait("0", "00:00:05") == 5.0 and rr.quota_wait("3", "00:00:05") == 0.0
    assert rr.duration_seconds("1.02:00:00") == 93600.0 and rr.duration_seconds("soon") == 0.0


def _counts(target: str, db: str) -> dict[str, int]:
    """Raw and deduplicated row counts, read in a process of its own (one chdb directory per process)."""
    code = (
        "import json, sys; from ingest.clickhouse import connect; c = connect(sys.argv[1]); d = sys.argv[2]; "
        "q = lambda s: c.query(s).result_rows[0][0]; "
        "print(json.dumps({t + s: q(f'SELECT count() FROM {d}.{t} {f}') for t in "
        "('azure_vms', 'azure_annotations', 'azure_scheduled_events') for s, f in (('', ''), ('_final', 'FINAL'))}))"
    )
    done = subprocess.run([sys.executable, "-c", code, target, db], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.slow
def test_a_reconcile_killed_mid_way_and_run_again_stores_everything_once(tmp_path: Path) -> None:
    """SIGKILL while the reconciler waits for page 2 (page 1 stored), then a full pass: each row once, raw."""
    now = datetime.now(UTC)
    fake = FakeArg(arg_tables(now), hold_request=2).start()
    target = f"chdb://{tmp_path / 'ch'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "IDENTITY_", "MSI_"))}
    env.update(fake.identity_env)
    args = [*CLI, "reconcile", "--once", "--subscription", SUB_A, "--subscription", SUB_B]
    args += ["--arm-endpoint", fake.url, "--clickhouse", target]
    try:
        first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert fake.held.wait(120), "the reconciler never asked for page 2"
            first.send_signal(signal.SIGKILL)
            first.wait(30)
        finally:
            if first.poll() is None:
                first.kill()
        fake.release.set()
        partial = _counts(target, "sevents")
        assert partial["azure_vms"] == 1000 - 1  # page 1 stored (one row of it has no vmId yet)
        fake.hold_request = None
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert f"reconciled {TOTAL_VMS} VMs ({TOTAL_VMS - 999} new or changed" in done.stdout
        counts = _counts(target, "sevents")
        assert counts == {
            "azure_vms": TOTAL_VMS,
            "azure_vms_final": TOTAL_VMS,
            "azure_annotations": 40,
            "azure_annotations_final": 40,
            "azure_scheduled_events": 8,
            "azure_scheduled_events_final": 8,
        }
    finally:
        fake.close()


@pytest.mark.slow
def test_the_periodic_worker_passes_every_interval_and_stops_on_sigterm(tmp_path: Path) -> None:
    """Without --once a pass runs every --interval; SIGTERM stops the worker between passes with exit 0."""
    fake = FakeArg({"Resources": [arg_vm(i) for i in range(5)]}).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "IDENTITY_", "MSI_"))}
    env.update(fake.identity_env)
    args = [*CLI, "reconcile", "--subscription", SUB_A, "--interval", "0.5", "--arm-endpoint", fake.url]
    worker = subprocess.Popen(
        [*args, "--clickhouse", f"chdb://{tmp_path / 'ch'}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        # two passes of four queries
        wait_for(lambda: len(fake.arg_requests()) >= 8, 120, what="two passes of queries", interval=0.1)
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
        assert b"reconcile stopped" in err and err.count(b"reconciled 5 VMs") >= 2
    finally:
        if worker.poll() is None:
            worker.kill()
        fake.close()
