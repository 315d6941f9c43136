-- The stored lifecycles read by EventId first (issue 32: at a year of 100,000 VMs the timeline's Events took 320 ms
-- alone, half of it reading event_history FINAL).
--
-- events, event_vm_lifecycles  the same rows, the EventId condition applied while reading. A panel names its
--                          events (event_id IN a subquery); with FINAL, ClickHouse applied that only after merging
--                          every row of the granules read, all their columns included, so the cost grew with the
--                          table's unmerged parts (a live ingest always leaves some). The condition is on the
--                          sorting key, so it cannot keep an older version of an event in place of the newest:
--                          optimize_move_to_prewhere_if_final moves only conditions on sorting-key columns to
--                          PREWHERE, and the others (first_seen_at, outcome, a VM's set) still apply after the
--                          merge. The setting is part of each view, so every reader gets it.

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
)
SETTINGS optimize_move_to_prewhere_if_final = 1;

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
FROM ${db}.event_vm_history FINAL
SETTINGS optimize_move_to_prewhere_if_final = 1;
