"""Pads the performatives proton writes to their full field count, as Azure's brokers send them.

AMQP allows trailing null fields to be left out, and proton leaves them out. The SDK's pure-Python AMQP
stack indexes performative fields by position without a length check (``frame[7]`` of Begin, ``frame[2]``
of Detach, ...), so against a peer that trims it raises IndexError. Event Hubs always sends every field.
This rewriter works on the outgoing byte stream: it passes protocol headers and SASL frames through and
appends encoded nulls to each AMQP performative's list, without decoding or re-encoding any field.
"""

from __future__ import annotations

import struct

# Field count of each performative, by descriptor code (AMQP 1.0 section 2.7).
ARITY = {0x10: 10, 0x11: 8, 0x12: 14, 0x13: 11, 0x14: 11, 0x15: 6, 0x16: 3, 0x17: 1, 0x18: 1}
_NULL = b"\x40"


def pad_list(encoded: bytes, arity: int) -> tuple[bytes, int]:
    """(the list re-framed as list32 with nulls appended up to ``arity``, bytes of ``encoded`` consumed)."""
    code = encoded[0]
    if code == 0x45:
        count, body, used = 0, b"", 1
    elif code == 0xC0:
        size, count = encoded[1], encoded[2]
        body, used = encoded[3 : 2 + size], 2 + size
    elif code == 0xD0:
        size, count = struct.unpack(">II", encoded[1:9])
        body, used = encoded[9 : 5 + size], 5 + size
    else:
        raise ValueError(f"performative body is not a list (constructor 0x{code:02x})")
    missing = max(0, arity - count)
    body += _NULL * missing
    return b"\xd0" + struct.pack(">II", len(body) + 4, count + missing) + body, used


def pad_frame(frame: bytes) -> bytes:
    """One complete frame with its performative padded (SASL and empty frames unchanged)."""
    doff, frame_type = frame[4], frame[5]
    start = doff * 4
    body = frame[start:]
    if frame_type != 0 or len(body) < 4 or body[:2] != b"\x00\x53":
        return frame
    arity = ARITY.get(body[2])
    if arity is None:
        return frame
    padded, used = pad_list(body[3:], arity)
    rest = body[3 + used :]
    new_body = body[:3] + padded + rest
    return struct.pack(">I", start + len(new_body)) + frame[4:start] + new_body


class FrameRewriter:
    """Feeds on the transport's output as it comes and returns the bytes to put on the wire."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = []
        while True:
            if self._buffer[:4] == b"AMQP":
                if len(self._buffer) < 8:
                    break
                out.append(self._buffer[:8])
                self._buffer = self._buffer[8:]
                continue
            if len(self._buffer) < 8:
                break
            size = struct.unpack(">I", self._buffer[:4])[0]
            if len(self._buffer) < size:
                break
            out.append(pad_frame(self._buffer[:size]))
            self._buffer = self._buffer[size:]
        return b"".join(out)
