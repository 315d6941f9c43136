"""Partition balancing (pure): live workers never take partitions from each other once the set of workers is stable."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ingest.eh_balance import Claim, plan

PARTITIONS = ["0", "1", "2", "3"]
EXPIRY = 10.0


def _claims(owners: dict[str, str], at: float = 100.0) -> dict[str, Claim]:
    return {p: Claim(p, owner, at, f"etag-{p}") for p, owner in owners.items()}


def test_a_lone_worker_claims_every_partition() -> None:
    """Nothing claimed yet: one worker takes all four."""
    decided = plan(PARTITIONS, {}, "a", now=100.0, expiry=EXPIRY)
    assert [c.partition_id for c in decided.claim] == PARTITIONS and not decided.release


def test_balanced_workers_only_renew_their_own() -> None:
    """Two workers with two partitions each: each renews its two, with their etags, and claims nothing else."""
    claims = _claims({"0": "a", "1": "a", "2": "b", "3": "b"})
    decided = plan(PARTITIONS, claims, "a", now=101.0, expiry=EXPIRY)
    assert decided.claim == (claims["0"], claims["1"]) and not decided.release and not decided.taken_from


def test_a_restarted_worker_resumes_its_own_partitions_before_they_expire() -> None:
    """The same owner id after a restart renews its claims at once; the live other worker keeps its own."""
    claims = _claims({"0": "a", "1": "a", "2": "b", "3": "b"}, at=100.0)
    decided = plan(PARTITIONS, claims, "b", now=103.0, expiry=EXPIRY)
    assert [c.partition_id for c in decided.claim] == ["2", "3"]
    survivor = plan(PARTITIONS, claims, "a", now=103.0, expiry=EXPIRY)
    assert [c.partition_id for c in survivor.claim] == ["0", "1"]  # not expired: not taken


def test_a_dead_workers_partitions_are_taken_once_expired() -> None:
    """b stopped renewing: after the expiry a claims b's partitions too."""
    claims = {**_claims({"0": "a", "1": "a"}, at=120.0), **_claims({"2": "b", "3": "b"}, at=100.0)}
    assert [c.partition_id for c in plan(PARTITIONS, claims, "a", now=109.0, expiry=EXPIRY).claim] == ["0", "1"]
    assert [c.partition_id for c in plan(PARTITIONS, claims, "a", now=111.0, expiry=EXPIRY).claim] == PARTITIONS


def test_released_partitions_are_free_at_once() -> None:
    """A clean stop releases (owner ""): the other worker claims them without waiting for the expiry."""
    claims = _claims({"0": "a", "1": "a", "2": "", "3": ""})
    assert [c.partition_id for c in plan(PARTITIONS, claims, "a", now=101.0, expiry=EXPIRY).claim] == PARTITIONS


def test_a_joining_worker_takes_one_partition_per_round_from_the_busiest() -> None:
    """a holds all four, b joins: b takes one (a move, logged), and a releases down to its share next round."""
    claims = _claims({p: "a" for p in PARTITIONS})
    joining = plan(PARTITIONS, claims, "b", now=101.0, expiry=EXPIRY)
    assert [c.partition_id for c in joining.claim] == ["3"] and joining.taken_from == "a"
    after = {**claims, "3": Claim("3", "b", 101.0, "etag-3b")}
    holder = plan(PARTITIONS, after, "a", now=102.0, expiry=EXPIRY)
    assert [c.partition_id for c in holder.claim] == ["0", "1"] and [c.partition_id for c in holder.release] == ["2"]


@given(st.lists(st.sampled_from(["a", "b", "c", ""]), min_size=4, max_size=4), st.sampled_from(["a", "b", "c"]))
def test_no_partition_is_taken_from_a_live_worker_holding_no_more_than_its_share(owners: list[str], me: str) -> None:
    """Whatever the claims, a worker only claims its own, free ones, or one from a worker above its share."""
    claims = _claims(dict(zip(PARTITIONS, owners, strict=True)))
    decided = plan(PARTITIONS, claims, me, now=101.0, expiry=EXPIRY)
    live = {o for o in owners if o}
    share = -(-len(PARTITIONS) // len(live | {me}))
    for claim in decided.claim:
        holder = claims[claim.partition_id].owner_id
        assert holder in ("", me) or owners.count(holder) > share
    assert len([c for c in decided.claim if claims[c.partition_id].owner_id not in ("", me)]) <= 1
