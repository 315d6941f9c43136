"""The one contract declaration against everything derived from it: migrations, the exported schema, the
collector's builder, the ingest's validation and rows; and a bad field never costing a lifecycle."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.enrich import heartbeat_record
from collector.model import VmIdentity
from demo import synthetic
from ingest.decode import decoder_for
from ingest.handler import MADE_SAFE, Handler, prepare
from ingest.rows import COLUMNS_OF
from ingest.source import Delivery
from sevents import contract
from sevents.contract import Limits
from sevents.records import encode

from .conftest import deliveries, scalar

SCHEMA_FILE = Path(contract.__file__).with_name("contract.schema.json")
INGEST_OWN = {"source_position": "String", "ingested_at": "DateTime64(3, 'UTC')"}
# columns ClickHouse computes from the record's own (DEFAULT expressions), for the readers' convenience
DERIVED = {"impacts": {"duration_s": "Float64"}, "approvals": {"hook_s": "Nullable(Float64)"}}


def test_migrated_tables_have_exactly_the_declared_columns(ch: Any, db: str) -> None:
    """A real embedded ClickHouse, migrated: every table's columns are the contract's plus the ingest's own."""
    for record_type, fields in contract.CONTRACT.items():
        table = contract.TABLES[record_type]
        found = dict(
            ch.query(
                "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = {t:String}",
                parameters={"db": db, "t": table},
            ).result_rows
        )
        assert found == {**contract.columns(fields), **DERIVED.get(table, {}), **INGEST_OWN}, table
        assert list(COLUMNS_OF[table]) == [*contract.names(fields), "source_position"]


def test_the_committed_schema_document_is_up_to_date() -> None:
    """``sevents/contract.schema.json`` is what the declaration exports (regenerate: see the file's test)."""
    exported = json.dumps(contract.json_schema(), indent=2, sort_keys=True) + "\n"
    assert SCHEMA_FILE.read_text(encoding="utf-8") == exported, (
        "regenerate: python -c 'import json; from sevents import contract; "
        "print(json.dumps(contract.json_schema(), indent=2, sort_keys=True))' > sevents/contract.schema.json"
    )


def test_the_schema_document_says_what_the_declaration_says() -> None:
    """Every field with its type, its column and whether it is required; limits as JSON-schema bounds."""
    branches = {b["title"]: b for b in contract.json_schema()["oneOf"]}
    for record_type, fields in contract.CONTRACT.items():
        branch = branches[record_type]
        assert list(branch["properties"]) == list(contract.names(fields))
        assert branch["required"] == [f.name for f in fields if f.required]
        for f in fields:
            assert branch["properties"][f.name]["x-clickhouse-type"] == f.column
    assert branches["heartbeat"]["properties"]["final"]["default"] is False
    assert "final" not in branches["heartbeat"]["required"]
    ud = branches["transition"]["properties"]["update_domain"]["anyOf"][0]
    assert (ud["minimum"], ud["maximum"]) == contract.UINT16


def _vm(**changes: Any) -> VmIdentity:
    base = synthetic.vm(0)
    fields = {name: base[name] for name in contract.names(contract.VM)}
    return VmIdentity(**{**fields, **changes})


def _heartbeat(vm: VmIdentity, *, final: bool) -> dict[str, Any]:
    now = datetime(2026, 11, 21, 23, 0, tzinfo=UTC)
    record = heartbeat_record(
        vm,
        observed_at=now,
        api_version="2020-07-01",
        collector_version="test",
        last_incarnation=1,
        last_poll_ok=True,
        last_poll_error="",
        polls=3,
        poll_errors={},
        active_events=0,
        outbox_depth=0,
        drops={},
        started_at=now,
        final=final,
    )
    return {**record, "seq": 1}


def test_an_optional_field_goes_end_to_end_from_one_declaration_line(ch: Any, db: str, handler: Handler) -> None:
    """``final`` was added as one Field line plus migration 0005: the collector's builder sends it, the ingest
    validates and stores it, and an older collector's heartbeat without it is stored with the default."""
    stopping = _heartbeat(_vm(), final=True)
    assert stopping["final"] is True
    older = synthetic.heartbeat(vm_index=1)
    assert "final" not in older
    handler(deliveries([stopping, older]))
    rows = ch.query(f"SELECT vm_id, final FROM {db}.heartbeats FINAL ORDER BY vm_id").result_rows
    assert sorted(rows) == sorted([(stopping["vm_id"], True), (older["vm_id"], False)])
    assert scalar(ch, f"SELECT count() FROM {db}.dead_letters") == 0


def test_the_collector_builds_only_what_the_ingest_takes() -> None:
    """Hostile instance metadata (fault domain 70000, a 100,000-character name) is made safe when built."""
    beat = _heartbeat(_vm(fault_domain=70000, vm_name="n" * 100_000), final=False)
    assert beat["fault_domain"] is None
    assert beat["vm_name"] == "n" * Limits().max_text_chars
    batch, rejected = prepare(deliveries([beat]), source="t", limits=Limits(), received_at=datetime.now(UTC))
    assert rejected == {}
    assert batch.records() == 1


