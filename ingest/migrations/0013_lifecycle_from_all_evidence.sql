-- An event's lifecycle from all the evidence (issue 26). A VM that its event pauses or reboots cannot see the event
-- while it is down, so its own sightings come late by its downtime; the views now take each moment from every
-- source that can tell it:
--
-- started_at   the earliest Started sighting by any observer, or the start of a downtime a VM measured for the
--              event (impacts.began_at: its last moment known running), never before that VM first saw the
--              event; started_at_source says which ('seen', or 'downtime': a bound, no later than)
-- approved_at  sevents' own approval record (approvals, decision 'approved'): the moment exactly; else, for an
--              event that started before its NotBefore, started_at (someone outside sevents approved it by then)
-- released_by  'sevents' (its policy approved), 'outside' (started before NotBefore without an sevents
--              approval), 'not_before' (a NotBefore was seen and Started came at or after it), 'no_notice'
--              (started with no NotBefore ever seen: a host failure, or first seen already Started); NULL while
--              it has not started
-- ended_at     the last end a VM saw while polling; a VM whose first polls after its own downtime found the
--              event gone only bounds it (ended_at_source 'after_downtime', used when no VM saw the end)
-- outcome      'active' while a reporting VM still shows it, or a silent one does and no VM has seen it end
--              (silent: no heartbeat for custom_sevents_silent_after_s, the dashboards' threshold);
--              'completed' when it started (seen or measured: a Reboot that ended while its VM was down is
--              completed, not cancelled); 'cancelled' when a VM saw it gone without a start; 'end_not_seen' when
--              no VM saw it start or end (its collectors stopped, went stale or were retired while it was
--              Scheduled: nothing says it was cancelled)
--
-- Per (event, VM), event_vms keeps the VM's own sightings (first_seen_at, ended_at, vm_started_at: its first
-- Started sighting) and its own downtime (observed_impact_s), and takes the event's moments (started_at,
-- approved_at) and outcome, so per-VM and per-domain notice and approval latency are the event's.

