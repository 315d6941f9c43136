"""The IMDS client's retry and negotiation policy, pure: what to retry, how long to wait, which api-version next.

Retry policy (per fetch): retry on 429 (Retry-After is a floor), 410 (IMDS updating, up to ~70 s), 5xx,
timeouts and connection errors, with full-jitter exponential backoff, until ``deadline_s`` has passed.
A 400 naming ``newest-versions`` switches to the newest api-version we support among them and tries again
at once; the configured version is asked for again every ``retry_newer_after_s``. Anything else
(redirects, other 4xx) fails the fetch without retry. ``collector.imds`` applies
this policy to real HTTP; everything here is a pure function of its arguments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Final

from sevents.retry import Backoff

SCHEDULED_EVENTS_VERSIONS: Final = (
    "2017-03-01",
    "2017-08-01",
    "2017-11-01",
    "2019-01-01",
    "2019-04-01",
    "2019-08-01",
    "2020-07-01",
)
DEFAULT_API_VERSION: Final = "2020-07-01"
# Has every field VmIdentity needs (resourceId arrived in 2019-03-11).
DEFAULT_INSTANCE_API_VERSION: Final = "2021-02-01"

# Error kinds (also the labels of the poll-error metric).
RETRYABLE_KINDS: Final = frozenset({"throttled", "updating", "server_error", "timeout", "connection"})

# Retry-After in delta-seconds: ASCII digits only (str.isdigit also accepts "²", which float() refuses).
_DELTA_SECONDS: Final = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class ImdsPolicy:
    """Timeouts, pacing and retry of the client."""

    connect_timeout_s: float = 3.0
    first_call_timeout_s: float = 130.0  # the whole first answer; the docs allow the first call up to 2 minutes
    read_timeout_s: float = 10.0  # the whole answer (headers and body), not each read
    max_body_bytes: int = 256 * 1024  # an IMDS document is a few KiB; more is a fault of that fetch
    min_interval_s: float = 0.4  # at most 2.5 requests/s from this client
    retry_newer_after_s: float = 3600.0  # after a downgrade, ask for the configured api-version again this often
    deadline_s: float = 75.0  # one fetch gives up after this long (410 lasts up to ~70 s)
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.5, cap=10.0))


def choose_version(offered: Sequence[str], supported: Sequence[str], tried: Collection[str]) -> str | None:
    """The api-version to try after a 400 listing ``offered``: the newest we support and have not tried.

    Prefer one the server names; otherwise the newest of ours not newer than the newest it names
    (IMDS lists only its few newest versions overall, and older ones keep working).
    """
    fresh = [v for v in supported if v not in tried]
    named = [v for v in fresh if v in offered]
    if named:
        return max(named)
    ceiling = max(offered, default=None)
    older = [v for v in fresh if ceiling is None or v <= ceiling]
    return max(older, default=None)


def newest_versions(body: bytes) -> list[str] | None:
    """The ``newest-versions`` a 400 body names, or None when it names none (any body, never an exception)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    versions = document.get("newest-versions") if isinstance(document, dict) else None
    if not isinstance(versions, list):
        return None
    return [v for v in versions if isinstance(v, str)]


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if _DELTA_SECONDS.fullmatch(text):
        return float(text)
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return max(0.0, (moment - now).total_seconds())


def classify(status: int) -> str:
    """The error kind of a non-200 HTTP status."""
    if status == 429:
        return "throttled"
    if status == 410:
        return "updating"
    if status >= 500:
        return "server_error"
    if 300 <= status < 400:
        return "redirect"
    if status == 400:
        return "bad_request"
    return f"http_{status}"
