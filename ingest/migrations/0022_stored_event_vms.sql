-- Each (event, VM)'s lifecycle stored once, where the evidence arrives, as each event's is since 0017 (issue 32: the
-- per-VM panels, a drill-down into one event included, cost 70 to 90 ms each before reading a row, nearly all of it
-- ClickHouse planning event_vms_since: its per-VM merges, windows, joins and three lookups of the silent VMs; read
-- from a stored table the same rows cost a few ms; BENCHMARKS.md).
--
-- event_vm_evidence_since  event_vms_since's rows without what changes with time alone: instead of the outcome,
--                          whether the VM still shows the event (holding: not gone, not its own Terminate or
--                          Preempt under way; event_evidence_since's holds_) and whether any VM saw it end
--                          (end_seen_by_any).
-- event_vms_since          the same rows and columns as before, now read through event_vm_evidence_since.
-- event_vm_history         one row per (event, VM) as event_vm_evidence_since computed it, written by the ingest
--                          with each event's event_history row (ingest/lifecycle_store.py); the newest wins.
-- holders_quiet            of the VMs still showing an event seen in the last 30 days, those silent now and those
--                          of them retired (the rule of silent_or_retired_vms, looked up by VM): what events has
--                          looked up since 0017, now one view for events and event_vm_lifecycles.
-- event_vm_lifecycles      event_vm_history read now, with event_vms_since's columns: a VM's row is 'active' while
--                          it shows the event, was seen in the last 30 days, is not retired, and reports or no VM
--                          saw the event end (event_vms_since's rule).

DROP VIEW IF EXISTS ${db}.event_vm_evidence_since ${on_cluster};
CREATE VIEW ${db}.event_vm_evidence_since ${on_cluster} AS
SELECT
    event_id, vm_id, vm_name, subscription_id, resource_group, location, zone, scale_set, fault_domain,
    update_domain, affects_this_vm, event_type, event_source, resource_type, description, duration_s, resources,
    first_seen_at, last_seen_at, not_before_first, not_before_last,
    event_started_ AS started_at,
    ended_at,
    multiIf(sevents_approved_at IS NOT NULL, sevents_approved_at, ifNull(dateDiff('millisecond', event_started_, event_not_before_) > if(NOT ifNull(event_seen_started_ <= event_started_, 0), 1000, 0), 0), event_started_,
        NULL) AS approved_at,
    transitions,
    anomalies,
    observed_impact_s,
    vm_started_at,
    if(event_started_ IS NULL, NULL, if(ifNull(event_seen_started_ <= event_started_, 0), 'seen', 'downtime'))
        AS started_at_source,
    if(ended_at IS NULL, NULL, if(end_seen_, 'seen', 'after_downtime')) AS ended_at_source,
    multiIf(event_started_ IS NULL, NULL, sevents_approved_at IS NOT NULL, 'sevents', event_not_before_ IS NULL, 'no_notice',
        ifNull(dateDiff('millisecond', event_started_, event_not_before_) > if(NOT ifNull(event_seen_started_ <= event_started_, 0), 1000, 0), 0), 'outside', 'not_before') AS released_by,
    holding_ AS holding,
    event_end_seen_by_any_ AS end_seen_by_any
FROM
(
    -- the event's moments over all its observers, on each of its rows
    SELECT
        *,
        min(vm_started_at) OVER w AS event_seen_started_,
        -- the event's first downtime, never before it was first seen (events_since's rule)
        if(min(down_at) OVER w IS NULL, NULL, greatest(min(down_at) OVER w, min(first_seen_at) OVER w))
            AS event_down_started_,
        multiIf(event_seen_started_ IS NULL, event_down_started_, event_down_started_ IS NULL, event_seen_started_,
                least(event_seen_started_, event_down_started_)) AS event_started_,
        argMaxIf(not_before_last, last_seen_at, not_before_last IS NOT NULL) OVER w AS event_not_before_,
        toUInt8(max(ended_at IS NOT NULL) OVER w) AS event_end_seen_by_any_
    FROM
    (
        SELECT
            event_id, vm_id, vm_name, subscription_id, resource_group, location, zone, scale_set, fault_domain,
            update_domain, affects_this_vm, event_type, event_source, resource_type, description, duration_s, resources,
            first_seen_at, last_seen_at, not_before_first, not_before_last, vm_started_at, last_mark, transitions,
            anomalies,
            if(last_mark % 2 = 1, last_seen_at, NULL) AS ended_at,
            i.observed_impact_s AS observed_impact_s,
            i.down_at AS down_at,
            -- its end was a sighting, not the first poll after its own downtime (it saw the event Started after going
            -- down, or kept polling well after it came back)
            ended_at IS NOT NULL
                AND (i.back_at IS NULL OR ifNull(vm_started_at > i.down_at, 0) OR ended_at > i.back_at + INTERVAL 5 SECOND)
                AS end_seen_,
            -- still shows it: not gone, and not its own Terminate or Preempt under way (event_evidence_since's holds_)
            toUInt8(last_mark % 2 = 0
                AND NOT (affects_this_vm AND vm_started_at IS NOT NULL AND event_type IN ('Terminate', 'Preempt')))
                AS holding_
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
                min(started_at) AS vm_started_at,
                max(last_mark) AS last_mark,
                length(groupUniqArrayArray(transition_ids)) AS transitions,
                length(groupUniqArrayArray(anomaly_ids)) AS anomalies
            FROM ${db}.event_vm_rollup
            WHERE day >= {since_day:Date}
            GROUP BY event_id, vm_id
        ) AS p
        -- the pair's downtime, grouped and joined by a hash of the pair (cheaper than two strings); each observation
        -- once however often it was delivered; an event's impacts began after its first observation
        LEFT JOIN
        (
            SELECT cityHash64(event_id, vm_id) AS pair_key, toNullable(sum(duration_s)) AS observed_impact_s,
                   toNullable(min(began_at)) AS down_at,
                   toNullable(max(began_at + toIntervalMillisecond(duration_ms))) AS back_at
            FROM ${db}.impacts FINAL
            WHERE began_at >= {since_day:Date} AND event_id != ''
            GROUP BY pair_key
        ) AS i ON i.pair_key = cityHash64(p.event_id, p.vm_id)
    )
    WINDOW w AS (PARTITION BY event_id)
) AS v
LEFT JOIN
(
    -- the moment sevents approved it, from its own records (exact; no sighting needed)
    SELECT event_id, toNullable(min(decided_at)) AS sevents_approved_at
    FROM ${db}.approvals
    WHERE decided_at >= {since_day:Date} AND decision = 'approved'
    GROUP BY event_id
) AS a USING (event_id);

DROP VIEW IF EXISTS ${db}.event_vms_since ${on_cluster};
CREATE VIEW ${db}.event_vms_since ${on_cluster} AS
SELECT
    event_id, vm_id, vm_name, subscription_id, resource_group, location, zone, scale_set, fault_domain,
    update_domain, affects_this_vm, event_type, event_source, resource_type, description, duration_s, resources,
    first_seen_at, last_seen_at, not_before_first, not_before_last, started_at, ended_at,
    -- still shows it, not stale, VM not retired; and reports, or no VM saw the event end
    multiIf(holding AND last_seen_at >= now64(3) - INTERVAL 30 DAY
                AND (vm_id, 1) NOT IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms)
                -- silent: no heartbeat for the silence threshold (one set for both: the same subquery is built once)
                AND (NOT ((vm_id, 0) IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms)
                          OR (vm_id, 1) IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms))
                     OR NOT end_seen_by_any), 'active',
            started_at IS NOT NULL, 'completed', end_seen_by_any, 'cancelled', 'end_not_seen') AS outcome,
    approved_at, transitions, anomalies, observed_impact_s, vm_started_at, started_at_source, ended_at_source,
    released_by
