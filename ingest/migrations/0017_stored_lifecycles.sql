-- Each event's lifecycle stored once, where the evidence arrives, instead of computed from every VM's rows on every
-- read (issue 26: every panel and alert within 100 ms at a year of the fleet; BENCHMARKS.md measured the views at
-- 150-280 ms, most of it their fixed cost of analysis and per-VM decisions, paid even for four events).
--
-- event_evidence_since  what all the evidence says of each event (the lifecycle of 0013 and Azure's account of 0016),
--                       without what changes with time alone: instead of 'active', the VMs that still show the event
--                       (holders, each with its last sighting) and the outcome it has once none does.
-- event_history         one row per event as event_evidence_since computed it, written by the ingest for every event a
--                       stored batch touched (ingest/lifecycle_store.py), before the batch is acknowledged; the
--                       newest computation wins (computed_at: the server's clock when it read, so a computation
--                       that saw less never replaces one that saw more).
-- events                event_history read now: an event is active while a holder seen in the last 30 days reports
--                       (heartbeat within the silence threshold), or, while no VM has seen it end, one is not retired;
--                       then ended_at, ended_at_source and started_to_gone_s are those of its end, outcome 'active'
--                       (Azure's account settles it first). Only the holders' silence is looked up, by VM.
-- events_since, event_lifecycles_since, event_impacts_since
--                       events of the rows last active on or after since_day (kept for the queries that name them;
--                       the dashboards and the audit read events).
-- active_events         events with outcome 'active', found among those with a recent holder.

CREATE VIEW IF NOT EXISTS ${db}.event_evidence_since ${on_cluster} AS
-- the events the collectors saw, their outcome settled by Azure's account where it has one
SELECT
    * EXCEPT (in_platform_, p_status, p_settled)
    REPLACE (multiIf(p_settled = 'Completed', 'completed', p_settled = 'Canceled', 'cancelled', outcome) AS outcome),
    if(ifNull(in_platform_, 0) = 1, 'both', 'sevents') AS seen_by,
    ifNull(p_status, '') AS platform_status,
    if(ifNull(p_settled, '') != '', 'platform', 'sevents') AS outcome_source
FROM
(
    SELECT
        * EXCEPT (fd_pairs_, ud_pairs_, started_at_source, ended_at_source, released_by),
        arraySort(arrayDistinct(arrayMap(p -> if(p.1 != '', p.1, availability_set), fd_pairs_))) AS fault_sets,
        arrayMap(p -> concat(p.1, ' / FD ', ifNull(toString(p.2), '?')),
                 arraySort(arrayMap(p -> (if(p.1 != '', p.1, availability_set), p.2), fd_pairs_))) AS fault_domain_labels,
        arrayMap(p -> concat(p.1, ' / UD ', ifNull(toString(p.2), '?')),
                 arraySort(arrayMap(p -> (if(p.1 != '', p.1, availability_set), p.2), ud_pairs_))) AS update_domain_labels,
        started_at_source,
        ended_at_source,
        released_by
    FROM
    (
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
            multiIf(sevents_approved_at IS NOT NULL, sevents_approved_at, ifNull(dateDiff('millisecond', started_at_, not_before_last_) > if(started_at_source_ = 'downtime', 1000, 0), 0), started_at_,
                    NULL) AS approved_at,
            started_at_ AS started_at,
            ended_at_ AS ended_at,
            outcome_ AS outcome,
            affected_vms,
            length(affected_keys_) AS affected_vm_count,
            observing_vms,
            fault_domains,
            update_domains,
            subscription_ids,
            resource_groups,
            if(started_at_ IS NULL, NULL, dateDiff('millisecond', first_seen_at_, started_at_) / 1000) AS notice_s,
            if(approved_at IS NULL, NULL, dateDiff('millisecond', first_seen_at_, approved_at) / 1000) AS approval_latency_s,
            if(ended_at_ IS NULL OR started_at_ IS NULL, NULL, dateDiff('millisecond', started_at_, ended_at_) / 1000)
                AS started_to_gone_s,
            observed_impact_s_ AS observed_impact_s,
            impacted_vms_ AS impacted_vms,
            transitions_ AS transitions,
            anomalies_ AS anomalies,
            -- the set each affected VM's domains belong to: its scale set, else the availability set (the event's VMs
            -- outside scale sets), named by the common prefix of their names (ingest.queries.set_label, pasted here)
            if(set_first_ = set_last_ OR (trim(TRAILING '0123456789-_.' FROM substring(set_first_, 1, if((toString(bitXor(toFixedString(substring(set_first_, 1, 64), 64), toFixedString(substring(set_last_, 1, 64), 64))) AS set_xor_) = '', least(length(set_first_), length(set_last_)), least(toUInt64(length(set_xor_) - length(trimLeft(set_xor_, '\0'))), least(length(set_first_), length(set_last_)))))) AS set_stem_) = '', set_first_, set_stem_) AS availability_set,
            fd_pairs_,
            ud_pairs_,
            started_at_source_ AS started_at_source,
            ended_at_source_ AS ended_at_source,
            holders_ AS holders,
            last_held_at_ AS last_held_at,
            end_seen_by_any_ AS end_seen_by_any,
            last_seen_at_ AS last_seen_at,
            multiIf(started_at_ IS NULL, NULL, sevents_approved_at IS NOT NULL, 'sevents', not_before_last_ IS NULL, 'no_notice',
                    ifNull(dateDiff('millisecond', started_at_, not_before_last_) > if(started_at_source_ = 'downtime', 1000, 0), 0), 'outside', 'not_before') AS released_by
        FROM
        (
            SELECT
                *,
                -- it started no later than the first downtime a VM measured for it began, and not before it was first seen
                if(down_at_ IS NULL, NULL, greatest(down_at_, first_seen_at_)) AS down_started_,
                multiIf(seen_started_ IS NULL, down_started_, down_started_ IS NULL, seen_started_,
                        least(seen_started_, down_started_)) AS started_at_,
                if(started_at_ IS NULL, NULL, if(ifNull(seen_started_ <= started_at_, 0), 'seen', 'downtime')) AS started_at_source_,
                -- its outcome once no VM shows it any more (events reads 'active' while one does)
                multiIf(started_at_ IS NOT NULL, 'completed', end_seen_by_any_, 'cancelled', 'end_not_seen') AS outcome_,
                -- the ends VMs saw while polling: not a VM's first polls after its own downtime (unless it saw the event Started
                -- after going down, or kept polling well after it came back)
                -- (each end's VM looked up in the VMs that measured a downtime: indexOf, 0 when it measured none)
                arrayMap(e -> indexOf(down_keys_, e.1), ends_) AS end_downs_,
                arrayFilter((e, k) -> k = 0 OR ifNull(e.3 > down_began_[k], 0) OR e.2 > down_back_[k] + INTERVAL 5 SECOND,
                            ends_, end_downs_) AS seen_ends_,
                if(notEmpty(seen_ends_), arrayMax(e -> e.2, seen_ends_), last_end_) AS ended_at_,
                if(ended_at_ IS NULL, NULL, if(notEmpty(seen_ends_), 'seen', 'after_downtime')) AS ended_at_source_
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
                    min(vm_started_at) AS seen_started_,
                    -- the VMs that still show it, each with its last sighting: events decides from their silence now
                    -- whether it is active (a reporting holder keeps it; a silent one only while no VM saw it end)
                    arraySort(groupArrayIf((vm_id, last_seen_at), holds_)) AS holders_,
                    maxIf(last_seen_at, holds_) AS last_held_at_,
                    max(last_seen_at) AS last_seen_at_,
                    countIf(ended_at IS NOT NULL) > 0 AS end_seen_by_any_,
                    max(ended_at) AS last_end_,
                    groupArrayIf((cityHash64(vm_id), assumeNotNull(ended_at), vm_started_at), ended_at IS NOT NULL) AS ends_,
                    uniqExact(vm_id) AS observing_vms,
                    arraySort(groupUniqArrayIf(fault_domain, affects_this_vm)) AS fault_domains,
                    arraySort(groupUniqArrayIf(update_domain, affects_this_vm)) AS update_domains,
                    arraySort(groupUniqArrayIf(subscription_id, affects_this_vm)) AS subscription_ids,
                    arraySort(groupUniqArrayIf(resource_group, affects_this_vm)) AS resource_groups,
                    sum(transitions) AS transitions_,
                    sum(anomalies) AS anomalies_
                -- the pairs, inlined: a view inside a parameterized view is planned again on every query
                FROM
                (
                    SELECT
                        event_id, vm_id, vm_name, subscription_id, resource_group, location, zone, scale_set, fault_domain,
                        update_domain, affects_this_vm, event_type, event_source, resource_type, description, duration_s, resources,
                        first_seen_at, last_seen_at, not_before_first, not_before_last, vm_started_at, last_mark, transitions,
                        anomalies,
                        if(last_mark % 2 = 1, last_seen_at, NULL) AS ended_at,
                        -- still shows it: not gone, not its own Terminate or Preempt under way (staleness and the VM's
                        -- silence or retirement change with time alone: events looks them up when read)
                        last_mark % 2 = 0
                            AND NOT (affects_this_vm AND vm_started_at IS NOT NULL AND event_type IN ('Terminate', 'Preempt'))
                            AS holds_
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
                )
                GROUP BY event_id
            ) AS v
            LEFT JOIN
            (
                -- the downtime each VM measured for it
                SELECT event_id, toNullable(max(vm_impact_s)) AS observed_impact_s_, count() AS impacted_vms_,
                       toNullable(min(vm_down_at)) AS down_at_,
                       groupArray(vm_key) AS down_keys_, groupArray(vm_down_at) AS down_began_, groupArray(vm_back_at) AS down_back_
                FROM
                (
                    SELECT event_id, cityHash64(vm_id) AS vm_key, sum(duration_s) AS vm_impact_s, min(began_at) AS vm_down_at,
                           max(began_at + toIntervalMillisecond(duration_ms)) AS vm_back_at
                    FROM ${db}.impacts FINAL
                    WHERE began_at >= {since_day:Date} AND event_id != ''
                    GROUP BY event_id, vm_key
                )
                GROUP BY event_id
            ) AS i USING (event_id)
        ) AS e
        -- the union of Resources once per event (the same union as over its VMs, without reading 50 copies); every row of
        -- the events shown was inserted at or after their first observation, so the parts before since_day are skipped
        LEFT JOIN
        (
            SELECT event_id, arraySort(groupUniqArrayArray(affected_vms)) AS affected_vms,
                   groupUniqArrayArray(affected_keys) AS affected_keys_,
                   -- the sets of its VMs, from the same rows (a query that shows none does not compute them)
                   minIfMerge(set_first) AS set_first_, maxIfMerge(set_last) AS set_last_,
                   groupUniqArrayArray(fd_pairs) AS fd_pairs_, groupUniqArrayArray(ud_pairs) AS ud_pairs_
            FROM ${db}.event_rollup
            WHERE last_seen_at >= {since_day:Date}
            GROUP BY event_id
        ) AS r USING (event_id)
        LEFT JOIN
        (
            -- the moment sevents approved it, from its own records (exact; no sighting needed)
            SELECT event_id, toNullable(min(decided_at)) AS sevents_approved_at
            FROM ${db}.approvals
            WHERE decided_at >= {since_day:Date} AND decision = 'approved'
            GROUP BY event_id
        ) AS a USING (event_id)
    )
) AS s
LEFT JOIN
(
    -- Azure's account of each event (central feed and Resource Graph rows alike): its latest status and whether it
    -- settled the outcome, a lookup by EventId (azure_scheduled_events is ordered by it) from the day before the
    -- events' first day (Azure published them no earlier than a day before a collector first saw them; Date32: the
    -- whole-history view's 1970-01-01 must not wrap)
    SELECT
        event_id,
        toUInt8(1) AS in_platform_,
        argMax(event_status, (multiIf(event_status IN ('Completed', 'Canceled'), 3, event_status = 'Started', 2, 1),
                              reconciled_at)) AS p_status,
        argMaxIf(event_status, reconciled_at, event_status IN ('Completed', 'Canceled')) AS p_settled
    FROM ${db}.azure_scheduled_events
    WHERE first_seen_at >= subtractDays(toDate32({since_day:Date}), 1)
    GROUP BY event_id

) AS p USING (event_id)
UNION ALL
-- the events only Azure's account has (announced to VMs without a collector): its fields, the collectors' empty
SELECT
    event_id,
    p_event_type AS event_type,
    p_event_source AS event_source,
    p_resource_type AS resource_type,
    p_description AS description,
    p_duration_s AS duration_s,
    p_first_seen_at AS first_seen_at,
    p_not_before_first AS not_before_first,
    p_not_before_last AS not_before_last,
    CAST(NULL AS Nullable(DateTime64(3, 'UTC'))) AS approved_at,
    p_started_at AS started_at,
    p_settled_at AS ended_at,
    multiIf(p_settled = 'Completed', 'completed', p_settled = 'Canceled', 'cancelled', 'announced') AS outcome,
    p_resources AS affected_vms,
    toUInt64(length(p_resources)) AS affected_vm_count,
    toUInt64(0) AS observing_vms,
    CAST([], 'Array(UInt16)') AS fault_domains,
    CAST([], 'Array(UInt16)') AS update_domains,
    [toString(p_subscription_id)] AS subscription_ids,
    [toString(p_resource_group)] AS resource_groups,
    dateDiff('millisecond', p_first_seen_at, p_started_at) / 1000 AS notice_s,
    CAST(NULL AS Nullable(Float64)) AS approval_latency_s,
    dateDiff('millisecond', p_started_at, p_settled_at) / 1000 AS started_to_gone_s,
    CAST(NULL AS Nullable(Float64)) AS observed_impact_s,
    toUInt64(0) AS impacted_vms,
    toUInt64(0) AS transitions,
    toUInt64(0) AS anomalies,
    '' AS availability_set,
    CAST([], 'Array(Tuple(String, DateTime64(3, \'UTC\')))') AS holders,
    toDateTime64(0, 3, 'UTC') AS last_held_at,
    toUInt8(0) AS end_seen_by_any,
    p_last_seen_at AS last_seen_at,
    CAST([], 'Array(String)') AS fault_sets,
    CAST([], 'Array(String)') AS fault_domain_labels,
    CAST([], 'Array(String)') AS update_domain_labels,
    CAST(NULL AS Nullable(String)) AS started_at_source,
    CAST(NULL AS Nullable(String)) AS ended_at_source,
    CAST(NULL AS Nullable(String)) AS released_by,
    'platform' AS seen_by,
    p_status AS platform_status,
    'platform' AS outcome_source
