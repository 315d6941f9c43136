"""Decode and validate one wire record (pure): bytes in, checked values out, or InvalidRecord with a reason.

The rules are the fields declared in ``sevents.contract`` (``ingest.rules`` checks them one by one). A record
whose only faults are in fields that are not its identity is not rejected: the precise path makes them safe
(``contract.make_safe``) and returns a note, which the handler stores beside the original in dead letters.

Two paths apply the rules. The fast path lets msgspec parse the payload straight into a typed struct per
record type (types checked in C), then checks in Python what the types
cannot vouch for: ranges, list and map sizes, the timestamp form. At any doubt it hands the payload to the
precise path, which parses with orjson and checks field by field in rule order, and is the only one that
names rejection reasons (besides the dedupe key check, which both run on the same values). So both reject
the same records for the same reasons; ``tests/ingest/test_ingest_fastpath.py`` compares them.

The record's dedupe key is recomputed and must match, since a wrong key silently breaks deduplication.
Unknown extra fields are allowed (adding an optional field does not bump the schema version) and dropped;
records with them take the precise path.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Final, Literal

import msgspec
import orjson

from ingest.errors import InvalidRecord
from ingest.rules import (
    COMMON_RULES,
    HEARTBEAT_RULES,
    INT64,
    RULES,
    TIME_YEARS,
    TRANSITION_RULES,
    UINT16,
    UINT32,
    UINT64,
    Limits,
    Rule,
    check_document,
)
from sevents import contract, records

__all__ = [
    "COMMON_RULES",
    "FAST_PLANS",
    "HEARTBEAT_RULES",
    "INT64",
    "RULES",
    "TRANSITION_RULES",
    "UINT16",
    "UINT32",
    "UINT64",
    "Decoder",
    "Limits",
    "Plan",
    "Rule",
    "decode_noted",
    "decode_reference",
    "decoder_for",
]

DEFAULT_LIMITS: Final = Limits()
_from_iso: Final = datetime.fromisoformat


@dataclass(frozen=True)
class Plan:
    """One record type's rules, laid out for both paths."""

    record_type: str
    rules: Mapping[str, Rule]
    names: tuple[str, ...]
    fetch: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    wide_ints: tuple[tuple[int, int, int], ...]  # ranges msgspec cannot check (beyond int64): checked here
    times: tuple[int, ...]
    lists: tuple[int, ...]
    maps: tuple[int, ...]
    check_key: Callable[[tuple[Any, ...]], None]
    decoder: msgspec.json.Decoder[Any]
    # The same struct with its fields in the order records.encode writes them (sorted): msgspec matches each key
    # to the field it expects next, so this decodes canonical payloads faster; read by name (ingest.decode_batch).
    wire_decoder: msgspec.json.Decoder[Any]
    fields: tuple[contract.Field, ...]
    defaults: tuple[tuple[str, Any], ...]  # optional fields and their defaults
    note_at: int | None  # where notes of fields made safe go (the anomaly column), if the type has one

    @classmethod
    def of(cls, record_type: str, fields: tuple[contract.Field, ...] | None = None) -> Plan:
        fields = contract.CONTRACT[record_type] if fields is None else fields
        rules = RULES[record_type] if fields is contract.CONTRACT[record_type] else {f.name: f for f in fields}
        kinds = [r.kind for r in rules.values()]
        return cls(
            record_type=record_type,
            rules=rules,
            names=tuple(rules),
            fetch=operator.itemgetter(*rules),
            wide_ints=tuple(
                (i, *r.bounds) for i, r in enumerate(rules.values()) if r.kind == "int" and not _fits_int64(r)
            ),
            times=tuple(i for i, k in enumerate(kinds) if k == "time"),
            lists=tuple(i for i, k in enumerate(kinds) if k == "texts"),
            maps=tuple(i for i, k in enumerate(kinds) if k == "counts"),
            check_key=_key_check(record_type, tuple(rules)),
            decoder=msgspec.json.Decoder(_struct(record_type, rules)),
            wire_decoder=msgspec.json.Decoder(_struct(record_type, {name: rules[name] for name in sorted(rules)})),
            fields=fields,
            defaults=tuple((r.name, r.default) for r in rules.values() if not r.required),
            note_at=list(rules).index("anomaly") if "anomaly" in rules else None,
        )


