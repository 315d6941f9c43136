-- event_history partitioned by the month of each event's first sighting (issue 32: at a year of 100,000 VMs the
-- 7-day panels read about 6,400 events, and EventIds are random, so those events sat in nearly every granule of the
-- year: Notice given and announced versus observed read 290-310 ms, and grew with the history).
--
-- A reader names its events (event_id IN ids) and knows a time T before which none of them was first seen: the
-- first sighting of an event is at most LOOKBACK_DAYS (30) before its last activity, and the ids come from activity
-- in the range or the active set (dashboards/filters.py RANGE_ROWS_AFTER, ingest/event_sql.py WINDOW_ROWS_AFTER).
-- The newest version of each, computed from all its evidence, carries that first sighting, so it lies in a
-- partition from T's month on; reading those partitions only, FINAL still picks it. Older versions in earlier
-- months are left unread, which changes nothing: FINAL would drop them. (FINAL merges across partitions; background
-- merges do not, so an event whose first sighting moved to an earlier month keeps its older version stored in the
-- later one, a row per such event.)
--
-- events  gains stored_month, the partition of the row read (YYYYMM of its first_seen_at, a String): readers
--         name their bound on it (ingest/event_sql.py since), and ClickHouse drops the other partitions before
--         FINAL. A condition on first_seen_at cannot do that: ClickHouse applies no partition pruning under FINAL on
--         a column outside the sorting key, rightly, since an older version may match where the newest does not.
--
-- The partition key is fixed when a table is created, so event_history is rebuilt as in 0024: a copy partitioned,
-- the rows copied, the two swapped (EXCHANGE), the old one dropped. Rows the ingest writes during the copy land
-- in the old table and are lost with it; their events stay marked and the ingest's sweep computes them again.
-- After a failure between the swap and the drop, a run again swaps the old table back: every row kept,
-- unpartitioned, where stored_month is 'all' (after every digit) and every reader reads every row: correct, only
-- slower, as before this migration.

-- @distributed event_history_monthly cityHash64(event_id)
CREATE TABLE IF NOT EXISTS ${db}.event_history_monthly${local} ${on_cluster} AS ${db}.event_history${local}
ENGINE = ReplacingMergeTree(computed_at)
PARTITION BY toYYYYMM(first_seen_at)
ORDER BY event_id
SETTINGS index_granularity = 256, deduplicate_merge_projection_mode = 'rebuild';

ALTER TABLE ${db}.event_history_monthly${local} ${on_cluster}
    ADD PROJECTION IF NOT EXISTS by_last_held (SELECT event_id, last_held_at ORDER BY last_held_at);

-- a history of more than 100 months is more partitions than one INSERT may write by default
INSERT INTO ${db}.event_history_monthly SETTINGS max_partitions_per_insert_block = 0
SELECT * FROM ${db}.event_history;

-- the copy's blocks leave a few parts per month, which background merges leave as they are for a while: one each
-- (a year of 100,000 VMs' table: 3 s)
OPTIMIZE TABLE ${db}.event_history_monthly${local} ${on_cluster} FINAL;

EXCHANGE TABLES ${db}.event_history${local} AND ${db}.event_history_monthly${local} ${on_cluster};

DROP TABLE IF EXISTS ${db}.event_history_monthly ${on_cluster};
DROP TABLE IF EXISTS ${db}.event_history_monthly${local} ${on_cluster};

DROP VIEW IF EXISTS ${db}.events ${on_cluster};
CREATE VIEW ${db}.events ${on_cluster} AS
WITH
    now64(3) - INTERVAL 30 DAY AS horizon_,
    (SELECT (silent, retired) FROM ${db}.holders_quiet) AS quiet_
SELECT
    * EXCEPT (holders, last_held_at, end_seen_by_any, computed_at, active_)
    REPLACE (
        if(outcome_source = 'platform' OR NOT active_, outcome, 'active') AS outcome,
        if(active_, NULL, ended_at) AS ended_at,
        if(active_, NULL, ended_at_source) AS ended_at_source,
        if(active_, NULL, started_to_gone_s) AS started_to_gone_s
    )
FROM
(
    SELECT
        *,
        _partition_id AS stored_month,
        -- active while a holder seen within the horizon reports; a silent one holds it only while no VM saw it end
        last_held_at >= horizon_
            AND (arrayExists(h -> h.last_seen_at >= horizon_ AND NOT has(quiet_.1, h.vm_id), holders)
                 OR (end_seen_by_any = 0 AND arrayExists(h -> h.last_seen_at >= horizon_ AND NOT has(quiet_.2, h.vm_id), holders)))
            AS active_
    FROM ${db}.event_history FINAL
)
SETTINGS optimize_move_to_prewhere_if_final = 1;
