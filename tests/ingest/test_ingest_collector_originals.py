"""Issue 29: a value the collector shortens keeps its original. A real agent polls a loopback IMDS whose event
has a 20,003-character Description; the record is stored with the safe value, and what the field held travels
beside it in the outbox and lands whole in ``dead_letters`` (real chDB, the outbox source)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from collector.outbox import Outbox
from collector.settings import CollectorSettings
from collector.wiring import build_agent
from ingest.decode import Limits
from ingest.handler import MADE_SAFE_BY_COLLECTOR, Handler
from ingest.source_outbox import OutboxSource
from ingest.writer import Writer
from sevents.records import RECORD_ORIGINAL
from tests.collector_edges.fake_imds import FakeImds, event

from .conftest import scalar


def test_a_description_the_collector_shortens_is_kept_whole_in_dead_letters(ch: Any, db: str, tmp_path: Path) -> None:
    """The transition is stored with the first 16,384 characters and a note; the outbox row beside it holds the
    whole Description, and the ingest keeps that row as a dead letter (made_safe_by_collector)."""
    long = "d" * 20_000 + "end"
    imds = FakeImds().start()
    try:
        imds.set_document(3, [{**event("e-long"), "Description": long}])
        state = tmp_path / "vm"
        settings = CollectorSettings(imds_url=imds.base_url, state_dir=state, min_request_interval=0.0)
        agent = build_agent(settings)
        try:
            (stored,) = agent.poll_once()
        finally:
            agent.close()
    finally:
        imds.stop()
    limit = Limits().max_text_chars
    assert stored["description"] == long[:limit]
    assert "description: truncated from 20003 characters" in stored["anomaly"]
    with Outbox(state / "outbox.sqlite") as outbox:
        rows = outbox.pending(limit=100)
    beside = [json.loads(r.payload) for r in rows if r.record_type == RECORD_ORIGINAL]
    assert [(o["of_record_id"], o["originals"]) for o in beside] == [(stored["record_id"], {"description": long})]

    handler = Handler(Writer(ch, db), source="outbox", stop=threading.Event())
    OutboxSource([str(state)], until_idle=True).run(handler, threading.Event())
    assert scalar(ch, f"SELECT length(description) FROM {db}.transitions FINAL WHERE event_id = 'e-long'") == limit
    dead = ch.query(f"SELECT error, payload FROM {db}.dead_letters FINAL").result_rows
    assert [(error, json.loads(payload)["originals"]["description"]) for error, payload in dead] == [
        (MADE_SAFE_BY_COLLECTOR, long)
    ]