-- The VMs without a heartbeat for the silence threshold, and which of them are retired (retired_vms' rule).
DROP VIEW IF EXISTS ${db}.silent_or_retired_vms ${on_cluster};
CREATE VIEW ${db}.silent_or_retired_vms ${on_cluster} AS
-- Keep retired in step with retired_vms (tests/ingest/test_ingest_active.py compares them): one pass here.
SELECT
    vm_id,
    toUInt8(r.retired_at >= h.started_at OR final
            OR dateDiff('millisecond', observed_at, now64(3)) / 1000 > getSettingOrDefault('custom_sevents_retire_after_s', 259200))
        AS retired
FROM ${db}.heartbeats_latest AS h FINAL
LEFT JOIN
(
    SELECT vm_id, max(retired_at) AS retired_at FROM ${db}.vm_retirements GROUP BY vm_id
) AS r USING (vm_id)
WHERE dateDiff('millisecond', observed_at, now64(3)) / 1000 > getSettingOrDefault('custom_sevents_silent_after_s', 300);

DROP VIEW IF EXISTS ${db}.event_vms_since ${on_cluster};
CREATE VIEW ${db}.event_vms_since ${on_cluster} AS
SELECT
    event_id, vm_id, vm_name, subscription_id, resource_group, location, zone, scale_set, fault_domain,
    update_domain, affects_this_vm, event_type, event_source, resource_type, description, duration_s, resources,
    first_seen_at, last_seen_at, not_before_first, not_before_last,
    event_started_ AS started_at,
    ended_at,
    multiIf(open_ AND (NOT silent_ OR NOT event_end_seen_by_any_), 'active', event_started_ IS NOT NULL, 'completed',
            event_end_seen_by_any_, 'cancelled', 'end_not_seen') AS outcome,
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
        ifNull(dateDiff('millisecond', event_started_, event_not_before_) > if(NOT ifNull(event_seen_started_ <= event_started_, 0), 1000, 0), 0), 'outside', 'not_before') AS released_by
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
        max(ended_at IS NOT NULL) OVER w AS event_end_seen_by_any_
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
            -- still shows it: not gone, not its own Terminate or Preempt under way, not stale, VM not retired
            last_mark % 2 = 0
                AND NOT (affects_this_vm AND vm_started_at IS NOT NULL AND event_type IN ('Terminate', 'Preempt'))
                AND last_seen_at >= now64(3) - INTERVAL 30 DAY
                AND (vm_id, 1) NOT IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) AS open_,
            -- no heartbeat for the silence threshold (one set for both: the same subquery is built once)
            (vm_id, 0) IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) OR (vm_id, 1) IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) AS silent_
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
    multiIf(sevents_approved_at IS NOT NULL, sevents_approved_at, ifNull(dateDiff('millisecond', started_at_, not_before_last_) > if(started_at_source_ = 'downtime', 1000, 0), 0), started_at_,
            NULL) AS approved_at,
    started_at_ AS started_at,
    ended_at_ AS ended_at,
    outcome_ AS outcome,
    observing_vms,
    fault_domains,
    update_domains,
    subscription_ids,
    resource_groups,
    if(started_at_ IS NULL, NULL, dateDiff('millisecond', first_seen_at_, started_at_) / 1000) AS notice_s,
    if(approved_at IS NULL, NULL, dateDiff('millisecond', first_seen_at_, approved_at) / 1000) AS approval_latency_s,
    if(ended_at_ IS NULL OR started_at_ IS NULL, NULL, dateDiff('millisecond', started_at_, ended_at_) / 1000)
        AS started_to_gone_s,
    transitions_ AS transitions,
    anomalies_ AS anomalies,
    started_at_source_ AS started_at_source,
    ended_at_source_ AS ended_at_source,
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
        multiIf(active_, 'active', started_at_ IS NOT NULL, 'completed', end_seen_by_any_, 'cancelled', 'end_not_seen')
            AS outcome_,
        -- the ends VMs saw while polling: not a VM's first polls after its own downtime (unless it saw the event Started
        -- after going down, or kept polling well after it came back)
        -- (each end's VM looked up in the VMs that measured a downtime: indexOf, 0 when it measured none)
        arrayMap(e -> indexOf(down_keys_, e.1), ends_) AS end_downs_,
        arrayFilter((e, k) -> k = 0 OR ifNull(e.3 > down_began_[k], 0) OR e.2 > down_back_[k] + INTERVAL 5 SECOND,
                    ends_, end_downs_) AS seen_ends_,
        if(active_, NULL, if(notEmpty(seen_ends_), arrayMax(e -> e.2, seen_ends_), last_end_)) AS ended_at_,
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
            -- active while a reporting VM shows it; a silent one holds it only while no VM has seen it end
            countIf(open_ AND NOT silent_) > 0 OR (countIf(open_) > 0 AND countIf(ended_at IS NOT NULL) = 0) AS active_,
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
                -- still shows it: not gone, not its own Terminate or Preempt under way, not stale, VM not retired
                last_mark % 2 = 0
                    AND NOT (affects_this_vm AND vm_started_at IS NOT NULL AND event_type IN ('Terminate', 'Preempt'))
                    AND last_seen_at >= now64(3) - INTERVAL 30 DAY
                    AND (vm_id, 1) NOT IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) AS open_,
                -- no heartbeat for the silence threshold (one set for both: the same subquery is built once)
                (vm_id, 0) IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) OR (vm_id, 1) IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) AS silent_
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
        SELECT event_id, toNullable(min(vm_down_at)) AS down_at_,
               groupArray(vm_key) AS down_keys_, groupArray(vm_down_at) AS down_began_, groupArray(vm_back_at) AS down_back_
        FROM
        (
            SELECT event_id, cityHash64(vm_id) AS vm_key, min(began_at) AS vm_down_at,
                   max(began_at + toIntervalMillisecond(duration_ms)) AS vm_back_at
            FROM ${db}.impacts
            WHERE began_at >= {since_day:Date} AND event_id != ''
            GROUP BY event_id, vm_key
        )
        GROUP BY event_id
    ) AS i USING (event_id)
) AS e
LEFT JOIN
(
    -- the moment sevents approved it, from its own records (exact; no sighting needed)
    SELECT event_id, toNullable(min(decided_at)) AS sevents_approved_at
    FROM ${db}.approvals
    WHERE decided_at >= {since_day:Date} AND decision = 'approved'
    GROUP BY event_id
) AS a USING (event_id);

