"""ISO 8601 timestamps read alike on Python 3.9 and 3.11+ (the collector runs on both).

``datetime.fromisoformat`` learned ``Z`` and fractions of any length only in 3.11; before that it reads just
what ``isoformat`` writes. ``parse`` tries it as it is, then once more with the text rewritten to that form,
so a newer Python's answer never changes and an older one reads the same texts.
"""

from __future__ import annotations

import re
from datetime import datetime

_PARTS = re.compile(
    r"^(?P<main>[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2})?)?)"
    r"(?:\.(?P<fraction>[0-9]+))?"
    r"(?P<zone>[zZ]|[+-][0-9]{2}:?[0-9]{2})?$"
)


def parse(text: str) -> datetime:
    """``datetime.fromisoformat`` with 3.11's ``Z`` and fraction lengths; raises ValueError otherwise."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        found = _PARTS.match(text)
        if found is None:
            raise
    main, fraction, zone = found.group("main", "fraction", "zone")
    if fraction:
        main += "." + fraction[:6].ljust(6, "0")  # 3.9 reads exactly 3 or 6 digits
    if zone in ("z", "Z"):
        zone = "+00:00"
    elif zone and ":" not in zone:
        zone = f"{zone[:3]}:{zone[3:]}"
    return datetime.fromisoformat(main + (zone or ""))
