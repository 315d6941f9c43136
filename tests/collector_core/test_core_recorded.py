"""Recorded IMDS documents: the docs' live-migration example end to end, and each older API version's shape.

fixtures/v2020_07_01_live_migration_{1..4}.json are copied verbatim from the 2020-07-01 docs (seed 004,
"Example responses"). The other fixtures reproduce the document shapes the older docs show: 2016 preview on
the ``latest`` path (seed 001), 2017-03-01 preview (seeds 000, 002: string DocumentIncarnation,
underscore-prefixed resources, ISO NotBefore), 2017-11-01 (Preempt), 2019-08-01 (seed 003: Description,
EventSource, Terminate), with 2019-04-01 (Description only) in between.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from collector.decode import decode_document
from collector.enrich import transition_record
from collector.model import Event, Snapshot, VmIdentity
from collector.transitions import diff
from sevents import records
from tests.collector_core.core_helpers import at, fixture

EVENT_ID = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"
DESCRIPTION = "Virtual machine is being paused because of a memory-preserving Live Migration operation."
NOT_BEFORE = datetime(2022, 4, 11, 22, 26, 58, tzinfo=UTC)


def vm(name: str) -> VmIdentity:
    """An observing VM of the example's availability set."""
    return VmIdentity(
        vm_id=f"id-{name}",
        vm_name=name,
        location="norwayeast",
        subscription_id="sub",
        resource_group="rg",
        resource_id=f"/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/{name}",
        fault_domain=0,
        update_domain=0,
    )


def observe(observer: VmIdentity) -> list[dict[str, Any]]:
    """Diff the four recorded documents, one poll a minute, and enrich every transition for ``observer``."""
    snapshot = Snapshot.empty()
    out: list[dict[str, Any]] = []
    for i in range(1, 5):
        document = decode_document(fixture(f"v2020_07_01_live_migration_{i}.json"))
        snapshot, transitions = diff(snapshot, document, at(60 * i))
        out += [
            transition_record(t, observer, api_version="2020-07-01", collector_version="0.1.0") for t in transitions
        ]
    return out


@pytest.mark.parametrize(("observer", "affected"), [("WestNO_0", True), ("westno_1", True), ("WestNO_7", False)])
def test_live_migration_example_gives_exactly_the_expected_records(observer: str, affected: bool) -> None:
    """The docs' four-document example yields appeared, status_changed, disappeared, with affects_this_vm."""
    got = observe(vm(observer))
    shape = [
        {
            k: r[k]
            for k in ("kind", "event_id", "incarnation", "status", "prev_status", "observed_at", "prev_observed_at")
        }
        for r in got
    ]
    assert shape == [
        {
            "kind": "appeared",
            "event_id": EVENT_ID,
            "incarnation": 2,
            "status": "Scheduled",
            "prev_status": "",
            "observed_at": "2022-04-11T22:12:00.123Z",
            "prev_observed_at": None,
        },
        {
            "kind": "status_changed",
            "event_id": EVENT_ID,
            "incarnation": 3,
            "status": "Started",
            "prev_status": "Scheduled",
            "observed_at": "2022-04-11T22:13:00.123Z",
            "prev_observed_at": "2022-04-11T22:12:00.123Z",
        },
        {
            "kind": "disappeared",
            "event_id": EVENT_ID,
            "incarnation": 4,
            "status": "",
            "prev_status": "Started",
            "observed_at": "2022-04-11T22:14:00.123Z",
            "prev_observed_at": "2022-04-11T22:13:00.123Z",
        },
    ]
    for r in got:
        assert r["affects_this_vm"] is affected
        assert r["event_type"] == "Freeze"
        assert r["resources"] == ["WestNO_0", "WestNO_1"]
        assert (r["description"], r["event_source"], r["duration_s"]) == (DESCRIPTION, "Platform", 5)
        assert r["changed_fields"] == [] and r["anomaly"] == ""
        assert (
            r["record_id"]
            == r["transition_id"]
            == records.transition_id(f"id-{observer}", EVENT_ID, r["incarnation"], r["kind"])
        )
        assert r["vm_name"] == observer and r["api_version"] == "2020-07-01"
        assert set(r) == set(records.TRANSITION_FIELDS) - {"seq"}
    assert [r["not_before"] for r in got] == ["2022-04-11T22:26:58.000Z", None, None]


