"""Instance metadata edge: ``/metadata/instance`` -> ``VmIdentity``, cached and refreshed every few minutes.

The identity rarely changes, yet it is on every record (vm_id is the partition key and part of every dedupe
key), so it is fetched at start, refreshed every ``refresh_s``, and kept durably (outbox state) so a restart
while IMDS is unwell still labels records with the last known identity. When IMDS fails, the last known
identity stays in use; before the first success ever, a stable fallback identity (``fallback_identity``)
stands in, never an empty one.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol

from collector.decode import valid_text
from collector.imds import ImdsClient, ImdsError, ImdsInterrupted
from collector.model import VmIdentity
from collector.outbox import OutboxError
from sevents.retry import Backoff, RetryInterrupted, retry

log = logging.getLogger(__name__)


class StateStore(Protocol):
    """Where the last known identity is kept across restarts (the outbox implements it)."""

    def get_state(self, key: str) -> str | None: ...

    def set_state(self, key: str, value: str) -> None: ...


STATE_KEY = "vm_identity"
FALLBACK_FILE: Final = "fallback-vm-id"
_FALLBACK_ID: Final = re.compile(r"unknown-[0-9a-f-]{36}")
# After a failed fetch: soon at first (the identity is on every record), then every 30 s at most.
DEFAULT_RETRY: Final = Backoff(initial=1.0, cap=30.0)
_DOMAIN_MAX: Final = 2**31 - 1


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
        vm_id=_text(compute, "vmId"),
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
    # A lone surrogate would make every record of this VM unencodable: replace it (see decode.valid_text).
    return valid_text(value)[0] if isinstance(value, str) else ""


def _number(compute: Mapping[str, Any], key: str) -> int | None:
    """IMDS sends fault/update domains as strings ("0"); older versions omit them."""
    value = compute.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= _DOMAIN_MAX else None
    # isdecimal, not isdigit: "²" is a digit that int() refuses, and one odd field must not cost the identity.
    text = value.strip() if isinstance(value, str) else ""
    if text.isdecimal() and len(text) <= len(str(_DOMAIN_MAX)) and int(text) <= _DOMAIN_MAX:
        return int(text)
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


def fallback_identity(state_dir: Path) -> VmIdentity:
    """A stable stand-in until instance metadata was read once: a random id kept in ``state_dir``.

    With an empty vm_id two VMs whose instance metadata is down would produce the same transition ids and
    merge downstream. The id is created once and reused across restarts; if it cannot be written (a full
    disk), it lasts for this run and a warning says so.
    """
    path = state_dir / FALLBACK_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
        if _FALLBACK_ID.fullmatch(text):
            return VmIdentity(vm_id=text, vm_name="")
    except (OSError, UnicodeDecodeError):
        pass  # absent or unreadable: make a new one
    vm_id = f"unknown-{uuid.uuid4()}"
    try:
        scratch = path.with_name(path.name + ".tmp")
        with scratch.open("w", encoding="ascii") as out:
            out.write(vm_id + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(scratch, path)
    except OSError as error:
        log.warning("cannot keep the fallback identity; it lasts until restart", extra={"error": str(error)})
    return VmIdentity(vm_id=vm_id, vm_name="")


class IdentityUnavailable(Exception):
    """Instance metadata could not be read this time (already logged)."""


class InstanceCache:
    """The current VmIdentity, kept fresh by ``run(stop)`` in its own thread, apart from the poll loop.

    A slow or failing instance-metadata endpoint then never delays a Scheduled Events poll: the poll reads
    ``identity`` (the last known one, or the fallback) and moves on.
    """

    def __init__(
        self,
        client: ImdsClient,
        *,
        fallback: VmIdentity,
        refresh_s: float = 300.0,
        retry: Backoff = DEFAULT_RETRY,
        store: StateStore | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._monotonic = monotonic
        self._next_try = -float("inf")  # for refresh_if_due
        self._failures = 0
        self._refresh_s = refresh_s
        self._retry = retry
        self._store = store
        self._identity = fallback
        self.known = threading.Event()  # set once there is a real identity (stored, or fetched)
        if store is not None:
            stored = _stored(store)
            if stored is not None:
                self._identity = stored
                self.known.set()

    @property
    def identity(self) -> VmIdentity:
        """The last known identity (the fallback before any)."""
        return self._identity

    def run(self, stop: threading.Event) -> None:
        """Refresh every ``refresh_s`` until ``stop``; after a failure, retry under the backoff policy.

        Each try is a single request: the retry policy here is the only one (the poll loop may be waiting).
        """
        while not stop.is_set():
            try:
                retry(
                    functools.partial(self._refresh_or_raise, stop),
                    backoff=self._retry,
                    stop=stop,
                    retryable=lambda error: isinstance(error, IdentityUnavailable),
                )
            except (RetryInterrupted, ImdsInterrupted):
                return
            stop.wait(self._refresh_s)

    def refresh_if_due(self, stop: threading.Event) -> None:
        """For callers that poll without ``run`` (``once``, in-process harnesses): one try when one is due."""
        if self._monotonic() >= self._next_try:
            self.refresh(stop, deadline_s=0.0)

    def _refresh_or_raise(self, stop: threading.Event) -> None:
        if not self.refresh(stop, deadline_s=0.0):
            raise IdentityUnavailable()

    def refresh(self, stop: threading.Event, *, deadline_s: float | None = None) -> bool:
        """Fetch the identity once (retrying within ``deadline_s``); whether it succeeded. Failures are logged."""
        try:
            response = self._client.instance(stop, deadline_s=deadline_s)
            fresh = parse_instance(response.body)
        except ImdsInterrupted:
            raise
        except (ImdsError, ValueError) as error:
            log.warning(
                "instance metadata unavailable; keeping the last known identity",
                extra={"error": str(error), "vm_id": self._identity.vm_id},
            )
            self._failures += 1
            self._next_try = self._monotonic() + self._retry.delay(self._failures)
            return False
        self._failures = 0
        self._next_try = self._monotonic() + self._refresh_s
        if fresh != self._identity:
            log.info("VM identity", extra={"vm_id": fresh.vm_id, "vm_name": fresh.vm_name})
            self._identity = fresh
            self.known.set()
            if self._store is not None:
                try:
                    self._store.set_state(STATE_KEY, identity_to_json(fresh))
                except (OSError, OutboxError) as error:
                    log.warning("cannot keep the identity for the next start", extra={"error": str(error)})
        return True


def _stored(store: StateStore) -> VmIdentity | None:
    try:
        stored = store.get_state(STATE_KEY)
        return None if stored is None else identity_from_json(stored)
    except (ValueError, OSError, OutboxError):
        log.warning("ignoring unreadable stored identity")
        return None
