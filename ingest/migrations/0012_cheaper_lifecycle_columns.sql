-- Cheaper twins of two rollup columns that every lifecycle query reads (issue 10). Each is a MATERIALIZED column
-- computed from the row's own columns: on every insert (the materialized views' rows and the backfills, which
-- never name it, so their positional INSERT ... SELECT still matches) and, for rows stored before this migration,
-- on read until MATERIALIZE COLUMN has written it (a background mutation; the values are right before it ends).
-- No backfill and no change to the materialized views.
--
-- event_vm_rollup.last_mark: the key last_kind is chosen by (milliseconds * 2, plus 1 when gone), as a plain max.
--   Odd exactly when last_kind is 'disappeared' (a disappearance wins a tie), so ended_at and outcome read one
--   UInt64 per (event, VM) pair instead of merging a String state (a week of a 20,000-VM fleet is 64,000 pairs).
-- event_rollup.affected_keys: the affected VMs' names (affected_vms) as cityHash64, so affected_vm_count unites
--   numbers, not strings. affected_vms stays the list shown.
--
-- The views that read last_kind or count affected_vms are made again with the twins; their columns and values
-- are unchanged (tests/ingest/test_ingest_rollups.py compares them with the reference views of 0004).
ALTER TABLE ${db}.event_vm_rollup${local} ${on_cluster}
    ADD COLUMN IF NOT EXISTS last_mark SimpleAggregateFunction(max, UInt64)
        MATERIALIZED toUInt64(toUnixTimestamp64Milli(last_seen_at)) * 2
            + (finalizeAggregation(last_kind) = 'disappeared')
        AFTER last_kind;
ALTER TABLE ${db}.event_vm_rollup ${on_cluster}
    ADD COLUMN IF NOT EXISTS last_mark SimpleAggregateFunction(max, UInt64)
        MATERIALIZED toUInt64(toUnixTimestamp64Milli(last_seen_at)) * 2
            + (finalizeAggregation(last_kind) = 'disappeared')
        AFTER last_kind;
ALTER TABLE ${db}.event_vm_rollup${local} ${on_cluster} MATERIALIZE COLUMN last_mark;

ALTER TABLE ${db}.event_rollup${local} ${on_cluster}
    ADD COLUMN IF NOT EXISTS affected_keys SimpleAggregateFunction(groupUniqArrayArray, Array(UInt64))
        MATERIALIZED arrayMap(name -> cityHash64(name), affected_vms)
        AFTER affected_vms;
ALTER TABLE ${db}.event_rollup ${on_cluster}
    ADD COLUMN IF NOT EXISTS affected_keys SimpleAggregateFunction(groupUniqArrayArray, Array(UInt64))
        MATERIALIZED arrayMap(name -> cityHash64(name), affected_vms)
        AFTER affected_vms;
ALTER TABLE ${db}.event_rollup${local} ${on_cluster} MATERIALIZE COLUMN affected_keys;

DROP VIEW IF EXISTS ${db}.event_vms_since ${on_cluster};
CREATE VIEW ${db}.event_vms_since ${on_cluster} AS
SELECT v.*, o.observed_impact_s AS observed_impact_s
FROM
(
    SELECT
        event_id, vm_id, vm_name, subscription_id, resource_group, location, zone, scale_set, fault_domain,
        update_domain, affects_this_vm, event_type, event_source, resource_type, description, duration_s, resources,
        first_seen_at, last_seen_at, not_before_first, not_before_last, started_at,
        if(last_mark % 2 = 1, last_seen_at, NULL) AS ended_at,
        multiIf(last_mark % 2 = 0
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
            max(last_mark) AS last_mark,
            length(groupUniqArrayArray(transition_ids)) AS transitions,
            length(groupUniqArrayArray(anomaly_ids)) AS anomalies
        FROM ${db}.event_vm_rollup
        WHERE day >= {since_day:Date}
        GROUP BY event_id, vm_id
    )
) AS v
LEFT JOIN
(
    -- each observation once however often it was delivered; an event's impacts began after its first observation
    SELECT event_id, vm_id, toNullable(sum(duration_s)) AS observed_impact_s
    FROM ${db}.impacts FINAL
    WHERE began_at >= {since_day:Date} AND event_id != ''
    GROUP BY event_id, vm_id
) AS o USING (event_id, vm_id);

DROP VIEW IF EXISTS ${db}.event_vms ${on_cluster};
CREATE VIEW ${db}.event_vms ${on_cluster} AS
SELECT * FROM ${db}.event_vms_since(since_day = toDate('1970-01-01'));

