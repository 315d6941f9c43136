"""The webhook's body per format (pure): a chat tool gets only its own shape, built from any record's fields."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from collector.webhook import FORMATS, body, summary

FIELDS = ("event_id", "event_type", "vm_name", "vm_id", "status", "not_before", "event_source")
records = st.fixed_dictionaries(
    {"record_type": st.just("transition"), "kind": st.sampled_from(("appeared", "status_changed", "updated"))},
    optional={name: st.one_of(st.none(), st.text(max_size=40)) for name in FIELDS},
)


@given(records, st.sampled_from(FORMATS))
def test_every_format_is_json_of_its_receivers_shape(record: dict[str, Any], fmt: str) -> None:
    sent = body(record, fmt)
    json.dumps(sent)  # what is POSTed is JSON, whatever the text
    if fmt == "json":
        assert sent == record
    elif fmt == "slack":
        assert sent == {"text": summary(record)}
    else:
        assert sent["type"] == "message" and len(sent["attachments"]) == 1
        card = sent["attachments"][0]["content"]
        assert card["type"] == "AdaptiveCard" and card["body"][0]["text"] == summary(record)
        assert all(fact["value"] for fact in card["body"][1]["facts"])


@given(records)
def test_the_line_names_the_event_and_its_moment(record: dict[str, Any]) -> None:
    line = summary(record)
    assert "\n" not in line or any("\n" in str(v) for v in record.values())
    if record.get("event_id"):
        assert record["event_id"] in line
    if record.get("not_before"):
        assert f"NotBefore {record['not_before']}" in line


def test_a_scheduled_reboot_reads_as_a_person_would_write_it() -> None:
    record = {
        "record_type": "transition",
        "kind": "appeared",
        "event_type": "Reboot",
        "vm_name": "web-1",
        "event_id": "E1",
        "status": "Scheduled",
        "not_before": "2026-11-26T12:00:00Z",
        "event_source": "Platform",
    }
    assert summary(record) == "Reboot scheduled on web-1, NotBefore 2026-11-26T12:00:00Z (event E1, source Platform)"
    assert summary({**record, "kind": "status_changed", "status": "Started"}).startswith("Reboot now Started on web-1")
    assert summary({**record, "kind": "updated"}).startswith("Reboot moved its NotBefore on web-1")
