"""Verifying attestations and signatures (issue 29, the strong form), pure: no I/O but reading the trust files.

An attestation (``sevents.contract``: RECORD_ATTESTATION) carries a VM's public key and IMDS's attested
document: a PKCS#7 SignedData over JSON that names the vmId and the nonce the VM asked for. It proves the key
the VM's own when

- the PKCS#7 signature over the content verifies (with signed attributes: their message digest is the content's,
  and the signature is over them) with the key of the signer's certificate, which it carries;
- that certificate chains to a configured root (``Trust.roots``; intermediates from the PKCS#7 and from an
  optional file, Azure's documents carry only the leaf) at the hub's enqueued time, and is a TLS server
  certificate for ``Trust.signer_name`` (``metadata.azure.com`` in Azure's public cloud);
- the signed vmId is the partition key the attestation came under and the vm_id it names;
- the signed nonce is ``attestation_nonce(public key)``;
- the document was made shortly before the hub enqueued it (``Trust.max_age``): a 10-digit nonce leaves a key
  grinder about 2**33 tries, which the window keeps out of reach of an old document.

PKCS#7 is read with asn1crypto (cryptography has no PKCS#7 verification), and every signature and the chain are
checked with cryptography (``cryptography.x509.verification``).

Errors::

    InvalidRecord(ATTESTATION_REFUSED, why)   an attestation that proves nothing (dead-lettered by the gate)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from asn1crypto import cms
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.x509 import DNSName
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from ingest.errors import InvalidRecord
from sevents.contract import ATTESTATION_FIELDS, attestation_nonce, key_id

ATTESTATION_REFUSED: Final = "attestation_refused"  # an attestation that does not prove its key the VM's own
DEFAULT_SIGNER_NAME: Final = "metadata.azure.com"
DEFAULT_MAX_AGE: Final = timedelta(hours=24)
# SHA-2 only: a document signed over SHA-1 is refused (collisions are practical)
_HASHES: Final[dict[str, hashes.HashAlgorithm]] = {
    "sha256": hashes.SHA256(),
    "sha384": hashes.SHA384(),
    "sha512": hashes.SHA512(),
}


@dataclass(frozen=True)
class Trust:
    """What an attested document must chain to, who must have signed it, and how old it may be."""

    roots: tuple[x509.Certificate, ...]
    intermediates: tuple[x509.Certificate, ...] = ()
    signer_name: str = DEFAULT_SIGNER_NAME
    max_age: timedelta = DEFAULT_MAX_AGE
    clock_skew: timedelta = timedelta(seconds=300)

    @classmethod
    def load(cls, ca_file: Path, intermediates_file: Path | None = None, **options: Any) -> Trust:
        """The roots of a PEM bundle (and intermediates of another); ValueError names a file without any."""
        roots = tuple(x509.load_pem_x509_certificates(ca_file.read_bytes()))
        between = tuple(x509.load_pem_x509_certificates(intermediates_file.read_bytes())) if intermediates_file else ()
        return cls(roots, between, **options)


@dataclass(frozen=True)
class Proven:
    """A key an attestation proved a VM's own."""

    vm_id: str
    key_id: str
    public_key: Ed25519PublicKey
    public_der: bytes
    subscription_id: str
    nonce: str
    created_on: datetime


def _refuse(why: str) -> InvalidRecord:
    return InvalidRecord(ATTESTATION_REFUSED, why)


