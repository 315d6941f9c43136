"""SQL the audit catalogue (``ingest.queries``) and the dashboards share: the events of a selection read through the
views of the migrations, the sets and domains their VMs belong to, and the figures both must agree on.

Fragments, not statements: each is pasted into a query that binds its values server-side (``{name:Type}``);
``db`` qualifies the names where the client's database is not the sevents one (Grafana). Each reads only what
it shows: the events a selection names, through the parts of the event rollup that cover them (migration 0006).
"""

# Fragments are assembled from constants of this module and its callers only; every value is bound server-side,
# so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

# IMDS keeps no event this long: every row of an event was written at most this many days before its last
# activity (the same figure as the active horizon of migration 0006).
LOOKBACK_DAYS = 30
SILENT_AFTER_S = 300  # no heartbeat this long: silent (the views' custom_sevents_silent_after_s default)

# The events first seen in [since, until): found through the parts of event_rollup that cover the window.
WINDOW_IDS = (
    "SELECT event_id FROM event_rollup "
    "WHERE last_seen_at >= {since:DateTime64(3, 'UTC')} AND first_seen_at < {until:DateTime64(3, 'UTC')}"
)
# No rollup row of an event active in the window is older than this (``rows_after`` of ``hit_domains``).
WINDOW_ROWS_AFTER = f"{{since:DateTime64(3, 'UTC')}} - INTERVAL {LOOKBACK_DAYS} DAY"
ONE_ID = "SELECT {event_id:String}"


def held_events(db: str = "") -> str:
    """The events some VM still showed when their lifecycle was last computed, seen in the last 30 days: a superset
    of those active now (``events`` decides, from those VMs' silence now), found without reading ``events``: through
    event_history's projection sorted by last_held_at (migration 0024), the recent granules only."""
    return f"SELECT event_id FROM {db}event_history WHERE last_held_at >= now64(3) - INTERVAL {LOOKBACK_DAYS} DAY"


def user_initiated(ids: str, db: str = "") -> str:
    """The events of ``ids`` a user started (EventSource User), from their stored lifecycle (a type and source do
    not change, so no FINAL is needed)."""
    return f"SELECT event_id FROM {db}event_history WHERE event_source = 'User' AND event_id IN ({ids})"


def under_way_at(ids: str, moment: str, db: str = "") -> str:
    """The events of ``ids`` first seen before ``moment`` (SQL) and not over by then, from their stored lifecycle:
    a superset (a VM still showing one keeps it), for the per-VM reads of a range's first state."""
    return (
        f"SELECT event_id FROM {db}event_history WHERE event_id IN ({ids}) AND first_seen_at < {moment} "
        f"AND (ended_at IS NULL OR ended_at >= {moment} OR notEmpty(holders))"
    )


def rollup_rows(ids: str, bound: str) -> str:
    """The condition on ``event_rollup`` rows of the events ``ids`` selects, none written before ``bound`` (if any)."""
    return f"{f'last_seen_at >= {bound} AND ' if bound else ''}event_id IN ({ids})"


def since(
    ids: str, view: str = "events", db: str = "", columns: str = "*", platform: str = "", rows_after: str = ""
) -> str:
    """The rows of ``events`` (each event's stored lifecycle read now) or ``event_vm_lifecycles`` (each observing
    VM's, stored too, read now) of the events ``ids`` selects, as a derived table: callers need not repeat
    ``event_id IN (ids)``.

    Both are stored rows keyed by EventId (migrations 0017 and 0022), read by it. ``db`` qualifies the names
    (``sevents.``) where the client's database is not the sevents one (Grafana). ``platform`` (``events`` only): a
    condition on ``azure_scheduled_events`` whose events are shown too, those only Azure's account has included
    (seen_by 'platform'; a lookup in a small table). ``rows_after`` (``events`` only): a time (SQL) before which
    none of those events was first seen, so that the months of event_history before it are not read (migration
    0029); empty reads every month.
    """
    if view not in ("events", "event_vm_lifecycles") or ((platform or rows_after) and view != "events"):
        raise ValueError(
            f"since() reads events or event_vm_lifecycles (platform, rows_after: events only), not {view!r}"
        )
    shown = f"event_id IN ({ids})"
    if platform:
        shown = f"({shown} OR event_id IN (SELECT event_id FROM {db}azure_scheduled_events WHERE {platform}))"
    if rows_after:
        shown = f"{shown} AND {months_from(rows_after)}"
    return f"(SELECT {columns} FROM {db}{view} WHERE {shown})"


