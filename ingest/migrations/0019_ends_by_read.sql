-- An event's end from the reads that could see it (the truth issue, once more): a VM rebooted by its event finds it
-- gone at its first read after the downtime, which says only "gone by then". The lifecycle told such a read apart
-- by time (an end seen 5 s or more after the VM came back counted as seen), and a collector that took longer than
-- that to start on a loaded VM had its late read taken for the end. Collectors now send, with each downtime, the
-- moment of their first read after it (impacts.read_at), and an end that VM saw counts as seen only if it saw it at a
-- later read. Impacts stored before keep the 5-second rule.
--
-- impacts.read_at           the collector's first read of IMDS after the downtime (the poll that stored it)
-- event_evidence_since      as 0017 made it, with an end a VM found at its first read after any downtime of its own
--                           (not only one its event caused: a VM down for another event sees this one's end late too)
--                           a bound, told apart by read_at
ALTER TABLE ${db}.impacts${local} ${on_cluster}
    ADD COLUMN IF NOT EXISTS read_at Nullable(DateTime64(3, 'UTC')) AFTER event_type;
ALTER TABLE ${db}.impacts ${on_cluster}
    ADD COLUMN IF NOT EXISTS read_at Nullable(DateTime64(3, 'UTC')) AFTER event_type;

DROP VIEW IF EXISTS ${db}.event_evidence_since ${on_cluster};
CREATE VIEW ${db}.event_evidence_since ${on_cluster} AS
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
                -- the last end a VM saw while polling, else the last bound (an end found right after a VM's own downtime)
                ifNull(last_seen_end_, last_end_) AS ended_at_,
                if(ended_at_ IS NULL, NULL, if(last_seen_end_ IS NOT NULL, 'seen', 'after_downtime')) AS ended_at_source_
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
                    maxIf(ended_at, NOT end_bounded_) AS last_seen_end_,
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
                            AS holds_,
                        -- an end it found at its first read after one of its own downtimes (whichever event caused it)
                        -- says only "gone by then", unless it saw the event Started after going down; the first read is
                        -- the downtime's read_at (from earlier collectors, none: taken as 5 s after the VM came back)
                        arrayExists(d -> d.1 < assumeNotNull(ended_at) AND assumeNotNull(ended_at) <= d.2
                                         AND NOT ifNull(vm_started_at > d.1, 0), downs_) AS end_bounded_
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
                    LEFT JOIN
                    (
                        -- each VM's own downtimes: (last moment known running, its first read after it)
                        SELECT vm_id,
                               groupArray((began_at, ifNull(read_at, began_at + toIntervalMillisecond(duration_ms)
                                                                     + INTERVAL 5 SECOND))) AS downs_
                        FROM ${db}.impacts FINAL
                        WHERE began_at >= {since_day:Date}
                        GROUP BY vm_id
                    ) AS d USING (vm_id)
                )
                GROUP BY event_id
            ) AS v
            LEFT JOIN
            (
                -- the downtime each VM measured for it
                SELECT event_id, toNullable(max(vm_impact_s)) AS observed_impact_s_, count() AS impacted_vms_,
                       toNullable(min(vm_down_at)) AS down_at_
                FROM
                (
                    SELECT event_id, cityHash64(vm_id) AS vm_key, sum(duration_s) AS vm_impact_s, min(began_at) AS vm_down_at
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
