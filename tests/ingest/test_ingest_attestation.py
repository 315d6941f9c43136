"""The pure core of attestation (issue 29.1, the strong form): the nonce a key asks for, and what ``prove`` takes
as proof that a key is a VM's own. Documents are real PKCS#7 made by the simulator's test authority."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.attestation import Signer, message, read_document
from ingest.attestation import ATTESTATION_REFUSED, Trust, prove, signature_holds
from ingest.errors import InvalidRecord
from ingest.settings import IngestSettings, validate
from sevents.contract import attestation_nonce, key_id
from simulator.attested import TestAuthority, azure_time
from tests.tiers import examples

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
VM = "5147af36-d137-5883-a676-07abe3ad8a19"
AUTHORITY = TestAuthority.generate(now=NOW)
TRUST = Trust((AUTHORITY.root,))
SIGNER = Signer.of(Ed25519PrivateKey.generate())


def _content(*, vm_id: str = VM, nonce: str = SIGNER.nonce, created: datetime = NOW) -> dict[str, object]:
    return {
        "licenseType": "",
        "nonce": nonce,
        "plan": {"name": "", "product": "", "publisher": ""},
        "sku": "22_04-lts-gen2",
        "subscriptionId": "8d10da13-8125-4ba9-a717-bf7490507b3d",
        "timeStamp": {"createdOn": azure_time(created), "expiresOn": azure_time(created + timedelta(hours=6))},
        "vmId": vm_id,
    }


def _body(
    content: dict[str, object] | None = None,
    *,
    authority: TestAuthority = AUTHORITY,
    vm_id: str = VM,
    signer: Signer = SIGNER,
    attributes: bool = True,
) -> bytes:
    """The attestation event's body as the collector sends it, over a document ``authority`` signed."""
    der = authority.sign(json.dumps(content or _content()).encode(), attributes=attributes)
    return message(vm_id, signer, base64.b64encode(der).decode())


@given(st.binary(max_size=200))
@settings(max_examples=examples(300))
def test_the_nonce_is_ten_digits_of_the_keys_hash(public_der: bytes) -> None:
    nonce = attestation_nonce(public_der)
    assert len(nonce) == 10 and nonce.isascii() and nonce.isdigit()
    assert int(nonce) == int.from_bytes(hashlib.sha256(public_der).digest(), "big") % 10**10
    assert key_id(public_der) == hashlib.sha256(public_der).hexdigest()


def test_a_signer_asks_for_its_own_keys_nonce() -> None:
    other = Signer.of(Ed25519PrivateKey.generate())
    assert SIGNER.nonce == attestation_nonce(SIGNER.public_der) != other.nonce
    assert SIGNER.key_id != other.key_id


def test_a_genuine_attestation_proves_the_key() -> None:
    proven = prove(_body(), VM, TRUST, NOW + timedelta(minutes=1))
    assert (proven.vm_id, proven.key_id, proven.nonce) == (VM, SIGNER.key_id, SIGNER.nonce)
    assert proven.public_der == SIGNER.public_der and proven.created_on == NOW
    assert proven.subscription_id == "8d10da13-8125-4ba9-a717-bf7490507b3d"


def test_a_document_without_signed_attributes_and_an_rsa_signer_verify() -> None:
    rsa = TestAuthority.generate(now=NOW, rsa_bits=2048)  # Azure's certificates are RSA
    for authority, attributes in ((AUTHORITY, False), (rsa, True), (rsa, False)):
        body = _body(authority=authority, attributes=attributes)
        assert prove(body, VM, Trust((authority.root,)), NOW).key_id == SIGNER.key_id


def test_the_collector_reads_the_nonce_imds_signed() -> None:
    der = AUTHORITY.sign(json.dumps(_content(nonce="0123456789")).encode())
    answer = json.dumps({"encoding": "pkcs7", "signature": base64.b64encode(der).decode()}).encode()
    signature, content = read_document(answer)
    assert content["nonce"] == "0123456789" and base64.b64decode(signature) == der


