"""Overlap: a batch is acknowledged only after it was stored, in order, and a failed one never is."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from ingest.overlap import Overlap
from ingest.source import Delivery


class ScriptedStore:
    """A staged deliver whose store waits for a go-ahead per batch and fails on cue."""

    def __init__(self, fail: set[str] = frozenset()) -> None:  # type: ignore[assignment] -- a frozenset is a set here
        self.fail = fail
        self.prepared: list[str] = []
        self.stored: list[str] = []
        self.go: dict[str, threading.Event] = {}

    def prepare(self, deliveries: Sequence[Delivery]) -> str:
        name = deliveries[0].position
        self.prepared.append(name)
        self.go[name] = threading.Event()
        return name

    def store(self, prepared: str) -> None:
        assert self.go[prepared].wait(5)
        if prepared in self.fail:
            raise RuntimeError(f"cannot store {prepared}")
        self.stored.append(prepared)


def _batch(name: str) -> list[Delivery]:
    return [Delivery(b"{}", name)]


def test_the_next_batch_is_prepared_while_the_one_before_is_still_being_stored() -> None:
    """Preparing batch b does not wait for batch a; acknowledging a waits for a's store."""
    store, acked = ScriptedStore(), []
    overlap = Overlap(store)
    overlap.submit(_batch("a"), lambda: acked.append("a"))
    done = threading.Event()

    def second() -> None:
        overlap.submit(_batch("b"), lambda: acked.append("b"))
        done.set()

    worker = threading.Thread(target=second)
    worker.start()
    while "b" not in store.prepared:
        threading.Event().wait(0.01)
    assert acked == [] and not done.is_set()  # b is prepared, a is not stored: nothing acknowledged yet
    store.go["a"].set()
    worker.join(5)
    assert acked == ["a"] and store.stored == ["a"]
    store.go["b"].set()
    overlap.wait()
    assert acked == ["a", "b"]
    overlap.close()


def test_a_failed_store_is_raised_by_the_next_call_and_never_acknowledged() -> None:
    """The error reaches the caller, the failed batch is not acknowledged, and later batches still work."""
    store, acked = ScriptedStore(fail={"a"}), []
    overlap = Overlap(store)
    overlap.submit(_batch("a"), lambda: acked.append("a"))
    store.go["a"].set()
    with pytest.raises(RuntimeError, match="cannot store a"):
        overlap.submit(_batch("b"), lambda: acked.append("b"))
    assert acked == [] and not overlap.busy  # b was prepared but not taken: the caller delivers it again
    overlap.submit(_batch("c"), lambda: acked.append("c"))
    store.go["c"].set()
    overlap.wait()
    assert acked == ["c"]
    overlap.close()


def test_a_plain_deliver_callable_works_without_overlap() -> None:
    """A deliver without prepare/store is called whole on the store thread, acknowledged after it returns."""
    seen: list[str] = []
    acked: list[str] = []
    overlap = Overlap(lambda deliveries: seen.append(deliveries[0].position))
    overlap.submit(_batch("x"), lambda: acked.append("x"))
    overlap.wait()
    assert seen == ["x"] and acked == ["x"]
    overlap.close()
