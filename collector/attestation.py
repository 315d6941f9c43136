"""Records a VM can prove (issue 29, the strong form): the VM's own key, IMDS's attested document, signatures.

Theory of operation. With ``attestation = true`` (sink eventhubs), the collector keeps an Ed25519 key pair in its
state dir (``attestation-key.pem``, mode 0600, made at the first start, opened without following links like the
other state files). Before it ships records, the Event Hubs sink asks IMDS for the attested document
(``/metadata/attested/document``, through the collector's own IMDS client: ``Metadata: true``, no proxy) with the
10-digit nonce derived from the public key (``sevents.contract.attestation_nonce``): Azure signs the nonce
together with the vmId, so the document binds this key to this VM. IMDS may answer with a cached document
signed over another nonce; the collector then asks again, a bounded number of times with backoff. The sink
sends the attestation (``message``) first, then signs the exact body bytes of every event it sends.

The wire form is declared in ``sevents.contract`` (RECORD_ATTESTATION, PROPERTY_SIGNATURE, PROPERTY_KEY_ID).
This module reads the signed JSON out of the PKCS#7 only to compare its nonce; the ingest verifies the
signature and the chain (ingest/attestation.py).

Errors::

    AttestationError    no attested document over our nonce (IMDS failed, or kept answering a cached one)
"""

from __future__ import annotations

import base64
import json
import logging
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from collector.imds import ImdsError
from collector.statedir import NO_FOLLOW
from sevents.contract import RECORD_ATTESTATION, attestation_nonce, key_id
from sevents.retry import Backoff

if TYPE_CHECKING:
    from collector.imds import ImdsClient
    from collector.settings import CollectorSettings

log = logging.getLogger(__name__)

KEY_FILE: Final = "attestation-key.pem"
ATTESTED_API_VERSION: Final = "2020-09-01"  # the version of Microsoft's attested data examples
CACHED_RETRIES: Final = 5  # how often to ask again while IMDS answers a document over another nonce
CACHED_BACKOFF: Final = Backoff(initial=1.0, cap=8.0)


class AttestationError(Exception):
    """No attested document over this key's nonce could be had (yet); the sink sends nothing meanwhile."""


@dataclass(frozen=True)
class Signer:
    """The VM's key: signs event bodies; ``public_der`` and ``key_id`` name it on the wire."""

    key: Ed25519PrivateKey
    public_der: bytes
    key_id: str
    nonce: str

    @classmethod
    def of(cls, key: Ed25519PrivateKey) -> Signer:
        public = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return cls(key, public, key_id(public), attestation_nonce(public))

    def sign(self, payload: bytes) -> str:
        """The base64 Ed25519 signature of ``payload`` (the exact bytes of an event's body)."""
        return base64.b64encode(self.key.sign(payload)).decode("ascii")


def load_or_create_key(state_dir: Path) -> Signer:
    """The key kept in ``state_dir`` (made and stored 0600 at the first start); never follows a link."""
    path = state_dir / KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW, 0o600)
    except FileExistsError:
        return Signer.of(_read_key(path))
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
            out.flush()
            os.fsync(out.fileno())
    except OSError:
        path.unlink()
        raise
    signer = Signer.of(key)
    log.info("attestation key made", extra={"key_id": signer.key_id, "file": str(path)})
    return signer


