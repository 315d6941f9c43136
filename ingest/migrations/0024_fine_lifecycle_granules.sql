-- The stored lifecycles in granules of 256 rows (issue 32: a query's cost follows the events it shows).
--
-- Panels, alerts and audits read event_history and event_vm_history by EventId, the first column of both sorting
-- keys. EventIds are random, so each event read costs a whole granule: 8,192 rows of every column read, FINAL
-- merged, however few rows the event has. A panel of the 4 active events read 4 granules, half of a year of
-- 20,000 VMs' event_history, and it grew with the history until every granule held one of its events. In
-- granules of 256 rows an event costs 256 rows of event_history and its VMs' rows plus at most 255 of
-- event_vm_history, whatever the history's size. The index grows to one mark per 256 rows (a year of
-- 100,000 VMs: about 700 marks of event_history, 36,000 of event_vm_history).
--
-- event_history also gets a projection sorted by last_held_at: the active set (the events some VM still showed,
-- ingest/event_sql.py held_events) reads the granules of the last 30 days instead of the column over the whole
-- history. Merges rebuild it from the rows they keep (deduplicate_merge_projection_mode): a replaced version of an
-- event leaves it with its row.
--
-- The granule size is fixed when a table is created, so each table is rebuilt: a copy in the new granules, the
-- rows copied, the two swapped (EXCHANGE: readers and the views see the table under its name throughout), the
-- old one dropped. Rows the ingest writes during the copy land in the old table and are lost with it; their
-- events stay marked (event_refresh_queue, event_rollup.stored_at), and the ingest's sweep (at its start and every
-- minute) computes them again. Run again after a failure, each step repeats harmlessly: a copied row twice is one
-- version (ReplacingMergeTree). After a failure between a swap and its drop, the run again swaps the old table
-- back: every row is kept, in the old granules (correct, only slower).

-- @distributed event_history_fine cityHash64(event_id)
CREATE TABLE IF NOT EXISTS ${db}.event_history_fine${local} ${on_cluster} AS ${db}.event_history${local}
ENGINE = ReplacingMergeTree(computed_at)
ORDER BY event_id
SETTINGS index_granularity = 256, deduplicate_merge_projection_mode = 'rebuild';

ALTER TABLE ${db}.event_history_fine${local} ${on_cluster}
    ADD PROJECTION IF NOT EXISTS by_last_held (SELECT event_id, last_held_at ORDER BY last_held_at);

INSERT INTO ${db}.event_history_fine SELECT * FROM ${db}.event_history;

EXCHANGE TABLES ${db}.event_history${local} AND ${db}.event_history_fine${local} ${on_cluster};

DROP TABLE IF EXISTS ${db}.event_history_fine ${on_cluster};
DROP TABLE IF EXISTS ${db}.event_history_fine${local} ${on_cluster};

-- @distributed event_vm_history_fine cityHash64(event_id)
CREATE TABLE IF NOT EXISTS ${db}.event_vm_history_fine${local} ${on_cluster} AS ${db}.event_vm_history${local}
ENGINE = ReplacingMergeTree(computed_at)
ORDER BY (event_id, vm_id)
SETTINGS index_granularity = 256;

INSERT INTO ${db}.event_vm_history_fine SELECT * FROM ${db}.event_vm_history;

EXCHANGE TABLES ${db}.event_vm_history${local} AND ${db}.event_vm_history_fine${local} ${on_cluster};

DROP TABLE IF EXISTS ${db}.event_vm_history_fine ${on_cluster};
DROP TABLE IF EXISTS ${db}.event_vm_history_fine${local} ${on_cluster};
