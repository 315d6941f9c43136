-- Rollups that follow `transitions` and `heartbeats` by themselves (materialized views), so that every question
-- costs what it shows, not the length of the history. `transitions` stays the table of record.
--
-- Every state here is unchanged by a repeated row (min, max, argMin/argMax, unique arrays of transition hashes
-- instead of counts, maxMap): a redelivered duplicate, a replay of dead letters or a second backfill never
-- changes a figure, and each backfill below may overlap rows its view already saw. Plain values (times, arrays)
-- are SimpleAggregateFunction columns, cheap to insert; last-value fields are argMax states, cheap to merge.
--
-- event_vm_rollup      one (event, observing VM): the lifecycle `event_vms` reads.
-- event_rollup         one event, partitioned by the month of its last activity: what finds the events of a
--                      time range or the active set without reading old parts (first/last seen, each VM's last
--                      state, affected VMs).
-- vm_retirements       when a VM's own Terminate or Preempt started: the VM is going away.
-- transitions_by_time  the columns time-range panels read, in time order.
-- heartbeat_hours      one VM per hour: heartbeats received, outbox depth, poll health (coverage at scale).

-- @distributed event_vm_rollup cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.event_vm_rollup${local} ${on_cluster}
(
    -- the day of the first observation in the inserted block: keeps an event's rows together with the other
    -- events of its days, so a range's events are read from a few days of parts and one event's by key
    day               Date,
    event_id          String,
    vm_id             String,
    -- the value last (or first) observed, as argMax/argMin states: merged by their own fast code at read time
    vm_name           AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    subscription_id   AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    resource_group    AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    location          AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    zone              AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    scale_set         AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    fault_domain      AggregateFunction(argMax, Nullable(UInt16), DateTime64(3, 'UTC')),
    update_domain     AggregateFunction(argMax, Nullable(UInt16), DateTime64(3, 'UTC')),
    affects_this_vm   SimpleAggregateFunction(max, Bool),
    event_type        AggregateFunction(argMaxIf, String, DateTime64(3, 'UTC'), UInt8),
    event_source      AggregateFunction(argMaxIf, Nullable(String), DateTime64(3, 'UTC'), UInt8),
    resource_type     AggregateFunction(argMaxIf, String, DateTime64(3, 'UTC'), UInt8),
    description       AggregateFunction(argMaxIf, Nullable(String), DateTime64(3, 'UTC'), UInt8),
    duration_s        AggregateFunction(argMinIf, Nullable(Int64), DateTime64(3, 'UTC'), UInt8),
    resources         SimpleAggregateFunction(groupUniqArrayArray, Array(String)),
    first_seen_at     SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    last_seen_at      SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    not_before_first  AggregateFunction(argMinIf, Nullable(DateTime64(3, 'UTC')), DateTime64(3, 'UTC'), UInt8),
    not_before_last   AggregateFunction(argMaxIf, Nullable(DateTime64(3, 'UTC')), DateTime64(3, 'UTC'), UInt8),
    started_at        SimpleAggregateFunction(min, Nullable(DateTime64(3, 'UTC'))),
    -- the last kind; at equal times a disappearance is the later one (milliseconds * 2, plus 1 when gone)
    last_kind         AggregateFunction(argMax, String, UInt64),
    transition_ids    SimpleAggregateFunction(groupUniqArrayArray, Array(UInt64)),
    anomaly_ids       SimpleAggregateFunction(groupUniqArrayArray, Array(UInt64)),
    -- one EventId through the plain views (drill-down, audit) reads only the granules that hold it
    INDEX event_id_idx event_id TYPE bloom_filter GRANULARITY 1
)
ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (day, event_id, vm_id);

