"""Traces that go somewhere: a real collector and a real ingest export spans to a local OTLP/HTTP receiver, and
one transition can be followed from its commit on the VM to its insert into ClickHouse by its trace id."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.collector_edges.fake_imds import FakeImds, event
from tests.helpers import wait_for

BIN = Path(sys.executable).parent


class OtlpReceiver:
    """The OTLP/HTTP protobuf endpoint of a collector of telemetry, on loopback: keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces":
                    receiver.take(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            service = next(a.value.string_value for a in resource.resource.attributes if a.key == "service.name")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        {
                            "service": service,
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "links": [link.trace_id.hex() for link in span.links],
                        }
                    )

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.slow
def test_one_transition_is_followed_from_the_vm_to_its_row(tmp_path: Path) -> None:
    imds = FakeImds().start()
    receiver = OtlpReceiver()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEVENTS_", "OTEL_")) and "PROXY" not in k}
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    state = tmp_path / "vm"
    imds.set_document(1, [event("EV-1")])
    argv = [str(BIN / "sevents-collector"), "run", "--imds-url", imds.base_url, "--state-dir", str(state)]
    collector = subprocess.Popen([*argv, "--min-request-interval", "0"], env=env, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _committed(state), 60, what="a committed transition", interval=0.1)
        collector.send_signal(signal.SIGTERM)
        _, err = collector.communicate(timeout=30)
        assert collector.returncode == 0, err.decode()
        (record_id,) = _committed(state)
        target = f"chdb://{tmp_path / 'ch'}"
        ingest = subprocess.run(
            [str(BIN / "sevents-ingest"), "run", "--until-idle", "--source", f"outbox:{state}", "--clickhouse", target],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert ingest.returncode == 0, ingest.stderr.decode()
    finally:
        if collector.poll() is None:
            collector.kill()
        receiver.close()
        imds.stop()
    names = {(s["service"], s["name"]) for s in receiver.spans}
    assert ("sevents-collector", "sevents.collector.poll") in names
    commits = [s for s in receiver.spans if s["name"] == "sevents.collector.commit" and s["trace_id"] == record_id]
    assert commits and commits[0]["service"] == "sevents-collector"  # the commit on the VM, in the record's trace
    inserts = [s for s in receiver.spans if s["name"] == "sevents.ingest.insert" and record_id in s["links"]]
    assert inserts and inserts[0]["service"] == "sevents-ingest"  # the insert into ClickHouse, linked to it


def _committed(state: Path) -> list[str]:
    """The record ids of the transitions in the collector's outbox (read only)."""
    path = state / "outbox.sqlite"
    if not path.exists():
        return []
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records'").fetchall():
            return []  # the collector has created the file, not yet its schema
        rows = db.execute("SELECT payload FROM records WHERE record_type = 'transition'").fetchall()
    return [json.loads(payload)["record_id"] for (payload,) in rows]
