-- The hours heartbeat_hours kept as sets of heartbeat ids (before migration 0020) as a count (issue 32). Readers
-- counted a VM-hour's heartbeats as greatest(its minutes, uniqExactMerge(its ids)), and merging the ids column
-- builds a hash set per VM-hour even where it is empty, as it is in every row written since 0020: about two
-- thirds of "Heartbeat coverage" at a year of 20,000 VMs (141 ms of CPU, 45 without the column), 352 ms p95 at
-- 100,000 VMs. The count of each VM-hour's ids is written once here, as a number readers take the max of; the
-- ids stay in their column until the table's TTL drops their hours, read by nothing.
--
-- heartbeat_hours.ids_counted   heartbeats counted by their ids (rows before 0020); 0 in rows written since
-- (copy)                        each VM-hour that has ids, once more with their count and its other columns as
--                               they read now. The rows before 0020 that no merge joined to a minutes row still
--                               have no minutes: the hours up to 8 days after the last of them are read (0020
--                               filled the minutes of the raw heartbeats' 7 days), none of a table that has none.
--                               Run again, the copy is the same rows once more: max, OR and anyLast of equal
--                               values are unchanged.
ALTER TABLE ${db}.heartbeat_hours${local} ${on_cluster}
    ADD COLUMN IF NOT EXISTS ids_counted SimpleAggregateFunction(max, UInt64) AFTER heartbeat_minutes;
ALTER TABLE ${db}.heartbeat_hours ${on_cluster}
    ADD COLUMN IF NOT EXISTS ids_counted SimpleAggregateFunction(max, UInt64) AFTER heartbeat_minutes;

INSERT INTO ${db}.heartbeat_hours
    (hour, vm_id, vm_name, subscription_id, location, scale_set, fault_domain, heartbeat_minutes, ids_counted,
     last_at, max_outbox_depth, failed_poll)
SELECT
    hour,
    vm_id,
    anyLast(vm_name),
    anyLast(subscription_id),
    anyLast(location),
    anyLast(scale_set),
    anyLast(fault_domain),
    groupBitOr(heartbeat_minutes),
    uniqExactMerge(heartbeats) AS ids_,
    max(last_at),
    max(max_outbox_depth),
    max(failed_poll)
FROM ${db}.heartbeat_hours
WHERE hour <= (SELECT max(hour) FROM ${db}.heartbeat_hours WHERE heartbeat_minutes = 0) + INTERVAL 8 DAY
GROUP BY hour, vm_id
HAVING ids_ > 0
SETTINGS max_bytes_before_external_group_by = 1000000000, distributed_product_mode = 'global';
