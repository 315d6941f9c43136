"""The ingest: collector records (outbox or Event Hubs) -> decode/validate -> ClickHouse, plus audit queries."""
