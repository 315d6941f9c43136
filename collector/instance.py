"""Instance metadata edge: ``/metadata/instance`` -> ``VmIdentity``, cached and refreshed every few minutes.

The identity rarely changes, yet it is on every record (vm_id is the partition key and part of every dedupe
key), so it is fetched at start, refreshed every ``refresh_s``, and kept durably (outbox state) so a restart
while IMDS is unwell still labels records with the last known identity. When IMDS fails, the last known
identity stays in use; ``VmIdentity.unknown()`` is used only before the first success ever.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from collector.imds import ImdsClient, ImdsError, ImdsInterrupted
from collector.model import VmIdentity

log = logging.getLogger(__name__)


class StateStore(Protocol):
    """Where the last known identity is kept across restarts (the outbox implements it)."""

    def get_state(self, key: str) -> str | None: ...

    def set_state(self, key: str, value: str) -> None: ...


STATE_KEY = "vm_identity"


def parse_instance(body: bytes) -> VmIdentity:
    """The identity in an instance metadata document; ValueError if it is not one (no ``compute.vmId``)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"instance metadata is not JSON: {error}") from error
    compute = document.get("compute") if isinstance(document, dict) else None
    if not isinstance(compute, dict) or not isinstance(compute.get("vmId"), str) or not compute["vmId"]:
        raise ValueError("instance metadata has no compute.vmId")
    return VmIdentity(
        vm_id=compute["vmId"],
        vm_name=_text(compute, "name"),
        location=_text(compute, "location"),
        subscription_id=_text(compute, "subscriptionId"),
        resource_group=_text(compute, "resourceGroupName"),
        resource_id=_text(compute, "resourceId"),
        zone=_text(compute, "zone"),
        fault_domain=_number(compute, "platformFaultDomain"),
        update_domain=_number(compute, "platformUpdateDomain"),
        scale_set=_text(compute, "vmScaleSetName"),
    )


def _text(compute: Mapping[str, Any], key: str) -> str:
    value = compute.get(key)
    return value if isinstance(value, str) else ""


def _number(compute: Mapping[str, Any], key: str) -> int | None:
    """IMDS sends fault/update domains as strings ("0"); older versions omit them."""
    value = compute.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    # isdecimal, not isdigit: "²" is a digit that int() refuses, and one odd field must not cost the identity.
    if isinstance(value, str) and value.strip().isdecimal():
        return int(value)
    return None


def identity_to_json(vm: VmIdentity) -> str:
    """The identity as JSON, for the state store."""
    return json.dumps(dataclasses.asdict(vm), sort_keys=True)


def identity_from_json(text: str) -> VmIdentity:
    """Inverse of ``identity_to_json``; ValueError on anything else."""
    try:
        fields = json.loads(text)
        return VmIdentity(**fields)
    except (TypeError, ValueError) as error:
        raise ValueError(f"not a stored identity: {error}") from error


class InstanceCache:
    """The current VmIdentity: refreshed from IMDS when older than ``refresh_s``, else from memory."""

    def __init__(
        self,
        client: ImdsClient,
        *,
        refresh_s: float = 300.0,
        retry_s: float = 30.0,
        store: StateStore | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._refresh_s = refresh_s
        self._retry_s = retry_s
        self._store = store
        self._monotonic = monotonic
        self._identity = VmIdentity.unknown()
        self._next_fetch = -float("inf")
        if store is not None:
            stored = store.get_state(STATE_KEY)
            if stored is not None:
                try:
                    self._identity = identity_from_json(stored)
                except ValueError:
                    log.warning("ignoring unreadable stored identity")

    @property
    def identity(self) -> VmIdentity:
        """The last known identity (``VmIdentity.unknown()`` before any)."""
        return self._identity

    def get(self, stop: threading.Event) -> VmIdentity:
        """The identity, fetching it first when due; IMDS failures keep the last known one (logged)."""
        if self._monotonic() < self._next_fetch:
            return self._identity
        try:
            # Before the first identity, retry as long as the policy allows; later one try will do.
            known = self._identity.vm_id != ""
            response = self._client.instance(stop, deadline_s=0.0 if known else None)
            fresh = parse_instance(response.body)
        except ImdsInterrupted:
            raise
        except (ImdsError, ValueError) as error:
            self._next_fetch = self._monotonic() + self._retry_s
            log.warning(
                "instance metadata unavailable; keeping the last known identity",
                extra={"error": str(error), "vm_id": self._identity.vm_id},
            )
            return self._identity
        self._next_fetch = self._monotonic() + self._refresh_s
        if fresh != self._identity:
            log.info("VM identity", extra={"vm_id": fresh.vm_id, "vm_name": fresh.vm_name})
            self._identity = fresh
            if self._store is not None:
                self._store.set_state(STATE_KEY, identity_to_json(fresh))
        return self._identity
