"""Valid wire records made up on demand, for tests and benchmarks (a helper shipped next to the code)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from dashboards.report_data import Filters, ReportData
from sevents import records

# Noon UTC four and a half to five and a half days ago: older than a collector's retirement (3 days), within the
# heartbeats' retention (7 days) and the 30 days an event stays held, whatever day the records are made on (a
# fixed date aged past the retention, and the heartbeats made at it were dropped as they were stored).
BASE_TIME = (datetime.now(UTC) - timedelta(days=5)).replace(hour=12, minute=0, second=0, microsecond=0)


def vm(index: int, *, fault_domains: int = 3) -> dict[str, Any]:
    """The identity fields of synthetic VM number ``index``."""
    return {
        "vm_id": f"00000000-0000-4000-8000-{index:012d}",
        "vm_name": f"vm-{index:03d}",
        "location": "westeurope",
        "subscription_id": "11111111-2222-3333-4444-555555555555",
        "resource_group": "fleet",
        "resource_id": f"/subscriptions/x/resourceGroups/fleet/providers/Microsoft.Compute/vm-{index:03d}",
        "zone": "",
        "fault_domain": index % fault_domains,
        "update_domain": index % 5,
        "scale_set": "",
    }


def transition(
    *,
    vm_index: int = 0,
    event_id: str = "E-1",
    incarnation: int = 1,
    kind: str = records.KIND_APPEARED,
    status: str = "Scheduled",
    prev_status: str = "",
    observed_at: datetime = BASE_TIME,
    not_before: datetime | None = BASE_TIME + timedelta(minutes=15),
    event_type: str = "Reboot",
    description: str | None = "Virtual machine is going to be restarted as requested by authorized user.",
    resources: list[str] | None = None,
    seq: int = 1,
) -> dict[str, Any]:
    """One transition record as a collector would send it."""
    identity = vm(vm_index)
    tid = records.transition_id(identity["vm_id"], event_id, incarnation, kind)
    resources = [identity["vm_name"]] if resources is None else resources
    return {
        "schema_version": records.SCHEMA_VERSION,
        "record_type": records.RECORD_TRANSITION,
        "record_id": tid,
        "seq": seq,
        "observed_at": records.format_time(observed_at),
        "api_version": "2020-07-01",
        "collector_version": "0.1.0",
        **identity,
        "transition_id": tid,
        "event_id": event_id,
        "incarnation": incarnation,
        "kind": kind,
        "status": status,
        "prev_status": prev_status,
        "prev_observed_at": None if not prev_status else records.format_time(observed_at - timedelta(seconds=1)),
        "event_type": event_type,
        "resource_type": "VirtualMachine",
        "resources": resources,
        "affects_this_vm": identity["vm_name"] in resources,
        "not_before": None if not_before is None else records.format_time(not_before),
        "description": description,
        "event_source": "Platform",
        "duration_s": 7,
        "changed_fields": [],
        "anomaly": "",
    }


def heartbeat(*, vm_index: int = 0, observed_at: datetime = BASE_TIME, seq: int = 1) -> dict[str, Any]:
    """One heartbeat record as a collector would send it."""
    identity = vm(vm_index)
    stamp = records.format_time(observed_at)
    hid = records.heartbeat_id(identity["vm_id"], stamp)
    return {
        "schema_version": records.SCHEMA_VERSION,
        "record_type": records.RECORD_HEARTBEAT,
        "record_id": hid,
        "seq": seq,
        "observed_at": stamp,
        "api_version": "2020-07-01",
        "collector_version": "0.1.0",
        **identity,
        "heartbeat_id": hid,
        "last_incarnation": 3,
        "last_poll_ok": True,
        "last_poll_error": "",
        "polls": 60,
        "poll_errors": {"timeout": 1},
        "active_events": 1,
        "outbox_depth": 0,
        "drops": {},
        "started_at": records.format_time(observed_at - timedelta(minutes=5)),
    }


def lifecycle(event_id: str, vm_index: int, *, start: datetime = BASE_TIME, seq: int = 1) -> list[dict[str, Any]]:
    """Appeared (Scheduled) -> Started -> disappeared for one VM: three records."""
    nb = start + timedelta(minutes=15)
    return [
        transition(vm_index=vm_index, event_id=event_id, incarnation=1, observed_at=start, not_before=nb, seq=seq),
        transition(
            vm_index=vm_index,
            event_id=event_id,
            incarnation=2,
            kind=records.KIND_STATUS_CHANGED,
            status="Started",
            prev_status="Scheduled",
            observed_at=start + timedelta(minutes=5),
            not_before=None,
            seq=seq + 1,
        ),
        transition(
            vm_index=vm_index,
            event_id=event_id,
            incarnation=3,
            kind=records.KIND_DISAPPEARED,
            status="",
            prev_status="Started",
            observed_at=start + timedelta(minutes=5, seconds=30),
            not_before=None,
            seq=seq + 2,
        ),
    ]


def stream(count: int, *, vms: int = 100) -> Iterator[dict[str, Any]]:
    """``count`` distinct transitions spread over ``vms`` VMs (for benchmarks)."""
    for i in range(count):
        yield transition(
            vm_index=i % vms,
            event_id=f"E-{i // (vms * 4)}",
            incarnation=i // vms,
            kind=records.KINDS[i % 4],
            observed_at=BASE_TIME + timedelta(milliseconds=i),
            seq=i // vms + 1,
        )


def fleet_report(vms: int, *, events: int, start: datetime = BASE_TIME) -> ReportData:
    """Report data of a fleet: half the VMs in availability set web, half in api, three fault domains each, every
    event reaching every VM of one set (alternately), each VM down 5-11 s. Events are Freezes (announcing 7 s, a
    pause detected) but every third a Reboot and every fifth a Redeploy (announcing no duration: -1, detected as
    a reboot)."""
    event_rows, lanes = [], []
    for e in range(events):
        event_id = f"{e:04d}EEEE-{e}"
        event_type = "Redeploy" if e % 5 == 4 else "Reboot" if e % 3 == 2 else "Freeze"
        announced, detected_by = (7, "pause") if event_type == "Freeze" else (-1, "reboot")
        first, started = start + timedelta(minutes=10 * e), start + timedelta(minutes=10 * e + 2)
        event_rows.append(
            {
                "event_id": event_id,
                "event_type": event_type,
                "event_source": "Platform",
                "outcome": "completed",
                "first_seen_at": first,
                "not_before_first": first + timedelta(minutes=15),
                "approved_at": started,
                "started_at": started,
                "ended_at": started + timedelta(minutes=5),
                "approval_latency_s": 120.0,
                "notice_s": 120.0,
                "duration_s": announced,
                "started_to_gone_s": 300.0,
                "observed_impact_s": 11.0,
                "impacted_vms": vms // 2,
                "affected_vm_count": vms // 2,
                "fault_domains": [0, 1, 2],
                "fault_domain_labels": [],
                "released_by": "outside",  # started before its NotBefore, approved by no sevents policy
                "started_at_source": "seen",
                "ended_at_source": "seen",
            }
        )
        for v in range(vms):
            group = "web" if v < vms // 2 else "api"
            if (e % 2 == 0) != (group == "web"):
                continue
            lanes.append(
                {
                    "event_id": event_id,
                    "event_type": event_type,
                    "vm_name": f"{group}-{v}",
                    "fault_domain": v % 3,
                    "fault_set": group,
                    "fault_set_id": f"id-of-{group}",
                    "first_seen_at": first,
                    "started_at": started,
                    "ended_at": started + timedelta(minutes=5),
                    "outcome": "completed",
                    "observed_impact_s": 5.0 + v % 7,
                    "detected_by": detected_by,
                }
            )
    window = Filters(since=start - timedelta(hours=1), until=start + timedelta(minutes=10 * events + 60))
    return ReportData(window, event_rows, lanes, [])
