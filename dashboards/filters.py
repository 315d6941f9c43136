"""The template variables every sevents dashboard shares and the SQL filters that apply them.

Each filter is wrapped in ``$__conditionalAll`` so that "All" costs nothing (the plugin turns it into
``1=1``) and events seen by no VM of the fleet still show. VM attributes (subscription, location, scale
set, fault domain, name) filter on the VMs an event *affects* (``affects_this_vm``), so picking a VM shows
the maintenance that hits it, not everything its availability set was told about; chosen together they
describe one VM (a fault domain of a set), in one subquery whatever the number chosen.

Option values come from data any sender can write, and a URL can carry any value: every variable reaches SQL
``percentencode``d inside one string literal that ClickHouse decodes (``selected``), never pasted as written.
"""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any, Final

from dashboards import grafana
from ingest import event_sql

DB: Final = "sevents"
EVENT_TYPES: Final = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
# A collector without a heartbeat this long counts as silent: the CLI's `audit silent`, the alert, the panels.
SILENT_AFTER_S: Final = event_sql.SILENT_AFTER_S
# An (event, VM) pair unchanged this long is stale, and events are found through this many days of rollup
# parts before a range (IMDS announces at most about 7 days ahead); the same figure as in migration 0006.
LOOKBACK_DAYS: Final = event_sql.LOOKBACK_DAYS

# (variable name, label, column in tables that carry the observing VM's identity)
VM_VARIABLES: Final = (
    ("subscription", "Subscription", "subscription_id"),
    ("location", "Location", "location"),
    ("scale_set", "Scale set", "scale_set"),
    ("fault_domain", "Fault domain", "toString(fault_domain)"),
    ("vm", "VM", "vm_name"),
)


# Grafana has no variable format that quotes a value for ClickHouse: `singlequote` escapes a quote as \' and
# `sqlstring` doubles it, but neither escapes a backslash, so a value ending in one (or holding \') ends the
# literal early. `percentencode` leaves only [A-Za-z0-9-_.~] and %XX: no quote, backslash, `/*`, `$`, bracket or
# comma survives (a `--` does, inside the literal, where ClickHouse and the plugin's comment stripper both read it
# as text), so the value stays inside one literal whatever it holds, and ClickHouse decodes it. A
# multi-value variable is formatted as one glob, `{a,b}`, before encoding: option values are URL-encoded
# themselves (`OPTION_VALUE`; a name Azure allows is unchanged), so a comma or brace in a name never splits it.
OPTION_VALUE: Final = "encodeURLComponent({column})"


def selected(variable: str) -> str:
    """An array of the values chosen in ``variable`` (for ``column IN (...)``), whatever they hold.

    ``decodeURLComponent`` undoes Grafana's ``percentencode``, leaving ``{v1,v2}`` (a textbox or single-value
    variable has no braces). Each ``vN`` is an option value, URL-encoded (``OPTION_VALUE``), so the braces and
    commas left are the glob's: they go, the commas become byte 0xFF (which no UTF-8 text holds), and a second
    decoding turns each ``vN`` back into its value.

    A constant expression: ClickHouse builds the set once. A subquery would be a query of its own (about 2 ms
    each, and a panel with every variable chosen has ten or more); decoding each value with an ``arrayMap`` lambda
    was slower still under FINAL (BENCHMARKS.md).
    """
    glob = f"replaceRegexpAll(decodeURLComponent('${{{variable}:percentencode}}'), '[{{}}]', '')"
    return f"splitByChar(char(255), decodeURLComponent(replaceAll({glob}, ',', '%FF')))"


def _any(column: str, variable: str) -> str:
    # the plugin finds the variable in the second argument as $name or ${name} only, never ${name:format}
    return f"$__conditionalAll({column} IN ({selected(variable)}), ${variable})"


