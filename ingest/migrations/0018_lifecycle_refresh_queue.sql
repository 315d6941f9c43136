-- The marks that let the ingest put off computing events' lifecycles (ingest/lifecycle_refresher.py).
--
-- Computing an event's lifecycle (event_history, 0017) costs about as much as inserting a batch, whatever the
-- number of events, so while batches keep coming the ingest refreshes the events they touched together, at most
-- once a second. ClickHouse marks every event a stored row names with the moment it was stored, in the very INSERT
-- that stores the row (so before the batch is acknowledged):
-- event_rollup.stored_at   transitions: a column of the rollup the INSERT already writes (a table of its own cost
--                          a part per insert, a tenth of a 10,000-row insert)
-- event_refresh_queue      impacts and approvals (few rows): a mark per event and INSERT, kept a week
-- An event whose stored lifecycle is older than its latest mark is refreshed by the next sweep (when an ingest
-- starts, and every minute), so a worker that dies before its put-off refresh loses nothing. Rows stored before
-- this migration carry no mark (their lifecycles were computed when they were stored).
ALTER TABLE ${db}.event_rollup${local} ${on_cluster}
    ADD COLUMN IF NOT EXISTS stored_at SimpleAggregateFunction(max, DateTime64(6, 'UTC'));
ALTER TABLE ${db}.event_rollup ${on_cluster}
    ADD COLUMN IF NOT EXISTS stored_at SimpleAggregateFunction(max, DateTime64(6, 'UTC'));

-- the rollup's view as 0009 made it, plus the moment of the INSERT (changed in place: no INSERT goes unrolled)
ALTER TABLE ${db}.event_rollup_mv ${on_cluster} MODIFY QUERY
SELECT
    event_id,
    min(observed_at) AS first_seen_at,
    max(observed_at) AS last_seen_at,
    maxMap(([vm_key], [vm_state])) AS vm_last,
    groupUniqArrayArray(resources) AS affected_vms,
    minIfState(vm_name, outside) AS set_first,
    maxIfState(vm_name, outside) AS set_last,
    minIfState(vm_id, outside) AS set_key,
    groupUniqArrayIf((set_name, fault_domain), affects_this_vm) AS fd_pairs,
    groupUniqArrayIf((set_name, update_domain), affects_this_vm) AS ud_pairs,
    now64(6) AS stored_at
FROM
(
    SELECT
        event_id,
        observed_at,
        resources,
        vm_id,
        vm_name,
        toString(scale_set) AS set_name,
        fault_domain,
        update_domain,
        affects_this_vm,
        set_name = '' AND vm_name != '' AS outside,
        toString(event_type) AS type,
        cityHash64(vm_id) AS vm_key,
        toUInt64(toUnixTimestamp64Milli(observed_at)) * 2
            + (kind = 'disappeared' OR (status = 'Started' AND affects_this_vm AND type IN ('Terminate', 'Preempt')))
            AS vm_state
    FROM ${db}.transitions${local}
    WHERE event_id != ''
)
GROUP BY event_id;

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

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.event_refresh_queue_impacts_mv ${on_cluster}
TO ${db}.event_refresh_queue${local}
AS SELECT DISTINCT event_id FROM ${db}.impacts${local} WHERE event_id != '';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.event_refresh_queue_approvals_mv ${on_cluster}
TO ${db}.event_refresh_queue${local}
AS SELECT DISTINCT event_id FROM ${db}.approvals${local} WHERE event_id != '';