def _tampered() -> bytes:
    """A genuine document whose signed vmId was changed in place (same length): its digest no longer matches."""
    der = AUTHORITY.sign(json.dumps(_content()).encode())
    forged = der.replace(VM.encode(), VM[::-1].encode())
    assert forged != der
    return message(VM[::-1], SIGNER, base64.b64encode(forged).decode())


OTHER_KEY = Signer.of(Ed25519PrivateKey.generate())
REFUSALS = {
    "another root": (_body(authority=TestAuthority.generate(now=NOW)), VM, "does not chain to the configured root"),
    "another signer name": (
        _body(authority=TestAuthority.generate(now=NOW, signer_name="metadata.example.com")),
        VM,
        "does not chain",
    ),
    "signed for another vmId": (_body(_content(vm_id="other-vm"), vm_id=VM), VM, "signed for vmId 'other-vm'"),
    "under another partition key": (_body(), "other-vm", "came under partition key 'other-vm'"),
    "another key's nonce": (_body(signer=OTHER_KEY), VM, "not the key's"),
    "a cached document (IMDS's time as nonce)": (_body(_content(nonce="20261126-115900")), VM, "not the key's"),
    "made long before it was sent": (_body(_content(created=NOW - timedelta(days=2))), VM, "not within"),
    "made after it was sent": (_body(_content(created=NOW + timedelta(hours=1))), VM, "not within"),
    "content changed after signing": (_tampered(), VM[::-1], "message digest is not the content's"),
    "not pkcs7": (message(VM, SIGNER, base64.b64encode(b"not a pkcs7").decode()), VM, "not a readable PKCS#7"),
    "not json": (b"\xff{", VM, "not JSON"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_proves_nothing_is_refused_with_its_reason(case: str) -> None:
    body, partition_key, why = REFUSALS[case]
    with pytest.raises(InvalidRecord) as refused:
        prove(body, partition_key, TRUST, NOW)
    assert refused.value.reason == ATTESTATION_REFUSED
    assert why in str(refused.value), str(refused.value)


@given(body=st.binary(max_size=600), signature=st.text(max_size=200))
@settings(max_examples=examples(300), deadline=None)
def test_no_input_escapes_as_anything_but_a_refusal(body: bytes, signature: str) -> None:
    """Arbitrary bodies, and arbitrary text where the PKCS#7 goes, are refused with a reason, never a crash."""
    for candidate in (body, message(VM, SIGNER, signature)):
        with pytest.raises(InvalidRecord) as refused:
            prove(candidate, VM, TRUST, NOW)
        assert refused.value.reason == ATTESTATION_REFUSED


@given(payload=st.binary(max_size=300), flip=st.integers(min_value=0))
@settings(max_examples=examples(200))
def test_a_signature_holds_for_exactly_the_bytes_signed(payload: bytes, flip: int) -> None:
    key = SIGNER.key.public_key()
    signature = SIGNER.sign(payload)
    assert signature_holds(payload, signature, key)
    assert not signature_holds(payload, OTHER_KEY.sign(payload), key)
    if payload:
        at = flip % len(payload)
        changed = payload[:at] + bytes([payload[at] ^ 1]) + payload[at + 1 :]
        assert not signature_holds(changed, signature, key)
    assert not signature_holds(payload, "not base64!", key)


def test_settings_refuse_required_without_a_root_and_a_root_file_without_certificates(tmp_path: Path) -> None:
    """Bad attestation settings are problems listed at start (exit 2), never a traceback at the first record."""
    empty, good = tmp_path / "empty.pem", tmp_path / "root.pem"
    empty.write_text("no certificate here\n")
    good.write_bytes(AUTHORITY.root_pem())
    assert validate(IngestSettings(attestation="required", attestation_ca_file=good)) == []
    problems = {
        "required without a root": validate(IngestSettings(attestation="required")),
        "a file of no certificate": validate(IngestSettings(attestation_ca_file=empty)),
        "an unknown mode": validate(IngestSettings(attestation="sometimes", attestation_ca_file=good)),
        "a missing file": validate(IngestSettings(attestation_intermediates_file=tmp_path / "nope.pem")),
    }
    assert all(len(found) == 1 for found in problems.values()), problems
    assert "needs attestation_ca_file" in problems["required without a root"][0]
    assert "not a readable PEM file" in problems["a file of no certificate"][0]
