-- heartbeat_hours counts a VM-hour's heartbeats as the minutes of the hour that had one (a bit each: 8 bytes), not
-- as the set of their ids: the set kept a 16-byte hash per heartbeat (about 960 bytes per VM-hour at one a minute,
-- 94% of a fleet's storage: about 986 GB at 100,000 VMs over 400 days). At the collectors' rate (one a minute) it
-- is the same count; at a faster rate coverage no longer reads above 100%. Like the set, an OR of bits is unchanged
-- by a repeated row.
--
-- heartbeat_hours.heartbeat_minutes   bit m set: a heartbeat was sent in minute m of the hour
-- heartbeat_hours_mv                  writes heartbeat_minutes and no longer the set of ids
-- (backfill)                          the hours the raw heartbeats still hold (their retention, 7 days by default)
--                                     get their minutes too, so an hour across the migration counts whole; older
--                                     rows keep only their ids, and a reader counts the greater of the two
ALTER TABLE ${db}.heartbeat_hours${local} ${on_cluster}
    ADD COLUMN IF NOT EXISTS heartbeat_minutes SimpleAggregateFunction(groupBitOr, UInt64) AFTER heartbeats;
ALTER TABLE ${db}.heartbeat_hours ${on_cluster}
    ADD COLUMN IF NOT EXISTS heartbeat_minutes SimpleAggregateFunction(groupBitOr, UInt64) AFTER heartbeats;

ALTER TABLE ${db}.heartbeat_hours_mv ${on_cluster} MODIFY QUERY
SELECT
    toStartOfHour(observed_at) AS hour,
    vm_id,
    anyLast(vm_name) AS vm_name,
    anyLast(toString(subscription_id)) AS subscription_id,
    anyLast(toString(location)) AS location,
    anyLast(toString(scale_set)) AS scale_set,
    anyLast(fault_domain) AS fault_domain,
    groupBitOr(bitShiftLeft(toUInt64(1), toMinute(observed_at))) AS heartbeat_minutes,
    max(observed_at) AS last_at,
    max(outbox_depth) AS max_outbox_depth,
    max(toUInt8(NOT last_poll_ok)) AS failed_poll
FROM ${db}.heartbeats${local}
GROUP BY hour, vm_id;

INSERT INTO ${db}.heartbeat_hours
    (hour, vm_id, vm_name, subscription_id, location, scale_set, fault_domain, heartbeat_minutes, last_at,
     max_outbox_depth, failed_poll)
SELECT
    toStartOfHour(observed_at) AS hour,
    vm_id,
    anyLast(vm_name),
    anyLast(toString(subscription_id)),
    anyLast(toString(location)),
    anyLast(toString(scale_set)),
    anyLast(fault_domain),
    groupBitOr(bitShiftLeft(toUInt64(1), toMinute(observed_at))),
    max(observed_at),
    max(outbox_depth),
    max(toUInt8(NOT last_poll_ok))
FROM ${db}.heartbeats
GROUP BY hour, vm_id
SETTINGS max_bytes_before_external_group_by = 1000000000, distributed_product_mode = 'global';
