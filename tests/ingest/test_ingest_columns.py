"""Arrow columns: every value of a validated row reaches ClickHouse as the same value, or is refused whole."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from demo import synthetic
from ingest.columns import LAYOUTS, arrow_column, arrow_table
from ingest.decode import decode_noted
from ingest.rows import COLUMNS_OF
from sevents.records import encode
from tests.ingest.conftest import scalar


def test_every_table_of_records_has_an_arrow_layout_in_its_column_order() -> None:
    """The layouts name the same columns, in the same order, as the rows the decoder builds."""
    for table, columns in COLUMNS_OF.items():
        assert tuple(c.name for c in LAYOUTS[table]) == columns


def test_low_cardinality_columns_are_dictionary_encoded_and_nullable_ones_keep_nulls() -> None:
    """LowCardinality arrives as an Arrow dictionary; a NULL of a Nullable column stays NULL."""
    assert arrow_column("kind", "LowCardinality(String)").dictionary
    assert not arrow_column("vm_id", "String").dictionary
    record = {**synthetic.transition(not_before=None, description=None), "event_source": None}
    table = arrow_table(LAYOUTS["transitions"], [decode_noted(encode(record), "p#0")[1]])
    assert pa.types.is_dictionary(table.column("kind").type)
    assert table.column("not_before").null_count == 1
    assert table.column("description").null_count == 1
    assert table.column("event_source").null_count == 1


def test_a_value_outside_its_arrow_type_raises_a_value_error() -> None:
    """An out-of-range integer is refused by pyarrow with an error the writer turns into a refused row."""
    row: Any = list(decode_noted(encode(synthetic.transition()), "p#0")[1])
    row[COLUMNS_OF["transitions"].index("fault_domain")] = 70_000  # beyond UInt16
    with pytest.raises((ValueError, OverflowError)):
        arrow_table(LAYOUTS["transitions"], [tuple(row)])


def test_rows_stored_through_arrow_read_back_equal_to_the_decoded_values(ch: Any, db: str) -> None:
    """Transitions and heartbeats inserted as Arrow come back as the decoder's values, column by column."""
    records = [synthetic.transition(incarnation=i) for i in range(2)] + [synthetic.heartbeat(vm_index=1)]
    records.append({**synthetic.transition(incarnation=9, not_before=None, description=None), "event_source": None})
    for table in ("transitions", "heartbeats"):
        rows = [decode_noted(encode(r), f"p#{i}")[1] for i, r in enumerate(records) if r["record_type"] + "s" == table]
        ch.insert_arrow(f"{db}.{table}", arrow_table(LAYOUTS[table], rows))
        columns = ", ".join(COLUMNS_OF[table])
        stored = ch.query(f"SELECT {columns} FROM {db}.{table} ORDER BY source_position").result_rows
        assert [_comparable(r) for r in stored] == [_comparable(r) for r in rows]
    assert scalar(ch, f"SELECT count() FROM {db}.transitions") == 3


def _comparable(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """Timestamps without their zone (the client reads DateTime64 as naive UTC), maps as dicts."""
    return tuple(v.replace(tzinfo=None) if hasattr(v, "tzinfo") and v is not None else v for v in row)
