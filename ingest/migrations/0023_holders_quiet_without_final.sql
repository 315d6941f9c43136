-- The silence of the VMs still showing an event, looked up without FINAL (issue 32). Every read of events and
-- event_vm_lifecycles computes holders_quiet first, while ClickHouse plans the query: about 30 ms of a 55 to 70 ms
-- panel at 10% of a year of 20,000 VMs, paid by every panel and alert that reads an event's outcome. FINAL merged
-- every unmerged part of heartbeats_latest to find the holders' latest rows; the latest row of each VM is also
-- argMax over its rows by observed_at (heartbeats_latest's version column), which needs no merge: 5 to 10 ms less
-- while the table has unmerged parts (a live ingest keeps a few), the same once it is merged (BENCHMARKS.md). The
-- rule is unchanged.
--
-- holders_quiet   of the VMs still showing an event seen in the last 30 days, those silent now and those of them
--                 retired (one row: two arrays); the same rows as before.

DROP VIEW IF EXISTS ${db}.holders_quiet ${on_cluster};
CREATE VIEW ${db}.holders_quiet ${on_cluster} AS
WITH
    now64(3) - INTERVAL 30 DAY AS horizon_,
    dateDiff('millisecond', h.last_heartbeat_at, now64(3)) / 1000 AS silent_for_,
    getSettingOrDefault('custom_sevents_silent_after_s', 300) AS silent_after_,
    getSettingOrDefault('custom_sevents_retire_after_s', 259200) AS retire_after_
SELECT
    groupArrayIf(vm_id, silent_for_ > silent_after_) AS silent,
    groupArrayIf(vm_id, silent_for_ > silent_after_
                 AND (ifNull(r.retired_at >= h.collector_started_at, 0) OR h.said_final
                      OR silent_for_ > retire_after_)) AS retired
FROM
(
    -- each holder's latest heartbeat, as FINAL would keep it (ReplacingMergeTree(observed_at))
    SELECT
        vm_id,
        max(observed_at) AS last_heartbeat_at,
        argMax(started_at, observed_at) AS collector_started_at,
        argMax(final, observed_at) AS said_final
    FROM ${db}.heartbeats_latest
    WHERE vm_id IN (SELECT arrayJoin(holders).vm_id FROM ${db}.event_history WHERE last_held_at >= horizon_)
    GROUP BY vm_id
) AS h
LEFT JOIN
(
    SELECT vm_id, max(retired_at) AS retired_at FROM ${db}.vm_retirements
    WHERE vm_id IN (SELECT arrayJoin(holders).vm_id FROM ${db}.event_history WHERE last_held_at >= horizon_)
    GROUP BY vm_id
) AS r USING (vm_id);
