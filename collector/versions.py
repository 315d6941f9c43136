"""Which fields each api-version carries, and snapshots aligned to it: a version change invents nothing (pure).

IMDS adds fields in later versions: ``Description`` (2019-04-01), ``EventSource`` (2019-08-01),
``DurationInSeconds`` (2020-07-01). When the collector moves between versions (a 400 naming newer versions,
or a periodic try upwards), a field one of the two versions does not carry would otherwise appear or vanish
under every event: an ``updated`` transition of each event and a "content changed under unchanged
incarnation" anomaly that IMDS never caused. ``align`` rewrites the previous snapshot as the new version
would have shown it, so the diff sees only what really changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

from collector.model import Document, Snapshot, Tracked

# Event field -> the first api-version that carries it.
FIELD_SINCE: Final[Mapping[str, str]] = {
    "description": "2019-04-01",
    "event_source": "2019-08-01",
    "duration_s": "2020-07-01",
}


def carries(api_version: str, field: str) -> bool:
    """Whether documents of ``api_version`` carry the event field ``field`` (ISO dates compare as text)."""
    return api_version >= FIELD_SINCE.get(field, "")


def align(prev: Snapshot, doc: Document, api_version: str) -> Snapshot:
    """``prev`` as ``api_version`` would have shown it: fields either version lacks take the document's values.

    Returns ``prev`` itself when nothing needs aligning (same version, or a snapshot that never saw one).
    """
    before = prev.api_version
    if not before or before == api_version:
        return prev
    blind = [f for f in FIELD_SINCE if not (carries(before, f) and carries(api_version, f))]
    now = {e.event_id: e for e in doc.events}
    events = []
    for tracked in prev.events:
        new = now.get(tracked.event.event_id)
        if new is None:
            events.append(tracked)
            continue
        values = {f: getattr(new, f) for f in blind}
        events.append(Tracked(event=dataclasses.replace(tracked.event, **values), since=tracked.since))
    return dataclasses.replace(prev, events=tuple(events), api_version=api_version)


def stamp(snapshot: Snapshot, api_version: str) -> Snapshot:
    """The snapshot marked as diffed at ``api_version`` (the same object when it already is)."""
    if snapshot.api_version == api_version:
        return snapshot
    return dataclasses.replace(snapshot, api_version=api_version)