def _struct(record_type: str, rules: Mapping[str, Rule]) -> type[msgspec.Struct]:
    """The msgspec struct of a record type: JSON types, and the integer ranges msgspec can check (int64)."""
    kind_types: dict[str, Any] = {
        "text": str,
        "int": int,
        "bool": bool,
        "time": str,
        "texts": list[str],
        "counts": dict[str, int],
    }
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for name, rule in rules.items():
        kind: Any = kind_types[rule.kind]
        if rule.kind == "int" and _fits_int64(rule):
            kind = Annotated[int, msgspec.Meta(ge=rule.bounds[0], le=rule.bounds[1])]
        if name == "schema_version":
            kind = Literal[records.SCHEMA_VERSION]
        elif name == "record_type":
            kind = Literal[record_type]
        kind = kind | None if rule.nullable else kind
        fields.append((name, kind) if rule.required else (name, kind, rule.default))
    # Unknown fields go to the precise path: msgspec skips them less strictly than orjson parses them.
    # kw_only: optional fields (with a default) may come anywhere in the declaration, not only last.
    # gc=False: a struct holds only text, numbers and lists or maps of them, so it is never part of a cycle; leaving
    # it untracked spares the collector passes over every decoded record.
    return msgspec.defstruct(f"Wire_{record_type}", fields, forbid_unknown_fields=True, kw_only=True, gc=False)


def _fits_int64(rule: Rule) -> bool:
    return INT64[0] <= rule.bounds[0] and rule.bounds[1] <= INT64[1]


