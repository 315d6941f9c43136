"""Every built-in simulator scenario in every Scheduled Events api-version, through the pure collector core.

``core_sim_drive.drive`` runs the simulator's engine on a manual clock and diffs each VM's rendered document
at every step; each test here compares what the collector core emitted with the engine's ground truth of
that same run (one truth row per event and VM that was shown it). Runs are cached, so each (scenario,
api-version) pair is simulated once for all tests.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

import pytest

from collector.enrich import transition_key
from collector.imds_policy import SCHEDULED_EVENTS_VERSIONS
from collector.model import STATUS_SCHEDULED, STATUS_STARTED, Transition
from collector.transitions import replay
from sevents.records import KIND_ANOMALY, KIND_APPEARED, KIND_DISAPPEARED, KIND_STATUS_CHANGED, KIND_UPDATED
from simulator import BUILTIN_SCENARIOS, load_scenario
from tests.collector_core.core_sim_drive import Run, drive

# The docs' version table (seed 004): the first api-version that shows an event type or carries a field.
TYPE_SINCE = {"Preempt": "2017-11-01", "Terminate": "2019-01-01"}
FIELD_SINCE = {"description": "2019-04-01", "event_source": "2019-08-01", "duration_s": "2020-07-01"}
LAST_STATUS = {"completed": STATUS_STARTED, "cancelled": STATUS_SCHEDULED}


def shown(version: str, event_type: str) -> bool:
    """Whether a document of ``version`` shows events of ``event_type``."""
    return version >= TYPE_SINCE.get(event_type, version)


def case(name: str, version: str) -> Any:
    """One (scenario, api-version) pair, named ``scenario@version``."""
    return pytest.param(name, version, id=f"{name}@{version}")


PAIRS = [(n, v) for n in sorted(BUILTIN_SCENARIOS) for v in SCHEDULED_EVENTS_VERSIONS]
CASES = [case(n, v) for n, v in PAIRS]
# The pairs where the scenario has an event type the api-version does not show yet.
HIDING = [case(n, v) for n, v in PAIRS if any(not shown(v, e.event_type) for e in load_scenario(n).events)]


def shown_rows(run: Run, vm: str) -> list[dict[str, Any]]:
    """The truth rows of VM ``vm`` whose event type this run's api-version shows."""
    return [r for r in run.rows(vm) if shown(run.version, r["event_type"])]


def of_event(run: Run, vm: str, event_id: str, kind: str | None = None) -> list[Transition]:
    """VM ``vm``'s transitions of one event, oldest first, optionally of one kind only."""
    return [t for t in run.vms[vm].transitions if t.event_id == event_id and kind in (None, t.kind)]


def within_step(run: Run, observed: datetime, truth: datetime, what: str) -> None:
    """The collector saw the change at the first poll at or after it: not before, less than a step later."""
    assert truth <= observed < truth + run.step, f"{what}: truth {truth}, observed {observed}"


def second_impact_duration(run: Run, label: str) -> int:
    """The DurationInSeconds the scenario gives event ``label`` after its second impact."""
    return next(e.second_impact_duration_s for e in run.scenario.events if e.label == label)


@pytest.mark.parametrize(("name", "version"), CASES)
def test_every_served_document_is_polled_and_repolls_are_silent(name: str, version: str) -> None:
    """Every document the simulator served was polled, and polling an unchanged body again emitted nothing."""
    run = drive(name, version)
    assert run.missed == {vm: [] for vm in run.vms}
    for vm in run.vms.values():
        assert vm.repeats > 0 and vm.repeat_noise == 0, vm.name


@pytest.mark.parametrize(("name", "version"), CASES)
def test_each_shown_event_appears_once_and_disappears_with_its_outcome(name: str, version: str) -> None:
    """Per event and VM: one appeared, a status change only if first seen Scheduled, one disappeared if it ended."""
    run = drive(name, version)
    for vm in run.vms:
        rows = shown_rows(run, vm)
        assert {t.event_id for t in run.vms[vm].transitions if t.event_id} == {r["event_id"] for r in rows}, vm
        for row in rows:
            where = f"{vm} {row['label']}"
            kinds = [t.kind for t in of_event(run, vm, row["event_id"])]
            (appeared,) = of_event(run, vm, row["event_id"], KIND_APPEARED)
            assert kinds[0] == KIND_APPEARED and appeared.prev_status == "", where
            first_seen_started = row["started_at"] is not None and row["started_at"] <= appeared.observed_at
            assert appeared.status == (STATUS_STARTED if first_seen_started else STATUS_SCHEDULED), where
            changes = of_event(run, vm, row["event_id"], KIND_STATUS_CHANGED)
            assert len(changes) == (row["started_at"] is not None and not first_seen_started), where
            assert all((t.prev_status, t.status) == (STATUS_SCHEDULED, STATUS_STARTED) for t in changes), where
            gone = of_event(run, vm, row["event_id"], KIND_DISAPPEARED)
            if row["outcome"] == "active":
                assert gone == [], where
                continue
            assert len(gone) == 1 and kinds[-1] == KIND_DISAPPEARED, where
            assert (gone[0].status, gone[0].prev_status) == ("", LAST_STATUS[row["outcome"]]), where


