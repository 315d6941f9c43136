"""The ClickHouse edge of the ingest: insert one batch, each table with its own deduplication token.

Record rows go in as one Arrow table per table: the batch decoder's columns (``ingest.decode_batch``) and the
per-record decoder's rows (``ingest.columns``); ClickHouse reads them without parsing text, LowCardinality
columns already dictionary-encoded. That is cheaper on both
sides than the client's row-oriented Native insert and than JSONEachRow, which ClickHouse parses more
slowly than the ingest decodes it. Dead letters (few, and of a type Arrow need not know) go in as rows, and
first, so that a record never counts as handled before its rejection is stored. Any client
failure becomes StoreError; a retry of the same batch repeats the same tokens, so ClickHouse drops the
inserts that had already succeeded.

A token alone is not proof of storage: a process killed mid-insert on the embedded engine can leave a
deduplication entry whose part never reached disk, and every retry of that batch is then dropped as a
duplicate (and would be acknowledged: records lost). So after each insert the batch's keys are looked up in
the table, and rows not found are inserted again without the token; ReplacingMergeTree and FINAL absorb the
duplicate if they were there after all. Only rows found stored count as stored.

The look-up costs about as much as a third of an insert, so it is done only where a lost part can be hit: in
the first ``verify_window`` seconds after the first store (a restarted ingest is redelivered its
predecessor's unacknowledged batches first) and on every retry after a failed attempt.
"""

from __future__ import annotations

import logging
import math
import re
import struct
import time
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from clickhouse_connect.driver.exceptions import DataError

from ingest.clickhouse import CLIENT_ERRORS
from ingest.columns import LAYOUTS, arrow_table
from ingest.errors import RejectedRows, StoreError
from ingest.rows import DEAD_LETTER_COLUMNS, KEY_OF, Batch, insert_token

# Error codes that depend on the inserted values: parse and conversion failures, out-of-range values, NULL
# into a non-Nullable column, a violated CHECK constraint. Anything else is the server's problem: retried.
REFUSED_CODES: Final = frozenset({6, 26, 27, 38, 41, 53, 69, 70, 72, 117, 131, 321, 349, 469})
_CODE: Final = re.compile(r"Code: (\d+)\.")

log = logging.getLogger(__name__)


