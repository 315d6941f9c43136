"""Retry as a written policy: exponential backoff with full jitter, a cap, and an overall deadline.

``Backoff`` computes delays; ``retry`` is the loop that applies it, waiting with ``stop.wait(delay)`` so that
shutdown interrupts the wait. Which errors are retryable is decided by the caller at its edge.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Delay before retry ``attempt`` (1-based): random in [0, min(cap, initial * multiplier**(attempt-1))]."""

    initial: float = 0.5
    cap: float = 30.0
    multiplier: float = 2.0
    deadline: float | None = None  # seconds after the first failure after which the caller gives up
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """The wait before the next try; a server's Retry-After is a floor, never shortened by jitter."""
        try:
            growth = self.multiplier ** max(0, attempt - 1)
        except OverflowError:  # past ~1000 attempts (hours into an outage) the cap was reached long ago
            growth = float("inf")
        ceiling = min(self.cap, self.initial * growth) if self.initial > 0 else 0.0
        jittered = self.rng.uniform(ceiling / 2, ceiling)
        return jittered if retry_after is None else max(retry_after, jittered)

    def expired(self, elapsed: float) -> bool:
        """Whether the caller has run past the overall deadline."""
        return self.deadline is not None and elapsed >= self.deadline


class RetryInterrupted(Exception):
    """``stop`` was set while waiting between tries."""


def retry(
    call: Callable[[], T],
    *,
    backoff: Backoff,
    stop: threading.Event,
    retryable: Callable[[Exception], bool] = lambda error: True,
    retry_after: Callable[[Exception], float | None] = lambda error: None,
    on_retry: Callable[[RetryNote], None] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> T:
    """``call()`` until it returns, for callers whose only business between tries is the wait. Loops that do more
    between tries write their own around ``Backoff`` (the ingest handler's insert retries count and log each
    failure and tell a refused row from a server fault; the webhook, the outbox source, the Event Hubs source and
    the attestation fetch keep their own state between tries).

    An exception that ``retryable`` accepts waits ``backoff.delay(attempt, retry_after(error))`` and tries
    again, as long as that wait ends within ``backoff.deadline`` (from the first try; None: no end). Anything
    else, and the last error at the deadline, is raised as it is. ``stop`` ends a wait at once with
    ``RetryInterrupted`` (from the error that was being retried).
    """
    started = monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except Exception as error:
            if not retryable(error):
                raise
            delay = backoff.delay(attempt, retry_after(error))
            elapsed = monotonic() - started
            if backoff.deadline is not None and elapsed + delay > backoff.deadline:
                raise
            if on_retry is not None:
                on_retry(RetryNote(attempt, error, delay, elapsed))
            if stop.wait(delay):
                raise RetryInterrupted() from error


@dataclass(frozen=True)
class RetryNote:
    """What ``retry`` tells ``on_retry`` before it waits: which try failed, why, the wait, the time spent."""

    attempt: int
    error: Exception
    delay: float
    elapsed: float