def decode_reference(payload: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[str, tuple[Any, ...]]:
    """The record type and field values (in ``RULES`` order, without the position) by the precise path alone: the
    oracle ``decode_noted`` must agree with (``tests/ingest/test_ingest_fastpath.py`` compares them)."""
    plan, row, _ = _precise(payload, limits)
    return plan.record_type, tuple(row)


def _validated_noted(payload: bytes, limits: Limits, plans: tuple[Plan, ...]) -> tuple[Plan, list[Any], str]:
    if len(payload) > limits.max_payload_bytes:
        raise InvalidRecord("too_large", f"{len(payload)} bytes > {limits.max_payload_bytes}")
    # A payload no longer than the text limit cannot hold a string over it: the fast path need not look.
    if len(payload) <= limits.max_text_chars:
        for plan in plans:
            try:
                values = msgspec.structs.astuple(plan.decoder.decode(payload))
            except (msgspec.MsgspecError, ValueError, RecursionError):
                continue  # not valid JSON of this type (a canonical record of the other fails at its first key)
            row = _checked(plan, values, limits)
            if row is not None:
                return plan, row, ""
            break
    return _precise(payload, limits, plans)  # says why, or takes it (unknown fields)


def _checked(plan: Plan, values: tuple[Any, ...], limits: Limits) -> list[Any] | None:
    """The row of a record whose JSON types msgspec checked, or None if anything else is in doubt."""
    for i, low, high in plan.wide_ints:
        value = values[i]
        if value is not None and not low <= value <= high:
            return None
    for i in plan.lists:
        if len(values[i]) > limits.max_list_items:
            return None
    for i in plan.maps:
        counts = values[i]
        if len(counts) > limits.max_map_items or not all(0 <= n <= UINT64[1] for n in counts.values()):
            return None
    plan.check_key(values)
    return _row(plan, values)


def _row(plan: Plan, values: tuple[Any, ...]) -> list[Any] | None:
    """The values with timestamps parsed; None if one is not in the wire form or out of range."""
    row = list(values)
    for i in plan.times:
        text = row[i]
        if text is not None:  # the checks of ``rules._time``, inlined (three per record)
            if len(text) != 24 or text[10] != "T" or text[23] != "Z":
                return None
            try:
                moment = _from_iso(text)
            except ValueError:
                return None
            if not TIME_YEARS[0] <= moment.year <= TIME_YEARS[1]:
                return None
            row[i] = moment
    return row


def _precise(payload: bytes, limits: Limits, plans: tuple[Plan, ...] | None = None) -> tuple[Plan, list[Any], str]:
    """The reference path: the same outcome for every payload, and the reason for every rejection.

    A record whose only faults are in fields that can be made safe (``contract.make_safe``) is taken with
    those fields repaired and a note saying how; the caller keeps the original in dead letters.
    """
    try:
        document = orjson.loads(payload)
    except (ValueError, RecursionError) as error:
        raise InvalidRecord("bad_json", str(error)[:200]) from None
    if type(document) is not dict:
        raise InvalidRecord("not_an_object", type(document).__name__)
    version = document.get("schema_version")
    if type(version) is not int or version != records.SCHEMA_VERSION:
        raise InvalidRecord("schema_version", f"unsupported schema_version {version!r}")
    record_type = document.get("record_type")
    by_type = _PLANS if plans is None else {p.record_type: p for p in plans}
    plan = by_type.get(record_type) if isinstance(record_type, str) else None
    if plan is None:
        raise InvalidRecord("record_type", f"unknown record_type {record_type!r}")
    for name, default in plan.defaults:  # optional fields an older collector does not send
        document.setdefault(name, default)
    try:
        values = plan.fetch(document)
    except KeyError as missing:
        raise InvalidRecord("missing_field", str(missing.args[0])) from None
    notes = ""
    try:
        _check_all(plan, document, values, limits)
    except InvalidRecord:
        safe, repairs = contract.make_safe(plan.fields, document, limits)
        if not repairs:
            raise
        _check_all(plan, safe, plan.fetch(safe), limits)  # still bad (a key, a type): the whole record goes
        document, values, notes = safe, plan.fetch(safe), "made safe: " + "; ".join(repairs)
    row = _row(plan, values)
    if row is None:  # check_document passed every timestamp that _row refused: the two disagree
        raise InvalidRecord("inconsistent", "the timestamp checks disagree")
    if notes and plan.note_at is not None:  # after the key check: the anomaly is part of some keys
        noted = f"{row[plan.note_at]}; {notes}" if row[plan.note_at] else notes
        row[plan.note_at] = noted[: limits.max_text_chars]
    return plan, row, notes


def _check_all(plan: Plan, document: Mapping[str, Any], values: tuple[Any, ...], limits: Limits) -> None:
    """Every rule and the key, raising the reason of the first violation in the reference order."""
    try:  # a wrong type, range or size anywhere: the first bad field in order, whatever it is
        check_document(plan.rules, document, limits, time_format=False)
    except InvalidRecord:
        check_document(plan.rules, document, limits)
        raise
    plan.check_key(values)  # a wrong key outranks a malformed timestamp
    check_document(plan.rules, document, limits)


def _key_check(record_type: str, names: tuple[str, ...]) -> Callable[[tuple[Any, ...]], None]:
    """The check of one record's values (in ``names`` order) against its type's fixed sets of values and its
    dedupe key (``sevents.records.ENUMS``, ``KEYS``): ``bad_value`` or ``bad_key``."""
    enums = [(names.index(name), name, allowed) for name, allowed in records.ENUMS[record_type].items()]
    recipe = records.KEYS[record_type]
    key_name = contract.BY_NAME[record_type].key
    key_at, id_at = names.index(key_name), names.index("record_id")

    def check(values: tuple[Any, ...]) -> None:
        for i, name, allowed in enums:
            if values[i] not in allowed:
                raise InvalidRecord("bad_value", f"unknown {name} {values[i]!r}")
        (expected,) = recipe({name: (value,) for name, value in zip(names, values, strict=True)})
        if values[key_at] != expected or values[id_at] != expected:
            raise InvalidRecord("bad_key", f"{key_name}/record_id do not match the record's identity")

    return check


# The contract's order is the one the fast paths try: transitions, the type the throughput goal is about, first.
_FAST_ORDER: Final = tuple(Plan.of(t.name) for t in contract.RECORD_TYPES)
_PLANS: Final[dict[str, Plan]] = {p.record_type: p for p in _FAST_ORDER}
FAST_PLANS: Final = _FAST_ORDER  # the record types' plans in the order the fast paths try them (ingest.decode_batch)


Noted = tuple[str, tuple[Any, ...], str]  # record type, table row, note of the fields made safe
Decoder = Callable[..., Noted]


def _decoder(plans: tuple[Plan, ...]) -> Decoder:
    def decode_noted(payload: bytes, position: str, limits: Limits = DEFAULT_LIMITS) -> Noted:
        """The record type, its complete table row (the values in ``RULES`` order, timestamps parsed to aware UTC
        datetimes, then ``position``), and the note of the fields made safe ("" when none: stored as sent).

        A non-empty note means the row holds repaired values and the original payload belongs in dead letters.
        Raises InvalidRecord, and nothing else, for a record that cannot be stored.
        """
        plan, row, notes = _validated_noted(payload, limits, plans)
        row.append(position)
        return plan.record_type, tuple(row), notes

    return decode_noted


def decoder_for(declaration: Mapping[str, tuple[contract.Field, ...]]) -> Decoder:
    """``decode_noted`` for a declaration of the record types (``sevents.contract.CONTRACT`` or, in tests, one with
    a field added: a new optional field needs no change here)."""
    return _decoder(tuple(Plan.of(t, fields) for t, fields in declaration.items()))


# The one decoder the ingest stores by (ingest.handler; ingest.decode_batch takes the common case in columns and
# hands it every record it cannot vouch for), built from the contract's plans in the order the fast paths try them.
decode_noted: Final = _decoder(_FAST_ORDER)