def vm_filter(skip: tuple[str, ...] = ()) -> str:
    """For tables with VM columns (transitions, heartbeats, heartbeats_latest)."""
    return " AND ".join(_any(column, name) for name, _, column in VM_VARIABLES if name not in skip)


def event_type_filter() -> str:
    return _any("event_type", "event_type")


def _affected_in(rows: str) -> str:
    """The events that affect a VM matching every VM variable chosen, found in ``rows`` (``table WHERE ...``: rows
    with the VM columns and ``affects_this_vm``). One subquery for all of them: each chosen variable is a condition
    on the same row, so set and fault domain chosen together mean that domain of that set. With every one on All
    the subquery is never run: the first term is ``1=1 AND ...``, which ClickHouse folds to true before it builds
    the subquery's set."""
    everything = " AND ".join(f"$__conditionalAll(0, ${name})" for name, _, _ in VM_VARIABLES)
    return f"(({everything}) OR event_id IN (SELECT event_id FROM {rows} AND affects_this_vm AND {vm_filter()}))"


def _chosen_vms() -> str:
    """The ids of the VMs that observed transitions with an identity matching every VM variable chosen
    (``transition_observers``: a row per VM and identity)."""
    return f"SELECT vm_id FROM {DB}.transition_observers WHERE {vm_filter()}"


def _affected(since: str) -> str:
    """``_affected_in`` the chosen VMs' transitions from ``since`` on (``transitions``, sorted by VM): the cost
    follows the VMs chosen and the range, not the fleet or the history."""
    return _affected_in(f"{DB}.transitions WHERE vm_id IN ({_chosen_vms()}) AND observed_at >= {since}")


def _affecting(ids: str) -> str:
    """``_affected_in`` the stored VM rows of a few events known beforehand (``ids``; ``event_vm_history``, keyed by
    EventId, written with each event's lifecycle), so the cost follows those events, not the fleet's transitions
    over the lookback. For a range's events the scan of its transitions is cheaper: they are many, and each costs
    a granule of ``event_vm_history``."""
    return _affected_in(f"{DB}.event_vm_history WHERE event_id IN ({ids})")


def event_filter(since: str = "$__fromTime") -> str:
    """For the ``events`` view (one row per EventId): type, and the affected VMs' attributes (``_affected``).

    ``since`` bounds the search for affected VMs; it must reach back to the first observation of every event
    the panel can show (the range's start minus the lookback for ranges, or the lookback for active events).
    """
    return f"{event_type_filter()} AND {_affected(f'{since} - INTERVAL {LOOKBACK_DAYS} DAY')}"


def active_event_filter() -> str:
    """``event_filter`` for panels of what is active now (no time range, with ``since(ACTIVE_IDS)``): the few
    active events' own VM rows (``_affecting``)."""
    return f"{event_type_filter()} AND {_affecting(ACTIVE_IDS)}"


def event_vm_filter() -> str:
    """For the ``event_vms`` view: it carries every VM column (the subscription included)."""
    return " AND ".join([event_type_filter(), vm_filter()])


# The EventIds a panel may show, each found through recent rollup parts only (never the history):
# what is active now, what was first seen in the range, and what overlaps the range.
# The active set: the events some VM still showed when their lifecycle was last computed, seen in the last 30 days
# (a superset: panels keep outcome 'active', which looks up those VMs' silence now).
ACTIVE_IDS: Final = event_sql.held_events(f"{DB}.")
FIRST_SEEN_IDS: Final = (
    f"SELECT event_id FROM {DB}.event_rollup WHERE last_seen_at >= $__fromTime AND first_seen_at <= $__toTime"
)
# An event that started in the range was observed in it: one of its rollup rows has activity in the range.
STARTED_IDS: Final = FIRST_SEEN_IDS
# Of the events last seen before the range, only one still open can overlap it. Nothing has happened to it since, so
# some VM still showed it when its lifecycle was last computed, within the last 30 days (IMDS keeps no event
# longer): it is among the held events (ACTIVE_IDS: a few granules of event_history's projection by last_held_at,
# where the open entries of 30 days of rollup rows cost a read of their per-VM state arrays, 27 ms at 100,000 VMs).
# A superset: overlapping_range() keeps those that overlap once their lifecycle is read. A Terminate or Preempt that
# started on its VMs holds none (they are gone): it is over, and shows in the ranges its activity falls in.
OPEN_BEFORE_IDS: Final = ACTIVE_IDS
# An event that spans a past range without any activity in it and lasted longer than the lookback is not
# found (IMDS does not keep an event that long); one that is active now always is.
OVERLAPPING_IDS: Final = (
    f"SELECT event_id FROM {DB}.event_rollup WHERE last_seen_at >= $__fromTime "
    f"AND first_seen_at <= $__toTime + INTERVAL {LOOKBACK_DAYS} DAY UNION ALL {OPEN_BEFORE_IDS}"
)

