"""Wire records built from transitions and collector state: exactly the contract's fields, values as promised."""

from __future__ import annotations

import json
from dataclasses import replace

from collector.enrich import affects, heartbeat_record, transition_key, transition_record
from collector.model import Snapshot, VmIdentity
from collector.transitions import diff
from sevents import records
from tests.collector_core.core_helpers import at, doc, event

VM = VmIdentity(
    vm_id="11111111-2222-3333-4444-555555555555",
    vm_name="WestNO_0",
    location="norwayeast",
    subscription_id="sub-1",
    resource_group="rg-1",
    resource_id="/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.Compute/virtualMachines/WestNO_0",
    zone="2",
    fault_domain=1,
    update_domain=4,
    scale_set="ss-1",
)


def test_updated_record_carries_changed_fields_and_vm_topology() -> None:
    """An `updated` record lists its changed fields and carries the observer's identity and topology."""
    e = event()
    snapshot, _ = diff(Snapshot.empty(), doc(1, e), at(0))
    _, (t,) = diff(snapshot, doc(2, replace(e, duration_s=-1)), at(1))
    r = transition_record(t, VM, api_version="2020-07-01", collector_version="1.2.3")
    assert r["kind"] == "updated" and r["changed_fields"] == ["duration_s"] and r["duration_s"] == -1
    assert (r["fault_domain"], r["update_domain"], r["zone"], r["scale_set"]) == (1, 4, "2", "ss-1")
    assert (r["schema_version"], r["record_type"], r["collector_version"]) == (
        records.SCHEMA_VERSION,
        "transition",
        "1.2.3",
    )
    assert list(r) == [f for f in records.TRANSITION_FIELDS if f != "seq"]
    json.loads(records.encode(r))


def test_document_anomaly_record_has_no_event_fields() -> None:
    """A document-level anomaly has empty event_id and no invented event fields."""
    snapshot, _ = diff(Snapshot.empty(), doc(9), at(0))
    _, (t,) = diff(snapshot, doc(1), at(1))
    r = transition_record(t, VM, api_version="2020-07-01", collector_version="1")
    assert (r["kind"], r["event_id"], r["incarnation"]) == ("anomaly", "", 1)
    assert r["anomaly"] == "incarnation went backwards from 9 to 1"
    assert (r["event_type"], r["resources"], r["not_before"], r["duration_s"], r["affects_this_vm"]) == (
        "",
        [],
        None,
        None,
        False,
    )


def test_two_resets_to_the_same_incarnation_get_different_ids() -> None:
    """Resets to incarnation 1 from different incarnations stay two records; the same reset keeps its id."""
    first, second = (diff(Snapshot.empty(), doc(n), at(0))[0] for n in (9, 30))
    (t1,) = diff(first, doc(1), at(1))[1]
    (t2,) = diff(second, doc(1), at(1))[1]
    (t1_again,) = diff(first, doc(1), at(5))[1]
    assert transition_key(t1, VM.vm_id) != transition_key(t2, VM.vm_id)
    assert transition_key(t1, VM.vm_id) == transition_key(t1_again, VM.vm_id)


def test_affects_compares_names_case_insensitively() -> None:
    """affects_this_vm matches the VM name in Resources regardless of case, and never for an unknown name."""
    e = event(resources=("westno_0", "WestNO_1"))
    assert affects(e, "WESTNO_0")
    assert not affects(e, "WestNO_2")
    assert not affects(e, "")
    assert not affects(None, "WestNO_0")


def test_heartbeat_record_has_exactly_the_contract_fields() -> None:
    """A heartbeat carries the collector's state, UTC millisecond times, and its heartbeat_id as record_id."""
    r = heartbeat_record(
        VM,
        observed_at=at(30),
        api_version="2020-07-01",
        collector_version="1",
        last_incarnation=None,
        last_poll_ok=False,
        last_poll_error="timeout",
        polls=30,
        poll_errors={"timeout": 2},
        active_events=0,
        outbox_depth=7,
        drops={},
        started_at=at(0),
    )
    assert list(r) == [f for f in records.HEARTBEAT_FIELDS if f != "seq"]
    assert r["record_id"] == r["heartbeat_id"] == records.heartbeat_id(VM.vm_id, "2022-04-11T22:10:30.123Z")
    assert (r["observed_at"], r["started_at"]) == ("2022-04-11T22:10:30.123Z", "2022-04-11T22:10:00.123Z")
    assert (r["record_type"], r["last_poll_error"], r["poll_errors"], r["outbox_depth"]) == (
        "heartbeat",
        "timeout",
        {"timeout": 2},
        7,
    )
    json.loads(records.encode(r))


def test_unknown_vm_identity_still_builds_records() -> None:
    """Before instance metadata is known, records are still complete, with empty identity fields."""
    _, (t,) = diff(Snapshot.empty(), doc(1, event()), at(0))
    r = transition_record(t, VmIdentity.unknown(), api_version="2020-07-01", collector_version="1")
    assert (r["vm_id"], r["vm_name"], r["fault_domain"], r["affects_this_vm"]) == ("", "", None, False)