DROP VIEW IF EXISTS ${db}.events_since ${on_cluster};
CREATE VIEW ${db}.events_since ${on_cluster} AS
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
            multiIf(active_, 'active', started_at_ IS NOT NULL, 'completed', end_seen_by_any_, 'cancelled', 'end_not_seen')
                AS outcome_,
            -- the ends VMs saw while polling: not a VM's first polls after its own downtime (unless it saw the event Started
            -- after going down, or kept polling well after it came back)
            -- (each end's VM looked up in the VMs that measured a downtime: indexOf, 0 when it measured none)
            arrayMap(e -> indexOf(down_keys_, e.1), ends_) AS end_downs_,
            arrayFilter((e, k) -> k = 0 OR ifNull(e.3 > down_began_[k], 0) OR e.2 > down_back_[k] + INTERVAL 5 SECOND,
                        ends_, end_downs_) AS seen_ends_,
            if(active_, NULL, if(notEmpty(seen_ends_), arrayMax(e -> e.2, seen_ends_), last_end_)) AS ended_at_,
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
                -- active while a reporting VM shows it; a silent one holds it only while no VM has seen it end
                countIf(open_ AND NOT silent_) > 0 OR (countIf(open_) > 0 AND countIf(ended_at IS NOT NULL) = 0) AS active_,
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
                    -- still shows it: not gone, not its own Terminate or Preempt under way, not stale, VM not retired
                    last_mark % 2 = 0
                        AND NOT (affects_this_vm AND vm_started_at IS NOT NULL AND event_type IN ('Terminate', 'Preempt'))
                        AND last_seen_at >= now64(3) - INTERVAL 30 DAY
                        AND (vm_id, 1) NOT IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) AS open_,
                    -- no heartbeat for the silence threshold (one set for both: the same subquery is built once)
                    (vm_id, 0) IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) OR (vm_id, 1) IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) AS silent_
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
);

DROP VIEW IF EXISTS ${db}.events ${on_cluster};
CREATE VIEW ${db}.events ${on_cluster} AS
SELECT * FROM ${db}.events_since(since_day = toDate('1970-01-01'));

-- Announced against measured, per event: the columns of events_since that the Impact dashboard's table shows, the
-- same rules for these columns only (tests/ingest/test_ingest_rollups.py compares them).
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
    observed_impact_s_ AS observed_impact_s,
    impacted_vms_ AS impacted_vms,
    length(affected_keys_) AS affected_vm_count,
    arrayMap(p -> concat(p.1, ' / FD ', ifNull(toString(p.2), '?')),
             arraySort(arrayMap(p -> (if(p.1 != '', p.1, availability_set), p.2), fd_pairs_))) AS fault_domain_labels