-- @backfill
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.event_vm_rollup_mv ${on_cluster}
TO ${db}.event_vm_rollup${local}
AS SELECT
    toDate(min(observed_at)) AS day,
    event_id,
    vm_id,
    argMaxState(toString(vm_name), observed_at) AS vm_name,
    argMaxState(toString(subscription_id), observed_at) AS subscription_id,
    argMaxState(toString(resource_group), observed_at) AS resource_group,
    argMaxState(toString(location), observed_at) AS location,
    argMaxState(toString(zone), observed_at) AS zone,
    argMaxState(toString(scale_set), observed_at) AS scale_set,
    -- like argMax of a Nullable column in a plain query: the last value that is not NULL
    argMaxState(fault_domain, observed_at) AS fault_domain,
    argMaxState(update_domain, observed_at) AS update_domain,
    max(affects_this_vm) AS affects_this_vm,
    argMaxIfState(toString(event_type), observed_at, event_type != '') AS event_type,
    argMaxIfState(CAST(event_source, 'Nullable(String)'), observed_at, event_source IS NOT NULL) AS event_source,
    argMaxIfState(toString(resource_type), observed_at, resource_type != '') AS resource_type,
    argMaxIfState(description, observed_at, description IS NOT NULL) AS description,
    argMinIfState(duration_s, observed_at, duration_s IS NOT NULL) AS duration_s,
    groupUniqArrayArray(resources) AS resources,
    min(observed_at) AS first_seen_at,
    max(observed_at) AS last_seen_at,
    argMinIfState(not_before, observed_at, not_before IS NOT NULL) AS not_before_first,
    argMaxIfState(not_before, observed_at, not_before IS NOT NULL) AS not_before_last,
    minIf(toNullable(observed_at), status = 'Started') AS started_at,
    argMaxState(toString(kind), toUInt64(toUnixTimestamp64Milli(observed_at)) * 2 + (kind = 'disappeared'))
        AS last_kind,
    groupUniqArray(cityHash64(transition_id)) AS transition_ids,
    groupUniqArrayIf(cityHash64(transition_id), kind = 'anomaly') AS anomaly_ids
FROM ${db}.transitions${local}
WHERE event_id != ''
GROUP BY event_id, vm_id;

-- @distributed event_rollup cityHash64(event_id)
CREATE TABLE IF NOT EXISTS ${db}.event_rollup${local} ${on_cluster}
(
    event_id          String,
    first_seen_at     SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    last_seen_at      SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    -- per observing VM (cityHash64 of vm_id): its last observation in milliseconds * 2, plus 1 when that
    -- observation closed the event on that VM (it disappeared, or the VM's own Terminate or Preempt started)
    vm_last           SimpleAggregateFunction(maxMap, Tuple(Array(UInt64), Array(UInt64))),
    affected_vms      SimpleAggregateFunction(groupUniqArrayArray, Array(String))
)
ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(last_seen_at)
ORDER BY event_id;

-- @backfill
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.event_rollup_mv ${on_cluster}
TO ${db}.event_rollup${local}
AS SELECT
    event_id,
    min(observed_at) AS first_seen_at,
    max(observed_at) AS last_seen_at,
    maxMap(([vm_key], [vm_state])) AS vm_last,
    groupUniqArrayArray(resources) AS affected_vms
FROM
(
    SELECT
        event_id,
        observed_at,
        resources,
        toString(event_type) AS type,
        cityHash64(vm_id) AS vm_key,
        toUInt64(toUnixTimestamp64Milli(observed_at)) * 2
            + (kind = 'disappeared' OR (status = 'Started' AND affects_this_vm AND type IN ('Terminate', 'Preempt')))
            AS vm_state
    FROM ${db}.transitions${local}
    WHERE event_id != ''
)
GROUP BY event_id;

-- @distributed vm_retirements cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.vm_retirements${local} ${on_cluster}
(
    vm_id             String,
    retired_at        SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    reason            SimpleAggregateFunction(anyLast, String)
)
ENGINE = AggregatingMergeTree()
ORDER BY vm_id;

-- @backfill
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.vm_retirements_mv ${on_cluster}
TO ${db}.vm_retirements${local}
AS SELECT vm_id, max(observed_at) AS retired_at, anyLast(toString(event_type)) AS reason
FROM ${db}.transitions${local}
WHERE status = 'Started' AND affects_this_vm AND event_type IN ('Terminate', 'Preempt')
GROUP BY vm_id;

-- Transitions in time order, narrow: what time-range panels (state timeline, ingest lag) read.
-- Same dedupe key as `transitions` (a transition always has the same observed_at), read with FINAL.
-- @distributed transitions_by_time cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.transitions_by_time${local} ${on_cluster}
(
    observed_at        DateTime64(3, 'UTC'),
    transition_id      String,
    ingested_at        DateTime64(3, 'UTC'),
    vm_id              String,
    vm_name            String,
    subscription_id    LowCardinality(String),
    location           LowCardinality(String),
    scale_set          LowCardinality(String),
    fault_domain       Nullable(UInt16),
    event_id           String,
    event_type         LowCardinality(String),
    kind               LowCardinality(String),
    status             LowCardinality(String),
    affects_this_vm    Bool
)
ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMM(observed_at)
ORDER BY (observed_at, transition_id);

-- @backfill
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.transitions_by_time_mv ${on_cluster}
TO ${db}.transitions_by_time${local}
AS SELECT observed_at, transition_id, ingested_at, vm_id, vm_name, subscription_id, location, scale_set, fault_domain,
          event_id, event_type, kind, status, affects_this_vm
FROM ${db}.transitions${local};

-- One VM per hour: how many heartbeats arrived (coverage), the deepest outbox, whether any poll failed.
-- @distributed heartbeat_hours cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.heartbeat_hours${local} ${on_cluster}
(
    hour               DateTime('UTC'),
    vm_id              String,
    vm_name            SimpleAggregateFunction(anyLast, String),
    subscription_id    SimpleAggregateFunction(anyLast, String),
    location           SimpleAggregateFunction(anyLast, String),
    scale_set          SimpleAggregateFunction(anyLast, String),
    fault_domain       SimpleAggregateFunction(anyLast, Nullable(UInt16)),
    heartbeats         AggregateFunction(uniqExact, String),
    last_at            SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    max_outbox_depth   SimpleAggregateFunction(max, UInt64),
    failed_poll        SimpleAggregateFunction(max, UInt8)
)
ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, vm_id)
TTL hour + INTERVAL 400 DAY;