def test_a_huge_description_and_a_bad_update_domain_cost_no_part_of_a_lifecycle(
    ch: Any, db: str, handler: Handler
) -> None:
    """Issue 17.3: each event's appeared/started/disappeared all reach ``transitions``; the originals of the
    records made safe are whole in ``dead_letters``."""
    huge = [{**r, "description": "d" * 20_000} for r in synthetic.lifecycle("E-HUGE", 0)]
    bad_ud = [{**r, "update_domain": 70000} for r in synthetic.lifecycle("E-UD", 1)]
    sent = [*huge, *bad_ud]
    handler(deliveries(sent))
    stored = ch.query(
        f"SELECT event_id, kind, length(description), update_domain, anomaly FROM {db}.transitions FINAL"
    ).result_rows
    by_event: dict[str, list[str]] = {}
    for event_id, kind, *_ in stored:
        by_event.setdefault(event_id, []).append(kind)
    expected = sorted(r["kind"] for r in synthetic.lifecycle("E", 0))
    assert {e: sorted(k) for e, k in by_event.items()} == {"E-HUGE": expected, "E-UD": expected}
    for event_id, _kind, length, ud, anomaly in stored:
        if event_id == "E-HUGE":
            assert length == Limits().max_text_chars
            assert "made safe: description: truncated from 20000 characters" in anomaly
        else:
            assert ud is None
            assert "made safe: update_domain: null: 70000 outside [0, 65535]" in anomaly
    dead = ch.query(
        f"SELECT error, payload FROM {db}.dead_letters FINAL", query_formats={"String": "bytes"}
    ).result_rows
    assert sorted(payload for _, payload in dead) == sorted(encode(r) for r in sent)
    assert all(error.startswith(MADE_SAFE.encode()) for error, _ in dead)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([synthetic.transition(), synthetic.heartbeat()]),
    st.dictionaries(
        st.sampled_from([*contract.names(contract.TRANSITION), *contract.names(contract.HEARTBEAT), "x"]),
        _JSON,
        max_size=4,
    ),
)
def test_any_record_is_a_row_possibly_made_safe_or_a_dead_letter_with_a_reason(
    base: dict[str, Any], changes: dict[str, Any]
) -> None:
    """Any JSON object: a stored row (fields made safe are flagged, the original kept) or a dead letter with a
    reason; never an exception, never silently gone."""
    payload = json.dumps({**base, **changes}).encode()
    batch, rejected = prepare([Delivery(payload, "h#0")], source="t", limits=Limits(), received_at=NOW)
    dead = {row[4].split(":")[0] for row in batch.dead_letters}
    if batch.records():
        assert dead <= {MADE_SAFE}
        assert rejected.get(MADE_SAFE, 0) == len(batch.dead_letters)
    else:
        assert len(batch.dead_letters) == 1
        assert dead and MADE_SAFE not in dead
        assert sum(rejected.values()) == 1


NOW = datetime(2026, 11, 22, tzinfo=UTC)


def test_a_new_optional_field_is_one_declaration_line(ch: Any, db: str) -> None:
    """Declare one more optional field (and add its column, as a migration would): the builder, the validator
    (the compiled fast path included) and the rows carry it; records without it get its default; a bad value
    in it is made safe like any other field's."""
    cpu = contract.Field("cpu_count", "int", "Nullable(UInt16)", nullable=True, bounds=contract.UINT16, default=None)
    extended = {**contract.CONTRACT, contract.RECORD_HEARTBEAT: (*contract.HEARTBEAT, cpu)}
    heartbeat = extended[contract.RECORD_HEARTBEAT]
    ch.command(f"ALTER TABLE {db}.heartbeats ADD COLUMN IF NOT EXISTS cpu_count Nullable(UInt16)")  # the migration

    values = {k: v for k, v in synthetic.heartbeat().items() if k != "seq"}
    built, notes = contract.build(heartbeat, {**values, "cpu_count": 8}, skip=("seq",))
    assert (built["cpu_count"], notes) == (8, [])
    assert contract.build(heartbeat, values, skip=("seq",))[0]["cpu_count"] is None  # optional: defaulted

    decode_with = decoder_for(extended)
    columns = [*contract.names(heartbeat), "source_position"]
    rows = []
    for i, cpu_count in enumerate([8, None, 70000]):
        record = {**built, "seq": 1, "cpu_count": cpu_count}
        record_type, row, note = decode_with(encode(record), f"p#{i}", Limits())
        assert record_type == contract.RECORD_HEARTBEAT
        assert row[columns.index("cpu_count")] == (None if cpu_count == 70000 else cpu_count)
        assert ("cpu_count: null" in note) is (cpu_count == 70000)
        rows.append(row)
    older = {**built, "seq": 1}
    del older["cpu_count"]
    assert decode_with(encode(older), "p#3", Limits())[1][columns.index("cpu_count")] is None

    ch.insert(f"{db}.heartbeats", rows[:1], column_names=columns)
    assert scalar(ch, f"SELECT cpu_count FROM {db}.heartbeats") == 8