class Writer:
    """Stores batches in ``database``; on a cluster, inserts wait until every shard has the rows."""

    def __init__(
        self, client: Any, database: str = "sevents", *, cluster: bool = False, verify_window: float = math.inf
    ) -> None:
        self.client = client
        self.database = database
        self.verify_window = verify_window
        self._first_store: float | None = None
        # optimize_on_insert=0: the tables collapse repeated keys when parts merge and readers use FINAL or
        # merge states, so sorting out duplicates inside each inserted block again is work for nothing.
        self._common: dict[str, Any] = {"insert_deduplicate": 1, "async_insert": 0, "optimize_on_insert": 0}
        if cluster:
            self._common["distributed_foreground_insert"] = 1

    def store(self, batch: Batch, *, retry: bool = False) -> None:
        """Insert every table's rows of ``batch``; returns only when ClickHouse confirmed all of them.

        ``retry``: an earlier attempt at this batch failed, so its token may be taken while its rows are not.
        """
        now = time.monotonic()
        self._first_store = now if self._first_store is None else self._first_store
        verify = retry or now - self._first_store <= self.verify_window
        try:
            if batch.dead_letters:
                keys = [str(row[0]) for row in batch.dead_letters]  # dead_letter_id
                self._insert_verified("dead_letters", batch.dead_letters, keys, verify)
            # Transitions first: alerts read them, and a heartbeat's insert need not delay them.
            for table in ("transitions", "approvals", "impacts", "heartbeats"):
                if batch.origins[table]:
                    self._insert_table(table, batch, verify)
        except DataError as error:
            raise RejectedRows(f"ClickHouse client refused a value: {_short(error)}") from error
        except CLIENT_ERRORS as error:
            if refused_by_server(error):
                raise RejectedRows(f"ClickHouse refused the rows: {_short(error)}") from error
            raise StoreError(f"ClickHouse did not store the batch: {_short(error)}") from error
        except (TypeError, ValueError, AttributeError, OverflowError, struct.error) as error:
            # raised while the client serialises a column: a value of this batch, not the server
            raise RejectedRows(f"a value cannot be sent to ClickHouse: {_short(error)}") from error

    def _insert_table(self, table: str, batch: Batch, verify: bool) -> None:
        """A record table's rows, as one Arrow table: the batch decoder's columns, then the other rows."""
        columns = batch.columns[table]
        parts = [] if columns is None else [columns]
        if batch.rows[table]:
            parts.append(arrow_table(LAYOUTS[table], batch.rows[table]))
        # Dictionaries differ from part to part, and the Arrow file format takes one per column: unify them.
        rows = parts[0] if len(parts) == 1 else pa.concat_tables(parts).unify_dictionaries().combine_chunks()
        keys = rows.column(KEY_OF[table]).to_pylist()  # text: the key columns are String
        self._insert_verified(table, rows, keys, verify)

    def _insert_verified(
        self, table: str, rows: pa.Table | list[tuple[Any, ...]], keys: list[str], verify: bool
    ) -> None:
        key_column = KEY_OF.get(table, "dead_letter_id")
        settings = {**self._common, "insert_deduplication_token": insert_token(table, keys)}
        self._insert(table, rows, settings)
        if not verify:
            return
        vms = _vms(rows) if table in LAYOUTS else []
        missing = self._missing(table, key_column, keys, vms)
        if not missing:
            return
        # Dropped as a duplicate of an insert that never reached disk: insert those rows again, untokened.
        log.warning(
            "rows of a deduplicated insert are not stored; inserting them again",
            extra={"table": table, "rows": len(keys), "missing": len(missing)},
        )
        again: pa.Table | list[tuple[Any, ...]]
        if isinstance(rows, pa.Table):
            again = rows.filter(pc.is_in(rows.column(key_column), pa.array(sorted(missing), pa.string())))
        else:
            again = [row for row, key in zip(rows, keys, strict=True) if key in missing]
        self._insert(table, again, {**self._common, "insert_deduplicate": 0})
        still = self._missing(table, key_column, keys, vms)
        if still:  # retried by the handler (with the token, then verified again): never acknowledged unstored
            raise StoreError(f"{len(still)} rows of {table} not found after inserting them")

    def _insert(self, table: str, rows: pa.Table | list[tuple[Any, ...]], settings: dict[str, Any]) -> None:
        name = f"{self.database}.{table}"
        if isinstance(rows, pa.Table):
            self.client.insert_arrow(name, rows, settings=settings)
        else:
            self.client.insert(name, rows, column_names=list(DEAD_LETTER_COLUMNS), settings=settings)

    def _missing(self, table: str, key_column: str, keys: list[str], vms: list[str]) -> set[str]:
        """The keys not found in ``table``; ``vms`` (the sorting key's prefix) narrows the read to their ranges.

        Identifiers are our own contract's names, never input; the values are bound parameters.
        """
        where = f"{key_column} IN {{keys:Array(String)}}" + (" AND vm_id IN {vms:Array(String)}" if vms else "")
        found = self.client.query(
            f"SELECT DISTINCT {key_column} FROM {self.database}.{table} WHERE {where}",  # noqa: S608 -- our names; values bound
            parameters={"keys": keys, "vms": vms},
        ).result_rows
        return set(keys) - {str(row[0]) for row in found}


def _vms(rows: pa.Table) -> list[str]:
    """The table's VMs, sorted: the sorting key's prefix, which narrows the verifying read."""
    return sorted(str(vm) for vm in pc.unique(rows.column("vm_id").cast(pa.string())).to_pylist())


def refused_by_server(error: BaseException) -> bool:
    """Whether ClickHouse's error code says the data (not the server or the network) was at fault."""
    match = _CODE.search(str(error))
    return match is not None and int(match.group(1)) in REFUSED_CODES


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