# The user-initiated events (EventSource User) among those overlapping the range: the only ones whose waits the
# approval dashboard shows per VM.
USER_IDS: Final = event_sql.user_initiated(OVERLAPPING_IDS, f"{DB}.")
# The events under way when the range starts: the only ones whose state at its left edge the timeline computes.
UNDER_WAY_IDS: Final = event_sql.under_way_at(OVERLAPPING_IDS, "$__fromTime", f"{DB}.")

# What a panel reads of events through ``since``, named whole so that a search for one finds every panel that
# reads it (ingest/schema.sql shows them): ``events``, each event's stored lifecycle read now (one row per event),
# and ``event_vm_lifecycles``, each observing VM's (one row per event and VM).
SINCE_VIEWS: Final = ("events", "event_vm_lifecycles")


def since(ids: str, view: str, platform: str = "") -> str:
    """``view`` (one of ``SINCE_VIEWS``), only the events ``ids`` selects. ``platform`` (``events`` only): a
    condition on ``azure_scheduled_events`` whose events only Azure's account has are shown too."""
    if view not in SINCE_VIEWS:
        raise ValueError(f"{view!r} is not one of {SINCE_VIEWS}")
    rows_after = _first_month(ids) if view == "events" else ""
    return event_sql.since(ids, view, f"{DB}.", platform=platform, rows_after=rows_after)


def _first_month(ids: str) -> str:
    """The months of event_history to read for the events ``ids`` selects: from the first sighting any of them can
    have (migration 0029); the active set's bound needs no range (alert rules read it too)."""
    return ACTIVE_ROWS_AFTER if ids == ACTIVE_IDS else RANGE_ROWS_AFTER


def stored(ids: str) -> str:
    """The stored lifecycles of the events ``ids`` selects (event_history, newest version): for panels that show
    nothing that changes with time (no outcome, no end), so that they skip ``events``' look-up of the silence of
    the VMs holding events (``event_sql.stored``)."""
    return event_sql.stored(ids, "event_history", f"{DB}.", rows_after=_first_month(ids))


# The events of Azure's account (central feed, Resource Graph) first published in the range or the lookback before
# it, less those it settled (Completed or Canceled) before the range: the end of an event only Azure's account has
# is its settling, so those cannot overlap the range (overlapping_range keeps those that do). Without that, a
# month of the feed's events, each in a granule of its own, read nearly all of event_history for a 6-hour range.
# With ``since`` their rows of events have seen_by 'platform'; those the collectors saw come through the rollup's
# ids as well.
PLATFORM_OVERLAPPING: Final = (
    f"first_seen_at >= $__fromTime - INTERVAL {LOOKBACK_DAYS} DAY AND first_seen_at <= $__toTime "
    f"AND event_id NOT IN (SELECT event_id FROM {DB}.azure_scheduled_events WHERE event_status IN "
    f"('Completed', 'Canceled') AND first_seen_at >= $__fromTime - INTERVAL {LOOKBACK_DAYS} DAY "
    "AND first_seen_at < $__fromTime)"
)


