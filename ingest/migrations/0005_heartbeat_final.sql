-- Heartbeats say whether they are a collector's last one before a clean stop (SIGTERM/SIGINT): a VM whose
-- last heartbeat is final stopped on purpose, one that went silent without it did not. Older collectors do
-- not send the field; their heartbeats read false.

ALTER TABLE ${db}.heartbeats${local} ${on_cluster} ADD COLUMN IF NOT EXISTS final Bool DEFAULT false;

-- On a cluster the Distributed table over heartbeats_local needs the column too (readers and writers use it).
-- On a single node ${local} is empty and this repeats the statement above, which IF NOT EXISTS makes a no-op.
ALTER TABLE ${db}.heartbeats ${on_cluster} ADD COLUMN IF NOT EXISTS final Bool DEFAULT false;