-- @backfill
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.heartbeat_hours_mv ${on_cluster}
TO ${db}.heartbeat_hours${local}
AS SELECT
    toStartOfHour(observed_at) AS hour,
    vm_id,
    anyLast(vm_name) AS vm_name,
    anyLast(toString(subscription_id)) AS subscription_id,
    anyLast(toString(location)) AS location,
    anyLast(toString(scale_set)) AS scale_set,
    anyLast(fault_domain) AS fault_domain,
    uniqExactState(heartbeat_id) AS heartbeats,
    max(observed_at) AS last_at,
    max(outbox_depth) AS max_outbox_depth,
    max(toUInt8(NOT last_poll_ok)) AS failed_poll
FROM ${db}.heartbeats${local}
GROUP BY hour, vm_id;

-- The latest heartbeat per VM now says whether it was the collector's last word (a clean stop).
ALTER TABLE ${db}.heartbeats_latest${local} ${on_cluster} ADD COLUMN IF NOT EXISTS final Bool DEFAULT false;
ALTER TABLE ${db}.heartbeats_latest ${on_cluster} ADD COLUMN IF NOT EXISTS final Bool DEFAULT false;
ALTER TABLE ${db}.heartbeats_latest_mv ${on_cluster} MODIFY QUERY
SELECT
    vm_id, observed_at, vm_name, location, subscription_id, resource_group, zone, fault_domain,
    update_domain, scale_set, collector_version, api_version, last_incarnation, last_poll_ok,
    last_poll_error, polls, poll_errors, active_events, outbox_depth, drops, started_at, final
FROM ${db}.heartbeats${local};

-- Raw heartbeats are for the last days only; the hourly rollup and heartbeats_latest keep the rest.
ALTER TABLE ${db}.heartbeats${local} ${on_cluster} MODIFY TTL toDateTime(observed_at) + INTERVAL 7 DAY;

-- Retirement: a VM that is gone stops counting, as a silent collector and as an observer of active events.
-- Silent (no heartbeat for custom_sevents_silent_after_s, default five minutes) and then: its own Terminate or
-- Preempt started since its collector started, or its collector's last word was a clean stop, or it has been
-- silent beyond the horizon (the ClickHouse setting custom_sevents_retire_after_s, default three days).
DROP VIEW IF EXISTS ${db}.vm_status ${on_cluster};
CREATE VIEW ${db}.vm_status ${on_cluster} AS
SELECT
    vm_id, vm_name, location, subscription_id, resource_group, zone, scale_set, fault_domain, update_domain,
    collector_version, api_version, observed_at AS last_heartbeat_at, started_at AS collector_started_at,
    last_poll_ok, last_poll_error, outbox_depth, final,
    dateDiff('millisecond', observed_at, now64(3)) / 1000 AS silent_for_s,
    silent_for_s > getSettingOrDefault('custom_sevents_silent_after_s', 300) AS silent,
    multiIf(NOT silent, '',
            r.retired_at >= started_at, concat(r.reason, ' started'),
            final, 'clean stop',
            silent_for_s > getSettingOrDefault('custom_sevents_retire_after_s', 259200), 'silent beyond horizon',
            '') AS retired_reason,
    multiIf(retired_reason != '', 'retired', silent, 'silent', 'reporting') AS state