FROM
(
    SELECT
        event_id,
        argMax(event_status, (multiIf(event_status IN ('Completed', 'Canceled'), 3, event_status = 'Started', 2, 1),
                              reconciled_at)) AS p_status,
        argMaxIf(event_status, reconciled_at, event_status IN ('Completed', 'Canceled')) AS p_settled,
        minOrNullIf(first_seen_at, event_status IN ('Completed', 'Canceled')) AS p_settled_at,
        minOrNullIf(first_seen_at, event_status IN ('Started', 'Completed')) AS p_started_at,
        min(first_seen_at) AS p_first_seen_at,
        max(first_seen_at) AS p_last_seen_at,
        toString(argMax(event_type, reconciled_at)) AS p_event_type,
        toNullable(toString(argMax(event_source, reconciled_at))) AS p_event_source,
        toString(argMax(resource_type, reconciled_at)) AS p_resource_type,
        toNullable(argMax(description, reconciled_at)) AS p_description,
        argMax(duration_s, reconciled_at) AS p_duration_s,
        argMinIf(not_before, reconciled_at, not_before IS NOT NULL) AS p_not_before_first,
        argMaxIf(not_before, reconciled_at, not_before IS NOT NULL) AS p_not_before_last,
        argMax(resources, reconciled_at) AS p_resources,
        argMax(subscription_id, reconciled_at) AS p_subscription_id,
        argMax(resource_group, reconciled_at) AS p_resource_group
    FROM ${db}.azure_scheduled_events
    WHERE first_seen_at >= subtractDays(toDate32({since_day:Date}), 31)
      -- not an event the collectors saw (those are the rows above)
      AND event_id NOT IN (SELECT event_id FROM ${db}.event_rollup WHERE last_seen_at >= {since_day:Date})
    GROUP BY event_id
)
;

