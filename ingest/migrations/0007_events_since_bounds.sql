-- Reading the events of a range costs that range only: the per-event union of Resources that `events_since`
-- joins is read from the partitions of since_day on (0006 grouped the whole of event_rollup on every query,
-- which made any query that shows affected VMs cost the length of the history).

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
-- the union of Resources once per event (the same union as over its VMs, without reading 50 copies); every row of
-- the events shown was inserted at or after their first observation, so the parts before since_day are skipped
LEFT JOIN
(
    SELECT event_id, arraySort(groupUniqArrayArray(affected_vms)) AS affected_vms
    FROM ${db}.event_rollup
    WHERE last_seen_at >= {since_day:Date}
    GROUP BY event_id
) AS r USING (event_id);
