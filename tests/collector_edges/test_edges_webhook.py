"""The per-VM webhook, end to end: a real collector process, the fake IMDS, and a receiver on loopback."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from collector.settings import load_settings
from sevents.errors import ConfigError
from tests.collector_edges.fake_imds import FakeImds, event
from tests.collector_edges.test_edges_cli import COLLECTOR, clean_env
from tests.helpers import wait_for


class Receiver:
    """An HTTP endpoint on loopback that keeps what was POSTed and when; ``fail`` first answers 503 that often."""

    def __init__(self, fail: int = 0) -> None:
        self.received: list[tuple[float, dict[str, Any]]] = []
        self.fail = fail
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.fail > 0:
                    receiver.fail -= 1
                    self.send_response(503)
                else:
                    receiver.received.append((time.monotonic(), json.loads(body)))
                    self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks/T0K3N"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _run(imds: FakeImds, state: Path, hook: Receiver, **extra: str) -> subprocess.Popen[bytes]:
    argv = [COLLECTOR, "run", "--imds-url", imds.base_url, "--state-dir", str(state), "--min-request-interval", "0"]
    env = clean_env(SEVENTS_WEBHOOK_URL=hook.url, SEVENTS_POLL_INTERVAL="1.0", **extra)
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _served_after(imds: FakeImds, moment: float) -> list[float]:
    with imds.lock:
        return [s.at for s in imds.seen if "scheduledevents" in s.path and s.at >= moment]


@pytest.mark.slow
def test_a_preempt_reaches_the_webhook_within_one_poll(imds: FakeImds, tmp_path: Path) -> None:
    """The Preempt's record is POSTed before the collector's next poll after the one that saw it (what the
    collector could know, and when); a Reboot (not among the webhook's types) is never sent; the receiver's first
    503 is retried."""
    hook = Receiver(fail=1)
    collector = _run(imds, tmp_path / "state", hook)
    try:
        wait_for(lambda: _served_after(imds, 0), 60, what="a first poll")
        appeared = time.monotonic()
        imds.set_document(2, [event("PRE-1", event_type="Preempt"), event("RB-1", event_type="Reboot")])
        wait_for(lambda: hook.received, 60, what="the webhook's POST", interval=0.02)
        # the polls after the one that saw it: what the POST is compared with
        wait_for(lambda: len(_served_after(imds, appeared)) >= 3, 60, what="three polls after the change")
        polls = _served_after(imds, appeared)
        collector.send_signal(signal.SIGTERM)
        _, err = collector.communicate(timeout=30)
    finally:
        if collector.poll() is None:
            collector.kill()
        hook.close()
    assert collector.returncode == 0, err.decode()
    assert [(r["event_id"], r["event_type"], r["kind"]) for _, r in hook.received] == [("PRE-1", "Preempt", "appeared")]
    received_at, record = hook.received[0]
    assert record["record_type"] == "transition" and record["vm_name"] == "web-0"
    # the poll that saw it was the first after the change; the POST (after one 503 and its retry) came before the
    # collector's next poll but one: within one poll of the document being served
    assert len(polls) >= 3 and received_at < polls[2]
    assert b"T0K3N" not in err  # the URL holds a token: never logged


def test_a_webhook_url_must_be_http_and_its_types_known(tmp_path: Path) -> None:
    """A bad URL or event type is a start-up error naming the setting, never the URL's value."""
    with pytest.raises(ConfigError) as caught:
        load_settings(
            env={"SEVENTS_WEBHOOK_URL": "ftp://hooks/T0K3N", "SEVENTS_WEBHOOK_EVENT_TYPES": "Preempt,Terminat"}
        )
    message = str(caught.value)
    assert "webhook_url must be an http:// or https:// URL (value not shown)" in message and "T0K3N" not in message
    assert "did you mean 'Terminate'?" in message
    settings = load_settings(env={"SEVENTS_WEBHOOK_URL": "https://hooks.example/T0K3N"})
    assert settings.webhook_event_types == ("Preempt", "Terminate") and "T0K3N" not in repr(settings)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["slack", "teams"])
def test_a_chat_tool_gets_its_own_shape_of_message(imds: FakeImds, tmp_path: Path, fmt: str) -> None:
    """With webhook_format slack or teams the receiver gets a chat message naming the event, its type, the VM and
    the NotBefore, never the raw record a chat tool would reject."""
    hook = Receiver()
    collector = _run(imds, tmp_path / "state", hook, SEVENTS_WEBHOOK_FORMAT=fmt)
    try:
        wait_for(lambda: _served_after(imds, 0), 60, what="a first poll")
        imds.set_document(2, [event("PRE-9", event_type="Preempt")])
        wait_for(lambda: hook.received, 60, what="the webhook's POST", interval=0.02)
        collector.send_signal(signal.SIGTERM)
        _, err = collector.communicate(timeout=30)
    finally:
        if collector.poll() is None:
            collector.kill()
        hook.close()
    assert collector.returncode == 0, err.decode()
    (_, message), *_ = hook.received
    if fmt == "slack":
        assert list(message) == ["text"]
        text = message["text"]
    else:
        assert message["type"] == "message"
        (attachment,) = message["attachments"]
        assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
        card = attachment["content"]
        assert card["type"] == "AdaptiveCard"
        text = card["body"][0]["text"]
        facts = {fact["title"]: fact["value"] for fact in card["body"][1]["facts"]}
        assert facts["VM"] == "web-0" and facts["EventId"] == "PRE-9" and facts["Status"] == "Scheduled"
    assert text.startswith("Preempt scheduled on web-0, NotBefore ") and "PRE-9" in text
    assert "record_type" not in json.dumps(message)


def test_an_unknown_webhook_format_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"webhook_format.*did you mean 'slack'"):
        load_settings(env={"SEVENTS_WEBHOOK_URL": "https://hooks.example.com/x", "SEVENTS_WEBHOOK_FORMAT": "slak"})
