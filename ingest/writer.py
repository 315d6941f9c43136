"""The ClickHouse edge of the ingest: insert one batch, each table with its own deduplication token.

Rows go in through the client's Native-format insert as the row tuples the handler built (the client's
compiled pivot turns them into columns faster than a transpose here; both beat JSONEachRow). Dead letters
are written first so that a record never counts as handled before its rejection is stored. Any client
failure becomes StoreError; a retry of the same batch repeats the same tokens, so ClickHouse drops the
inserts that had already succeeded.
"""

from __future__ import annotations

import re
import struct
from typing import Any, Final

from clickhouse_connect.driver.exceptions import DataError

from ingest.clickhouse import CLIENT_ERRORS
from ingest.errors import RejectedRows, StoreError
from ingest.rows import COLUMNS_OF, DEAD_LETTER_COLUMNS, KEY_OF, Batch, column, insert_token

# Error codes that depend on the inserted values: parse and conversion failures, out-of-range values, NULL
# into a non-Nullable column, a violated CHECK constraint. Anything else is the server's problem: retried.
REFUSED_CODES: Final = frozenset({6, 26, 27, 38, 41, 53, 69, 70, 72, 117, 131, 321, 349, 469})
_CODE: Final = re.compile(r"Code: (\d+)\.")


class Writer:
    """Stores batches in ``database``; on a cluster, inserts wait until every shard has the rows."""

    def __init__(self, client: Any, database: str = "sevents", *, cluster: bool = False) -> None:
        self.client = client
        self.database = database
        self._common: dict[str, Any] = {"insert_deduplicate": 1, "async_insert": 0}
        if cluster:
            self._common["distributed_foreground_insert"] = 1

    def store(self, batch: Batch) -> None:
        """Insert every table's rows of ``batch``; returns only when ClickHouse confirmed all of them."""
        try:
            if batch.dead_letters:
                keys = [str(row[0]) for row in batch.dead_letters]
                self.client.insert(
                    f"{self.database}.dead_letters",
                    batch.dead_letters,
                    column_names=list(DEAD_LETTER_COLUMNS),
                    settings={**self._common, "insert_deduplication_token": insert_token("dead_letters", keys)},
                )
            for table in ("heartbeats", "transitions"):
                rows = batch.rows[table]
                if not rows:
                    continue
                token = insert_token(table, column(table, rows, KEY_OF[table]))
                self.client.insert(
                    f"{self.database}.{table}",
                    rows,
                    column_names=list(COLUMNS_OF[table]),
                    settings={**self._common, "insert_deduplication_token": token},
                )
        except DataError as error:
            raise RejectedRows(f"ClickHouse client refused a value: {_short(error)}") from error
        except CLIENT_ERRORS as error:
            if refused_by_server(error):
                raise RejectedRows(f"ClickHouse refused the rows: {_short(error)}") from error
            raise StoreError(f"ClickHouse did not store the batch: {_short(error)}") from error
        except (TypeError, ValueError, AttributeError, OverflowError, struct.error) as error:
            # raised while the client serialises a column: a value of this batch, not the server
            raise RejectedRows(f"a value cannot be sent to ClickHouse: {_short(error)}") from error


def refused_by_server(error: BaseException) -> bool:
    """Whether ClickHouse's error code says the data (not the server or the network) was at fault."""
    match = _CODE.search(str(error))
    return match is not None and int(match.group(1)) in REFUSED_CODES


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
