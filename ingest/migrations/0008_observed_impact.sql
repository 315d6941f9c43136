-- Observed impact (issue 11): the downtime each collector measured on its own VM, next to what was announced.
--
-- impacts holds one row per observation: a pause (the VM stopped running while the collector's clock kept
-- counting) or a reboot (a new boot id), with the event of that VM that was Started then, or none. event_vms
-- gains observed_impact_s (the VM's measured downtime for the event, NULL when it was not hit), events the longest
-- over its VMs and how many were hit. The figure that runs from Started until the event is gone keeps its
-- value under the name that says what it is: started_to_gone_s (it was impact_s; a Freeze stays Started for
-- minutes while the VM pauses for seconds).

-- @distributed impacts cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.impacts${local} ${on_cluster}
(
    impact_id          String,
    record_id          String,
    schema_version     UInt16,
    record_type        LowCardinality(String),
    seq                UInt64,
    observed_at        DateTime64(3, 'UTC'),
    api_version        LowCardinality(String),
    collector_version  LowCardinality(String),
    vm_id              String,
    vm_name            String,
    location           LowCardinality(String),
    subscription_id    LowCardinality(String),
    resource_group     LowCardinality(String),
    resource_id        String,
    zone               LowCardinality(String),
    fault_domain       Nullable(UInt16),
    update_domain      Nullable(UInt16),
    scale_set          LowCardinality(String),
    detected_by        LowCardinality(String),
    began_at           DateTime64(3, 'UTC'),
    duration_ms        UInt64,
    event_id           String,
    event_type         LowCardinality(String),
    duration_s         Float64 DEFAULT duration_ms / 1000,
    source_position    String DEFAULT '',
    ingested_at        DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMM(began_at)
-- the day first: a panel's range reads its own days (a repeated record has the same began_at, so the same day)
ORDER BY (toDate(began_at), vm_id, began_at, impact_id)
SETTINGS non_replicated_deduplication_window = 10000;

DROP VIEW IF EXISTS ${db}.event_vms_since ${on_cluster};
CREATE VIEW ${db}.event_vms_since ${on_cluster} AS
SELECT v.*, o.observed_impact_s AS observed_impact_s
FROM
(
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
        AS started_to_gone_s,
    o.observed_impact_s AS observed_impact_s,
    o.impacted_vms AS impacted_vms,
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
        )
    )
    GROUP BY event_id
) AS v
-- the union of Resources once per event (the same union as over its VMs, without reading 50 copies); every row of
-- the events shown was inserted at or after their first observation, so the parts before since_day are skipped
LEFT JOIN
(
    SELECT event_id, arraySort(groupUniqArrayArray(affected_vms)) AS affected_vms
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
) AS o USING (event_id);

DROP VIEW IF EXISTS ${db}.events ${on_cluster};
CREATE VIEW ${db}.events ${on_cluster} AS
SELECT * FROM ${db}.events_since(since_day = toDate('1970-01-01'));
