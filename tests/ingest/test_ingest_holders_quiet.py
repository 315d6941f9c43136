"""``holders_quiet``: of the VMs still showing an event, those silent now and those of them retired, read from
each VM's latest heartbeat while ``heartbeats_latest`` still holds older ones in parts not merged yet.

Each heartbeat goes in by an INSERT of its own (a part of its own, as batches arrive), so the view must pick each
VM's latest row itself, as FINAL would after a merge. The rule, from the views' defaults: silent when the latest
heartbeat is over 300 s old; retired when silent and the VM's Terminate or Preempt started at or after its
collector's start, or the collector said it was stopping (final), or silent for over three days.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import lifecycle_store
from tests.tiers import examples

SILENT_AFTER_S = 300
RETIRE_AFTER_S = 259_200
# far from both thresholds, so that the seconds the test takes cannot move a VM across one
AGES_S = (5, 120, 900, 7_200, 200_000, 400_000)


def _heartbeat(ch: Any, db: str, vm: str, at: datetime, started: datetime, final: bool) -> None:
    row = {
        "heartbeat_id": f"hb-{vm}-{at.timestamp()}",
        "observed_at": at,
        "vm_id": f"id-{vm}",
        "vm_name": vm,
        "last_poll_ok": True,
        "started_at": started,
        "final": final,
    }
    ch.insert(f"{db}.heartbeats", [list(row.values())], column_names=list(row))


def _transition(ch: Any, db: str, vm: str, event_id: str, at: datetime, status: str, event_type: str) -> None:
    row = {
        "transition_id": f"{vm}-{event_id}-{status}",
        "observed_at": at,
        "vm_id": f"id-{vm}",
        "vm_name": vm,
        "event_id": event_id,
        "kind": "appeared",
        "status": status,
        "event_type": event_type,
        "resources": [vm],
        "affects_this_vm": True,
    }
    ch.insert(f"{db}.transitions", [list(row.values())], column_names=list(row))


vm_story = st.fixed_dictionaries(
    {
        # (age of the heartbeat, collector started that long before it, said final) per heartbeat, any order
        "beats": st.lists(
            st.tuples(st.sampled_from(AGES_S), st.sampled_from((60, 86_400)), st.booleans()),
            min_size=1,
            max_size=4,
            unique_by=lambda beat: beat[0],
        ),
        # its own Terminate started this long ago (None: never)
        "terminated_ago_s": st.one_of(st.none(), st.sampled_from((30, 3_600, 500_000))),
    }
)


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(stories=st.lists(vm_story, min_size=1, max_size=4))
def test_silence_and_retirement_come_from_each_vms_latest_heartbeat(
    ch: Any, db: str, stories: list[dict[str, Any]]
) -> None:
    for table in ("heartbeats", "heartbeats_latest", "transitions", "vm_retirements", "event_history"):
        ch.command(f"TRUNCATE TABLE {db}.{table}")
    ch.command(f"SYSTEM STOP MERGES {db}.heartbeats_latest")  # each heartbeat stays in a part of its own
    now = datetime.now(UTC).replace(microsecond=0)
    expected_silent, expected_retired = set(), set()
    for n, story in enumerate(stories):
        vm = f"vm-{n}"
        _transition(ch, db, vm, "E-1", now - timedelta(days=1), "Scheduled", "Reboot")  # a holder of E-1
        for age, started_before, final in story["beats"]:
            at = now - timedelta(seconds=age)
            _heartbeat(ch, db, vm, at, at - timedelta(seconds=started_before), final)
        if story["terminated_ago_s"] is not None:
            moment = now - timedelta(seconds=story["terminated_ago_s"])
            _transition(ch, db, vm, f"T-{n}", moment, "Started", "Terminate")
        age, started_before, final = min(story["beats"])  # the latest heartbeat
        if age > SILENT_AFTER_S:
            expected_silent.add(f"id-{vm}")
            collector_started = now - timedelta(seconds=age + started_before)
            terminated = story["terminated_ago_s"]
            retired_since_start = terminated is not None and now - timedelta(seconds=terminated) >= collector_started
            if retired_since_start or final or age > RETIRE_AFTER_S:
                expected_retired.add(f"id-{vm}")
    lifecycle_store.refresh(ch, db, ["E-1"])
    parts = ch.query(
        "SELECT count() FROM system.parts WHERE database = {db:String} AND table = 'heartbeats_latest' AND active",
        parameters={"db": db},
    ).result_rows[0][0]
    assert parts == sum(len(story["beats"]) for story in stories), "each heartbeat in a part of its own"
    ((silent, retired),) = ch.query(f"SELECT silent, retired FROM {db}.holders_quiet").result_rows
    assert (set(silent), set(retired)) == (expected_silent, expected_retired)
    assert len(silent) == len(set(silent)), "a VM once, however many of its heartbeats are stored"
