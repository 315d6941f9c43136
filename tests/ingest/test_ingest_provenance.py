"""Issue 29.1 in the handler: provenance checks (both decode paths) and conflicts (stored and within a batch)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo import synthetic
from ingest.handler import CONFLICT, FUTURE, NOT_ITS_PARTITION_KEY, Handler
from ingest.settings import load
from ingest.source import Delivery, Provenance
from ingest.writer import Writer
from sevents.records import encode, format_time
from sevents.retry import Backoff
from tests.ingest.conftest import scalar

NOW = datetime.now(UTC).replace(microsecond=0)
VM0 = str(synthetic.vm(0)["vm_id"])


def _handler(ch: Any, db: str, skew_s: float = 300) -> Handler:
    return Handler(
        Writer(ch, db),
        source="eventhubs",
        stop=threading.Event(),
        backoff=Backoff(0.01, 0.05),
        now=lambda: NOW,
        clock_skew=timedelta(seconds=skew_s),
    )


def _sent(records: list[dict[str, Any]], key: str | None = VM0, enqueued: datetime | None = NOW) -> list[Delivery]:
    proof = Provenance(key, enqueued)
    return [Delivery(encode(r), f"eventhubs:0:{i}", provenance=proof) for i, r in enumerate(records)]


def _errors(ch: Any, db: str) -> list[str]:
    return sorted(str(row[0]).split(":")[0] for row in ch.query(f"SELECT error FROM {db}.dead_letters").result_rows)


@pytest.mark.parametrize("precise", [False, True], ids=["by-column", "per-record"])
def test_a_record_under_another_key_or_from_the_future_is_dead_lettered_on_both_paths(
    ch: Any, db: str, precise: bool
) -> None:
    """The batch decoder's rows and the per-record decoder's (a record with an unknown field takes that path)."""
    extra = {"unknown_field": 1} if precise else {}
    good = {**synthetic.heartbeat(observed_at=NOW - timedelta(hours=1)), **extra}
    other_vm = {**synthetic.heartbeat(vm_index=1, observed_at=NOW), **extra}
    future = {**synthetic.heartbeat(observed_at=NOW + timedelta(seconds=301)), **extra}
    started_later = {
        **synthetic.heartbeat(observed_at=NOW),
        **extra,
        "started_at": format_time(NOW + timedelta(days=1)),
    }
    _handler(ch, db)(_sent([good, other_vm, future, started_later]))
    assert _errors(ch, db) == sorted([NOT_ITS_PARTITION_KEY, FUTURE, FUTURE])
    assert scalar(ch, f"SELECT count() FROM {db}.heartbeats") == 1


def test_the_skew_bound_counts_from_each_record_s_enqueued_time(ch: Any, db: str) -> None:
    """Within the bound is fine; no enqueued time: the ingest's receive time stands in; no partition key: refused."""
    near = synthetic.transition(observed_at=NOW + timedelta(seconds=59))
    later = synthetic.transition(event_id="E-2", observed_at=NOW + timedelta(seconds=200))
    handler = _handler(ch, db, skew_s=60)
    handler(_sent([near]) + _sent([later], enqueued=NOW + timedelta(seconds=150)))
    assert scalar(ch, f"SELECT count() FROM {db}.transitions") == 2
    handler(_sent([synthetic.transition(event_id="E-3", observed_at=NOW + timedelta(seconds=61))], enqueued=None))
    handler(_sent([synthetic.transition(event_id="E-4", observed_at=NOW)], key=None))
    assert _errors(ch, db) == [FUTURE, NOT_ITS_PARTITION_KEY]


def test_a_trusted_source_keeps_today_s_behaviour(ch: Any, db: str) -> None:
    """The outbox gives no provenance: a record observed a day ahead is stored (as before)."""
    ahead = synthetic.transition(observed_at=NOW + timedelta(days=1))
    _handler(ch, db)([Delivery(encode(ahead), "outbox#1")])
    assert scalar(ch, f"SELECT count() FROM {db}.transitions") == 1
    assert _errors(ch, db) == []


@pytest.mark.parametrize("trusted", [False, True], ids=["eventhubs", "outbox"])
def test_the_first_record_of_a_key_stays(ch: Any, db: str, trusted: bool) -> None:
    """A second record with a stored key and other content is a conflict; the same record again is not; within
    one batch the first of a key stays too. For every source."""
    handler = _handler(ch, db)

    def deliver(records: list[dict[str, Any]], at: int) -> None:
        proof = None if trusted else Provenance(VM0, NOW)
        handler([Delivery(encode(r), f"p#{at + i}", provenance=proof) for i, r in enumerate(records)])

    first = synthetic.transition(observed_at=NOW - timedelta(minutes=5))
    deliver([first, synthetic.heartbeat(observed_at=NOW)], 0)
    deliver([first, {**first, "status": "Started", "event_type": "Freeze"}], 10)
    beat = synthetic.heartbeat(observed_at=NOW - timedelta(minutes=1))
    deliver([beat, {**beat, "polls": 1}, beat], 20)
    assert _errors(ch, db) == [CONFLICT, CONFLICT]
    errors = [str(r[0]) for r in ch.query(f"SELECT error FROM {db}.dead_letters ORDER BY position").result_rows]
    assert "is stored with other status, event_type" in errors[0]
    assert "came earlier in this batch with other polls" in errors[1]
    assert ch.query(f"SELECT status, event_type FROM {db}.transitions FINAL").result_rows == [("Scheduled", "Reboot")]
    assert ch.query(f"SELECT polls FROM {db}.heartbeats FINAL WHERE polls != 60").result_rows == []
    assert scalar(ch, f"SELECT count() FROM {db}.heartbeats FINAL") == 2


def test_the_clock_skew_bound_is_a_setting(tmp_path: Path) -> None:
    assert load(file=None, env={}, flags={}).eventhubs_clock_skew == 300
    assert load(file=None, env={"SEVENTS_EVENTHUBS_CLOCK_SKEW": "30"}, flags={}).eventhubs_clock_skew == 30
    with pytest.raises(Exception, match="eventhubs_clock_skew"):
        load(file=None, env={"SEVENTS_EVENTHUBS_CLOCK_SKEW": "-1"}, flags={})
