"""What one alerts on for the collector itself: sink sends, webhook posts, approval decisions, hook runs, the last
successful poll and the build; a real daemon whose Event Hubs namespace is unreachable shows it in /metrics."""

from __future__ import annotations

import json
import platform
import signal
import socket
import sys
import threading
import time
import urllib.error
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.eventhub.exceptions import AuthenticationError, ConnectError, EventDataSendError, OperationTimeoutError
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from collector.approval import ApprovalPolicy
from collector.approver import Approver
from collector.decode import decode_document
from collector.imds import ImdsClient
from collector.metrics import CollectorMetrics
from collector.model import Snapshot, VmIdentity
from collector.outbox import Outbox, OutboxFull
from collector.ship import Shipper, SinkError, failure_reason
from collector.transitions import diff
from collector.webhook import Webhook, post_failure
from sevents.retry import Backoff
from sevents.telemetry import make_meter_provider
from sevents.version import version
from tests.collector_edges.daemon import start_collector
from tests.collector_edges.fake_imds import FakeImds, event
from tests.collector_edges.test_edges_agent import ScriptedSink
from tests.collector_edges.test_edges_cli import clean_env
from tests.collector_edges.test_edges_webhook import Receiver
from tests.helpers import metric_points, scrape_samples, wait_for


def _metrics(**kwargs: Any) -> tuple[CollectorMetrics, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return CollectorMetrics(make_meter_provider("test", readers=[reader], env={}), **kwargs), reader


def _values(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    return {tuple(sorted(p.attributes.items())): p.value for p in metric_points(reader).get(name, [])}


# -- the figures, updated where things happen ------------------------------------------------------------------
def test_last_successful_poll_is_zero_until_one_succeeds_then_its_unix_time() -> None:
    now = [1000.0]
    metrics, reader = _metrics(wall=lambda: now[0])
    metrics.poll(ok=False)
    assert _values(reader, "sevents.collector.last_successful_poll_timestamp") == {(): 0.0}
    now[0] = 1234.5
    metrics.poll(ok=True)
    now[0] = 2000.0
    metrics.poll(ok=False)  # a failure does not move it
    assert _values(reader, "sevents.collector.last_successful_poll_timestamp") == {(): 1234.5}


def test_build_info_reads_the_version_once_and_the_api_version_in_use() -> None:
    metrics, reader = _metrics()
    reads, api = [], ["2020-07-01"]
    metrics.build(version=lambda: reads.append(1) or "9.9.9", api_version=lambda: api[0])
    first = _values(reader, "sevents.collector.build_info")
    api[0] = "2019-08-01"  # negotiated down
    second = _values(reader, "sevents.collector.build_info")
    python = ("python_version", platform.python_version())
    assert first == {(("api_version", "2020-07-01"), python, ("version", "9.9.9")): 1}
    assert second == {(("api_version", "2019-08-01"), python, ("version", "9.9.9")): 1}
    assert reads == [1]


def test_no_figure_carries_a_collector_label_unless_asked_for() -> None:
    metrics, reader = _metrics()
    metrics.poll(ok=True)
    labelled, labelled_reader = _metrics(collector="vm-a")
    labelled.poll(ok=True)
    assert all("collector" not in p.attributes for p in metric_points(reader)["sevents.collector.polls"])
    assert all(p.attributes["collector"] == "vm-a" for p in metric_points(labelled_reader)["sevents.collector.polls"])


@pytest.mark.parametrize(
    ("cause", "reason"),
    [
        (ConnectError("refused"), "connection"),
        (AuthenticationError("bad key"), "auth"),
        (ClientAuthenticationError("no token"), "auth"),
        (OperationTimeoutError("slow"), "timeout"),
        (EventDataSendError("quota"), "refused"),
        (ConnectionRefusedError(111, "refused"), "connection"),
        (TimeoutError(), "timeout"),
        (OutboxFull("full"), "outbox"),
        (ValueError("?"), "other"),
        (None, "refused"),
    ],
)
def test_a_send_failure_has_a_bounded_reason(cause: BaseException | None, reason: str) -> None:
    error = SinkError("no")
    error.__cause__ = cause
    assert failure_reason(error) == reason


def test_shipper_counts_each_send_by_result_and_the_records_accepted(tmp_path: Path) -> None:
    metrics, reader = _metrics()
    metrics.sink_ready("eventhubs")
    assert _values(reader, "sevents.collector.sink_sends") == {(("result", "ok"), ("sink", "eventhubs")): 0}
    with Outbox(tmp_path / "o.sqlite") as outbox:
        outbox.commit([{"record_type": "heartbeat", "n": i} for i in range(3)], None)
        shipper = Shipper(
            outbox,
            ScriptedSink(failures=2),
            backoff=Backoff(initial=0.01, cap=0.01),
            on_sent=lambda n: metrics.sink_sent("eventhubs", n),
            on_failed=lambda reason: metrics.sink_failed("eventhubs", reason),
        )
        assert shipper.flush(10.0)
    assert _values(reader, "sevents.collector.sink_sends") == {
        (("result", "ok"), ("sink", "eventhubs")): 1,
        (("reason", "refused"), ("result", "failed"), ("sink", "eventhubs")): 2,
    }
    assert _values(reader, "sevents.collector.sink_records") == {(("sink", "eventhubs"),): 3}


def test_webhook_counts_each_post_attempt_and_why_it_failed() -> None:
    metrics, reader = _metrics()
    metrics.webhook_ready()
    receiver = Receiver(fail=1)  # a 503, then accepted
    try:
        hook = Webhook(receiver.url, ["Preempt"], backoff=Backoff(initial=0.01, cap=0.01), on_post=metrics.webhook_post)
        stop = threading.Event()
        worker = threading.Thread(target=hook.run, args=(stop,), daemon=True)
        worker.start()
        hook.notify([{"record_type": "transition", "kind": "appeared", "event_type": "Preempt", "event_id": "e"}])
        wait_for(lambda: hook.sent == 1)
        stop.set()
        worker.join(5)
    finally:
        receiver.close()
    assert _values(reader, "sevents.collector.webhook_posts") == {
        (("result", "ok"),): 1,
        (("reason", "http_503"), ("result", "failed")): 1,
    }


def test_post_failure_reasons() -> None:
    http = urllib.error.HTTPError("http://x/", 429, "slow down", {}, None)  # type: ignore[arg-type]
    assert post_failure(http) == "http_429"
    assert post_failure(urllib.error.URLError(ConnectionRefusedError(111, "refused"))) == "connection"
    assert post_failure(urllib.error.URLError(TimeoutError("timed out"))) == "timeout"
    assert post_failure(TimeoutError("timed out")) == "timeout"
    assert post_failure(ValueError("unknown url type")) == "invalid"


def test_approver_counts_decisions_and_hook_outcomes(tmp_path: Path) -> None:
    """A failing pre-hook: one pre run ``failed`` and a ``hook_failed`` decision; an uncovered type: ``not_covered``."""
    metrics, reader = _metrics()
    policy = ApprovalPolicy(enabled=True, event_types=("Reboot",), pre_hook=(sys.executable, "-c", "exit(3)"))
    body = json.dumps({"DocumentIncarnation": 1, "Events": [event("r"), event("f", event_type="Freeze")]}).encode()
    snapshot, _ = diff(Snapshot.empty(), decode_document(body), datetime.now(UTC))
    client = cast(ImdsClient, SimpleNamespace(api_version="2020-07-01"))
    with Outbox(tmp_path / "o.sqlite") as outbox:
        approver = Approver(
            policy,
            client,
            outbox,
            clock=lambda: datetime.now(UTC),
            collector_version="0",
            on_decision=metrics.approval_decision,
            on_hook=metrics.hook_run,
        )
        approver.offer(snapshot, VmIdentity("id-0", "web-0"), threading.Event())  # no worker: jobs run now
    assert _values(reader, "sevents.collector.approval_decisions") == {
        (("decision", "not_covered"),): 1,
        (("decision", "hook_failed"),): 1,
    }
    assert _values(reader, "sevents.collector.hook_runs") == {(("outcome", "failed"), ("phase", "pre")): 1}


# -- the daemon, scraped -----------------------------------------------------------------------------------
def _sum(samples: list[Any], name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


@pytest.mark.slow
def test_an_unreachable_event_hubs_namespace_shows_in_metrics_at_the_first_send(imds: FakeImds, tmp_path: Path) -> None:
    """Event Hubs on a closed loopback port: the failed send is on /metrics by the time the shipper logs it (the
    first moment the process itself knows), next to the last successful poll and the build."""
    imds.set_document(1, [event("a")])
    with socket.socket() as closed:  # bound, never listening: connections are refused, the port stays ours
        closed.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{closed.getsockname()[1]}"
        secret = (
            f"Endpoint=sb://{endpoint};SharedAccessKeyName=k;SharedAccessKey=v;EntityPath=hub;"
            "UseDevelopmentEmulator=true"
        )
        started = time.time()
        env = clean_env(SEVENTS_SINK="eventhubs", SEVENTS_EVENTHUBS_CONNECTION_STRING=secret, SEVENTS_DRAIN_TIMEOUT="1")
        process, logs = start_collector(imds.base_url, tmp_path / "state", "--poll-interval", "0.2", env=env)
        try:
            port = logs.metrics_port()
            before = scrape_samples(port)
            refused = "sink refused a batch; will retry"
            wait_for(lambda: any(line.get("message") == refused for line in logs.lines), timeout=120)
            samples = scrape_samples(port)  # the counter moves before the line is logged
            print(f"first failed send on /metrics {time.time() - started:.1f} s after the start")
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0
        finally:
            process.kill()
            process.wait()
    first = next(line for line in logs.lines if line.get("message") == refused)
    assert first["reason"] == "connection"
    assert _sum(before, "sevents_collector_sink_sends_total", sink="eventhubs", result="ok") == 0
    failed = _sum(samples, "sevents_collector_sink_sends_total", sink="eventhubs", result="failed", reason="connection")
    assert failed >= 1
    assert _sum(samples, "sevents_collector_sink_records_total", sink="eventhubs") == 0
    last_ok = _sum(samples, "sevents_collector_last_successful_poll_timestamp_seconds")
    assert started <= last_ok <= time.time()
    build = [s for s in samples if s.name == "sevents_collector_build_info"]
    assert [(s.value, s.labels) for s in build] == [
        (1.0, {"version": version(), "python_version": platform.python_version(), "api_version": "2020-07-01"})
    ]
    assert not any("collector" in s.labels for s in samples)
