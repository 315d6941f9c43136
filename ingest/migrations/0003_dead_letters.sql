-- Records the ingest could not load: the raw payload verbatim, why, and where it came from. Poison input lands
-- here and never blocks the records around it. Keyed by (position, payload hash) so a redelivered batch does
-- not duplicate its dead letters.

-- @distributed dead_letters cityHash64(dead_letter_id)
CREATE TABLE IF NOT EXISTS ${db}.dead_letters${local} ${on_cluster}
(
    dead_letter_id     String,
    received_at        DateTime64(3, 'UTC'),
    source             LowCardinality(String),
    position           String,
    error              String,
    payload            String,
    payload_size       UInt64,
    properties         Map(String, String),
    ingested_at        DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMM(received_at)
ORDER BY (dead_letter_id)
SETTINGS non_replicated_deduplication_window = 10000;
