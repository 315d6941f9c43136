-- The identities VMs observed transitions with, keyed by VM (issue 32: a query's cost follows what it shows).
--
-- A panel with a VM variable chosen (a subscription, a scale set, a VM) shows the events that affect a matching VM.
-- Range panels found those events in the transitions of the range and the lookback before it, in time order
-- (transitions_by_time): a month of the whole fleet's transitions scanned for one VM's, about 4 M rows at
-- 100,000 VMs. transition_observers holds each VM once per identity it reported (subscription, location, scale
-- set, fault domain, name), a row per VM: the chosen VMs' ids come from it, and their transitions from
-- `transitions`, sorted by vm_id, a few granules per VM and month. The panel keeps its conditions on the
-- transitions' own columns, so what it shows is unchanged: this table only narrows which VMs' rows are read.
--
-- Rows are deduplicated within each insert (DISTINCT) and by the sorting key when parts merge; readers need no
-- FINAL, a repeated identity only repeats a VM's id in a set. The view exists before the backfill, so no
-- transition inserted meanwhile is missed; one seen twice adds a duplicate the merges drop.
-- @distributed transition_observers cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.transition_observers${local} ${on_cluster}
(
    vm_id              String,
    subscription_id    LowCardinality(String),
    location           LowCardinality(String),
    scale_set          LowCardinality(String),
    fault_domain       Nullable(UInt16),
    vm_name            String
)
ENGINE = ReplacingMergeTree()
ORDER BY (vm_id, subscription_id, location, scale_set, vm_name, ifNull(toInt32(fault_domain), -1));

-- @backfill
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.transition_observers_mv ${on_cluster}
TO ${db}.transition_observers${local}
AS SELECT DISTINCT vm_id, subscription_id, location, scale_set, fault_domain, vm_name
FROM ${db}.transitions${local};
