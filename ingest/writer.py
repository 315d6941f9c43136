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

No batch can stall: ClickHouse refuses a block whose rows span more than ``max_partitions_per_insert_block``
partitions (100; a VM's backlog after an outage has a heartbeat partition per day), so a table's rows that span
more than ``partitions_per_insert`` partitions go in as several inserts of whole partitions, in partition order,
each with its own token over its own keys: the same batch always makes the same inserts and tokens, so retries
stay idempotent. A batch whose rows span few partitions (the live case) is one insert, as before. Heartbeats
older than the ``heartbeats`` table's TTL go in all the same (its materialized views keep them: the hourly
rollup ``heartbeat_hours`` and ``heartbeats_latest``) but the table itself may drop them at once, so they are
verified in the rollup instead; those older than the rollup's TTL too are kept nowhere and are not inserted:
``store`` returns them, counted per table, as dropped for retention. Rows of the other tables older than their
TTL (the retention settings, ``ingest.retention``) are not inserted either, and counted the same way: the TTL
could take them between the insert and the verifying read, which would then insert them for ever.
"""

from __future__ import annotations

import logging
import math
import re
import struct
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from clickhouse_connect.driver.exceptions import DataError

from ingest import lifecycle_store
from ingest.clickhouse import CLIENT_ERRORS, about_the_data
from ingest.columns import LAYOUTS, arrow_table
from ingest.errors import RejectedRows, StoreError
from ingest.lifecycle_refresher import Refresher
from ingest.rows import DEAD_LETTER_COLUMNS, KEY_OF, Batch, insert_token
from sevents import contract

# Each record table's PARTITION BY (the migrations): the column and toYYYYMM ("month") or toYYYYMMDD ("day").
# The materialized views' tables are partitioned by month of the same times, so a block within N partitions
# here is within N there. A schema partitioned finer than this says is still safe: a block ClickHouse refuses
# for its partitions is halved by the handler until it fits.
PARTITION_BY: Final = {t.table: (t.time, t.partition) for t in contract.RECORD_TYPES}
# Half ClickHouse's default max_partitions_per_insert_block (100): room for a server configured a bit lower.
PARTITIONS_PER_INSERT: Final = 50
HEARTBEAT_ROLLUP: Final = "heartbeat_hours"  # fed by a materialized view from heartbeats (migration 0006)
# A row whose TTL ends within this margin is treated as gone: the TTL merge may come before the verifying read,
# the rollup's TTL counts from the hour's start, and the server's clock may run a little ahead of ours.
RETENTION_MARGIN: Final = timedelta(hours=2)
RETENTION_REFRESH_S: Final = 600.0  # how long a table's TTL read from the schema is trusted
_TTL: Final = re.compile(r"\bTTL\s+(.*?)(?:\s+SETTINGS\b|$)", re.DOTALL)
_INTERVAL: Final = re.compile(
    r"toInterval(Second|Minute|Hour|Day|Week|Month|Quarter|Year)\((\d+)\)"
    r"|INTERVAL\s+(\d+)\s+(SECOND|MINUTE|HOUR|DAY|WEEK|MONTH|QUARTER|YEAR)",
    re.IGNORECASE,
)
_UNIT_S: Final = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "week": 7 * 86400,
    "month": 28 * 86400,  # the shortest: a row is never taken for kept when it may be gone
    "quarter": 89 * 86400,
    "year": 365 * 86400,
}

# What a stored row is compared by when a record with its key comes again (``stored_versions``): every field of
# the record (not where or when it was stored), and how the read is narrowed to the batch's keys: columns of the
# sorting key the keys fix, and a time the key includes (so the read prunes partitions).
COMPARED: Final = {contract.TABLES[t]: contract.names(fields) for t, fields in contract.CONTRACT.items()}
_TIMES: Final = {
    contract.TABLES[t]: frozenset(f.name for f in fields if f.kind == "time") for t, fields in contract.CONTRACT.items()
}
_NARROW: Final[dict[str, tuple[tuple[str, ...], str | None]]] = {
    t.table: (t.lookup, t.lookup_time) for t in contract.RECORD_TYPES
}
# The column a look-up reads first (PREWHERE) where its table is narrowed by it: a batch's events name few rows
# (transitions keep a bloom filter of them), while its VMs' ranges cover most granules of the table.
_FIRST: Final = "event_id"
# Heartbeats last: alerts read the others, and a heartbeat's insert need not delay them.
_INSERT_ORDER: Final = sorted((t.table for t in contract.RECORD_TYPES), key=lambda table: table == "heartbeats")
# the tables whose rows are evidence of an event (``event_id``), which the stored lifecycles are computed from
_EVENT_TABLES: Final = tuple(t.table for t in contract.RECORD_TYPES if any(f.name == "event_id" for f in t.fields))
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MS: Final = timedelta(milliseconds=1)

log = logging.getLogger(__name__)


def comparable(value: Any) -> Any:
    """A field's value in the form a stored row is compared in: timestamps as milliseconds since the epoch, maps
    as sorted pairs (a dict, or Arrow's list of pairs), lists as tuples."""
    if isinstance(value, datetime):
        return ((value if value.tzinfo else value.replace(tzinfo=UTC)) - _EPOCH) // _MS
    if isinstance(value, dict):
        return tuple(sorted(value.items()))
    if isinstance(value, list):
        if value and isinstance(value[0], tuple):
            return tuple(sorted(value))
        return tuple(value)
    return value


class Writer:
    """Stores batches in ``database``; on a cluster, inserts wait until every shard has the rows."""

    def __init__(
        self,
        client: Any,
        database: str = "sevents",
        *,
        cluster: bool = False,
        verify_window: float = math.inf,
        partitions_per_insert: int = PARTITIONS_PER_INSERT,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        refresh_every: float = 0.0,
    ) -> None:
        """``refresh_every``: seconds the events' lifecycles may be put off while batches keep coming
        (``ingest.lifecycle_refresher``; the ingest runs with ``DEFAULT_EVERY``); 0 refreshes with every batch."""
        self.client = client
        self.database = database
        self.verify_window = verify_window
        self.partitions_per_insert = partitions_per_insert
        self.now = now
        self._local = "_local" if cluster else ""  # where the TTLs are: the tables holding the rows
        self._first_store: float | None = None
        self._retention: tuple[float, dict[str, timedelta | None]] | None = None  # (read at, table -> TTL)
        # optimize_on_insert=0: the tables collapse repeated keys when parts merge and readers use FINAL or
        # merge states, so sorting out duplicates inside each inserted block again is work for nothing.
        self._common: dict[str, Any] = {"insert_deduplicate": 1, "async_insert": 0, "optimize_on_insert": 0}
        self._refresh_settings: dict[str, Any] = {"async_insert": 0}
        if cluster:
            self._common["distributed_foreground_insert"] = 1
            self._refresh_settings["distributed_foreground_insert"] = 1
        settings = self._refresh_settings
        self.lifecycles = Refresher(
            lambda ids: lifecycle_store.refresh(client, database, ids, settings),
            lambda: lifecycle_store.stale(client, database, settings),
            every=refresh_every,
        )

    def store(self, batch: Batch, *, retry: bool = False) -> dict[str, int]:
        """Insert every table's rows of ``batch``; returns only when ClickHouse confirmed all of them.

        ``retry``: an earlier attempt at this batch failed, so its token may be taken while its rows are not.
        Returns the rows dropped for retention (older than every table that would keep them), per table.
        """
        now = time.monotonic()
        self._first_store = now if self._first_store is None else self._first_store
        verify = retry or now - self._first_store <= self.verify_window
        dropped: dict[str, int] = {}
        try:
            if batch.dead_letters:
                keys = [str(row[0]) for row in batch.dead_letters]  # dead_letter_id
                self._insert_verified("dead_letters", batch.dead_letters, keys, verify)
            for table in _INSERT_ORDER:
                if batch.origins[table]:
                    gone = self._insert_table(table, batch, verify)
                    if gone:
                        dropped[table] = gone
        except DataError as error:
            raise RejectedRows(f"ClickHouse client refused a value: {_short(error)}") from error
        except CLIENT_ERRORS as error:
            if about_the_data(error):
                raise RejectedRows(f"ClickHouse refused the rows: {_short(error)}") from error
            raise StoreError(f"ClickHouse did not store the batch: {_short(error)}") from error
        except (TypeError, ValueError, AttributeError, OverflowError, struct.error) as error:
            # raised while the client serialises a column: a value of this batch, not the server
            raise RejectedRows(f"a value cannot be sent to ClickHouse: {_short(error)}") from error
        # the events these rows are evidence of (marked by the INSERT), computed again now that ClickHouse has them
        # or put off (a failure is the server's, never the batch's: retried like an insert)
        touched = [i for table in _EVENT_TABLES if batch.origins[table] for i in batch.distinct(table, "event_id")]
        try:
            self.lifecycles.touched(touched)
        except CLIENT_ERRORS as error:
            raise StoreError(f"ClickHouse did not compute the events' lifecycles: {_short(error)}") from error
        return dropped

    def close(self) -> None:
        """Compute the lifecycles put off so far (what fails stays marked for the next sweep)."""
        self.lifecycles.close()

    def stored_versions(self, batch: Batch) -> dict[str, dict[str, list[tuple[Any, ...]]]]:
        """Table -> key -> every stored version (``COMPARED`` fields, ``comparable``) of the keys of ``batch`` that
        are stored; a table with none stored maps to {}.

        One read lists, for every table of the batch at once (``UNION ALL``: one round trip, however many record
        types the batch holds), the stored keys in the batch's ranges of the sorting key (its VMs, and its events
        or times: ``_NARROW``), without sending the keys (binding ten thousand keys costs more than the read); a
        batch of new records finds none of its own there. The event column, where a table is narrowed by one, is
        read first (``PREWHERE``): a batch's events name few rows, while its VMs' ranges cover most granules of
        the table, so the other columns are read only for the rows of its events. Only keys found are read in
        full, by a second read of their table. Raises StoreError if ClickHouse does not answer. Identifiers are
        our own contract's names, never input; values are bound.
        """
        tables = [table for table, origins in batch.origins.items() if origins]
        if not tables:
            return {}
        versions: dict[str, dict[str, list[tuple[Any, ...]]]] = {table: {} for table in tables}
        selects: list[str] = []
        parameters: dict[str, Any] = {}
        narrowed: dict[str, tuple[list[str], list[str], dict[str, Any]]] = {}
        for place, table in enumerate(tables):
            first, rest, bound = self._narrow(table, batch, prefix=f"t{place}_")
            narrowed[table] = (first, rest, bound)
            parameters.update(bound)
            selects.append(
                f"SELECT DISTINCT {place} AS place, {KEY_OF[table]} AS stored_key FROM {self.database}.{table} "  # noqa: S608 -- our names; values bound
                f"{_clauses(first, rest)}"
            )
        try:
            listed = self.client.query(" UNION ALL ".join(selects), parameters=parameters).result_rows
            if not listed:  # the common case: nothing stored in the batch's ranges
                return versions
            found: dict[str, set[str]] = {}
            for place, key in listed:
                found.setdefault(tables[place], set()).add(str(key))
            for table, keys in found.items():
                mine = keys.intersection(map(str, batch.values(table, KEY_OF[table])))
                if mine:
                    versions[table] = self._versions(table, mine, *narrowed[table])
        except CLIENT_ERRORS as error:
            raise StoreError(f"cannot look the batch's keys up: {_short(error)}") from error
        return versions

    def _versions(
        self, table: str, keys: set[str], first: list[str], rest: list[str], bound: dict[str, Any]
    ) -> dict[str, list[tuple[Any, ...]]]:
        """Key -> every stored version of ``keys`` (stored keys of ``table``, in the ranges ``_narrow`` gave)."""
        key_column, names, times = KEY_OF[table], COMPARED[table], _TIMES[table]
        select = ", ".join(f"toUnixTimestamp64Milli({n})" if n in times else n for n in names)
        rows = self.client.query(
            f"SELECT {select} FROM {self.database}.{table} "  # noqa: S608 -- our names; values bound
            f"{_clauses(first, [*rest, f'{key_column} IN {{keys:Array(String)}}'])}",
            parameters={**bound, "keys": sorted(keys)},
        ).result_rows
        at = names.index(key_column)
        versions: dict[str, list[tuple[Any, ...]]] = {}
        for row in rows:
            versions.setdefault(str(row[at]), []).append(tuple(comparable(v) for v in row))
        return versions

    @staticmethod
    def _narrow(table: str, batch: Batch, *, prefix: str) -> tuple[list[str], list[str], dict[str, Any]]:
        """The conditions of ``table``'s rows in the batch's ranges of the sorting key: those read first (the
        event column, ``_FIRST``), the others, and their parameters (named with ``prefix``)."""
        columns, span = _NARROW[table]
        first: list[str] = []
        rest: list[str] = []
        parameters: dict[str, Any] = {}
        for name in columns:
            (first if name == _FIRST else rest).append(f"{name} IN {{{prefix}{name}:Array(String)}}")
            parameters[f"{prefix}{name}"] = [str(v) for v in batch.distinct(table, name)]
        low, high = (batch.earliest(table, span), batch.latest(table, span)) if span else (None, None)
        if span and low is not None and high is not None:
            rest.append(
                f"{span} BETWEEN fromUnixTimestamp64Milli({{{prefix}low:Int64}}, 'UTC') "
                f"AND fromUnixTimestamp64Milli({{{prefix}high:Int64}}, 'UTC')"
            )
            parameters.update({f"{prefix}low": comparable(low), f"{prefix}high": comparable(high)})
        return first, rest, parameters

    def _insert_table(self, table: str, batch: Batch, verify: bool) -> int:
        """A record table's rows, as one Arrow table (the batch decoder's columns, then the other rows), in
        inserts of at most ``partitions_per_insert`` partitions; returns the rows dropped for retention."""
        columns = batch.columns[table]
        parts = [] if columns is None else [columns]
        if batch.rows[table]:
            parts.append(arrow_table(LAYOUTS[table], batch.rows[table]))
        # Dictionaries differ from part to part, and the Arrow file format takes one per column: unify them.
        rows = parts[0] if len(parts) == 1 else pa.concat_tables(parts).unify_dictionaries().combine_chunks()
        expiring: pa.Table | None = None
        dropped = 0
        if table == "heartbeats":
            rows, expiring, dropped = self._by_retention(rows)
        else:
            rows, dropped = self._past_retention(table, rows)
        for chunk in partition_chunks(rows, table, self.partitions_per_insert):
            keys = chunk.column(KEY_OF[table]).to_pylist()  # text: the key columns are String
            self._insert_verified(table, chunk, keys, verify)
        if expiring is not None:
            for chunk in partition_chunks(expiring, table, self.partitions_per_insert):
                keys = chunk.column(KEY_OF[table]).to_pylist()
                self._insert_verified(table, chunk, keys, verify, in_rollup=True)
        return dropped

    def _by_retention(self, rows: pa.Table) -> tuple[pa.Table, pa.Table | None, int]:
        """Heartbeats by age: (those ``heartbeats`` keeps, those only its rollup keeps or None, how many none keeps).

        The common case, every heartbeat recent, costs one minimum over the column (and, every few minutes, a
        look at the schema).
        """
        observed = rows.column("observed_at")
        oldest = pc.min(observed).as_py()
        raw = self._ttl("heartbeats") if oldest is not None else None
        now = self.now()
        if oldest is None or raw is None or oldest >= now - raw + RETENTION_MARGIN:
            return rows, None, 0
        kept = pc.greater_equal(observed, pa.scalar(now - raw + RETENTION_MARGIN, observed.type))
        rollup = self._ttl(HEARTBEAT_ROLLUP)
        old = pc.invert(kept)
        if rollup is not None:  # and older than the rollup's TTL as well: kept nowhere
            old = pc.and_(old, pc.greater_equal(observed, pa.scalar(now - rollup + RETENTION_MARGIN, observed.type)))
        recent, expiring = rows.filter(kept), rows.filter(old)
        return recent, (expiring if expiring.num_rows else None), rows.num_rows - recent.num_rows - expiring.num_rows

    def _past_retention(self, table: str, rows: pa.Table) -> tuple[pa.Table, int]:
        """``table``'s rows its TTL still keeps, and how many it would not: those are not inserted (the TTL could
        take them before the verifying read, which would then insert them for ever), only counted. The common
        case, every row recent or no TTL, costs one minimum over the column."""
        ttl = self._ttl(table)
        if ttl is None or not rows.num_rows:
            return rows, 0
        times = rows.column(PARTITION_BY[table][0])
        limit = self.now() - ttl + RETENTION_MARGIN
        oldest = pc.min(times).as_py()
        if oldest is None or oldest >= limit:
            return rows, 0
        kept = rows.filter(pc.greater_equal(times, pa.scalar(limit, times.type)))
        return kept, rows.num_rows - kept.num_rows

    def _ttl(self, table: str) -> timedelta | None:
        """How long ``table`` keeps a row: its TTL as the schema says (read again every few minutes); None, for
        ever. On a cluster the TTL is on the local tables."""
        now = time.monotonic()
        if self._retention is None or now - self._retention[0] > RETENTION_REFRESH_S:
            names = [f"{name}{self._local}" for name in (*PARTITION_BY, HEARTBEAT_ROLLUP)]
            found = self.client.query(
                "SELECT name, engine_full FROM system.tables "
                "WHERE database = {db:String} AND name IN {names:Array(String)}",
                parameters={"db": self.database, "names": names},
            ).result_rows
            ttls = {str(name).removesuffix(self._local): ttl_of(str(engine)) for name, engine in found}
            if len(ttls) < len(names):  # not migrated yet (or dropped meanwhile): not worth keeping
                return ttls.get(table)
            self._retention = (now, ttls)
        return self._retention[1].get(table)

    def _insert_verified(
        self,
        table: str,
        rows: pa.Table | list[tuple[Any, ...]],
        keys: list[str],
        verify: bool,
        *,
        in_rollup: bool = False,
    ) -> None:
        """Insert with the keys' token; when verifying, look the keys up (``in_rollup``: heartbeats the table
        itself may already have dropped by TTL are looked for in their hourly rollup) and insert the missing
        ones again, untokened."""
        key_column = KEY_OF.get(table, "dead_letter_id")
        settings = {**self._common, "insert_deduplication_token": insert_token(table, keys)}
        self._insert(table, rows, settings)
        if not verify:
            return
        vms = _vms(rows) if table in LAYOUTS else []

        def missing_now() -> set[str]:
            if in_rollup and isinstance(rows, pa.Table):
                return self._missing_from_rollup(rows)
            return self._missing(table, key_column, keys, vms)

        missing = missing_now()
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
        still = missing_now()
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

    def _missing_from_rollup(self, rows: pa.Table) -> set[str]:
        """The heartbeats of ``rows`` whose hour of their VM is not in the hourly rollup, or is there with only
        earlier heartbeats: what a lost insert would leave. (The rollup keeps which minutes of an hour had a
        heartbeat, not which heartbeats; its latest time per hour tells.)"""
        ids = rows.column("heartbeat_id").to_pylist()
        vms = rows.column("vm_id").cast(pa.string()).to_pylist()
        stamps = pc.cast(rows.column("observed_at"), pa.int64()).to_pylist()  # milliseconds since the epoch
        hours = [ms // 3_600_000 * 3600 for ms in stamps]
        found = self.client.query(
            f"SELECT vm_id, toUnixTimestamp(hour), toUnixTimestamp64Milli(max(last_at)) "  # noqa: S608 -- our names; values bound
            f"FROM {self.database}.{HEARTBEAT_ROLLUP} WHERE hour BETWEEN toDateTime({{low:UInt32}}, 'UTC') AND "
            f"toDateTime({{high:UInt32}}, 'UTC') AND vm_id IN {{vms:Array(String)}} GROUP BY vm_id, hour",
            parameters={"low": min(hours), "high": max(hours), "vms": sorted(set(vms))},
        ).result_rows
        latest = {(str(vm), int(hour)): int(last) for vm, hour, last in found}
        return {
            key for key, vm, hour, ms in zip(ids, vms, hours, stamps, strict=True) if latest.get((vm, hour), -1) < ms
        }


def partition_chunks(rows: pa.Table, table: str, limit: int) -> Iterator[pa.Table]:
    """``rows`` in blocks of whole partitions (the table's PARTITION BY), at most ``limit`` partitions each.

    Rows within ``limit`` partitions (every live batch) are one block, untouched. Otherwise blocks follow the
    partitions' order and keep the rows' order within a partition: the same rows always make the same blocks.
    """
    if not rows.num_rows:
        return
    if _span(rows, table) <= limit:  # the common case, for the price of one pass over one column
        yield rows
        return
    partition = _partition(rows, table)
    if pc.count_distinct(partition).as_py() <= limit:
        yield rows
        return
    members: dict[int, list[int]] = {}
    for index, key in enumerate(partition.to_pylist()):
        members.setdefault(key, []).append(index)
    ordered = sorted(members)
    for start in range(0, len(ordered), limit):
        taken = [index for key in ordered[start : start + limit] for index in members[key]]
        yield rows.take(pa.array(taken, pa.int64()))


def _span(rows: pa.Table, table: str) -> int:
    """How many partitions lie from the earliest row's to the latest's: at least as many as the rows span."""
    name, unit = PARTITION_BY[table]
    bounds = pc.min_max(rows.column(name))
    low: datetime | None = bounds["min"].as_py()
    high: datetime | None = bounds["max"].as_py()
    if low is None or high is None:
        return 1
    if unit == "day":
        return (high.date() - low.date()).days + 1
    return (high.year - low.year) * 12 + high.month - low.month + 1


def _partition(rows: pa.Table, table: str) -> pa.ChunkedArray:
    """Each row's partition, as toYYYYMM / toYYYYMMDD of the table's partition column (UTC) computes it."""
    name, unit = PARTITION_BY[table]
    times = rows.column(name)
    month = pc.add(pc.multiply(pc.year(times), 100), pc.month(times))
    return pc.add(pc.multiply(month, 100), pc.day(times)) if unit == "day" else month


def ttl_of(engine_full: str) -> timedelta | None:
    """A table's row TTL from its ``engine_full`` (``... TTL toDateTime(observed_at) + toIntervalDay(7) ...``);
    None when it has none (or it is not a plain interval, which the writer then does not rely on)."""
    clause = _TTL.search(engine_full)
    if clause is None:
        return None
    found = _INTERVAL.search(clause.group(1))
    if found is None:
        return None
    unit, count = (found.group(1), found.group(2)) if found.group(1) else (found.group(4), found.group(3))
    return timedelta(seconds=int(count) * _UNIT_S[unit.lower()])


def _clauses(first: list[str], rest: list[str]) -> str:
    """The PREWHERE (conditions read first) and WHERE of a look-up."""
    clauses = [f"{word} {' AND '.join(conds)}" for word, conds in (("PREWHERE", first), ("WHERE", rest)) if conds]
    return " ".join(clauses)


def _vms(rows: pa.Table) -> list[str]:
    """The table's VMs, sorted: the sorting key's prefix, which narrows the verifying read."""
    return sorted(str(vm) for vm in pc.unique(rows.column("vm_id").cast(pa.string())).to_pylist())


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
