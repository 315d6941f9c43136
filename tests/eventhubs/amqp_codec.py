"""Encoding helpers of the local Event Hubs endpoint: message sections, batches, annotations, SAS tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse
from typing import Any

from proton import Data, symbol, ulong

MAX_MESSAGE_SIZE = 1024 * 1024
_SELECTOR_FILTER = "apache.org:selector-filter:string"
_BATCH_SECTION_PREFIXES = (b"\x00Sp", b"\x00Sq", b"\x00Sr", b"\x00Ss", b"\x00St", b"\x00Su", b"\x00Sw")


def split_sections(raw: bytes) -> list[tuple[int, Any, bytes]]:
    """(descriptor, value, encoded bytes) of each AMQP message section in ``raw``."""
    sections, pos, data = [], 0, Data()
    while pos < len(raw):
        data.clear()
        used = data.decode(raw[pos:])
        data.rewind()
        data.next()
        described = data.get_object()
        value = described.value
        sections.append(
            (int(described.descriptor), bytes(value) if isinstance(value, memoryview) else value, raw[pos : pos + used])
        )
        pos += used
    return sections


def _encode_annotations(annotations: dict[symbol, Any]) -> bytes:
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(ulong(0x72))
    data.put_object(annotations)
    data.exit()
    return bytes(data.encode())


def unpack(raw: bytes) -> list[tuple[bytes, tuple[tuple[str, object], ...], str | None]]:
    """The events of one transfer: (sections without annotations, producer annotations, partition key).

    The SDK sends batches as message format 0x80013700: data sections each holding a whole encoded message.
    proton does not expose the message format, so a data section that itself starts with a message section
    descriptor is taken as a batched message (a JSON or text payload never starts with 0x00 0x53).
    """
    outer = split_sections(raw)
    bodies = [value for code, value, _ in outer if code == 0x75]
    if bodies and all(bytes(b[:3]) in _BATCH_SECTION_PREFIXES for b in bodies):
        return [_strip(split_sections(bytes(b))) for b in bodies]
    return [_strip(outer)]


def _strip(sections: list[tuple[int, Any, bytes]]) -> tuple[bytes, tuple[tuple[str, object], ...], str | None]:
    kept, annotations = b"", {}
    for code, value, encoded in sections:
        if code == 0x72:
            annotations = {str(k): v for k, v in (value or {}).items()}
        else:
            kept += encoded
    key = annotations.pop("x-opt-partition-key", None)
    return kept, tuple(annotations.items()), None if key is None else str(key)


def sas_valid(token: str, audience: str, key_name: str, key: str, now: float) -> bool:
    """Whether ``token`` is a current SharedAccessSignature for ``audience`` signed with the key."""
    if not token.startswith("SharedAccessSignature "):
        return False
    fields = dict(urllib.parse.parse_qsl(token.split(" ", 1)[1]))
    try:
        expiry = int(fields["se"])
        resource, signature, name = fields["sr"], fields["sig"], fields["skn"]
    except (KeyError, ValueError):
        return False
    to_sign = f"{urllib.parse.quote_plus(resource)}\n{expiry}".encode()
    expected = base64.b64encode(hmac.new(key.encode(), to_sign, hashlib.sha256).digest()).decode()
    return (
        name == key_name
        and hmac.compare_digest(expected, signature)
        and expiry > now
        and audience.rstrip("/").startswith(resource.rstrip("/"))
    )


def selector_of(filter_data: Any) -> str | None:
    if filter_data is None:
        return None
    filter_data.rewind()
    if not filter_data.next():
        return None
    filters = filter_data.get_object()
    for key, value in filters.items():
        if str(key) == _SELECTOR_FILTER:
            return str(value.value)
    return None


def with_annotations(sections: bytes, annotations: dict[symbol, Any]) -> bytes:
    """Insert the broker's message annotations after any header and delivery annotations."""
    parts = split_sections(sections)
    head = b"".join(enc for code, _, enc in parts if code in (0x70, 0x71))
    tail = b"".join(enc for code, _, enc in parts if code not in (0x70, 0x71))
    return head + _encode_annotations(annotations) + tail
