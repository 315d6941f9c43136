"""The IMDS client against real loopback servers: headers, proxies, redirects, versions, retries, shutdown."""

from __future__ import annotations

import http.client
import itertools
import json
import logging
import threading
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.fetch import Connections
from collector.imds import ImdsClient, ImdsError, ImdsInterrupted, scheduled_events_url
from collector.imds_policy import SCHEDULED_EVENTS_VERSIONS, ImdsPolicy, choose_version, parse_retry_after
from sevents.retry import Backoff
from tests.collector_edges.fake_imds import FakeImds, Scripted, event

FAST = ImdsPolicy(min_interval_s=0.0, deadline_s=10.0, backoff=Backoff(initial=0.01, cap=0.05))


def client(imds: FakeImds, **kwargs: object) -> ImdsClient:
    options: dict[str, object] = {"policy": FAST}
    options.update(kwargs)
    return ImdsClient(imds.base_url, **options)  # type: ignore[arg-type]


def test_metadata_header_always_sent_and_no_forwarded_for(imds: FakeImds) -> None:
    """Every request, scheduled events and instance alike, carries Metadata: true and no X-Forwarded-For."""
    imds.set_document(3, [event("e1")])
    c = client(imds)
    stop = threading.Event()
    body = c.scheduled_events(stop).body
    c.instance(stop)
    assert json.loads(body)["DocumentIncarnation"] == 3
    assert len(imds.seen) == 2
    for seen in imds.seen:
        assert seen.headers.get("Metadata") == "true"
        assert "X-Forwarded-For" not in seen.headers


def test_one_connection_carries_successive_requests(imds: FakeImds) -> None:
    """Requests reuse the kept-alive connection (IMDS keeps it open): one TCP connection for several polls."""
    c = client(imds)
    for _ in range(3):
        c.scheduled_events(threading.Event())
    c.instance(threading.Event())
    assert len({s.peer for s in imds.seen}) == 1
    c.close()


def test_a_connection_the_server_closed_while_idle_is_replaced(imds: FakeImds) -> None:
    """IMDS closing an idle kept-alive connection costs nothing: the next request opens a new one, first try."""
    errors: list[str] = []
    c = client(imds, on_error=errors.append)
    c.scheduled_events(threading.Event())
    imds.hang_up_idle()
    assert c.scheduled_events(threading.Event()).attempts == 1
    assert errors == []
    assert len({s.peer for s in imds.seen}) == 2


def test_redirect_is_not_followed(imds: FakeImds) -> None:
    """A 302 fails the fetch as kind redirect and its Location is never requested."""
    imds.script.append(Scripted(302, b"", {"Location": imds.base_url + "/elsewhere"}))
    with pytest.raises(ImdsError) as caught:
        client(imds).scheduled_events(threading.Event())
    assert caught.value.kind == "redirect"
    assert [s.path for s in imds.seen] == ["/metadata/scheduledevents"]


def test_version_negotiation_from_newest_versions(imds: FakeImds) -> None:
    """A 400 listing newest-versions switches to the newest version we support among them, and it sticks."""
    imds.versions = ("2019-01-01", "2019-04-01", "2019-08-01")
    c = client(imds, api_version="2020-07-01")
    response = c.scheduled_events(threading.Event())
    assert response.api_version == "2019-08-01"
    assert c.api_version == "2019-08-01"
    c.scheduled_events(threading.Event())
    assert [s.query["api-version"][0] for s in imds.seen] == ["2020-07-01", "2019-08-01", "2019-08-01"]


def test_preview_version_uses_latest_path(imds: FakeImds) -> None:
    """2017-03-01 is fetched from /metadata/latest/scheduledevents, later versions from /metadata/scheduledevents."""
    client(imds, api_version="2017-03-01").scheduled_events(threading.Event())
    client(imds, api_version="2017-08-01").scheduled_events(threading.Event())
    assert [s.path for s in imds.seen] == ["/metadata/latest/scheduledevents", "/metadata/scheduledevents"]


def test_every_supported_version_is_fetchable(imds: FakeImds) -> None:
    """Each api-version from 2017-03-01 to 2020-07-01 is accepted by an IMDS that knows them all."""
    for version in SCHEDULED_EVENTS_VERSIONS:
        assert client(imds, api_version=version).scheduled_events(threading.Event()).api_version == version
    assert len(imds.scheduled()) == len(SCHEDULED_EVENTS_VERSIONS)


