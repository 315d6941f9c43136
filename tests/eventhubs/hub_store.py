"""Partitioned event storage for the local Event Hubs endpoint: sequence numbers, offsets, positions.

Theory of operation: each partition is an append-only list. An event keeps the encoded AMQP sections the
producer sent (minus any message annotations, which the broker owns) and gets the numbers Event Hubs assigns:
a sequence number counting from 0, an offset (the byte position of the event in the partition, as Event
Hubs reports it, a decimal string) and an enqueued time in milliseconds. Receivers are positioned by the
selector expression the SDK sends in the link's source filter. The store lives outside the AMQP server so
that the server can stop and start again on the same data (the outage test).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from dataclasses import dataclass, field

# The filter the SDK puts on a receiver's source: ``amqp.annotation.<name> <op> '<value>'``.
_SELECTOR = re.compile(
    r"amqp\.annotation\.(x-opt-offset|x-opt-sequence-number|x-opt-enqueued-time)\s*(>=|>)\s*'([^']*)'"
)


class SelectorError(ValueError):
    """The receiver's filter expression is not one Event Hubs understands."""


@dataclass(frozen=True)
class StoredEvent:
    """One event as the broker keeps it."""

    sequence_number: int
    offset: int
    enqueued_ms: int
    partition_key: str | None
    sections: bytes  # encoded AMQP sections without message annotations
    annotations: tuple[tuple[str, object], ...] = ()  # the producer's own message annotations


@dataclass
class Partition:
    """An append-only log of one partition."""

    partition_id: str
    events: list[StoredEvent] = field(default_factory=list)
    next_offset: int = 0

    def append(
        self, sections: bytes, partition_key: str | None, annotations: tuple[tuple[str, object], ...], now_ms: int
    ) -> StoredEvent:
        event = StoredEvent(len(self.events), self.next_offset, now_ms, partition_key, sections, annotations)
        self.events.append(event)
        self.next_offset += max(1, len(sections))
        return event

    def start_index(self, selector: str | None) -> int:
        """Index of the first event a receiver with this selector gets (no selector: the end)."""
        if selector is None:
            return len(self.events)
        match = _SELECTOR.fullmatch(selector.strip())
        if match is None:
            raise SelectorError(f"unsupported selector {selector!r}")
        name, op, raw = match.groups()
        if name == "x-opt-offset" and raw == "@latest":
            return len(self.events)
        try:
            value = int(raw)
        except ValueError:
            raise SelectorError(f"bad value in selector {selector!r}") from None
        for index, event in enumerate(self.events):
            key = {"x-opt-offset": event.offset, "x-opt-sequence-number": event.sequence_number}.get(
                name, event.enqueued_ms
            )
            if key > value or (op == ">=" and key == value):
                return index
        return len(self.events)


class HubStore:
    """All partitions of one event hub; thread-safe, shared by the AMQP server and test code."""

    def __init__(
        self,
        name: str = "hub",
        partition_count: int = 4,
        consumer_groups: tuple[str, ...] = ("$Default", "sevents-ingest"),
    ) -> None:
        self.name = name
        self.consumer_groups = set(consumer_groups)
        self.created_ms = int(time.time() * 1000)
        self.partitions = {str(i): Partition(str(i)) for i in range(partition_count)}
        self.lock = threading.RLock()
        self.appended = threading.Condition(self.lock)

    @property
    def partition_ids(self) -> list[str]:
        return list(self.partitions)

    def partition_for_key(self, key: str) -> str:
        """A stable hash of the partition key, so one key always lands on one partition."""
        digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
        return str(digest % len(self.partitions))

    def append(
        self,
        partition_id: str | None,
        sections: bytes,
        partition_key: str | None,
        annotations: tuple[tuple[str, object], ...] = (),
    ) -> StoredEvent:
        """Store one event on the given partition, or the key's partition, or round-robin."""
        with self.lock:
            if partition_id is None:
                if partition_key is not None:
                    partition_id = self.partition_for_key(partition_key)
                else:
                    partition_id = str(self.total() % len(self.partitions))
            event = self.partitions[partition_id].append(sections, partition_key, annotations, int(time.time() * 1000))
            self.appended.notify_all()
            return event

    def total(self) -> int:
        with self.lock:
            return sum(len(p.events) for p in self.partitions.values())

    def events(self, partition_id: str) -> list[StoredEvent]:
        with self.lock:
            return list(self.partitions[partition_id].events)