-- @distributed event_history cityHash64(event_id)
CREATE TABLE IF NOT EXISTS ${db}.event_history${local} ${on_cluster}
(
    event_id              String,
    event_type            String,
    event_source          Nullable(String),
    resource_type         String,
    description           Nullable(String),
    duration_s            Nullable(Int64),
    first_seen_at         DateTime64(3, 'UTC'),
    not_before_first      Nullable(DateTime64(3, 'UTC')),
    not_before_last       Nullable(DateTime64(3, 'UTC')),
    approved_at           Nullable(DateTime64(3, 'UTC')),
    started_at            Nullable(DateTime64(3, 'UTC')),
    ended_at              Nullable(DateTime64(3, 'UTC')),
    outcome               LowCardinality(String),
    affected_vms          Array(String),
    affected_vm_count     UInt64,
    observing_vms         UInt64,
    fault_domains         Array(UInt16),
    update_domains        Array(UInt16),
    subscription_ids      Array(String),
    resource_groups       Array(String),
    notice_s              Nullable(Float64),
    approval_latency_s    Nullable(Float64),
    started_to_gone_s     Nullable(Float64),
    observed_impact_s     Nullable(Float64),
    impacted_vms          UInt64,
    transitions           UInt64,
    anomalies             UInt64,
    availability_set      String,
    holders               Array(Tuple(vm_id String, last_seen_at DateTime64(3, 'UTC'))),
    last_held_at          DateTime64(3, 'UTC'),
    end_seen_by_any       UInt8,
    last_seen_at          DateTime64(3, 'UTC'),
    fault_sets            Array(String),
    fault_domain_labels   Array(String),
    update_domain_labels  Array(String),
    started_at_source     Nullable(String),
    ended_at_source       Nullable(String),
    released_by           Nullable(String),
    seen_by               LowCardinality(String),
    platform_status       LowCardinality(String),
    outcome_source        LowCardinality(String),
    computed_at           DateTime64(6, 'UTC')  -- microseconds: two refreshes of one event in one millisecond still order
)
ENGINE = ReplacingMergeTree(computed_at)
ORDER BY event_id;

