"""Salvage through the real agent and a loopback IMDS: one bad field in one event, and one entry that is no
event, cost nothing else; what was made safe is in the record's anomaly, what was left out counted by reason."""

from __future__ import annotations

import json

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from collector.settings import CollectorSettings
from collector.wiring import build_agent
from sevents.records import KIND_APPEARED, KIND_UPDATED
from sevents.telemetry import make_meter_provider
from tests.collector_edges.fake_imds import FakeImds, Scripted, event
from tests.helpers import metric_points


def _body(incarnation: int, events: list[object]) -> bytes:
    # 1e999 is a JSON number Python reads as infinity; json.dumps cannot write it, so it is put in by hand.
    return json.dumps({"DocumentIncarnation": incarnation, "Events": events}).replace('"INF"', "1e999").encode()


def test_one_bad_field_and_one_bad_entry_cost_no_other_event(imds: FakeImds, settings: CollectorSettings) -> None:
    """Today's IMDS answer with DurationInSeconds 1e999 in one event, a numeric Description in another and an
    entry without EventId: every event is stored, the two with the field made safe and noted; the entry is
    counted as dropped (no_event_id) and the field repairs as ``repaired``. The same answer again stores
    nothing; once IMDS sends the field well, the event is updated."""
    reader = InMemoryMetricReader()
    provider = make_meter_provider("test", readers=[reader], env={})
    no_id = {k: v for k, v in event("x").items() if k != "EventId"}
    bad = [
        event("a"),
        {**event("b"), "DurationInSeconds": "INF"},
        no_id,
        {**event("c", status="Started"), "Description": 42},
    ]
    imds.script.extend([Scripted(200, _body(5, bad)), Scripted(200, _body(5, bad))])
    agent = build_agent(settings, meter_provider=provider)
    try:
        stored = agent.poll_once()
        assert [(r["event_id"], r["kind"]) for r in stored] == [
            ("a", KIND_APPEARED),
            ("b", KIND_APPEARED),
            ("c", KIND_APPEARED),
        ]
        a, b, c = stored
        assert a["anomaly"] == "" and a["duration_s"] == 7
        assert b["duration_s"] is None and b["description"] == "Host server is undergoing maintenance."
        assert b["anomaly"] == "made safe: DurationInSeconds inf is not an integer: made unknown"
        assert c["description"] is None and c["duration_s"] == 7 and c["status"] == "Started"
        assert c["anomaly"] == "made safe: Description 42 is a JSON int, not a string: made unknown"
        assert agent.poll_once() == []  # the same answer: nothing new

        imds.set_document(6, [event("a"), event("b"), event("c", status="Started")])
        (update_b, update_c) = agent.poll_once()
        assert (update_b["event_id"], update_b["kind"], update_b["changed_fields"]) == (
            "b",
            KIND_UPDATED,
            ["duration_s"],
        )
        assert (update_c["event_id"], update_c["changed_fields"], update_c["anomaly"]) == ("c", ["description"], "")

        errors = {p.attributes["kind"]: p.value for p in metric_points(reader)["sevents.collector.poll_errors"]}
        assert errors == {"repaired": 2, "event_dropped_no_event_id": 2}
        beat = agent.heartbeat()
        assert beat is not None and beat["poll_errors"] == errors and beat["last_poll_ok"] is True
    finally:
        agent.close()