def test_live_migration_seen_by_two_vms_has_distinct_ids_per_observer() -> None:
    """The same EventId seen by two VMs gives the same transitions under different ids (one per observer)."""
    ids0 = {r["transition_id"] for r in observe(vm("WestNO_0"))}
    ids1 = {r["transition_id"] for r in observe(vm("WestNO_1"))}
    assert len(ids0) == len(ids1) == 3
    assert not ids0 & ids1


def _ev(**fields: Any) -> Event:
    return Event(**fields)


OLDER_VERSIONS = [
    (
        "v2016_preview_latest.json",
        3,
        [
            _ev(
                event_id="7b7a9e9f-7c5f-4b8d-9d53-1f0f3e3a4c11",
                event_type="Freeze",
                resource_type="VirtualMachine",
                resources=("WebRole_IN_0",),
                status="Scheduled",
                not_before=datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC),
                description=None,
                event_source=None,
                duration_s=None,
            )
        ],
    ),
    (
        "v2017_03_01_preview.json",
        5,
        [
            _ev(
                event_id="602d9444-d2cd-49c7-8624-8643e7171297",
                event_type="Reboot",
                resource_type="VirtualMachine",
                resources=("FrontEnd_IN_0", "BackEnd_IN_0"),
                status="Scheduled",
                not_before=datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC),
                description=None,
                event_source=None,
                duration_s=None,
            ),
            _ev(
                event_id="f020ba2e-3bc0-4c40-a10b-86575a9eabd5",
                event_type="Redeploy",
                resource_type="VirtualMachine",
                resources=("FrontEnd_IN_1",),
                status="Started",
                not_before=None,
                description=None,
                event_source=None,
                duration_s=None,
            ),
        ],
    ),
    (
        "v2017_11_01_preempt.json",
        12,
        [
            _ev(
                event_id="5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7",
                event_type="Preempt",
                resource_type="VirtualMachine",
                resources=("spotvm_3",),
                status="Scheduled",
                not_before=datetime(2017, 12, 5, 10, 2, 30, tzinfo=UTC),
                description=None,
                event_source=None,
                duration_s=None,
            )
        ],
    ),
    (
        "v2019_04_01_description.json",
        2,
        [
            _ev(
                event_id="e3a1c0de-0d2b-4a52-9b21-2f5e6c7d8e9f",
                event_type="Redeploy",
                resource_type="VirtualMachine",
                resources=("BackEnd_IN_2",),
                status="Scheduled",
                not_before=datetime(2019, 5, 9, 7, 15, tzinfo=UTC),
                description="Host server is undergoing maintenance.",
                event_source=None,
                duration_s=None,
            )
        ],
    ),
    (
        "v2019_08_01_terminate.json",
        7,
        [
            _ev(
                event_id="f020ba2e-3bc0-4c40-a10b-86575a9eabd5",
                event_type="Terminate",
                resource_type="VirtualMachine",
                resources=("FrontEnd_IN_0", "BackEnd_IN_0"),
                status="Scheduled",
                not_before=datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC),
                description="Virtual machine is being deleted.",
                event_source="User",
                duration_s=None,
            ),
            _ev(
                event_id="602d9444-d2cd-49c7-8624-8643e7171297",
                event_type="Reboot",
                resource_type="VirtualMachine",
                resources=("FrontEnd_IN_1",),
                status="Started",
                not_before=None,
                description="Host server is undergoing maintenance.",
                event_source="Platform",
                duration_s=None,
            ),
        ],
    ),
]


@pytest.mark.parametrize(("name", "incarnation", "events"), OLDER_VERSIONS, ids=[v[0] for v in OLDER_VERSIONS])
def test_older_api_version_shapes_decode(name: str, incarnation: int, events: list[Event]) -> None:
    """Each older API version's document decodes to the same typed events (absent fields None, "_" stripped)."""
    document = decode_document(fixture(name))
    assert document.incarnation == incarnation
    assert list(document.events) == events


def test_2017_03_01_resources_match_the_vm_name_without_underscore() -> None:
    """A 2017-03-01 resource "_FrontEnd_IN_0" is recognised as the VM named FrontEnd_IN_0."""
    document = decode_document(fixture("v2017_03_01_preview.json"))
    _, transitions = diff(Snapshot.empty(), document, at(0))
    rec = transition_record(transitions[0], vm("frontend_in_0"), api_version="2017-03-01", collector_version="x")
    assert rec["affects_this_vm"] is True
    assert rec["resources"] == ["FrontEnd_IN_0", "BackEnd_IN_0"]
