"""Backoff policy and structured logs."""

from __future__ import annotations

import io
import json
import logging
import random

from sevents.logs import setup_logging
from sevents.retry import Backoff


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
