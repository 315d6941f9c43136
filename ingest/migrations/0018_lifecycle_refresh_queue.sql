-- The events whose lifecycle the ingest has put off computing (ingest/lifecycle_refresher.py).
--
-- Computing an event's lifecycle (event_history, 0017) costs about as much as inserting a batch, whatever the
-- number of events, so while batches keep coming the ingest refreshes the events they touched together, at most
-- once a second. Before a batch whose refresh is put off is acknowledged, its events are marked here; an event
-- whose stored lifecycle is older than its latest mark is refreshed by the next sweep (when an ingest starts, and
-- every minute), so a worker that dies in between loses nothing. Marks are kept a week.
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