-- every event of the history so far (the ingest keeps it from here on)
INSERT INTO ${db}.event_history
SELECT *, now64(6) AS computed_at FROM ${db}.event_evidence_since(since_day = toDate('1970-01-01'))
-- (on a cluster: each subquery of the view run once and sent to every shard, see ingest/lifecycle_store.py)
SETTINGS max_bytes_before_external_group_by = 1000000000, distributed_product_mode = 'global';

DROP VIEW IF EXISTS ${db}.events ${on_cluster};
CREATE VIEW ${db}.events ${on_cluster} AS
WITH
    now64(3) - INTERVAL 30 DAY AS horizon_,
    -- of the VMs still showing an event seen in the last 30 days, those silent now and those of them retired: the
    -- rule of silent_or_retired_vms, looked up by VM (that view reads every VM's latest heartbeat and retirement)
    (
        SELECT (groupArrayIf(vm_id, silent_for_ > silent_after_), groupArrayIf(vm_id, silent_for_ > silent_after_
                    AND (ifNull(r.retired_at >= h.started_at, 0) OR final OR silent_for_ > retire_after_)))
        FROM ${db}.heartbeats_latest AS h FINAL
        LEFT JOIN
        (
            SELECT vm_id, max(retired_at) AS retired_at FROM ${db}.vm_retirements
            WHERE vm_id IN (SELECT arrayJoin(holders).vm_id FROM ${db}.event_history WHERE last_held_at >= horizon_)
            GROUP BY vm_id
        ) AS r USING (vm_id)
        WHERE vm_id IN (SELECT arrayJoin(holders).vm_id FROM ${db}.event_history WHERE last_held_at >= horizon_)
    ) AS quiet_,
    dateDiff('millisecond', h.observed_at, now64(3)) / 1000 AS silent_for_,
    getSettingOrDefault('custom_sevents_silent_after_s', 300) AS silent_after_,
    getSettingOrDefault('custom_sevents_retire_after_s', 259200) AS retire_after_
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

DROP VIEW IF EXISTS ${db}.events_since ${on_cluster};
CREATE VIEW ${db}.events_since ${on_cluster} AS
SELECT * FROM ${db}.events WHERE last_seen_at >= {since_day:Date};

DROP VIEW IF EXISTS ${db}.event_lifecycles_since ${on_cluster};
CREATE VIEW ${db}.event_lifecycles_since ${on_cluster} AS
SELECT
    event_id, event_type, event_source, resource_type, description, duration_s, first_seen_at, not_before_first,
    not_before_last, approved_at, started_at, ended_at, outcome, observing_vms, fault_domains, update_domains,
    subscription_ids, resource_groups, notice_s, approval_latency_s, started_to_gone_s, transitions, anomalies,
    started_at_source, ended_at_source, released_by
FROM ${db}.events WHERE last_seen_at >= {since_day:Date};

DROP VIEW IF EXISTS ${db}.event_impacts_since ${on_cluster};
CREATE VIEW ${db}.event_impacts_since ${on_cluster} AS
SELECT
    event_id, event_type, event_source, duration_s, started_at, ended_at, started_to_gone_s, observed_impact_s,
    impacted_vms, affected_vm_count, fault_domain_labels
FROM ${db}.events WHERE last_seen_at >= {since_day:Date};

DROP VIEW IF EXISTS ${db}.active_events ${on_cluster};
CREATE VIEW ${db}.active_events ${on_cluster} AS
SELECT event_id FROM ${db}.events
WHERE event_id IN (SELECT event_id FROM ${db}.event_history WHERE last_held_at >= now64(3) - INTERVAL 30 DAY)
  AND outcome = 'active';
