"""Backoff policy, the retry loop, and structured logs."""

from __future__ import annotations

import io
import json
import logging
import random
import threading
import time

import pytest

from sevents.logs import setup_logging
from sevents.retry import Backoff, RetryInterrupted, RetryNote, retry


def test_backoff_grows_to_its_cap_with_jitter_in_the_upper_half() -> None:
    """Each delay lies between half and all of min(cap, initial * multiplier**(attempt-1))."""
    policy = Backoff(initial=1.0, cap=8.0, rng=random.Random(7))
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (10, 8.0)]:
        for _ in range(50):
            assert ceiling / 2 <= policy.delay(attempt) <= ceiling


def test_retry_after_is_a_floor() -> None:
    """A server's Retry-After is never shortened by jitter."""
    policy = Backoff(initial=0.1, cap=0.2, rng=random.Random(1))
    assert policy.delay(1, retry_after=5.0) == 5.0


def test_deadline() -> None:
    """The policy says when the caller has run out of time."""
    assert not Backoff(deadline=70).expired(69.9)
    assert Backoff(deadline=70).expired(70)
    assert not Backoff().expired(10**9)


def test_json_logs_carry_extra_fields() -> None:
    """Off a terminal, every log line is a JSON object with the extras as fields."""
    stream = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("info", stream=stream)
        logging.getLogger("sevents.test").info("polled", extra={"incarnation": 3, "vm": "a"})
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    entry = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert entry["message"] == "polled"
    assert entry["incarnation"] == 3 and entry["vm"] == "a"
    assert entry["level"] == "info" and entry["time"].endswith("Z")


class Flaky:
    """Fails with the given errors in turn, then returns the number of calls."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.calls


def test_retry_tries_again_until_the_call_returns() -> None:
    """Retryable errors are retried after the backoff delay; the call's result comes back."""
    notes: list[RetryNote] = []
    call = Flaky(OSError("a"), OSError("b"))
    assert retry(call, backoff=Backoff(initial=0.01, cap=0.01), stop=threading.Event(), on_retry=notes.append) == 3
    assert [n.attempt for n in notes] == [1, 2]
    assert all(0.005 <= n.delay <= 0.01 for n in notes)


def test_retry_raises_what_it_may_not_retry_and_the_last_error_at_the_deadline() -> None:
    """A non-retryable error is raised at once; a retryable one once the next wait would pass the deadline."""
    with pytest.raises(KeyError):
        retry(Flaky(KeyError("k")), backoff=Backoff(), stop=threading.Event(), retryable=lambda e: False)
    call = Flaky(*(OSError(str(n)) for n in range(100)))
    with pytest.raises(OSError):
        retry(call, backoff=Backoff(initial=0.05, cap=0.05, deadline=0.2), stop=threading.Event())
    assert 2 <= call.calls <= 9


def test_retry_wait_is_interrupted_by_stop() -> None:
    """Setting stop ends a long wait at once with RetryInterrupted."""
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    with pytest.raises(RetryInterrupted):
        retry(Flaky(OSError("x")), backoff=Backoff(initial=60.0, cap=60.0), stop=stop)
    assert time.monotonic() - started < 30.0  # far below the 30-60 s wait
