-- Every transition any collector observed, deduplicated by its key (observer, EventId, incarnation, kind).
-- The sorting key is that dedupe key, so ReplacingMergeTree keeps one row per transition_id; readers use
-- FINAL (or aggregate by the key) because duplicates disappear only at merge time. Retried inserts are
-- also dropped up front by insert_deduplication_token (non_replicated_deduplication_window).

-- @distributed transitions cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.transitions${local} ${on_cluster}
(
    transition_id      String,
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
    event_id           String,
    incarnation        Int64,
    kind               LowCardinality(String),
    status             LowCardinality(String),
    prev_status        LowCardinality(String),
    prev_observed_at   Nullable(DateTime64(3, 'UTC')),
    event_type         LowCardinality(String),
    resource_type      LowCardinality(String),
    resources          Array(String),
    affects_this_vm    Bool,
    not_before         Nullable(DateTime64(3, 'UTC')),
    description        Nullable(String),
    event_source       LowCardinality(Nullable(String)),
    duration_s         Nullable(Int64),
    changed_fields     Array(String),
    anomaly            String,
    source_position    String DEFAULT '',
    ingested_at        DateTime64(3, 'UTC') DEFAULT now64(3),
    INDEX event_id_idx event_id TYPE bloom_filter GRANULARITY 4
)
ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMM(observed_at)
ORDER BY (vm_id, event_id, kind, incarnation, transition_id)
SETTINGS non_replicated_deduplication_window = 10000;