DROP VIEW IF EXISTS ${db}.event_lifecycles_since ${on_cluster};
CREATE VIEW ${db}.event_lifecycles_since ${on_cluster} AS
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
    observing_vms,
    fault_domains,
    update_domains,
    subscription_ids,
    resource_groups,
    if(started_at_ IS NULL, NULL, dateDiff('millisecond', first_seen_at_, started_at_) / 1000) AS notice_s,
    if(approved_at_ IS NULL, NULL, dateDiff('millisecond', first_seen_at_, approved_at_) / 1000)
        AS approval_latency_s,
    if(ended_at_ IS NULL OR started_at_ IS NULL, NULL, dateDiff('millisecond', started_at_, ended_at_) / 1000)
        AS started_to_gone_s,
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
    -- event_vms_since, inlined: a view inside a parameterized view is planned again on every query
    FROM
    (
        SELECT
            event_id, vm_id, vm_name, subscription_id, resource_group, location, zone, scale_set, fault_domain,
            update_domain, affects_this_vm, event_type, event_source, resource_type, description, duration_s, resources,
            first_seen_at, last_seen_at, not_before_first, not_before_last, started_at,
            if(last_mark % 2 = 1, last_seen_at, NULL) AS ended_at,
            multiIf(last_mark % 2 = 0
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
                max(last_mark) AS last_mark,
                length(groupUniqArrayArray(transition_ids)) AS transitions,
                length(groupUniqArrayArray(anomaly_ids)) AS anomalies
            FROM ${db}.event_vm_rollup
            WHERE day >= {since_day:Date}
            GROUP BY event_id, vm_id
        )
    )
    GROUP BY event_id
) AS v;

DROP VIEW IF EXISTS ${db}.events_since ${on_cluster};
CREATE VIEW ${db}.events_since ${on_cluster} AS
SELECT
    * EXCEPT (fd_pairs_, ud_pairs_),
    arraySort(arrayDistinct(arrayMap(p -> if(p.1 != '', p.1, availability_set), fd_pairs_))) AS fault_sets,
    arrayMap(p -> concat(p.1, ' / FD ', ifNull(toString(p.2), '?')),
             arraySort(arrayMap(p -> (if(p.1 != '', p.1, availability_set), p.2), fd_pairs_))) AS fault_domain_labels,
    arrayMap(p -> concat(p.1, ' / UD ', ifNull(toString(p.2), '?')),
             arraySort(arrayMap(p -> (if(p.1 != '', p.1, availability_set), p.2), ud_pairs_))) AS update_domain_labels
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
        approved_at_ AS approved_at,
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
        if(approved_at_ IS NULL, NULL, dateDiff('millisecond', first_seen_at_, approved_at_) / 1000)
            AS approval_latency_s,
        if(ended_at_ IS NULL OR started_at_ IS NULL, NULL, dateDiff('millisecond', started_at_, ended_at_) / 1000)
            AS started_to_gone_s,
        o.observed_impact_s AS observed_impact_s,
        o.impacted_vms AS impacted_vms,
        transitions_ AS transitions,
        anomalies_ AS anomalies,
        -- the set each affected VM's domains belong to: its scale set, else the availability set (the event's VMs
        -- outside scale sets), named by the common prefix of their names (ingest.queries.set_label, pasted here)
        if(set_first_ = set_last_ OR (trim(TRAILING '0123456789-_.' FROM substring(set_first_, 1, if((toString(bitXor(toFixedString(substring(set_first_, 1, 64), 64), toFixedString(substring(set_last_, 1, 64), 64))) AS set_xor_) = '', least(length(set_first_), length(set_last_)), least(toUInt64(length(set_xor_) - length(trimLeft(set_xor_, '\0'))), least(length(set_first_), length(set_last_)))))) AS set_stem_) = '', set_first_, set_stem_) AS availability_set,
        fd_pairs_,
        ud_pairs_
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
        -- event_vms_since, inlined: a view inside a parameterized view is planned again on every query
        FROM
        (
            SELECT
                event_id, vm_id, vm_name, subscription_id, resource_group, location, zone, scale_set, fault_domain,
                update_domain, affects_this_vm, event_type, event_source, resource_type, description, duration_s, resources,
                first_seen_at, last_seen_at, not_before_first, not_before_last, started_at,
                if(last_mark % 2 = 1, last_seen_at, NULL) AS ended_at,
                multiIf(last_mark % 2 = 0
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
                    max(last_mark) AS last_mark,
                    length(groupUniqArrayArray(transition_ids)) AS transitions,
                    length(groupUniqArrayArray(anomaly_ids)) AS anomalies
                FROM ${db}.event_vm_rollup
                WHERE day >= {since_day:Date}
                GROUP BY event_id, vm_id
            )
        )
        GROUP BY event_id
    ) AS v
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
    -- the downtime each VM measured (impacts), per event: the longest over its VMs and how many VMs were hit
    LEFT JOIN
    (
        SELECT event_id, toNullable(max(vm_impact_s)) AS observed_impact_s, count() AS impacted_vms
        FROM
        (
            SELECT event_id, vm_id, sum(duration_s) AS vm_impact_s
            FROM ${db}.impacts FINAL
            WHERE began_at >= {since_day:Date} AND event_id != ''
            GROUP BY event_id, vm_id
        )
        GROUP BY event_id
    ) AS o USING (event_id)
);

