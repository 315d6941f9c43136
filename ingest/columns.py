"""Validated row tuples -> an Arrow table ClickHouse reads without per-value work on either side (pure).

The Arrow types follow the contract's column types, so ClickHouse maps each column straight onto its own:
timestamps are millisecond UTC timestamps (DateTime64(3, 'UTC')), and LowCardinality columns arrive
dictionary-encoded, which ClickHouse takes as LowCardinality without hashing every value again. pyarrow
converts each column in C; the only Python-level step is the transpose (``zip(*rows)``).

A value that does not fit its Arrow type raises ``ValueError``/``TypeError``/``OverflowError`` (pyarrow's
``ArrowInvalid`` and ``ArrowTypeError`` are subclasses): the writer treats that as a refused row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from sevents import contract

_SCALARS: Final = {
    "String": pa.string(),
    "Bool": pa.bool_(),
    "UInt16": pa.uint16(),
    "UInt32": pa.uint32(),
    "UInt64": pa.uint64(),
    "Int64": pa.int64(),
    "DateTime64(3, 'UTC')": pa.timestamp("ms", tz="UTC"),
    "Array(String)": pa.list_(pa.string()),
    "Map(String, UInt64)": pa.map_(pa.string(), pa.uint64()),
}


@dataclass(frozen=True)
class ArrowColumn:
    """One column: its name, Arrow type, and whether ClickHouse stores it as LowCardinality."""

    name: str
    type: pa.DataType
    dictionary: bool


def arrow_column(name: str, column_type: str) -> ArrowColumn:
    """The Arrow form of a ClickHouse column type of the contract; raises KeyError for one it does not use."""
    inner, dictionary = column_type, False
    for wrapper in ("LowCardinality", "Nullable"):
        if inner.startswith(wrapper + "("):
            inner = inner[len(wrapper) + 1 : -1]
            dictionary = dictionary or wrapper == "LowCardinality"
    return ArrowColumn(name, _SCALARS[inner], dictionary)


def layout(fields: Sequence[contract.Field]) -> tuple[ArrowColumn, ...]:
    """The Arrow columns of a record type's rows: its contract fields, then ``source_position``."""
    return (*(arrow_column(f.name, f.column) for f in fields), ArrowColumn("source_position", pa.string(), False))


def arrow_table(columns: Sequence[ArrowColumn], rows: Sequence[tuple[Any, ...]]) -> pa.Table:
    """The rows (tuples in ``columns`` order) as one Arrow table."""
    arrays = []
    transposed = list(zip(*rows, strict=True)) or [()] * len(columns)
    for column, values in zip(columns, transposed, strict=True):
        array = pa.array(values, type=column.type)
        arrays.append(array.dictionary_encode() if column.dictionary else array)
    return pa.Table.from_arrays(arrays, names=[c.name for c in columns])


def _layouts() -> dict[str, tuple[ArrowColumn, ...]]:
    """Every table whose column types all have an Arrow form (the others go in as Python rows)."""
    found = {}
    for record_type, fields in contract.CONTRACT.items():
        try:
            found[contract.TABLES[record_type]] = layout(fields)
        except KeyError:
            continue
    return found


LAYOUTS: Final = _layouts()
