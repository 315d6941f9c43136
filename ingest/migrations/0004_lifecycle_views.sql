-- Lifecycles derived from the deduplicated transitions, as views (no update races, nothing to backfill).
--
-- event_vms: one row per (EventId, observing VM), for timelines.
-- events:    one row per EventId across every VM that reported it.
--
-- event_vms also carries the observing VM's subscription_id and resource_group (its latest, like vm_name),
-- so dashboards filter a subscription without a subquery; events carries subscription_ids and resource_groups
-- of the VMs the event affects (like fault_domains).
--
-- Definitions (IMDS shows no completion and no approval, so these are what an observer can establish):
--   first_seen_at     earliest observation of the event by any collector.
--   not_before_first  NotBefore as first announced; not_before_last: the last non-blank NotBefore seen.
--   started_at        earliest observation with EventStatus = Started.
--   ended_at          when the event disappeared (the last disappearance of any VM); NULL while active.
--   outcome           'active' while any VM still shows it; else 'completed' if it was ever seen Started,
--                     else 'cancelled' (Scheduled, then gone without starting).
--   approved_at       the event started before its announced NotBefore, which only an approval (a
--                     StartRequests POST, by anyone) allows: approved_at = started_at, the moment the approval
--                     became observable. NULL when it started at or after NotBefore (the platform's own
--                     timeout) or never started. Precision: one poll interval.
--   notice_s          started_at - first_seen_at: warning the fleet actually got.
--   approval_latency_s approved_at - first_seen_at.
--   impact_s          ended_at - started_at.

CREATE VIEW IF NOT EXISTS ${db}.event_vms ${on_cluster} AS
SELECT
    event_id,
    vm_id,
    vm_name,
    subscription_id,
    resource_group,
    location,
    zone,
    scale_set,
    fault_domain,
    update_domain,
    affects_this_vm,
    event_type,
    event_source,
    resource_type,
    description,
    duration_s,
    resources,
    first_seen_at,
    last_seen_at,
    not_before_first,
    not_before_last,
    started_at,
    if(last_kind = 'disappeared', last_seen_at, NULL) AS ended_at,
    multiIf(last_kind != 'disappeared', 'active', started_at IS NULL, 'cancelled', 'completed') AS outcome,
    if(started_at IS NOT NULL AND not_before_last IS NOT NULL AND started_at < not_before_last,
       started_at, NULL) AS approved_at,
    transitions,
    anomalies
FROM
(
    SELECT
        event_id,
        vm_id,
        argMax(vm_name, observed_at) AS vm_name,
        argMax(subscription_id, observed_at) AS subscription_id,
        argMax(resource_group, observed_at) AS resource_group,
        argMax(location, observed_at) AS location,
        argMax(zone, observed_at) AS zone,
        argMax(scale_set, observed_at) AS scale_set,
        argMax(fault_domain, observed_at) AS fault_domain,
        argMax(update_domain, observed_at) AS update_domain,
        max(affects_this_vm) AS affects_this_vm,
        argMaxIf(event_type, observed_at, event_type != '') AS event_type,
        argMaxIf(event_source, observed_at, event_source IS NOT NULL) AS event_source,
        argMaxIf(resource_type, observed_at, resource_type != '') AS resource_type,
        argMaxIf(description, observed_at, description IS NOT NULL) AS description,
        argMinIf(duration_s, observed_at, duration_s IS NOT NULL) AS duration_s,
        arraySort(groupUniqArrayArray(resources)) AS resources,
        min(observed_at) AS first_seen_at,
        max(observed_at) AS last_seen_at,
        argMinIf(not_before, observed_at, not_before IS NOT NULL) AS not_before_first,
        argMaxIf(not_before, observed_at, not_before IS NOT NULL) AS not_before_last,
        minIfOrNull(observed_at, status = 'Started') AS started_at,
        -- at equal times a disappearance is the later of the two
        argMax(kind, (observed_at, kind = 'disappeared')) AS last_kind,
        count() AS transitions,
        countIf(kind = 'anomaly') AS anomalies
    FROM ${db}.transitions FINAL
    WHERE event_id != ''
    GROUP BY event_id, vm_id
);

CREATE VIEW IF NOT EXISTS ${db}.events ${on_cluster} AS
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
    -- inner aliases end in _ so that none shadows a column another aggregate reads
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
        arraySort(groupUniqArrayArray(resources)) AS affected_vms,
        uniqExact(vm_id) AS observing_vms,
        arraySort(groupUniqArrayIf(fault_domain, affects_this_vm)) AS fault_domains,
        arraySort(groupUniqArrayIf(update_domain, affects_this_vm)) AS update_domains,
        arraySort(groupUniqArrayIf(subscription_id, affects_this_vm)) AS subscription_ids,
        arraySort(groupUniqArrayIf(resource_group, affects_this_vm)) AS resource_groups,
        sum(transitions) AS transitions_,
        sum(anomalies) AS anomalies_
    FROM ${db}.event_vms
    GROUP BY event_id
);
