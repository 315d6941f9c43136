"""Attested data, simulated: ``/metadata/attested/document`` per VM, signed by a test CA in place of Azure's.

IMDS answers ``{"encoding": "pkcs7", "signature": "<base64 DER>"}``: a PKCS#7 SignedData whose content is a
JSON object (``licenseType``, ``nonce``, ``plan``, ``sku``, ``subscriptionId``, ``timeStamp`` with
``createdOn``/``expiresOn`` as ``MM/DD/YY HH:MM:SS -0000``, ``vmId``), signed by a certificate for
``metadata.azure.com`` that chains to a root (DESIGN.md). Here a test authority (``TestAuthority``: a root and
a signing certificate, generated, or the signing certificate issued from a configured root key) takes Azure's
place. Without a nonce IMDS puts the time (``YYYYMMDD-HHMMSS``) in its place; a nonce must be 10 digits.
Like IMDS, the answer may come from a cache: with ``cache_s`` > 0, a VM asking again within that time gets
the document made first, whatever nonce it asks for now (a client must compare the nonce and ask again).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs7
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from simulator.protocol import Reply, VmView, bad_request, check_request

PATH: Final = "/metadata/attested/document"
# api-versions IMDS answers attested data for (2018-10-01 and later), oldest first
ATTESTED_VERSIONS: Final = (
    "2018-10-01",
    "2019-02-01",
    "2019-03-11",
    "2019-04-30",
    "2019-06-01",
    "2019-06-04",
    "2019-08-01",
    "2019-08-15",
    "2019-11-01",
    "2020-06-01",
    "2020-07-15",
    "2020-09-01",
    "2020-10-01",
    "2020-12-01",
    "2021-01-01",
    "2021-02-01",
    "2021-03-01",
    "2021-05-01",
    "2021-08-01",
    "2021-10-01",
    "2021-11-01",
    "2021-11-15",
    "2021-12-13",
    "2023-07-01",
)
SIGNER_NAME: Final = "metadata.azure.com"  # the subject and DNS name of Azure's attested data certificate
_NONCE: Final = re.compile(r"^[0-9]{10}$")
_VALIDITY: Final = timedelta(days=365)
Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey  # Azure signs with RSA; P-256 is quicker to make


def new_key(rsa_bits: int | None = None) -> Key:
    """A P-256 key, or an RSA key of ``rsa_bits`` (Azure's kind)."""
    if rsa_bits:
        return rsa.generate_private_key(public_exponent=65537, key_size=rsa_bits)
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _root(key: Key, now: datetime, common_name: str) -> x509.Certificate:
    usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _leaf(issuer_key: Key, issuer: x509.Certificate, key: Key, now: datetime, name: str) -> x509.Certificate:
    usage = x509.KeyUsage(True, False, False, False, False, False, False, False, False)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(min(now + _VALIDITY, issuer.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
        .sign(issuer_key, hashes.SHA256())
    )


@dataclass(frozen=True)
class TestAuthority:
    """A root in Azure's place and the certificate that signs attested documents under it."""

    __test__ = False  # a name pytest would otherwise try to collect

    root: x509.Certificate
    signer: x509.Certificate
    signer_key: Key

    @classmethod
    def generate(
        cls,
        *,
        now: datetime | None = None,
        common_name: str = "sevents test attestation root",
        signer_name: str = SIGNER_NAME,
        rsa_bits: int | None = None,
    ) -> TestAuthority:
        """A fresh root and signing certificate (P-256, or RSA of ``rsa_bits``): what tests and the demo trust
        instead of Azure's root."""
        moment = now or datetime.now(UTC)
        root_key = new_key(rsa_bits)
        root = _root(root_key, moment, common_name)
        return cls.issued_by(root_key, root, now=moment, signer_name=signer_name, rsa_bits=rsa_bits)

    @classmethod
    def issued_by(
        cls,
        root_key: Key,
        root: x509.Certificate,
        *,
        now: datetime | None = None,
        signer_name: str = SIGNER_NAME,
        rsa_bits: int | None = None,
    ) -> TestAuthority:
        """A signing certificate for ``signer_name`` issued by a configured root (its key and certificate)."""
        key = new_key(rsa_bits)
        return cls(root, _leaf(root_key, root, key, now or datetime.now(UTC), signer_name), key)

    @classmethod
    def from_files(cls, root_cert: Path, root_key: Path) -> TestAuthority:
        """The root of a PEM certificate and its PEM (unencrypted) key: a configured test root."""
        key = serialization.load_pem_private_key(root_key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError(f"{root_key}: expected an EC or RSA private key")
        return cls.issued_by(key, x509.load_pem_x509_certificate(root_cert.read_bytes()))

    def root_pem(self) -> bytes:
        """The root as PEM: the file the ingest's ``attestation_ca_file`` names."""
        return self.root.public_bytes(serialization.Encoding.PEM)

    def sign(self, content: bytes, *, attributes: bool = True) -> bytes:
        """``content`` in a PKCS#7 SignedData (DER), with signed attributes unless told not, the signing
        certificate included."""
        options = [pkcs7.PKCS7Options.Binary] + ([] if attributes else [pkcs7.PKCS7Options.NoAttributes])
        return (
            pkcs7.PKCS7SignatureBuilder()
            .set_data(content)
            .add_signer(self.signer, self.signer_key, hashes.SHA256())
            .sign(serialization.Encoding.DER, options)
        )


def azure_time(moment: datetime) -> str:
    """IMDS's timeStamp form: ``11/30/20 21:19:19 -0000``."""
    return moment.astimezone(UTC).strftime("%m/%d/%y %H:%M:%S -0000")


def signed_content(vm: VmView, nonce: str, now: datetime) -> dict[str, Any]:
    """The JSON IMDS signs for ``vm``, in Microsoft's documented shape."""
    return {
        "licenseType": "",
        "nonce": nonce,
        "plan": {"name": "", "product": "", "publisher": ""},
        "sku": "22_04-lts-gen2",
        "subscriptionId": vm.subscription_id,
        "timeStamp": {"createdOn": azure_time(now), "expiresOn": azure_time(now + timedelta(hours=6))},
        "vmId": vm.vm_id,
    }


class AttestedDocuments:
    """Answers ``GET /metadata/attested/document`` for every VM, with IMDS's caching when ``cache_s`` > 0."""

    def __init__(
        self,
        authority: TestAuthority | Callable[[], TestAuthority] = TestAuthority.generate,
        *,
        cache_s: float = 0.0,
    ) -> None:
        self._authority = authority if isinstance(authority, TestAuthority) else None
        self._make = authority if not isinstance(authority, TestAuthority) else None
        self.cache_s = cache_s
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[datetime, dict[str, str]]] = {}  # VM name -> (made at, answer)
        self.served = 0

    @property
    def authority(self) -> TestAuthority:
        """The test authority (generated at the first use unless given)."""
        with self._lock:
            if self._authority is None:
                assert self._make is not None
                self._authority = self._make()
            return self._authority

    def answer(
        self, name: str, vm: VmView, headers: Mapping[str, str], query: Mapping[str, list[str]], now: datetime
    ) -> Reply:
        checked = check_request(headers, query, ATTESTED_VERSIONS)
        if isinstance(checked, Reply):
            return checked
        nonces = query.get("nonce", [])
        nonce = nonces[0] if nonces else now.strftime("%Y%m%d-%H%M%S")
        if nonces and not _NONCE.match(nonce):
            return bad_request("Invalid nonce: it must be a string of 10 digits.")
        authority = self.authority
        with self._lock:
            self.served += 1
            cached = self._cache.get(name)
            if cached is not None and now - cached[0] < timedelta(seconds=self.cache_s):
                return Reply(200, cached[1])
            content = json.dumps(signed_content(vm, nonce, now), separators=(",", ":")).encode()
            body = {"encoding": "pkcs7", "signature": base64.b64encode(authority.sign(content)).decode("ascii")}
            self._cache[name] = (now, body)
            return Reply(200, body)


class AttestationRootError(Exception):
    """A configured test root that cannot be read or written (the CLI's exit 2)."""


def attested_authority(root: Sequence[str] | None, root_out: str | None) -> AttestedDocuments:
    """The simulator's attested data from its command line: under a configured root (certificate and key files),
    or a generated one; the root's certificate written to ``root_out`` when asked, for the ingest to trust."""
    try:
        authority = TestAuthority.from_files(Path(root[0]), Path(root[1])) if root else TestAuthority.generate()
        if root_out:
            Path(root_out).write_bytes(authority.root_pem())
    except (OSError, ValueError, TypeError) as error:
        raise AttestationRootError(f"attestation root: {error}") from None
    return AttestedDocuments(authority)
