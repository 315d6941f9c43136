-- Azure's own account of the fleet, read from Azure Resource Graph by `sevents-ingest reconcile` (issue 27):
-- the VM inventory, the Resource Health annotation changes and Microsoft's central scheduled events. Tables of
-- record, written page by page as ARG answers (ingest/reconcile.py). Every row carries its content's hash
-- (row_hash): the reconciler reads the stored hash of a page's keys first and inserts only rows that are new or
-- changed, so a second reconcile of an unchanged fleet inserts nothing, and a reconcile killed mid-page and run
-- again stores each row once. ReplacingMergeTree(reconciled_at) and FINAL absorb what concurrent reconcilers
-- might write twice. first_seen_at is kept from the stored row when a row changes, so it never moves, and the
-- partition expressions only use columns that never change for a key: a key's versions share one partition.

-- One row per VM (properties.vmId, which is IMDS compute.vmId, lower case): standalone, availability-set and
-- Flexible scale-set VMs from Resources, Uniform scale-set instances from ComputeResources. present = false once
-- a complete reconcile of the VM's subscription no longer found it (deleted). A 100,000-VM fleet is 100,000 keys
-- plus one row per change (a power state, a resize): a few MB, read whole by audit coverage, by month of first
-- sighting, so scale-set churn adds new parts rather than rewriting old ones.
-- @distributed azure_vms cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.azure_vms${local} ${on_cluster}
(
    vm_id               String,
    resource_id         String,
    name                String,
    subscription_id     LowCardinality(String),
    resource_group      LowCardinality(String),
    location            LowCardinality(String),
    zone                LowCardinality(String),
    availability_set_id String,
    availability_set    String,
    scale_set_id        String,
    scale_set           String,
    vm_size             LowCardinality(String),
    power_state         LowCardinality(String),
    fault_domain        Nullable(UInt16),
    update_domain       Nullable(UInt16),
    source_table        LowCardinality(String),
    present             Bool,
    row_hash            UInt64,
    first_seen_at       DateTime64(3, 'UTC'),
    reconciled_at       DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(reconciled_at)
PARTITION BY toYYYYMM(first_seen_at)
ORDER BY vm_id;

-- Resource Health annotation changes (HealthResourceChanges: 14 days of history, one change resource per
-- change): what the platform says it did to a VM. Keyed by the change resource's id; ordered by the VM's
-- resource id (lower case) and time, so that one VM's or one window's annotations are a primary-key range.
-- vm_id: the VM's vmId, from the inventory when the reconciler knew it ('' otherwise; join on resource_id).
-- @distributed azure_annotations cityHash64(resource_id)
CREATE TABLE IF NOT EXISTS ${db}.azure_annotations${local} ${on_cluster}
(
    change_id           String,
    resource_id         String,
    vm_id               String,
    subscription_id     LowCardinality(String),
    changed_at          DateTime64(3, 'UTC'),
    change_type         LowCardinality(String),
    annotation_name     LowCardinality(String),
    reason              String,
    category            LowCardinality(String),
    context             String,
    summary             String,
    occurred_at         Nullable(DateTime64(3, 'UTC')),
    row_hash            UInt64,
    first_seen_at       DateTime64(3, 'UTC'),
    reconciled_at       DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(reconciled_at)
PARTITION BY toYYYYMM(changed_at)
ORDER BY (resource_id, changed_at, change_id);

-- Microsoft's central scheduled events (maintenanceresources, type microsoft.maintenance/scheduledevents: the
-- latest state of each event). One row per (EventId, EventStatus) the reconciler saw, so an event's statuses
-- (Scheduled, Started, Completed, Canceled) stay as history; a change within one status (a new NotBefore)
-- replaces that row. first_seen_at: when the reconciler first saw the event in that status.
-- @distributed azure_scheduled_events cityHash64(event_id)
CREATE TABLE IF NOT EXISTS ${db}.azure_scheduled_events${local} ${on_cluster}
(
    event_id            String,
    event_status        LowCardinality(String),
    event_type          LowCardinality(String),
    resource_type       LowCardinality(String),
    resources           Array(String),
    not_before          Nullable(DateTime64(3, 'UTC')),
    duration_s          Nullable(Int64),
    event_source        LowCardinality(String),
    description         String,
    resource_id         String,
    subscription_id     LowCardinality(String),
    resource_group      LowCardinality(String),
    row_hash            UInt64,
    first_seen_at       DateTime64(3, 'UTC'),
    reconciled_at       DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(reconciled_at)
PARTITION BY toYYYYMM(first_seen_at)
ORDER BY (event_id, event_status);
