"""The sevents collector: poll IMDS Scheduled Events, diff, commit to a durable outbox, ship.

Read in order: settings · imds_policy (retry and api-version negotiation, pure) · imds (HTTP edge) · instance
(VM identity) · dhcp (non-VNET endpoint) · decode · transitions (pure diff) · enrich (wire records) · outbox
(SQLite) · statedir (lock, resumed snapshot) · ship (sink) · agent (glue) · cli.
"""