def test_429_retry_after_is_honoured(imds: FakeImds) -> None:
    """After a 429 with Retry-After: 1 the next request comes at least one second later."""
    imds.script.append(Scripted(429, b'{"error":"Too many requests"}', {"Retry-After": "1"}))
    errors: list[str] = []
    response = client(imds, on_error=errors.append).scheduled_events(threading.Event())
    first, second = imds.scheduled()
    assert second.at - first.at >= 0.95
    assert response.attempts == 2
    assert errors == ["throttled"]


def test_410_and_500_are_retried(imds: FakeImds) -> None:
    """410 (IMDS updating) and 500 are retried until the document comes back."""
    imds.script.extend([Scripted(410), Scripted(500), Scripted(503), Scripted(410)])
    errors: list[str] = []
    response = client(imds, on_error=errors.append).scheduled_events(threading.Event())
    assert response.attempts == 5
    assert errors == ["updating", "server_error", "server_error", "updating"]


def test_retry_gives_up_after_the_deadline(imds: FakeImds) -> None:
    """A server that keeps answering 500 fails the fetch once the deadline has passed."""
    imds.script.extend([Scripted(500)] * 1000)
    policy = ImdsPolicy(min_interval_s=0.0, deadline_s=0.5, backoff=Backoff(initial=0.05, cap=0.1))
    with pytest.raises(ImdsError) as caught:
        client(imds, policy=policy).scheduled_events(threading.Event())
    assert caught.value.kind == "server_error"
    # Each retry waits at least 0.025 s, so a 0.5 s deadline allows at most ~20 tries, however slow the machine.
    assert 2 <= len(imds.scheduled()) <= 25


def test_other_client_errors_are_not_retried(imds: FakeImds) -> None:
    """A 404 fails at once without a second request."""
    imds.script.append(Scripted(404, b'{"error":"Not found"}'))
    with pytest.raises(ImdsError) as caught:
        client(imds).scheduled_events(threading.Event())
    assert caught.value.kind == "http_404"
    assert len(imds.scheduled()) == 1


def test_slow_first_call_is_tolerated(imds: FakeImds) -> None:
    """A first answer slower than the normal read timeout still succeeds (the first-call timeout applies)."""
    imds.script.append(Scripted(200, b'{"DocumentIncarnation": 1, "Events": []}', delay=1.5))
    policy = ImdsPolicy(min_interval_s=0.0, read_timeout_s=0.5, first_call_timeout_s=10.0, backoff=FAST.backoff)
    errors: list[str] = []
    c = client(imds, policy=policy, on_error=errors.append)
    assert json.loads(c.scheduled_events(threading.Event()).body)["DocumentIncarnation"] == 1
    assert errors == []
    # Once IMDS has answered, the short read timeout applies: the same delay is now a timeout, retried.
    imds.script.append(Scripted(200, b"{}", delay=1.5))
    assert c.scheduled_events(threading.Event()).attempts == 2
    assert errors == ["timeout"]


def test_shutdown_interrupts_a_slow_first_call(imds: FakeImds) -> None:
    """While IMDS takes its time on the first call, setting stop returns control within a fraction of a second."""
    imds.script.append(Scripted(200, b'{"DocumentIncarnation": 1, "Events": []}', delay=20))
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with pytest.raises(ImdsInterrupted):
        client(imds).scheduled_events(stop)
    assert time.monotonic() - started < 10.0  # far below the 20 s the answer would take (generous for loaded CI)


def test_shutdown_interrupts_a_backoff(imds: FakeImds) -> None:
    """A long Retry-After wait ends as soon as stop is set."""
    imds.script.append(Scripted(429, b"", {"Retry-After": "30"}))
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with pytest.raises(ImdsInterrupted):
        client(imds, policy=ImdsPolicy(min_interval_s=0.0, deadline_s=60.0)).scheduled_events(stop)
    assert time.monotonic() - started < 10.0  # far below the 30 s Retry-After (generous for loaded CI)


class TimedConnections(Connections):
    """Real connections that note when each request is handed one, the moment before it leaves the client."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[float] = []

    def take(self, netloc: str, connect_timeout_s: float) -> http.client.HTTPConnection:
        self.sent.append(time.monotonic())
        return super().take(netloc, connect_timeout_s)


def test_requests_are_spaced(imds: FakeImds) -> None:
    """With min_interval_s 0.2, each request leaves the client at least 0.2 s after the previous one was paced."""
    # The client paces on its own clock, then hands the request to a worker thread: the moment the connection is
    # taken is later by however long that thread took to start, which load can stretch for one request and not the
    # next. So the bound is taken from what the client recorded (its pacing moment), never from a fixed tolerance.
    connections = TimedConnections()
    c = client(imds, policy=ImdsPolicy(min_interval_s=0.2), connections=connections)
    paced: list[float] = []
    for _ in range(5):
        c.scheduled_events(threading.Event())
        paced.append(c._last_request)  # one attempt per call (200s): the pacing moment of this call's request
    assert len(connections.sent) == 5
    assert all(p <= s for p, s in zip(paced, connections.sent, strict=True)), "a request left before it was paced"
    assert all(later >= before + 0.2 for before, later in zip(paced, connections.sent[1:], strict=False))


def test_proxy_environment_is_ignored(imds: FakeImds, monkeypatch: pytest.MonkeyPatch) -> None:
    """Black-hole HTTP(S)_PROXY variables do not divert or stop an IMDS request."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    assert client(imds).scheduled_events(threading.Event()).attempts == 1


