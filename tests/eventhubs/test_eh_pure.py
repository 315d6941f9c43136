"""Pure parts: W3C trace context, the frame padder and partition positioning of the local endpoint."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from proton import Data

from sevents.tracing import parse_traceparent, traceparent_for
from tests.eventhubs.amqp_frames import FrameRewriter, pad_list
from tests.eventhubs.hub_store import Partition, SelectorError

HEX32 = st.text(alphabet="0123456789abcdef", min_size=32, max_size=32).filter(lambda s: s != "0" * 32)


@given(HEX32, st.integers(min_value=0, max_value=2**62))
def test_traceparent_round_trips_the_record_id_as_trace_id(record_id: str, seq: int) -> None:
    """A record's traceparent parses back to a valid remote context whose trace id is the record id."""
    context = parse_traceparent(traceparent_for(record_id, seq))
    assert context is not None and context.is_remote and context.is_valid
    assert f"{context.trace_id:032x}" == record_id


@given(st.one_of(st.text(), st.binary(), st.none()))
def test_parse_traceparent_never_raises(value: str | bytes | None) -> None:
    """Arbitrary header values either parse or give None, nothing else."""
    parse_traceparent(value)


def test_traceparent_refuses_ids_that_are_not_trace_ids() -> None:
    """Record ids that are not 32 hex digits (or are all zero) get no traceparent."""
    assert traceparent_for("short", 1) is None
    assert traceparent_for("0" * 32, 1) is None
    assert parse_traceparent("00-" + "0" * 32 + "-" + "1" * 16 + "-01") is None


def _list_bytes(values: list[object]) -> bytes:
    data = Data()
    data.put_list()
    data.enter()
    for value in values:
        data.put_object(value)
    data.exit()
    return bytes(data.encode())


@given(st.lists(st.one_of(st.integers(0, 2**31), st.text(max_size=300)), max_size=14), st.integers(1, 14))
def test_padded_list_decodes_to_the_same_values_then_nulls(values: list[object], arity: int) -> None:
    """Padding keeps every field and appends nulls up to the arity, and consumes exactly the original list."""
    encoded = _list_bytes(values)
    padded, used = pad_list(encoded + b"tail", arity)
    assert used == len(encoded)
    data = Data()
    data.decode(padded)
    data.rewind()
    data.next()
    decoded = data.get_object()
    assert list(decoded[: len(values)]) == values
    assert list(decoded[len(values) :]) == [None] * max(0, arity - len(values))


def test_rewriter_passes_headers_and_reassembles_split_frames() -> None:
    """Protocol headers pass unchanged and a frame split across writes comes out whole and padded."""
    body = b"\x00\x53\x17" + _list_bytes([])  # close with no fields
    frame = struct.pack(">IBBH", 8 + len(body), 2, 0, 0) + body
    rewriter = FrameRewriter()
    out = rewriter.feed(b"AMQP\x00\x01\x00\x00" + frame[:5]) + rewriter.feed(frame[5:])
    assert out.startswith(b"AMQP\x00\x01\x00\x00")
    padded = out[8:]
    assert struct.unpack(">I", padded[:4])[0] == len(padded)
    assert padded.endswith(b"\x40")


def test_partition_positions_by_offset_sequence_number_and_time() -> None:
    """Selectors pick the first event after (or at) the given offset, sequence number or enqueued time."""
    partition = Partition("0")
    for i in range(4):
        partition.append(b"x" * 10, None, (), now_ms=1000 + i)
    offsets = [e.offset for e in partition.events]
    assert partition.start_index("amqp.annotation.x-opt-offset > '-1'") == 0
    assert partition.start_index(f"amqp.annotation.x-opt-offset > '{offsets[1]}'") == 2
    assert partition.start_index(f"amqp.annotation.x-opt-offset >= '{offsets[1]}'") == 1
    assert partition.start_index("amqp.annotation.x-opt-offset > '@latest'") == 4
    assert partition.start_index("amqp.annotation.x-opt-sequence-number >= '3'") == 3
    assert partition.start_index("amqp.annotation.x-opt-enqueued-time > '1001'") == 2
    assert partition.start_index(None) == 4
    with pytest.raises(SelectorError):
        partition.start_index("amqp.annotation.x-opt-offset = '1'")