# No rollup row of an event a panel can show is older than its first observation, at most LOOKBACK_DAYS before
# the event's last activity: before the range (or the active horizon, if earlier) by that much. The search for
# the sets of the events hit reads no part older than that, and ``since`` no month of event_history before it.
RANGE_ROWS_AFTER: Final = f"least($__fromTime, now64(3) - INTERVAL {LOOKBACK_DAYS} DAY) - INTERVAL {LOOKBACK_DAYS} DAY"
# The same for the active set alone: an event some VM showed within the horizon was first seen at most that long
# before.
ACTIVE_ROWS_AFTER: Final = f"now64(3) - INTERVAL {2 * LOOKBACK_DAYS} DAY"


def scoped(ids: str) -> str:
    """``event_vm_lifecycles`` like ``since`` (through ``event_sql.scoped``), each VM with its set: ``fault_set``,
    ``fault_set_id``, ``fault_domain_label``.

    Per-domain figures group by ``fault_set_id`` with the domain: FD 0 of two sets is two rows.
    """
    return event_sql.scoped(ids, f"{DB}.")


def hit_domains(keep: str, keys: tuple[str, ...] = ()) -> str:
    """The measured downtime (``impacts`` rows ``keep`` selects), one row per (event, set, fault domain[, keys]).

    For per-domain figures: group by ``fault_set_id`` and ``domain_``, label with ``domain_label``.
    """
    return event_sql.hit_domains(keep, f"{DB}.", keys=keys, rows_after=RANGE_ROWS_AFTER)


def event_sets(ids: str) -> str:
    """Per event: ``availability_set`` from ``events`` (through ``event_sql.event_sets``; join by ``event_id``;
    a row's set: scale_set, else that)."""
    return event_sql.event_sets(ids, f"{DB}.", rows_after=RANGE_ROWS_AFTER)


def active() -> str:
    """Only the active set (with ``since(ACTIVE_IDS)``)."""
    return "outcome = 'active'"


def started_in_range() -> str:
    """Events that started in the dashboard's range (with ``since(STARTED_IDS)``)."""
    return "started_at IS NOT NULL AND $__timeFilter(started_at)"


def first_seen_in_range() -> str:
    """Events first seen in the dashboard's range (with ``since(FIRST_SEEN_IDS)``)."""
    return "$__timeFilter(first_seen_at)"


def overlapping_range(first: str = "first_seen_at", last: str = "ended_at") -> str:
    """Events that overlap the range (with ``since(OVERLAPPING_IDS)``); still-active events have no end."""
    return f"{first} <= $__toTime AND ({last} IS NULL OR {last} >= $__fromTime)"


def _option_query(column: str, upstream: tuple[str, ...]) -> str:
    """Options of one VM variable: the value URL-encoded (what ``selected`` decodes), the text as stored."""
    where = [f"{column} IS NOT NULL"] + [_any(col, name) for name, _, col in VM_VARIABLES if name in upstream]
    return (
        f"SELECT DISTINCT {OPTION_VALUE.format(column=column)} AS value, {column} AS text "
        f"FROM {DB}.heartbeats_latest FINAL WHERE {' AND '.join(where)} ORDER BY text"
    )


def variables() -> list[dict[str, Any]]:
    """Data source, the VM cascade (each narrowed by the ones before it) and the event type."""
    out = [grafana.datasource_variable()]
    upstream: tuple[str, ...] = ()
    for name, label, column in VM_VARIABLES:
        out.append(grafana.query_variable(name, label, _option_query(column, upstream)))
        upstream = (*upstream, name)
    out.append(grafana.custom_variable("event_type", "Event type", EVENT_TYPES))
    return out


def fmt_list(column: str) -> str:
    """An array column as one comma-separated string (tables and alert labels)."""
    return f"arrayStringConcat(arrayMap(x -> toString(x), {column}), ', ')"
