"""The attestation gate: pin each VM's proven keys, and let through only records signed by their VM's key.

Theory of operation. ``AttestationGate(deliveries)`` runs before a batch is decoded (``ingest.handler``):

1. Attestation events (application property record_type = ``attestation``, ``sevents.contract``) are taken out
   of the batch. Each must be signed by the key it carries, and ``ingest.attestation.prove`` must find that
   IMDS's attested document binds the key to the VM it came from; then the key is pinned to that vmId in
   ``attested_keys`` (migration 0015), the table of record. A second key for a vmId that already has one
   needs its own valid attestation, and is pinned with ``new_key`` true, an ``anomaly`` naming the keys it
   joins, and a warning in the log. An attestation already pinned is taken again without a row. One that
   proves nothing is dead-lettered (``attestation_refused``, saying why).
2. With ``required``, every other delivery from a source with provenance (Event Hubs) must carry the
   signature of its exact body by a key pinned to its partition key's VM (which the handler then requires to
   be its vm_id): otherwise it is dead-lettered ``unsigned``, ``another_vms_key`` (a key pinned to another
   VM), ``unattested_key`` (a key no valid attestation pinned: a VM whose attestation has not come, or was
   refused) or ``bad_signature`` (the VM's key, other bytes). A trusted local source (the outbox) gives no
   provenance and is not checked.

Records that arrive before their VM's attestation are dead-lettered ``unattested_key``: the collector cannot
cause that, since it sends the attestation first, under its vm_id, in the same ordered partition as its
records (and again on every new connection). The pins are written before the gate returns, so a batch
redelivered after a failed insert finds them; the in-memory copy is updated only after the write succeeded.
With attestation off but a root configured, attestations are still verified and pinned (so that it can be
turned on later without waiting for every collector to restart); with no root they are counted as dropped
(``attestation_unchecked``).

Errors::

    StoreError    ClickHouse did not answer the pin lookup or write (the handler retries the whole gate)
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ingest.attestation import Proven, Trust, prove, signature_holds
from ingest.clickhouse import CLIENT_ERRORS
from ingest.errors import InvalidRecord, StoreError
from ingest.source import Delivery
from sevents.contract import PROPERTY_KEY_ID, PROPERTY_SIGNATURE, RECORD_ATTESTATION

log = logging.getLogger(__name__)

MODES: Final = ("off", "required")
UNSIGNED: Final = "unsigned"  # no signature on a record from Event Hubs
UNATTESTED_KEY: Final = "unattested_key"  # signed by a key no valid attestation pinned to any VM
ANOTHER_VMS_KEY: Final = "another_vms_key"  # signed by a key pinned to another VM
BAD_SIGNATURE: Final = "bad_signature"  # the VM's key did not sign these bytes
UNCHECKED: Final = "attestation_unchecked"  # an attestation dropped (counted): attestation off, no root set
TABLE: Final = "attested_keys"
PIN_COLUMNS: Final = (
    "vm_id",
    "key_id",
    "public_key",
    "subscription_id",
    "nonce",
    "attested_at",
    "pinned_at",
    "new_key",
    "anomaly",
    "source_position",
)


@dataclass
class Passed:
    """What the gate made of a batch: the deliveries to decode, the refused (dead letters), and counts."""

    kept: list[Delivery] = field(default_factory=list)
    refused: list[tuple[Delivery, InvalidRecord]] = field(default_factory=list)
    pinned: int = 0  # keys pinned now
    new_keys: int = 0  # of which for a VM that had another key
    unchecked: int = 0  # attestations dropped because no root is configured


class PinStore:
    """``attested_keys`` in ClickHouse: the pinned keys of some VMs, and new pins."""

    def __init__(self, client: Any, database: str) -> None:
        self.client = client
        self.database = database

    def keys_of(self, vms: Sequence[str]) -> dict[str, dict[str, bytes]]:
        """vm_id -> key_id -> public key (DER) of every key pinned to ``vms``."""
        try:
            rows = self.client.query(
                f"SELECT vm_id, key_id, public_key FROM {self.database}.{TABLE} "  # noqa: S608 -- our names; values bound
                "WHERE vm_id IN {vms:Array(String)}",
                parameters={"vms": sorted(set(vms))},
            ).result_rows
        except CLIENT_ERRORS as error:
            raise StoreError(f"cannot read the pinned keys: {error}") from error
        found: dict[str, dict[str, bytes]] = {}
        for vm_id, kid, public in rows:
            found.setdefault(str(vm_id), {})[str(kid)] = base64.b64decode(public)
        return found

    def pin(self, rows: Sequence[tuple[Any, ...]]) -> None:
        try:
            self.client.insert(f"{self.database}.{TABLE}", list(rows), column_names=list(PIN_COLUMNS))
        except CLIENT_ERRORS as error:
            raise StoreError(f"cannot pin {len(rows)} attested keys: {error}") from error


class AttestationGate:
    """Callable on a batch of deliveries (thread-safe enough: partitions hold different VMs)."""

    def __init__(
        self,
        store: PinStore,
        trust: Trust | None,
        *,
        required: bool,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if required and trust is None:
            raise ValueError("attestation required needs a trusted root")
        self.store = store
        self.trust = trust
        self.required = required
        self.now = now
        self._keys: dict[str, dict[str, Ed25519PublicKey]] = {}  # vm_id -> key_id -> key, as pinned
        self._owner: dict[str, str] = {}  # key_id -> the vm_id it is pinned to, for the reasons given
        self._lock = threading.Lock()  # partitions deliver concurrently; pins are read and written one at a time

    def __call__(self, deliveries: Sequence[Delivery]) -> Passed:
        passed = Passed()
        attestations = [d for d in deliveries if d.properties.get("record_type") == RECORD_ATTESTATION]
        records = [d for d in deliveries if d.properties.get("record_type") != RECORD_ATTESTATION]
        checked = [d for d in records if d.provenance is not None] if self.required else []
        wanted = {str(d.provenance.partition_key) for d in [*attestations, *checked] if d.provenance is not None}
        with self._lock:
            self._load(wanted - self._keys.keys())
            if attestations:
                self._pin(attestations, passed)
        for delivery in records:
            error = self._refusal(delivery) if self.required and delivery.provenance is not None else None
            if error is None:
                passed.kept.append(delivery)
            else:
                passed.refused.append((delivery, error))
        return passed

    def _load(self, vms: set[str]) -> None:
        if not vms:
            return
        for vm_id, keys in self.store.keys_of(sorted(vms)).items():
            self._remember(vm_id, keys)

    def _remember(self, vm_id: str, keys: dict[str, bytes]) -> None:
        from cryptography.hazmat.primitives.serialization import load_der_public_key

        mine = self._keys.setdefault(vm_id, {})
        for kid, der in keys.items():
            key = load_der_public_key(der)
            if isinstance(key, Ed25519PublicKey):
                mine[kid] = key
                self._owner[kid] = vm_id

    def _pin(self, attestations: Sequence[Delivery], passed: Passed) -> None:
        """Verify each attestation; write the new pins; only then remember them."""
        if self.trust is None:
            passed.unchecked += len(attestations)
            return
        fresh: dict[str, dict[str, bytes]] = {}
        rows = []
        pinned_at = self.now()
        for delivery in attestations:
            try:
                proven = self._prove(delivery)
            except InvalidRecord as error:
                log.warning("attestation refused", extra={"position": delivery.position, "error": str(error)})
                passed.refused.append((delivery, error))
                continue
            known = {**self._keys.get(proven.vm_id, {}), **fresh.get(proven.vm_id, {})}
            if proven.key_id in known:
                continue  # pinned already: the collector sends its attestation on every new connection
            anomaly = f"new key for a known vmId: it joins {', '.join(sorted(known))}" if known else ""
            if known:
                passed.new_keys += 1
                log.warning(
                    "a VM presents a new key, with a valid attestation: pinned and flagged",
                    extra={"vm_id": proven.vm_id, "key_id": proven.key_id, "known_keys": len(known)},
                )
            fresh.setdefault(proven.vm_id, {})[proven.key_id] = proven.public_der
            rows.append(_pin_row(proven, pinned_at, bool(known), anomaly, delivery.position))
        if rows:
            self.store.pin(rows)
            passed.pinned += len(rows)
            log.info("attested keys pinned", extra={"count": len(rows), "new_keys": passed.new_keys})
        for vm_id, keys in fresh.items():
            self._remember(vm_id, keys)

    def _prove(self, delivery: Delivery) -> Proven:
        assert self.trust is not None
        provenance = delivery.provenance
        enqueued = (provenance.enqueued_at if provenance is not None else None) or self.now()
        proven = prove(delivery.payload, provenance.partition_key if provenance else None, self.trust, enqueued)
        signature = delivery.properties.get(PROPERTY_SIGNATURE, "")
        if delivery.properties.get(PROPERTY_KEY_ID) != proven.key_id or not signature_holds(
            delivery.payload, signature, proven.public_key
        ):
            raise InvalidRecord("attestation_refused", "not signed by the key it attests (no proof of possession)")
        return proven

    def _refusal(self, delivery: Delivery) -> InvalidRecord | None:
        """Why a record from Event Hubs is not its VM's own signed record, or None."""
        signature = delivery.properties.get(PROPERTY_SIGNATURE)
        kid = delivery.properties.get(PROPERTY_KEY_ID, "")
        if not signature:
            return InvalidRecord(UNSIGNED, "no signature: attestation is required of records from Event Hubs")
        vm_id = str(delivery.provenance.partition_key) if delivery.provenance is not None else ""
        key = self._keys.get(vm_id, {}).get(kid)
        if key is None:
            owner = self._owner.get(kid)
            if owner is not None:
                return InvalidRecord(ANOTHER_VMS_KEY, f"signed by key {kid[:16]} of VM {owner}, not of VM {vm_id}")
            return InvalidRecord(
                UNATTESTED_KEY, f"signed by key {kid[:16]}, which no valid attestation pinned to VM {vm_id}"
            )
        if not signature_holds(delivery.payload, signature, key):
            return InvalidRecord(BAD_SIGNATURE, f"the signature of key {kid[:16]} (VM {vm_id}) is not of these bytes")
        return None


def _pin_row(proven: Proven, pinned_at: datetime, new_key: bool, anomaly: str, position: str) -> tuple[Any, ...]:
    return (
        proven.vm_id,
        proven.key_id,
        base64.b64encode(proven.public_der).decode("ascii"),
        proven.subscription_id,
        proven.nonce,
        proven.created_on,
        pinned_at,
        new_key,
        anomaly,
        position,
    )