def months_from(moment: str, partition: str = "stored_month") -> str:
    """The condition on ``events`` that keeps the partitions of event_history from ``moment``'s month on (SQL).

    ``stored_month`` is the partition (YYYYMM of first_seen_at in UTC, a String; 'all' sorts after every month, for
    a table rebuilt unpartitioned): ClickHouse drops the others before FINAL. The month is UTC's whatever the time
    zone ``moment`` or the server is in: an hour's shift at a month's end would skip the month before.
    ``partition``: the column naming it (``_partition_id`` on event_history itself)."""
    return f"{partition} >= toString(toYYYYMM({moment}, 'UTC'))"


def stored(ids: str, table: str, db: str = "", columns: str = "*", rows_after: str = "") -> str:
    """The stored rows of the events ``ids`` selects, newest version only, read from ``event_history`` or
    ``event_vm_history`` themselves, as a derived table: for columns that do not change with time.

    ``events`` and ``event_vm_lifecycles`` look up the silence of the VMs holding events before they read anything
    (22-28 ms at 100,000 VMs, whatever the columns asked), to tell what is still active: ``outcome``, and an
    active event's ``ended_at``, ``ended_at_source`` and ``started_to_gone_s``. Every other column is what was
    stored. The EventIds are applied before FINAL merges (PREWHERE: they are the sorting key's first column).
    ``rows_after`` (event_history only): as in ``since``.
    """
    if table not in ("event_history", "event_vm_history") or (rows_after and table != "event_history"):
        raise ValueError(f"stored() reads event_history or event_vm_history (rows_after: event_history), not {table!r}")
    months = f" AND {months_from(rows_after, '_partition_id')}" if rows_after else ""
    return f"(SELECT {columns} FROM {db}{table} FINAL PREWHERE event_id IN ({ids}){months})"


# Fault and update domain numbers mean something only inside one availability set or scale set, so every
# per-domain figure groups by the set as well. A scale set is named by its VMs' instance metadata. IMDS does
# not name an availability set, but Azure tells every VM of one the same events: the VMs (outside scale sets)
# that observed an event are that event's set. Its label is the longest common prefix of their names without
# trailing digits or separators ("web-0".."web-11" -> "web"); a VM observing alone (a standalone VM) is its
# own set and keeps its name, as do members that share no prefix (the first name). Its identity is the
# smallest vm_id among them: two sets whose labels coincide still never add up, at worst one set splits in two
# when its first VM missed an event.
SET_FIRST, SET_LAST, SET_KEY = "set_first_", "set_last_", "set_key_"


def _fixed(name: str) -> str:
    return f"toFixedString(substring({name}, 1, 64), 64)"


def set_label(first: str, last: str) -> str:
    """SQL for an availability set's label from the smallest and the largest name of its VMs.

    Their common prefix is that of all the names. Its length is the count of leading zero bytes in the two
    names XORed as FixedString (VM names have at most 64 characters; the string form drops trailing zeros, so
    equal names XOR to ''): bytewise, no lambda per row. Defines the aliases set_xor_ and set_stem_.
    """
    common = f"least(length({first}), length({last}))"
    leading_zeros = "toUInt64(length(set_xor_) - length(trimLeft(set_xor_, '\\0')))"
    xor = f"toString(bitXor({_fixed(first)}, {_fixed(last)}))"
    same = f"if(({xor} AS set_xor_) = '', {common}, least({leading_zeros}, {common}))"
    stem = f"trim(TRAILING '0123456789-_.' FROM substring({first}, 1, {same}))"
    return f"if({first} = {last} OR ({stem} AS set_stem_) = '', {first}, set_stem_)"


def domain_label(fault_set: str, number: str, kind: str = "FD") -> str:
    """SQL for the label of a domain inside its set: ``web / FD 1`` (``?`` when the VM reported none)."""
    return f"concat({fault_set}, ' / {kind} ', ifNull(toString({number}), '?'))"


def scoped(ids: str, db: str = "") -> str:
    """``event_vm_lifecycles`` of the events ``ids`` selects (like ``since``), each VM with its domains' set.

    Adds ``fault_set`` (label), ``fault_set_id`` (identity: group by it), ``fault_domain_label`` and
    ``update_domain_label`` (``web / FD 1``, ``web / UD 3``). The set is computed over every observing VM of
    the event before the caller filters rows, so picking one VM leaves its set's label unchanged.
    """
    # the availability set (or standalone VM) of the event: its VMs outside scale sets (a collector without its
    # identity yet reports no name: left out)
    outside = "scale_set = '' AND vm_name != ''"
    window = (
        f"SELECT *, minIf(vm_name, {outside}) OVER w AS {SET_FIRST}, maxIf(vm_name, {outside}) OVER w AS {SET_LAST}, "
        f"minIf(vm_id, {outside}) OVER w AS {SET_KEY} "
        f"FROM {since(ids, 'event_vm_lifecycles', db)} WINDOW w AS (PARTITION BY event_id)"
    )
    return (
        f"(SELECT * EXCEPT ({SET_FIRST}, {SET_LAST}, {SET_KEY}), "
        f"if(scale_set != '', scale_set, {set_label(SET_FIRST, SET_LAST)}) AS fault_set, "
        f"if(scale_set != '', scale_set, {SET_KEY}) AS fault_set_id, "
        f"{domain_label('fault_set', 'fault_domain')} AS fault_domain_label, "
        f"{domain_label('fault_set', 'update_domain', 'UD')} AS update_domain_label FROM ({window}))"
    )