def parse_message(body: bytes) -> dict[str, str]:
    """The attestation event's fields (``ATTESTATION_FIELDS``, all text), or InvalidRecord."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise _refuse(f"not JSON: {error}") from None
    if not isinstance(message, dict) or any(not isinstance(message.get(f), str) for f in ATTESTATION_FIELDS):
        raise _refuse(f"expected a JSON object of text fields {', '.join(ATTESTATION_FIELDS)}")
    if message["encoding"] != "pkcs7":
        raise _refuse(f"encoding {message['encoding'][:40]!r}, expected pkcs7")
    return {f: message[f] for f in ATTESTATION_FIELDS}


def public_key_of(text: str) -> tuple[Ed25519PublicKey, bytes]:
    """The Ed25519 key of a base64 DER SubjectPublicKeyInfo, and those DER bytes; InvalidRecord otherwise."""
    try:
        der = base64.b64decode(text, validate=True)
        key = serialization.load_der_public_key(der)
    except (binascii.Error, ValueError, UnsupportedAlgorithm) as error:
        raise _refuse(f"public_key is not a base64 DER public key: {error}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise _refuse(f"public_key is a {type(key).__name__}, expected Ed25519")
    return key, der


def signed_json(signature_b64: str, trust: Trust, at: datetime) -> dict[str, Any]:
    """The JSON object the PKCS#7 (base64 DER) carries, once its signature and chain verified at ``at``."""
    try:
        der = base64.b64decode(signature_b64, validate=True)
        info = cms.ContentInfo.load(der)
        if info["content_type"].native != "signed_data":
            raise _refuse(f"not a PKCS#7 SignedData: {info['content_type'].native}")
        signed = info["content"]
        content = signed["encap_content_info"]["content"].native
        infos = list(signed["signer_infos"])
        carried = [x509.load_der_x509_certificate(c.chosen.dump()) for c in signed["certificates"] or ()]
    except InvalidRecord:
        raise
    except (binascii.Error, ValueError, TypeError, KeyError) as error:  # asn1crypto raises ValueError/TypeError
        raise _refuse(f"the attested document is not a readable PKCS#7: {error}") from None
    if not isinstance(content, bytes) or len(infos) != 1:
        raise _refuse("the PKCS#7 must carry its content and exactly one signer")
    leaf = _signer_certificate(infos[0], carried)
    _check_signature(infos[0], leaf, content)
    _check_chain(leaf, [c for c in carried if c != leaf], trust, at)
    try:
        document = json.loads(content)
    except (ValueError, UnicodeDecodeError) as error:
        raise _refuse(f"the signed content is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise _refuse("the signed content is not a JSON object")
    return document


def _signer_certificate(info: cms.SignerInfo, carried: Sequence[x509.Certificate]) -> x509.Certificate:
    sid = info["sid"]
    for cert in carried:
        if sid.name == "issuer_and_serial_number":
            wanted = sid.chosen
            if cert.serial_number == wanted["serial_number"].native and cert.issuer.public_bytes() == bytes(
                wanted["issuer"].dump()
            ):
                return cert
        else:
            try:
                ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
            except x509.ExtensionNotFound:
                continue
            if ski == sid.chosen.native:
                return cert
    raise _refuse("the PKCS#7 does not carry its signer's certificate")


def _check_signature(info: cms.SignerInfo, cert: x509.Certificate, content: bytes) -> None:
    digest_name = info["digest_algorithm"]["algorithm"].native
    if digest_name not in _HASHES:
        raise _refuse(f"unsupported digest {digest_name}")
    digest = _HASHES[digest_name]
    attributes = info["signed_attrs"]
    if attributes.native is None or len(attributes) == 0:
        signed = content
    else:
        found = {a["type"].native: a["values"][0].native for a in attributes}
        if found.get("message_digest") != hashlib.new(digest_name, content).digest():
            raise _refuse("the PKCS#7's message digest is not the content's: the content was changed")
        signed = attributes.untag().dump()  # signed as a SET OF, not under the [0] tag it travels in
    signature = info["signature"].native
    algorithm = info["signature_algorithm"].signature_algo
    key = cert.public_key()
    try:
        if isinstance(key, rsa.RSAPublicKey) and algorithm == "rsassa_pkcs1v15":
            key.verify(signature, signed, padding.PKCS1v15(), digest)
        elif isinstance(key, ec.EllipticCurvePublicKey) and algorithm == "ecdsa":
            key.verify(signature, signed, ec.ECDSA(digest))
        else:
            raise _refuse(f"unsupported signature {algorithm} with a {type(key).__name__}")
    except InvalidSignature:
        raise _refuse("the PKCS#7 signature does not verify with its signer's certificate") from None


def _check_chain(leaf: x509.Certificate, carried: Sequence[x509.Certificate], trust: Trust, at: datetime) -> None:
    verifier = (
        PolicyBuilder().store(Store(list(trust.roots))).time(at).build_server_verifier(DNSName(trust.signer_name))
    )
    try:
        verifier.verify(leaf, [*carried, *trust.intermediates])
    except VerificationError as error:
        raise _refuse(
            f"the signer's certificate ({leaf.subject.rfc4514_string()}) does not chain to the configured root "
            f"as a certificate for {trust.signer_name}: {error}"
        ) from None


def azure_time(text: Any) -> datetime:
    """IMDS's ``11/30/20 21:19:19 -0000`` as a UTC datetime; InvalidRecord otherwise."""
    try:
        return datetime.strptime(str(text), "%m/%d/%y %H:%M:%S %z").astimezone(UTC)
    except ValueError:
        raise _refuse(f"timeStamp.createdOn {str(text)[:40]!r} is not IMDS's time form") from None


def prove(body: bytes, partition_key: str | None, trust: Trust, enqueued_at: datetime) -> Proven:
    """The key an attestation event proves its VM's own, or InvalidRecord (``ATTESTATION_REFUSED``) saying why."""
    message = parse_message(body)
    key, der = public_key_of(message["public_key"])
    vm_id = message["vm_id"]
    if vm_id != partition_key:
        raise _refuse(f"vm_id {vm_id[:64]!r} came under partition key {partition_key!r}")
    document = signed_json(message["signature"], trust, enqueued_at)
    if document.get("vmId") != vm_id:
        raise _refuse(f"the attested document is signed for vmId {str(document.get('vmId'))[:64]!r}, not {vm_id!r}")
    nonce = attestation_nonce(der)
    if document.get("nonce") != nonce:
        raise _refuse(
            f"the attested document's nonce {str(document.get('nonce'))[:20]!r} is not the key's ({nonce}): "
            "it was not asked for this key"
        )
    stamp = document.get("timeStamp")
    created = azure_time(stamp.get("createdOn") if isinstance(stamp, dict) else None)
    if created > enqueued_at + trust.clock_skew or created < enqueued_at - trust.max_age:
        raise _refuse(
            f"the attested document was made {created.isoformat()}, not within {trust.max_age} before the hub "
            f"enqueued it ({enqueued_at.isoformat()})"
        )
    subscription = document.get("subscriptionId")
    return Proven(vm_id, key_id(der), key, der, subscription if isinstance(subscription, str) else "", nonce, created)


def signature_holds(payload: bytes, signature_b64: str, key: Ed25519PublicKey) -> bool:
    """Whether ``signature_b64`` is ``key``'s Ed25519 signature of exactly ``payload``."""
    try:
        key.verify(base64.b64decode(signature_b64, validate=True), payload)
    except (binascii.Error, ValueError, InvalidSignature):
        return False
    return True
