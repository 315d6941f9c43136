"""Which Event Hubs partitions a worker holds next round (pure): claims in, the partitions to claim out.

Theory of operation. Every worker renews its claims each balancing round; a claim not renewed for
``expiry`` seconds belongs to a dead worker. The rules, in order, are chosen so that healthy workers never
take partitions from each other in steady state (every move costs a link and seconds of latency):

| situation                                        | action                                             |
|--------------------------------------------------|----------------------------------------------------|
| a claim carries my owner id                      | renew it (a worker restarted under the same id     |
|                                                  | resumes its partitions at once, before expiry)     |
| I hold more than my share                        | release the excess (an orderly hand-over)          |
| a partition is unclaimed, released or expired    | claim it, up to my share                           |
| I hold less than the floor share, nothing is free| take one from the owner holding the most, only if  |
|                                                  | it holds more than its share (a worker joined)     |

``share`` is ceil(partitions / live owners), counting me: the shares add up to at least the partitions, so
none stays unowned. The last rule is the only move between live workers; it happens when the set of
workers changes (a new worker has no claims, so the others cannot see it), never when it stays the same.

How soon a worker's partitions are served again (``ingest.source_eventhubs``): the claim store is all the
workers know of each other (Event Hubs tells a receiver nothing of another's link), so

| how the worker ended                       | its partitions are served again after                          |
|--------------------------------------------|----------------------------------------------------------------|
| restarted under the same owner id          | its restart: it renews its own claims before the first round   |
| stopped cleanly (SIGTERM)                  | at most one interval: it released them, the others' next round |
| killed, and not back under its id          | ``expiry`` after its last renewal, plus up to one interval     |

so a stable owner id per worker (pod or unit name) and a short interval and expiry bound the takeover; the
benchmark's workers use 0.5 s and 6 s (``benchmarks/bench_eventhubs.py``: a killed worker restarted under its
id served its partitions again 0.8 to 2.4 s after the kill).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    """One partition's ownership record as the checkpoint store lists it."""

    partition_id: str
    owner_id: str  # "" when released
    last_modified: float  # seconds since the epoch
    etag: str | None = None


@dataclass(frozen=True)
class Plan:
    """What to ask the store for: ``claim`` (renewals and new claims, with their etags) and ``release``."""

    claim: tuple[Claim, ...]
    release: tuple[Claim, ...]
    taken_from: str = ""  # the live owner a partition is taken from ("" when none)


def live(claim: Claim, now: float, expiry: float) -> bool:
    return bool(claim.owner_id) and now - claim.last_modified < expiry


def plan(partitions: Sequence[str], claims: Mapping[str, Claim], me: str, now: float, expiry: float) -> Plan:
    """The claims to make this round (see the table in the module docstring)."""
    mine = [claims[p] for p in partitions if p in claims and claims[p].owner_id == me]
    others: dict[str, list[Claim]] = {}
    for p in partitions:
        c = claims.get(p)
        if c is not None and c.owner_id != me and live(c, now, expiry):
            others.setdefault(c.owner_id, []).append(c)
    owners = len(others) + 1
    share = math.ceil(len(partitions) / owners)
    keep, release = mine[:share], mine[share:]
    free = [
        claims.get(p) or Claim(p, "", 0.0)
        for p in partitions
        if (p not in claims or not live(claims[p], now, expiry)) and (p not in claims or claims[p].owner_id != me)
    ]
    new = free[: max(0, share - len(keep))]
    taken_from = ""
    if not new and len(keep) < len(partitions) // owners and others:
        richest, held = max(others.items(), key=lambda item: (len(item[1]), item[0]))
        if len(held) > share:
            new, taken_from = [max(held, key=lambda c: c.partition_id)], richest
    return Plan(tuple(keep) + tuple(new), tuple(release), taken_from)