@pytest.mark.parametrize(("name", "version"), CASES)
def test_observed_times_match_truth_within_one_step(name: str, version: str) -> None:
    """Appearance, start and end are observed at the first poll after the truth says they happened."""
    run = drive(name, version)
    for vm in run.vms:
        for row in shown_rows(run, vm):
            where = f"{vm} {row['label']}"
            (appeared,) = of_event(run, vm, row["event_id"], KIND_APPEARED)
            within_step(run, appeared.observed_at, row["first_visible_at"], where + " appeared")
            entered = appeared.observed_at  # when the event was first seen in its latest status
            for change in of_event(run, vm, row["event_id"], KIND_STATUS_CHANGED):
                within_step(run, change.observed_at, row["started_at"], where + " started")
                assert change.prev_observed_at == entered, where
                entered = change.observed_at
            for gone in of_event(run, vm, row["event_id"], KIND_DISAPPEARED):
                within_step(run, gone.observed_at, row["ended_at"], where + " gone")
                assert gone.prev_observed_at == entered, where


@pytest.mark.parametrize(("name", "version"), CASES)
def test_second_impact_is_an_update_only_where_duration_is_shown(name: str, version: str) -> None:
    """A second impact is one `updated` of duration_s from 2020-07-01 on; older versions cannot see it."""
    run = drive(name, version)
    for vm in run.vms:
        for row in shown_rows(run, vm):
            where = f"{vm} {row['label']}"
            updates = of_event(run, vm, row["event_id"], KIND_UPDATED)
            if row["second_impact_at"] is None or version < FIELD_SINCE["duration_s"]:
                assert updates == [], where
                continue
            (update,) = updates
            within_step(run, update.observed_at, row["second_impact_at"], where + " second impact")
            assert (update.status, update.prev_status, update.changed_fields) == ("Started", "Started", ("duration_s",))
            assert update.event is not None
            assert update.event.duration_s == second_impact_duration(run, row["label"]), where


@pytest.mark.parametrize(("name", "version"), CASES)
def test_decoded_fields_match_truth_and_are_none_where_the_version_lacks_them(name: str, version: str) -> None:
    """Each transition's event carries the truth's fields, and None for fields its api-version does not have."""
    run = drive(name, version)
    for vm in run.vms:
        for row in shown_rows(run, vm):
            impact = row["second_impact_at"] and second_impact_duration(run, row["label"])
            expected = {"description": row["description"], "event_source": row["event_source"]}
            for t in of_event(run, vm, row["event_id"]):
                e, where = t.event, f"{vm} {row['label']} {t.kind}"
                assert e is not None, where
                assert (e.event_type, e.resource_type) == (row["event_type"], "VirtualMachine"), where
                assert list(e.resources) == row["resources"], where
                assert e.not_before == (row["not_before"] if e.status == STATUS_SCHEDULED else None), where
                for field, since in FIELD_SINCE.items():
                    value = getattr(e, field)
                    if version < since:
                        assert value is None, f"{where} {field}"
                    elif field == "duration_s":
                        assert value in (row["duration_s"], impact), where
                    else:
                        assert value == expected[field], f"{where} {field}"


@pytest.mark.parametrize(("name", "version"), HIDING)
def test_event_types_newer_than_the_version_are_not_shown(name: str, version: str) -> None:
    """An event type the api-version does not know leaves no transition on any VM, though the truth has it."""
    run = drive(name, version)
    hidden = {r["event_id"] for r in run.truth if not shown(version, r["event_type"])}
    assert hidden
    for vm in run.vms.values():
        assert [t for t in vm.transitions if t.event_id in hidden] == [], vm.name


@pytest.mark.parametrize(("name", "version"), CASES)
def test_anomalies_only_where_the_incarnation_goes_back(name: str, version: str) -> None:
    """The only anomalies are one per incarnation going backwards, which happens in incarnation-reset alone."""
    run = drive(name, version)
    resets_seen = 0
    for vm, history in run.histories.items():
        backwards = [b for a, b in itertools.pairwise(history) if b.incarnation < a.incarnation]
        anomalies = [t for t in run.vms[vm].transitions if t.kind == KIND_ANOMALY]
        assert len(anomalies) == len(backwards), (vm, [t.anomaly for t in anomalies])
        for reset, anomaly in zip(backwards, anomalies, strict=True):
            assert anomaly.event_id == "" and anomaly.anomaly.startswith("incarnation went backwards"), vm
            within_step(run, anomaly.observed_at, reset.at, f"{vm} reset")
        resets_seen += len(backwards)
    assert (resets_seen > 0) == (name == "incarnation-reset")


@pytest.mark.parametrize(("name", "version"), CASES)
def test_replay_reconstructs_every_document(name: str, version: str) -> None:
    """Replaying a VM's transitions from empty gives the events of each document it polled, the last included."""
    run = drive(name, version)
    for vm in run.vms.values():
        assert vm.checkpoints, vm.name
        for doc, emitted in vm.checkpoints:
            assert replay(vm.transitions[:emitted]) == {e.event_id: e for e in doc.events}, vm.name
        last, _ = vm.checkpoints[-1]
        assert replay(vm.transitions) == {e.event_id: e for e in last.events}, vm.name


@pytest.mark.parametrize(("name", "version"), CASES)
def test_transition_ids_are_unique_per_vm(name: str, version: str) -> None:
    """No two transitions of one VM share a transition_id, so dedupe downstream never drops a real one."""
    run = drive(name, version)
    for vm in run.vms.values():
        ids = [transition_key(t, vm.vm_id) for t in vm.transitions]
        assert len(ids) == len(set(ids)), vm.name
        assert bool(ids) == bool(shown_rows(run, vm.name) or run.scenario.resets), vm.name