FROM ${db}.event_vm_evidence_since(since_day = {since_day:Date});

-- @distributed event_vm_history cityHash64(event_id)
CREATE TABLE IF NOT EXISTS ${db}.event_vm_history${local} ${on_cluster}
(
    event_id              String,
    vm_id                 String,
    vm_name               String,
    subscription_id       LowCardinality(String),
    resource_group        LowCardinality(String),
    location              LowCardinality(String),
    zone                  LowCardinality(String),
    scale_set             LowCardinality(String),
    fault_domain          Nullable(UInt16),
    update_domain         Nullable(UInt16),
    affects_this_vm       Bool,
    event_type            LowCardinality(String),
    event_source          LowCardinality(Nullable(String)),
    resource_type         LowCardinality(String),
    description           Nullable(String),
    duration_s            Nullable(Int64),
    resources             Array(String),
    first_seen_at         DateTime64(3, 'UTC'),
    last_seen_at          DateTime64(3, 'UTC'),
    not_before_first      Nullable(DateTime64(3, 'UTC')),
    not_before_last       Nullable(DateTime64(3, 'UTC')),
    started_at            Nullable(DateTime64(3, 'UTC')),
    ended_at              Nullable(DateTime64(3, 'UTC')),
    approved_at           Nullable(DateTime64(3, 'UTC')),
    transitions           UInt64,
    anomalies             UInt64,
    observed_impact_s     Nullable(Float64),
    vm_started_at         Nullable(DateTime64(3, 'UTC')),
    started_at_source     LowCardinality(Nullable(String)),
    ended_at_source       LowCardinality(Nullable(String)),
    released_by           LowCardinality(Nullable(String)),
    holding               UInt8,
    end_seen_by_any       UInt8,
    computed_at           DateTime64(6, 'UTC')  -- microseconds, as event_history's
)
ENGINE = ReplacingMergeTree(computed_at)
ORDER BY (event_id, vm_id);

