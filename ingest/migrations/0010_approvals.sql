-- Approvals sevents made (issue 12): one row per decision of a collector's approval policy about one event.
--
-- decision is approved (the StartRequests POST was accepted), approve_failed, left_to_approver (this VM ran its
-- pre-approval hook; another VM, named in approver, approves), hook_failed, hook_timeout or hook_interrupted
-- (the collector stopped while the hook ran; nothing approved), not_covered (the policy does not cover the event;
-- rule names the first rule it failed) or post_hook (the hook run once the event was gone). hook_s is the hook's
-- duration in seconds (NULL: no hook ran), http_status the approval POST's status (NULL: none sent, or the
-- collector did not live to hear it). Rows are deduplicated by approval_id (VM, event, decision).
-- An event approved with no row here was approved by someone outside sevents (approved_at of events).

-- @distributed approvals cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.approvals${local} ${on_cluster}
(
    approval_id        String,
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
    decision           LowCardinality(String),
    rule               LowCardinality(String),
    approver           LowCardinality(String),
    event_type         LowCardinality(String),
    not_before         Nullable(DateTime64(3, 'UTC')),
    hook_exit          Nullable(Int64),
    hook_ms            Nullable(UInt64),
    http_status        Nullable(UInt16),
    decided_at         DateTime64(3, 'UTC'),
    hook_s             Nullable(Float64) DEFAULT hook_ms / 1000,
    source_position    String DEFAULT '',
    ingested_at        DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMM(decided_at)
-- the day first: a panel's range reads its own days (a repeated record has the same decided_at, so the same day)
ORDER BY (toDate(decided_at), event_id, vm_id, decision, approval_id)
SETTINGS non_replicated_deduplication_window = 10000;
