"""Validated records and rejected payloads -> the rows of each table (pure), grouped for one insert each."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from ingest.source import Delivery
from sevents import contract

DEAD_LETTER_COLUMNS: Final = (
    "dead_letter_id",
    "received_at",
    "source",
    "position",
    "error",
    "payload",
    "payload_size",
    "properties",
)
TABLE_OF: Final = dict(contract.TABLES)
# Each record table's columns (the contract's fields, then where the record came from) and its dedupe key.
COLUMNS_OF: Final = {t.table: (*contract.names(t.fields), "source_position") for t in contract.RECORD_TYPES}
KEY_OF: Final = {t.table: t.key for t in contract.RECORD_TYPES}


@dataclass
class Batch:
    """Rows for one delivery, per table, with their origins.

    A table's rows are ``columns`` (the batch decoder's, as Arrow) followed by ``rows`` (complete value tuples in
    column order, from the per-record decoder); ``origins`` holds the delivery of each, in that order.
    """

    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=lambda: {t: [] for t in COLUMNS_OF})
    origins: dict[str, list[Delivery]] = field(default_factory=lambda: {t: [] for t in COLUMNS_OF})
    dead_letters: list[tuple[Any, ...]] = field(default_factory=list)
    columns: dict[str, pa.Table | None] = field(default_factory=lambda: dict.fromkeys(COLUMNS_OF))

    def add_columns(self, table: str, columns: pa.Table, deliveries: Sequence[Delivery]) -> None:
        """The batch decoder's rows of ``table`` (one per delivery, in order); before any ``add_row`` of it."""
        if self.rows[table] or self.columns[table] is not None or columns.num_rows != len(deliveries):
            raise ValueError(f"columns of {table} must come first, once, one row per delivery")
        self.columns[table] = columns
        self.origins[table] = list(deliveries)

    def add_row(self, record_type: str, row: tuple[Any, ...], delivery: Delivery) -> None:
        """One complete row (``ingest.decode.decode_noted``: the values and the delivery's position) and its
        delivery."""
        table = TABLE_OF[record_type]
        self.rows[table].append(row)
        self.origins[table].append(delivery)

    def values(self, table: str, name: str) -> list[Any]:
        """One field of every row of ``table``, in origin order (timestamps as aware datetimes)."""
        columns = self.columns[table]
        head = [] if columns is None else columns.column(name).to_pylist()
        return head + column(table, self.rows[table], name)

    def add_dead_letter(
        self,
        delivery: Delivery,
        *,
        error: str,
        source: str,
        received_at: datetime,
    ) -> None:
        payload, position = delivery.payload, delivery.position
        self.dead_letters.append(
            (
                dead_letter_id(position, payload),
                received_at,
                source,
                position,
                error,
                payload,
                len(payload),
                dict(delivery.properties),
            )
        )

    def row(self, table: str, index: int) -> dict[str, Any]:
        """One row of ``table`` (its place in origin order) by column name (timestamps as aware datetimes)."""
        columns = self.columns[table]
        head = 0 if columns is None else columns.num_rows
        if index < head and columns is not None:
            found: dict[str, Any] = columns.slice(index, 1).to_pylist()[0]
            return found
        return dict(zip(COLUMNS_OF[table], self.rows[table][index - head], strict=True))

    def remove(self, table: str, indexes: set[int]) -> list[Delivery]:
        """Take the rows of ``table`` at ``indexes`` (places in origin order) out; their deliveries, in order."""
        origins = self.origins[table]
        columns = self.columns[table]
        head = 0 if columns is None else columns.num_rows
        if columns is not None:
            keep = [i for i in range(head) if i not in indexes]
            self.columns[table] = columns.take(pa.array(keep, pa.int64())) if keep else None
        self.rows[table] = [row for j, row in enumerate(self.rows[table]) if head + j not in indexes]
        self.origins[table] = [o for i, o in enumerate(origins) if i not in indexes]
        return [origins[i] for i in sorted(indexes)]

    def records(self) -> int:
        """Record rows (dead letters not counted)."""
        return sum(len(o) for o in self.origins.values())

    def earliest(self, table: str, name: str) -> Any:
        """The smallest value of one field over ``table``'s rows (None when it has none)."""
        columns, rows = self.columns[table], self.rows[table]
        found = [] if columns is None or not columns.num_rows else [pc.min(columns.column(name)).as_py()]
        return min(found + column(table, rows, name), default=None)

    def distinct(self, table: str, name: str) -> list[Any]:
        """The distinct values of one field over ``table``'s rows, sorted."""
        columns = self.columns[table]
        found = set() if columns is None else set(pc.unique(columns.column(name)).to_pylist())
        return sorted(found | set(column(table, self.rows[table], name)))

    def repeats(self, table: str, name: str) -> bool:
        """Whether a value of one field occurs more than once over ``table``'s rows."""
        columns, rows = self.columns[table], self.rows[table]
        if not rows:
            return columns is not None and pc.count_distinct(columns.column(name)).as_py() < columns.num_rows
        values = self.values(table, name)
        return len(set(values)) < len(values)

    def latest(self, table: str, name: str) -> Any:
        """The largest value of one field over ``table``'s rows (None when it has none)."""
        columns, rows = self.columns[table], self.rows[table]
        found = [] if columns is None or not columns.num_rows else [pc.max(columns.column(name)).as_py()]
        return max([v for v in found + column(table, rows, name) if v is not None], default=None)

    def split(self) -> tuple[Batch, Batch]:
        """Two halves of the record rows (the dead letters go with the first), to corner a row ClickHouse refuses.

        With two or more record rows both halves get at least one, so halving always ends.
        """
        first, second = Batch(dead_letters=list(self.dead_letters)), Batch()
        room = self.records() // 2
        for table, origins in self.origins.items():
            cut = min(room, len(origins))
            room -= cut
            first.origins[table], second.origins[table] = origins[:cut], origins[cut:]
            columns, rows = self.columns[table], self.rows[table]
            head = 0 if columns is None else columns.num_rows
            if columns is not None:
                first.columns[table] = columns.slice(0, cut) if cut else None
                second.columns[table] = columns.slice(cut) if cut < head else None
            first.rows[table], second.rows[table] = rows[: max(0, cut - head)], rows[max(0, cut - head) :]
        return first, second

    def only_record(self) -> Delivery | None:
        """The delivery of the one record row, when there is exactly one."""
        origins = [o for table in self.origins.values() for o in table]
        return origins[0] if len(origins) == 1 else None

    def __len__(self) -> int:
        return self.records() + len(self.dead_letters)


def dead_letter_id(position: str, payload: bytes) -> str:
    """Same payload from the same place: the same dead letter, however often it is redelivered."""
    digest = hashlib.sha256(position.encode() + b"\x1f" + payload)
    return digest.hexdigest()[:32]


def column(table: str, rows: Sequence[tuple[Any, ...]], name: str) -> list[Any]:
    """One field of every row."""
    i = COLUMNS_OF[table].index(name)
    return [row[i] for row in rows]


def insert_token(table: str, keys: Sequence[str]) -> str:
    """Deterministic insert_deduplication_token: a retried insert of the same rows is dropped by ClickHouse."""
    digest = hashlib.sha256(table.encode())
    if keys:  # one update of the joined keys: the same bytes as one update per key, far fewer calls
        digest.update(("\x1f" + "\x1f".join(keys)).encode())
    return f"{table}-{len(keys)}-{digest.hexdigest()[:32]}"