-- every (event, VM) of the history so far (the ingest keeps it from here on)
INSERT INTO ${db}.event_vm_history
SELECT *, now64(6) AS computed_at FROM ${db}.event_vm_evidence_since(since_day = toDate('1970-01-01'))
-- (on a cluster: each subquery of the view run once and sent to every shard, see ingest/lifecycle_store.py)
SETTINGS max_bytes_before_external_group_by = 1000000000, distributed_product_mode = 'global';

DROP VIEW IF EXISTS ${db}.holders_quiet ${on_cluster};
CREATE VIEW ${db}.holders_quiet ${on_cluster} AS
WITH
    now64(3) - INTERVAL 30 DAY AS horizon_,
    dateDiff('millisecond', h.observed_at, now64(3)) / 1000 AS silent_for_,
    getSettingOrDefault('custom_sevents_silent_after_s', 300) AS silent_after_,
    getSettingOrDefault('custom_sevents_retire_after_s', 259200) AS retire_after_
SELECT
    groupArrayIf(vm_id, silent_for_ > silent_after_) AS silent,
    groupArrayIf(vm_id, silent_for_ > silent_after_
                 AND (ifNull(r.retired_at >= h.started_at, 0) OR final OR silent_for_ > retire_after_)) AS retired
FROM ${db}.heartbeats_latest AS h FINAL
LEFT JOIN
(
    SELECT vm_id, max(retired_at) AS retired_at FROM ${db}.vm_retirements
    WHERE vm_id IN (SELECT arrayJoin(holders).vm_id FROM ${db}.event_history WHERE last_held_at >= horizon_)
    GROUP BY vm_id
) AS r USING (vm_id)
WHERE vm_id IN (SELECT arrayJoin(holders).vm_id FROM ${db}.event_history WHERE last_held_at >= horizon_);

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
        -- active while a holder seen within the horizon reports; a silent one holds it only while no VM saw it end
        last_held_at >= horizon_
            AND (arrayExists(h -> h.last_seen_at >= horizon_ AND NOT has(quiet_.1, h.vm_id), holders)
                 OR (end_seen_by_any = 0 AND arrayExists(h -> h.last_seen_at >= horizon_ AND NOT has(quiet_.2, h.vm_id), holders)))
            AS active_
    FROM ${db}.event_history FINAL
);

DROP VIEW IF EXISTS ${db}.event_vm_lifecycles ${on_cluster};
CREATE VIEW ${db}.event_vm_lifecycles ${on_cluster} AS
WITH
    now64(3) - INTERVAL 30 DAY AS horizon_,
    (SELECT (silent, retired) FROM ${db}.holders_quiet) AS quiet_
SELECT
    event_id, vm_id, vm_name, subscription_id, resource_group, location, zone, scale_set, fault_domain,
    update_domain, affects_this_vm, event_type, event_source, resource_type, description, duration_s, resources,
    first_seen_at, last_seen_at, not_before_first, not_before_last, started_at, ended_at,
    multiIf(holding AND last_seen_at >= horizon_ AND NOT has(quiet_.2, vm_id)
                AND (NOT has(quiet_.1, vm_id) OR NOT end_seen_by_any), 'active',
            started_at IS NOT NULL, 'completed', end_seen_by_any, 'cancelled', 'end_not_seen') AS outcome,
    approved_at, transitions, anomalies, observed_impact_s, vm_started_at, started_at_source, ended_at_source,
    released_by
FROM ${db}.event_vm_history FINAL;
