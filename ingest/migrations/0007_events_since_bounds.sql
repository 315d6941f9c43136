-- Queries plan and read less (issue 10: every panel and alert under 100 ms on a year of a 20,000-VM fleet).
--
-- events_since reads the per-event union of Resources from the partitions of since_day on (0006 grouped the whole
-- of event_rollup on every query, so any query showing affected VMs cost the length of the history), and
-- aggregates the pair rollup itself instead of through event_vms_since. retired_vms asks heartbeats_latest for
-- the retired VMs directly (the same rule as vm_status, without computing its other columns), and the active
-- set finds its candidates without unfolding every map.

DROP VIEW IF EXISTS ${db}.retired_vms ${on_cluster};
-- Keep in step with vm_status.state = 'retired' (tests/ingest/test_ingest_active.py compares the two).
CREATE VIEW ${db}.retired_vms ${on_cluster} AS
SELECT vm_id
FROM ${db}.heartbeats_latest AS h FINAL
LEFT JOIN
(
    SELECT vm_id, max(retired_at) AS retired_at FROM ${db}.vm_retirements GROUP BY vm_id
) AS r USING (vm_id)
WHERE dateDiff('millisecond', observed_at, now64(3)) / 1000 > getSettingOrDefault('custom_sevents_silent_after_s', 300)
  AND (r.retired_at >= h.started_at OR final
       OR dateDiff('millisecond', observed_at, now64(3)) / 1000 > getSettingOrDefault('custom_sevents_retire_after_s', 259200));

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
) AS r USING (event_id);

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
          SELECT event_id FROM ${db}.event_rollup
          WHERE last_seen_at >= now64(3) - INTERVAL 30 DAY AND arrayExists(state -> state % 2 = 0, vm_last.2)
      )
    GROUP BY event_id
)
ARRAY JOIN last.1 AS vm_key, last.2 AS state
WHERE state % 2 = 0
  AND intDiv(state, 2) >= toUInt64(toUnixTimestamp64Milli(now64(3) - INTERVAL 30 DAY))
  AND vm_key NOT IN (SELECT cityHash64(vm_id) FROM ${db}.retired_vms);
