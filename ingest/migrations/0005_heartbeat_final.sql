-- A collector's last heartbeat before a clean stop says so (final = true): a VM whose last word was a clean
-- stop is retired, not silent. On a cluster the second statement reaches the Distributed table; on one node
-- both name the same table and the second does nothing.
ALTER TABLE ${db}.heartbeats${local} ${on_cluster} ADD COLUMN IF NOT EXISTS final Bool DEFAULT false;
ALTER TABLE ${db}.heartbeats ${on_cluster} ADD COLUMN IF NOT EXISTS final Bool DEFAULT false;
