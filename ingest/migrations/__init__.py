"""Numbered schema migrations (templates; see ingest/migrate.py)."""