FROM ${db}.heartbeats_latest AS h FINAL
LEFT JOIN
(
    SELECT vm_id, max(retired_at) AS retired_at, anyLast(reason) AS reason FROM ${db}.vm_retirements GROUP BY vm_id
) AS r USING (vm_id);

DROP VIEW IF EXISTS ${db}.retired_vms ${on_cluster};
CREATE VIEW ${db}.retired_vms ${on_cluster} AS
SELECT vm_id FROM ${db}.vm_status WHERE state = 'retired';

-- event_vms and events keep their names and columns. Each is the whole history of its *_since view, which
-- reads the pair rollup from a day on only: a panel passes the first day of the events it shows (the earliest
-- first observation among them, from event_rollup), so a range costs its own days, never the history.
DROP VIEW IF EXISTS ${db}.event_vms_since ${on_cluster};
CREATE VIEW ${db}.event_vms_since ${on_cluster} AS
SELECT
    event_id, vm_id, vm_name, subscription_id, resource_group, location, zone, scale_set, fault_domain,
    update_domain, affects_this_vm, event_type, event_source, resource_type, description, duration_s, resources,
    first_seen_at, last_seen_at, not_before_first, not_before_last, started_at,
    if(last_kind = 'disappeared', last_seen_at, NULL) AS ended_at,
    multiIf(last_kind != 'disappeared'
                AND NOT (affects_this_vm AND started_at IS NOT NULL AND event_type IN ('Terminate', 'Preempt'))
                AND last_seen_at >= now64(3) - INTERVAL 30 DAY
                AND vm_id NOT IN (SELECT vm_id FROM ${db}.retired_vms), 'active',
            started_at IS NULL, 'cancelled', 'completed') AS outcome,
    if(started_at IS NOT NULL AND not_before_last IS NOT NULL AND started_at < not_before_last,
       started_at, NULL) AS approved_at,
    transitions,
    anomalies
FROM
(
    SELECT
        event_id,
        vm_id,
        argMaxMerge(vm_name) AS vm_name,
        argMaxMerge(subscription_id) AS subscription_id,
        argMaxMerge(resource_group) AS resource_group,
        argMaxMerge(location) AS location,
        argMaxMerge(zone) AS zone,
        argMaxMerge(scale_set) AS scale_set,
        argMaxMerge(fault_domain) AS fault_domain,
        argMaxMerge(update_domain) AS update_domain,
        max(affects_this_vm) AS affects_this_vm,
        argMaxIfMerge(event_type) AS event_type,
        argMaxIfMerge(event_source) AS event_source,
        argMaxIfMerge(resource_type) AS resource_type,
        argMaxIfMerge(description) AS description,
        argMinIfMerge(duration_s) AS duration_s,
        arraySort(groupUniqArrayArray(resources)) AS resources,
        min(first_seen_at) AS first_seen_at,
        max(last_seen_at) AS last_seen_at,
        argMinIfMerge(not_before_first) AS not_before_first,
        argMaxIfMerge(not_before_last) AS not_before_last,
        min(started_at) AS started_at,
        argMaxMerge(last_kind) AS last_kind,
        length(groupUniqArrayArray(transition_ids)) AS transitions,
        length(groupUniqArrayArray(anomaly_ids)) AS anomalies
    FROM ${db}.event_vm_rollup
    WHERE day >= {since_day:Date}
    GROUP BY event_id, vm_id
);

DROP VIEW IF EXISTS ${db}.event_vms ${on_cluster};
CREATE VIEW ${db}.event_vms ${on_cluster} AS
SELECT * FROM ${db}.event_vms_since(since_day = toDate('1970-01-01'));

