"""W3C trace context for records: a deterministic ``traceparent`` per record, and its parsing back into a span context.

A record's trace id is its ``record_id`` (32 hex digits, the same width as a W3C trace id), so the trace of
one transition can be found from the ClickHouse row, the collector's log line or the Event Hubs message
without any state shared between them. The parent (span) id is derived from the record id and ``seq``, the
collector-side hop that produced the message. See https://www.w3.org/TR/trace-context/.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

TRACEPARENT: Final = "traceparent"
_PATTERN = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_HEX32 = re.compile(r"[0-9a-f]{32}")


def traceparent_for(record_id: str, seq: int) -> str | None:
    """The ``traceparent`` of one record, or None when its id cannot serve as a trace id."""
    trace_id = record_id.lower()
    if not _HEX32.fullmatch(trace_id) or trace_id == "0" * 32:
        return None
    span_id = hashlib.sha256(f"{trace_id}/{seq}".encode()).hexdigest()[:16]
    if span_id == "0" * 16:  # all-zero ids are invalid in W3C trace context
        span_id = "0" * 15 + "1"
    return f"00-{trace_id}-{span_id}-01"


def parse_traceparent(value: str | bytes | None) -> SpanContext | None:
    """The remote span context a ``traceparent`` names, or None for anything malformed."""
    if value is None:
        return None
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    match = _PATTERN.fullmatch(text.strip().lower())
    if match is None:
        return None
    trace_id, span_id, flags = (int(group, 16) for group in match.groups())
    if trace_id == 0 or span_id == 0:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 0x01))


def tracing() -> bool:
    """Whether spans leave the process (a provider was installed): else building links is wasted work."""
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def record_context(record_id: str, seq: int) -> Context | None:
    """A context whose parent is the record's ``traceparent``: a span started in it joins the record's trace."""
    parent = parse_traceparent(traceparent_for(record_id, seq))
    return None if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))


def record_links(records: Iterable[tuple[str, int]]) -> list[Link]:
    """A link to the trace of each (record_id, seq); records whose id cannot be a trace id are left out."""
    links = []
    for record_id, seq in records:
        context = parse_traceparent(traceparent_for(record_id, seq))
        if context is not None:
            links.append(Link(context))
    return links
