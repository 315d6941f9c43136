-- The marks that let the ingest put off computing events' lifecycles (ingest/lifecycle_refresher.py).
--
-- Computing an event's lifecycle (event_history, 0017) costs about as much as inserting a batch, whatever the
-- number of events, so while batches keep coming the ingest refreshes the events they touched together, at most
-- once a second. ClickHouse marks every event a stored row names (a materialized view per table of evidence, so
-- the mark is written by the very INSERT that stores the row, before the batch is acknowledged). An event whose
-- stored lifecycle is older than its latest mark is refreshed by the next sweep (when an ingest starts, and every
-- minute), so a worker that dies before its put-off refresh loses nothing. Marks are kept a week.
-- @distributed event_refresh_queue cityHash64(event_id)
CREATE TABLE IF NOT EXISTS ${db}.event_refresh_queue${local} ${on_cluster}
(
    event_id   String,
    queued_at  DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = MergeTree()
PARTITION BY toDate(queued_at)
ORDER BY (event_id, queued_at)
TTL toDateTime(queued_at) + INTERVAL 7 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.event_refresh_queue_transitions_mv ${on_cluster}
TO ${db}.event_refresh_queue${local}
AS SELECT DISTINCT event_id FROM ${db}.transitions${local} WHERE event_id != '';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.event_refresh_queue_impacts_mv ${on_cluster}
TO ${db}.event_refresh_queue${local}
AS SELECT DISTINCT event_id FROM ${db}.impacts${local} WHERE event_id != '';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.event_refresh_queue_approvals_mv ${on_cluster}
TO ${db}.event_refresh_queue${local}
AS SELECT DISTINCT event_id FROM ${db}.approvals${local} WHERE event_id != '';