DROP VIEW IF EXISTS ${db}.events_since ${on_cluster};
CREATE VIEW ${db}.events_since ${on_cluster} AS
SELECT
    event_id,
    event_type_ AS event_type,
    event_source_ AS event_source,
    resource_type_ AS resource_type,
    description_ AS description,
    duration_s_ AS duration_s,
    first_seen_at_ AS first_seen_at,
    not_before_first_ AS not_before_first,
    not_before_last_ AS not_before_last,
    approved_at_ AS approved_at,
    started_at_ AS started_at,
    ended_at_ AS ended_at,
    outcome_ AS outcome,
    affected_vms,
    length(affected_vms) AS affected_vm_count,
    observing_vms,
    fault_domains,
    update_domains,
    subscription_ids,
    resource_groups,
    if(started_at_ IS NULL, NULL, dateDiff('millisecond', first_seen_at_, started_at_) / 1000) AS notice_s,
    if(approved_at_ IS NULL, NULL, dateDiff('millisecond', first_seen_at_, approved_at_) / 1000)
        AS approval_latency_s,
    if(ended_at_ IS NULL OR started_at_ IS NULL, NULL, dateDiff('millisecond', started_at_, ended_at_) / 1000)
        AS impact_s,
    transitions_ AS transitions,
    anomalies_ AS anomalies
FROM
(
    SELECT
        event_id,
        argMax(event_type, last_seen_at) AS event_type_,
        argMaxIf(event_source, last_seen_at, event_source IS NOT NULL) AS event_source_,
        argMax(resource_type, last_seen_at) AS resource_type_,
        argMaxIf(description, last_seen_at, description IS NOT NULL) AS description_,
        argMinIf(duration_s, first_seen_at, duration_s IS NOT NULL) AS duration_s_,
        min(first_seen_at) AS first_seen_at_,
        argMinIf(not_before_first, first_seen_at, not_before_first IS NOT NULL) AS not_before_first_,
        argMaxIf(not_before_last, last_seen_at, not_before_last IS NOT NULL) AS not_before_last_,
        min(approved_at) AS approved_at_,
        min(started_at) AS started_at_,
        multiIf(countIf(outcome = 'active') > 0, 'active',
                countIf(outcome = 'completed') > 0, 'completed', 'cancelled') AS outcome_,
        if(outcome_ = 'active', NULL, max(ended_at)) AS ended_at_,
        uniqExact(vm_id) AS observing_vms,
        arraySort(groupUniqArrayIf(fault_domain, affects_this_vm)) AS fault_domains,
        arraySort(groupUniqArrayIf(update_domain, affects_this_vm)) AS update_domains,
        arraySort(groupUniqArrayIf(subscription_id, affects_this_vm)) AS subscription_ids,
        arraySort(groupUniqArrayIf(resource_group, affects_this_vm)) AS resource_groups,
        sum(transitions) AS transitions_,
        sum(anomalies) AS anomalies_
    FROM ${db}.event_vms_since(since_day = {since_day:Date})
    GROUP BY event_id
) AS v
-- the union of Resources once per event (the same union as over its VMs, without reading 50 copies)
LEFT JOIN
(
    SELECT event_id, arraySort(groupUniqArrayArray(affected_vms)) AS affected_vms
    FROM ${db}.event_rollup
    GROUP BY event_id
) AS r USING (event_id);

DROP VIEW IF EXISTS ${db}.events ${on_cluster};
CREATE VIEW ${db}.events ${on_cluster} AS
SELECT * FROM ${db}.events_since(since_day = toDate('1970-01-01'));

-- The active set: events that some VM, not retired, still shows, found through the last 30 days of
-- event_rollup only (IMDS announces at most about 7 days ahead, so a pair unchanged for 30 days is stale).
-- First the events with an open (event, VM) entry in any part (few: the active ones and the ones whose parts
-- have not merged yet), then their exact per-VM state. Alerts and "active now" panels start here.
DROP VIEW IF EXISTS ${db}.active_events ${on_cluster};
CREATE VIEW ${db}.active_events ${on_cluster} AS
SELECT DISTINCT event_id
FROM
(
    SELECT event_id, maxMap(vm_last) AS last
    FROM ${db}.event_rollup
    WHERE last_seen_at >= now64(3) - INTERVAL 30 DAY
      AND event_id IN
      (
          SELECT event_id FROM ${db}.event_rollup ARRAY JOIN vm_last.2 AS state
          WHERE last_seen_at >= now64(3) - INTERVAL 30 DAY AND state % 2 = 0
      )
    GROUP BY event_id
)
ARRAY JOIN last.1 AS vm_key, last.2 AS state
WHERE state % 2 = 0
  AND intDiv(state, 2) >= toUInt64(toUnixTimestamp64Milli(now64(3) - INTERVAL 30 DAY))
  AND vm_key NOT IN (SELECT cityHash64(vm_id) FROM ${db}.retired_vms);