# The VMs an (event, set, domain) row counts: a bitmap of 64-bit hashes of their ids, where a uniqExact state (a hash
# set) cost a third of the per-domain panel at 100,000 VMs to carry through the join with the sets and merge. Two
# ids of a million VMs share a hash with odds of about 3 in 10^8.
VMS_HIT = "groupBitmapState(cityHash64(vm_id))"


def hit_domains(keep: str, db: str = "", keys: tuple[str, ...] = (), rows_after: str = "") -> str:
    """The downtime VMs measured (``impacts``), one row per (event, set, fault domain[, ``keys``]).

    ``keep`` selects impact rows (a time range, filters on the VM's columns); rows of no event (unannounced) are
    left out. Per row: ``kept_`` (VMs hit), ``vms_`` (their ids as a ``groupBitmap`` state of 64-bit hashes, for
    ``groupBitmapMerge``), ``impact_`` (their downtime summed: each VM's is the sum of its observations) and ``max_``
    (the longest VM's). Labels ``fault_set`` and ``domain_label``, identity ``fault_set_id`` (group by it and
    ``domain_``): the set comes from the event's own rollup row (its VMs outside scale sets, as ``scoped`` finds
    them), so the cost follows the downtime shown, not the event's VMs. ``keys`` are more grouping expressions over
    impact rows (``expr AS alias``).
    ``rows_after`` is a time (SQL) before which no rollup row of those events was written, so that the search for
    their sets skips older parts (empty searches the whole history).
    """
    extra = "".join(f", {key}" for key in keys)
    aliases = "".join(f", {key.rsplit(' AS ', 1)[1]}" for key in keys)
    hits = f"{db}impacts FINAL WHERE event_id != '' AND {keep}"
    hit_events = f"SELECT event_id FROM {db}impacts WHERE event_id != '' AND {keep}"  # ids: no need to collapse
    per_vm = (
        f"SELECT event_id, vm_id, any(scale_set) AS vm_set_, any(fault_domain) AS domain_{extra}, "
        f"sum(duration_s) AS vm_impact_ FROM {hits} GROUP BY event_id, vm_id{aliases}"
    )
    per_domain = (
        f"SELECT event_id, vm_set_ AS scale_set, domain_{aliases}, count() AS kept_, {VMS_HIT} AS vms_, "
        f"sum(vm_impact_) AS impact_, max(vm_impact_) AS max_ FROM ({per_vm}) "
        f"GROUP BY event_id, scale_set, domain_{aliases}"
    )
    sets = (
        f"SELECT event_id, minIfMerge(set_first) AS {SET_FIRST}, maxIfMerge(set_last) AS {SET_LAST}, "
        f"minIfMerge(set_key) AS {SET_KEY} FROM {db}event_rollup "
        f"WHERE {rollup_rows(hit_events, rows_after)} GROUP BY event_id"
    )
    return (
        f"(SELECT * EXCEPT ({SET_FIRST}, {SET_LAST}, {SET_KEY}), "
        f"if(scale_set != '', toString(scale_set), {set_label(SET_FIRST, SET_LAST)}) AS fault_set, "
        f"if(scale_set != '', toString(scale_set), {SET_KEY}) AS fault_set_id, "
        f"{domain_label('fault_set', 'domain_')} AS domain_label "
        f"FROM ({per_domain}) AS d LEFT JOIN ({sets}) AS s USING (event_id))"
    )


def event_sets(ids: str, db: str = "", rows_after: str = "") -> str:
    """One row per event ``ids`` selects: ``availability_set``, the label of its VMs outside scale sets.

    For rows that carry a VM's ``scale_set`` already (transitions, pairs), joined by ``event_id``: their set
    is ``if(scale_set != '', scale_set, availability_set)``. The events' stored lifecycle holds it (migration 0009),
    read without ``events``' look-up of silent holders (``stored``).
    """
    return stored(ids, "event_history", db, "event_id, availability_set", rows_after=rows_after)
