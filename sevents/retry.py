"""Retry as a written policy: exponential backoff with full jitter, a cap, and an overall deadline.

The policy only computes delays; callers wait with ``stop.wait(delay)`` so that shutdown interrupts
the wait. Which errors are retryable is decided by the caller at its edge.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


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
