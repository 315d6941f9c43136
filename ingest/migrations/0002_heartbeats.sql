-- Collector heartbeats: a bounded history (TTL) for coverage charts, and the latest one per VM kept forever
-- (a VM that went silent a year ago must still show up as silent).

-- @distributed heartbeats cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.heartbeats${local} ${on_cluster}
(
    heartbeat_id       String,
    record_id          String,
    schema_version     UInt16,
    record_type        LowCardinality(String),
    seq                UInt64,
    observed_at        DateTime64(3, 'UTC'),
    api_version        LowCardinality(String),
    collector_version  LowCardinality(String),
    vm_id              String,
    vm_name            String,
    location           LowCardinality(String),
    subscription_id    LowCardinality(String),
    resource_group     LowCardinality(String),
    resource_id        String,
    zone               LowCardinality(String),
    fault_domain       Nullable(UInt16),
    update_domain      Nullable(UInt16),
    scale_set          LowCardinality(String),
    last_incarnation   Nullable(Int64),
    last_poll_ok       Bool,
    last_poll_error    LowCardinality(String),
    polls              UInt64,
    poll_errors        Map(String, UInt64),
    active_events      UInt32,
    outbox_depth       UInt64,
    drops              Map(String, UInt64),
    started_at         DateTime64(3, 'UTC'),
    source_position    String DEFAULT '',
    ingested_at        DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMMDD(observed_at)
ORDER BY (vm_id, observed_at, heartbeat_id)
TTL toDateTime(observed_at) + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;

-- @distributed heartbeats_latest cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.heartbeats_latest${local} ${on_cluster}
(
    vm_id              String,
    observed_at        DateTime64(3, 'UTC'),
    vm_name            String,
    location           LowCardinality(String),
    subscription_id    LowCardinality(String),
    resource_group     LowCardinality(String),
    zone               LowCardinality(String),
    fault_domain       Nullable(UInt16),
    update_domain      Nullable(UInt16),
    scale_set          LowCardinality(String),
    collector_version  LowCardinality(String),
    api_version        LowCardinality(String),
    last_incarnation   Nullable(Int64),
    last_poll_ok       Bool,
    last_poll_error    LowCardinality(String),
    polls              UInt64,
    poll_errors        Map(String, UInt64),
    active_events      UInt32,
    outbox_depth       UInt64,
    drops              Map(String, UInt64),
    started_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(observed_at)
ORDER BY vm_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.heartbeats_latest_mv ${on_cluster}
TO ${db}.heartbeats_latest${local}
AS SELECT
    vm_id, observed_at, vm_name, location, subscription_id, resource_group, zone, fault_domain,
    update_domain, scale_set, collector_version, api_version, last_incarnation, last_poll_ok,
    last_poll_error, polls, poll_errors, active_events, outbox_depth, drops, started_at
FROM ${db}.heartbeats${local};
