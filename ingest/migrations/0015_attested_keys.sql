-- Records a VM can prove (issue 29, the strong form): each VM's signing keys, pinned by the ingest on first use
-- once IMDS's attested document proved them the VM's own (ingest/attestation_gate.py). The table of record: a
-- record from Event Hubs is stored, with [ingest] attestation = "required", only if a key pinned here to its VM
-- signed it. A VM's later key needs its own valid attestation and is pinned with new_key = true and an anomaly
-- naming the keys it joins. One row per (vm_id, key_id), written once (an attestation already pinned writes no
-- row); kept for ever (no retention TTL): a key unpinned would turn its VM's records into dead letters.
-- @distributed attested_keys cityHash64(vm_id)
CREATE TABLE IF NOT EXISTS ${db}.attested_keys${local} ${on_cluster}
(
    vm_id           String,
    key_id          String,
    public_key      String,
    subscription_id LowCardinality(String),
    nonce           String,
    attested_at     DateTime64(3, 'UTC'),
    pinned_at       DateTime64(3, 'UTC'),
    new_key         Bool,
    anomaly         String,
    source_position String
)
ENGINE = ReplacingMergeTree(pinned_at)
ORDER BY (vm_id, key_id);