FROM
(
    SELECT
        *,
        -- it started no later than the first downtime a VM measured for it began, and not before it was first seen
        if(down_at_ IS NULL, NULL, greatest(down_at_, first_seen_at_)) AS down_started_,
        multiIf(seen_started_ IS NULL, down_started_, down_started_ IS NULL, seen_started_,
                least(seen_started_, down_started_)) AS started_at_,
        if(started_at_ IS NULL, NULL, if(ifNull(seen_started_ <= started_at_, 0), 'seen', 'downtime')) AS started_at_source_,
        multiIf(active_, 'active', started_at_ IS NOT NULL, 'completed', end_seen_by_any_, 'cancelled', 'end_not_seen')
            AS outcome_,
        -- the ends VMs saw while polling: not a VM's first polls after its own downtime (unless it saw the event Started
        -- after going down, or kept polling well after it came back)
        -- (each end's VM looked up in the VMs that measured a downtime: indexOf, 0 when it measured none)
        arrayMap(e -> indexOf(down_keys_, e.1), ends_) AS end_downs_,
        arrayFilter((e, k) -> k = 0 OR ifNull(e.3 > down_began_[k], 0) OR e.2 > down_back_[k] + INTERVAL 5 SECOND,
                    ends_, end_downs_) AS seen_ends_,
        if(active_, NULL, if(notEmpty(seen_ends_), arrayMax(e -> e.2, seen_ends_), last_end_)) AS ended_at_,
        if(ended_at_ IS NULL, NULL, if(notEmpty(seen_ends_), 'seen', 'after_downtime')) AS ended_at_source_
    FROM
    (
        SELECT
            event_id,
            argMax(event_type, last_seen_at) AS event_type_,
            argMaxIf(event_source, last_seen_at, event_source IS NOT NULL) AS event_source_,
            argMinIf(duration_s, first_seen_at, duration_s IS NOT NULL) AS duration_s_,
            min(first_seen_at) AS first_seen_at_,
            min(vm_started_at) AS seen_started_,
            -- active while a reporting VM shows it; a silent one holds it only while no VM has seen it end
            countIf(open_ AND NOT silent_) > 0 OR (countIf(open_) > 0 AND countIf(ended_at IS NOT NULL) = 0) AS active_,
            countIf(ended_at IS NOT NULL) > 0 AS end_seen_by_any_,
            max(ended_at) AS last_end_,
            groupArrayIf((cityHash64(vm_id), assumeNotNull(ended_at), vm_started_at), ended_at IS NOT NULL) AS ends_
        FROM
        (
            SELECT
                event_id, vm_id, affects_this_vm, event_type, event_source, duration_s, first_seen_at, last_seen_at,
                not_before_last, vm_started_at, last_mark,
                if(last_mark % 2 = 1, last_seen_at, NULL) AS ended_at,
                -- still shows it: not gone, not its own Terminate or Preempt under way, not stale, VM not retired
                last_mark % 2 = 0
                    AND NOT (affects_this_vm AND vm_started_at IS NOT NULL AND event_type IN ('Terminate', 'Preempt'))
                    AND last_seen_at >= now64(3) - INTERVAL 30 DAY
                    AND (vm_id, 1) NOT IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) AS open_,
                -- no heartbeat for the silence threshold (one set for both: the same subquery is built once)
                (vm_id, 0) IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) OR (vm_id, 1) IN (SELECT vm_id, retired FROM ${db}.silent_or_retired_vms) AS silent_
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
                    argMaxIfMerge(not_before_last) AS not_before_last,
                    min(started_at) AS vm_started_at,
                    max(last_mark) AS last_mark
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
) AS r USING (event_id);

-- The EventIds some VM that is not retired still shows; a silent VM counts only while no VM has seen the event end
-- (events.outcome 'active': the same rule over the rollup's last state per VM, odd once that VM saw it close).
-- One row per (event, VM) of the candidates, so that the silent and retired VMs are looked up in sets.
DROP VIEW IF EXISTS ${db}.active_events ${on_cluster};
CREATE VIEW ${db}.active_events ${on_cluster} AS
SELECT event_id
FROM
(
    SELECT
        event_id,
        -- it still shows the event, within the horizon, and its VM is not retired
        state % 2 = 0 AND intDiv(state, 2) >= toUInt64(toUnixTimestamp64Milli(now64(3) - INTERVAL 30 DAY))
            AND (vm_key, 1) NOT IN (SELECT cityHash64(vm_id), retired FROM ${db}.silent_or_retired_vms) AS open,
        (vm_key, 0) IN (SELECT cityHash64(vm_id), retired FROM ${db}.silent_or_retired_vms)
            OR (vm_key, 1) IN (SELECT cityHash64(vm_id), retired FROM ${db}.silent_or_retired_vms) AS silent,
        state % 2 = 1 AS closed
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
)
GROUP BY event_id
HAVING countIf(open AND NOT silent) > 0 OR (countIf(open) > 0 AND countIf(closed) = 0);