def test_connection_refused_is_a_connection_error() -> None:
    """Nothing listening is kind connection (retried until the deadline)."""
    policy = ImdsPolicy(min_interval_s=0.0, deadline_s=0.2, backoff=Backoff(initial=0.05, cap=0.05))
    with pytest.raises(ImdsError) as caught:
        ImdsClient("http://127.0.0.1:9", policy=policy).scheduled_events(threading.Event())
    assert caught.value.kind == "connection"


def test_urls_follow_the_convention() -> None:
    """The simulator's per-VM base URLs get the documented paths appended."""
    base = "http://127.0.0.1:8080/vm/web-0/"
    assert scheduled_events_url(base, "2020-07-01") == (
        "http://127.0.0.1:8080/vm/web-0/metadata/scheduledevents?api-version=2020-07-01"
    )


versions = st.sampled_from(["2016-01-01", *SCHEDULED_EVENTS_VERSIONS, "2020-09-01", "2021-02-01", "2023-07-01"])


@given(st.lists(versions, max_size=5), st.sets(st.sampled_from(SCHEDULED_EVENTS_VERSIONS)))
def test_choose_version_picks_a_supported_untried_one(offered: list[str], tried: set[str]) -> None:
    """The negotiated version is always one we support and have not tried, never newer than all offered."""
    choice = choose_version(offered, SCHEDULED_EVENTS_VERSIONS, tried)
    if choice is not None:
        assert choice in SCHEDULED_EVENTS_VERSIONS and choice not in tried
        if offered:
            assert choice <= max(offered)


def test_retry_after_forms() -> None:
    """Retry-After is read as delta-seconds or an HTTP date; junk is ignored."""
    now = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("3", now) == 3.0
    assert parse_retry_after("Sat, 21 Nov 2026 12:00:05 GMT", now) == 5.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None


def test_odd_retry_after_values_are_ignored() -> None:
    """Retry-After digits outside ASCII (latin-1 superscripts pass str.isdigit) read as absent, not a crash."""
    now = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
    for value in ("\xb2", "1\xb9", "-3", "1.5", " 7 "):
        result = parse_retry_after(value, now)
        assert result is None or result >= 0.0
    assert parse_retry_after(" 7 ", now) == 7.0


def test_a_400_with_a_deeply_nested_body_fails_the_fetch_cleanly(imds: FakeImds) -> None:
    """A 400 whose body nests too deep for the JSON parser is an ImdsError (bad_request), not a RecursionError."""
    imds.script.append(Scripted(400, b"[" * 100_000))
    with pytest.raises(ImdsError) as caught:
        client(imds).scheduled_events(threading.Event())
    assert caught.value.kind == "bad_request"


def test_odd_retry_after_header_does_not_crash_a_fetch(imds: FakeImds) -> None:
    """A 429 carrying a latin-1 superscript digit as Retry-After is retried like one without the header."""
    imds.script.append(Scripted(429, b"", {"Retry-After": "\xb2"}))
    assert client(imds).scheduled_events(threading.Event()).attempts == 2


def test_a_slow_answer_is_logged_while_it_is_waited_for(imds: FakeImds, caplog: pytest.LogCaptureFixture) -> None:
    """While a request is outstanding, a line saying how long it has waited appears every 10 s (clock injected)."""
    imds.script.append(Scripted(200, b'{"DocumentIncarnation": 1, "Events": []}', delay=1.0))
    ticks = itertools.count(step=4.0)  # each look at the clock moves it 4 s: a 1 s wait looks like a long one
    c = client(imds, monotonic=lambda: float(next(ticks)))
    with caplog.at_level(logging.INFO, logger="collector.imds"):
        c.scheduled_events(threading.Event())
    waits = [r for r in caplog.records if r.getMessage() == "still waiting for IMDS"]
    assert waits
    assert all(r.waited_s >= 10 and "scheduledevents" in r.url for r in waits)