def _read_key(path: Path) -> Ed25519PrivateKey:
    fd = os.open(path, os.O_RDONLY | NO_FOLLOW)
    with os.fdopen(fd, "rb") as source:
        mode = os.fstat(source.fileno()).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            os.fchmod(source.fileno(), 0o600)
            log.warning("the attestation key was readable by others: made it 0600", extra={"file": str(path)})
        key = serialization.load_pem_private_key(source.read(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    return key


def signed_content(der: bytes) -> bytes:
    """The JSON IMDS signed, read out of the PKCS#7 SignedData (not verified: the ingest does that)."""
    from asn1crypto import cms  # only a collector with attestation on pays for it

    info = cms.ContentInfo.load(der)
    if info["content_type"].native != "signed_data":
        raise ValueError(f"not a PKCS#7 SignedData: {info['content_type'].native}")
    content = info["content"]["encap_content_info"]["content"]
    if content.native is None:
        raise ValueError("the PKCS#7 carries no content")
    return bytes(content.native)


def read_document(body: bytes) -> tuple[str, dict[str, Any]]:
    """IMDS's answer ``{"encoding": "pkcs7", "signature": "<base64 DER>"}``: the base64 DER and the signed JSON."""
    answer = json.loads(body)
    if (
        not isinstance(answer, dict)
        or answer.get("encoding") != "pkcs7"
        or not isinstance(answer.get("signature"), str)
    ):
        raise ValueError("not an attested document: expected encoding pkcs7 and a signature")
    signature: str = answer["signature"]
    content = json.loads(signed_content(base64.b64decode(signature, validate=False)))
    if not isinstance(content, dict):
        raise ValueError("the attested document's signed content is not a JSON object")
    return signature, content


@dataclass(frozen=True)
class Attestation:
    """What the sink sends first: the VM's id (its partition key) and the attestation event's body."""

    vm_id: str
    body: bytes


def message(vm_id: str, signer: Signer, signature: str) -> bytes:
    """The attestation event's body (``sevents.contract.ATTESTATION_FIELDS``)."""
    fields = {
        "vm_id": vm_id,
        "public_key": base64.b64encode(signer.public_der).decode("ascii"),
        "encoding": "pkcs7",
        "signature": signature,
    }
    return json.dumps(fields, separators=(",", ":")).encode()


class Attester:
    """Fetches the attested document over the signer's nonce, asking again while IMDS answers a cached one."""

    def __init__(
        self,
        client: ImdsClient,
        signer: Signer,
        *,
        api_version: str = ATTESTED_API_VERSION,
        retries: int = CACHED_RETRIES,
        backoff: Backoff = CACHED_BACKOFF,
    ) -> None:
        self.client = client
        self.signer = signer
        self.api_version = api_version
        self.retries = retries
        self.backoff = backoff
        self.stop = threading.Event()  # set by close(): a fetch or a wait in progress ends at once
        self.asked = 0  # documents asked for, for logs and tests

    @classmethod
    def from_settings(cls, settings: CollectorSettings) -> Attester:
        """The key in the state dir and an IMDS client like the poller's (same base URL, policy, no proxy)."""
        from collector.dhcp import resolve_base_url
        from collector.imds import ImdsClient
        from collector.imds_policy import ImdsPolicy

        base = resolve_base_url(settings.imds_url, discover=settings.discover_endpoint, globs=settings.dhcp_lease_globs)
        policy = ImdsPolicy(  # the poller's timeouts, pacing and retry deadline
            first_call_timeout_s=settings.first_call_timeout,
            read_timeout_s=settings.request_timeout,
            min_interval_s=settings.min_request_interval,
            deadline_s=settings.retry_deadline,
            backoff=Backoff(initial=0.5, cap=10.0),
        )
        return cls(ImdsClient(base, policy=policy), load_or_create_key(settings.state_dir))

    def attestation(self) -> Attestation:
        """A fresh attested document over our nonce, as the attestation event; AttestationError if none came."""
        nonce = self.signer.nonce
        for attempt in range(1, self.retries + 2):
            self.asked += 1
            try:
                response = self.client.attested(self.stop, self.api_version, nonce)
                signature, content = read_document(response.body)
            except ImdsError as error:
                raise AttestationError(f"IMDS gave no attested document: {error}") from error
            except ValueError as error:
                raise AttestationError(f"IMDS's attested document is unreadable: {error}") from error
            vm_id = content.get("vmId")
            if content.get("nonce") == nonce and isinstance(vm_id, str) and vm_id:
                log.info("attested document fetched", extra={"key_id": self.signer.key_id, "vm_id": vm_id})
                return Attestation(vm_id, message(vm_id, self.signer, signature))
            if content.get("nonce") == nonce:
                raise AttestationError("IMDS's attested document names no vmId")
            if attempt > self.retries:
                break
            delay = self.backoff.delay(attempt)
            log.info(
                "IMDS answered a cached attested document (another nonce); asking again",
                extra={"attempt": attempt, "retry_in_s": round(delay, 2)},
            )
            if self.stop.wait(delay):
                raise AttestationError("stopped while waiting for IMDS's attested document")
        raise AttestationError(
            f"IMDS answered a cached attested document over another nonce {self.retries + 1} times; will ask later"
        )

    def close(self) -> None:
        self.stop.set()
        self.client.close()


__all__ = ["RECORD_ATTESTATION", "Attestation", "AttestationError", "Attester", "Signer", "load_or_create_key"]