DROP VIEW IF EXISTS ${db}.events ${on_cluster};
CREATE VIEW ${db}.events ${on_cluster} AS
SELECT * FROM ${db}.events_since(since_day = toDate('1970-01-01'));


-- Announced against measured, per event: the columns of events_since that the Impact dashboard's table shows, and
-- nothing else. A query pays for analysing every expression of the views it names, shown or not (about a third
-- of that table's time through events_since, on a week of a 20,000-VM fleet), so this view repeats the rules
-- of events_since for these columns only: the same values (tests/ingest/test_ingest_rollups.py compares them).
DROP VIEW IF EXISTS ${db}.event_impacts_since ${on_cluster};
CREATE VIEW ${db}.event_impacts_since ${on_cluster} AS
SELECT
    event_id,
    event_type_ AS event_type,
    event_source_ AS event_source,
    duration_s_ AS duration_s,
    started_at_ AS started_at,
    ended_at_ AS ended_at,
    if(ended_at_ IS NULL OR started_at_ IS NULL, NULL, dateDiff('millisecond', started_at_, ended_at_) / 1000)
        AS started_to_gone_s,
    o.observed_impact_s AS observed_impact_s,
    o.impacted_vms AS impacted_vms,
    length(affected_keys_) AS affected_vm_count,
    arrayMap(p -> concat(p.1, ' / FD ', ifNull(toString(p.2), '?')),
             arraySort(arrayMap(p -> (if(p.1 != '', p.1, availability_set), p.2), fd_pairs_))) AS fault_domain_labels
FROM
(
    SELECT
        event_id,
        argMax(event_type, last_seen_at) AS event_type_,
        argMaxIf(event_source, last_seen_at, event_source IS NOT NULL) AS event_source_,
        argMinIf(duration_s, first_seen_at, duration_s IS NOT NULL) AS duration_s_,
        min(started_at) AS started_at_,
        -- no end while one of its VMs still has it open (events_since: outcome 'active')
        if(countIf(open) > 0, NULL, max(ended_at)) AS ended_at_
    FROM
    (
        SELECT
            event_id, vm_id, event_type, event_source, duration_s, first_seen_at, last_seen_at, started_at,
            if(last_mark % 2 = 1, last_seen_at, NULL) AS ended_at,
            last_mark % 2 = 0
                AND NOT (affects_this_vm AND started_at IS NOT NULL AND event_type IN ('Terminate', 'Preempt'))
                AND last_seen_at >= now64(3) - INTERVAL 30 DAY
                AND vm_id NOT IN (SELECT vm_id FROM ${db}.retired_vms) AS open
        FROM
        (
            SELECT
                event_id,
                vm_id,
                max(affects_this_vm) AS affects_this_vm,
                argMaxIfMerge(event_type) AS event_type,
                argMaxIfMerge(event_source) AS event_source,
                argMinIfMerge(duration_s) AS duration_s,
                min(first_seen_at) AS first_seen_at,
                max(last_seen_at) AS last_seen_at,
                min(started_at) AS started_at,
                max(last_mark) AS last_mark
            FROM ${db}.event_vm_rollup
            WHERE day >= {since_day:Date}
            GROUP BY event_id, vm_id
        )
    )
    GROUP BY event_id
) AS v
LEFT JOIN
(
    SELECT
        event_id,
        groupUniqArrayArray(affected_keys) AS affected_keys_,
        minIfMerge(set_first) AS set_first_,
        maxIfMerge(set_last) AS set_last_,
        groupUniqArrayArray(fd_pairs) AS fd_pairs_,
        -- events_since's availability_set (ingest.queries.set_label, pasted here)
        if(set_first_ = set_last_ OR (trim(TRAILING '0123456789-_.' FROM substring(set_first_, 1, if((toString(bitXor(toFixedString(substring(set_first_, 1, 64), 64), toFixedString(substring(set_last_, 1, 64), 64))) AS set_xor_) = '', least(length(set_first_), length(set_last_)), least(toUInt64(length(set_xor_) - length(trimLeft(set_xor_, '\0'))), least(length(set_first_), length(set_last_)))))) AS set_stem_) = '', set_first_, set_stem_) AS availability_set
    FROM ${db}.event_rollup
    WHERE last_seen_at >= {since_day:Date}
    GROUP BY event_id
) AS r USING (event_id)
LEFT JOIN
(
    SELECT event_id, toNullable(max(vm_impact_s)) AS observed_impact_s, count() AS impacted_vms
    FROM
    (
        SELECT event_id, vm_id, sum(duration_s) AS vm_impact_s
        FROM ${db}.impacts FINAL
        WHERE began_at >= {since_day:Date} AND event_id != ''
        GROUP BY event_id, vm_id
    )
    GROUP BY event_id
) AS o USING (event_id);
