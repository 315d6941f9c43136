"""The simulator's attested data as ``sevents-imds-sim`` serves it (a real subprocess): IMDS's answer shape and
request rules, signed under a configured test root, or a generated one it writes out for the ingest to trust."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from collector.attestation import read_document
from ingest.attestation import Trust, signed_json

SIM = [sys.executable, "-m", "simulator.cli", "--port", "0", "--log-level", "warning"]
NONCE = "0123456789"


@contextmanager
def _running(*flags: str) -> Iterator[str]:
    """The simulator started with ``flags``; its base URL (the first line it prints)."""
    process = subprocess.Popen([*SIM, *flags], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(30)


def _root(directory: Path) -> tuple[Path, Path]:
    """A configured test root: its certificate and unencrypted key, as an operator would make them."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "configured test root")])
    now = datetime.now(UTC)
    usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "root.pem", directory / "root.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    key_file.write_bytes(key_pem)
    return cert_file, key_file


def _document(base: str, vm: str, **params: str) -> requests.Response:
    return requests.get(
        f"{base}/vm/{vm}/metadata/attested/document", params=params, headers={"Metadata": "true"}, timeout=10
    )


def test_documents_are_signed_under_the_configured_root(tmp_path: Path) -> None:
    cert_file, key_file = _root(tmp_path)
    with _running("--attestation-root", str(cert_file), str(key_file)) as base:
        vms = requests.get(f"{base}/_sim/vms", timeout=10).json()
        first = vms[0]
        answer = _document(base, first["name"], **{"api-version": "2020-09-01", "nonce": NONCE})
        assert answer.status_code == 200 and set(answer.json()) == {"encoding", "signature"}
        signature, content = read_document(answer.content)
        assert content["nonce"] == NONCE and content["vmId"] == first["vm_id"]
        assert {"subscriptionId", "sku", "timeStamp", "plan", "licenseType"} <= set(content)
        trust = Trust(tuple(x509.load_pem_x509_certificates(cert_file.read_bytes())))
        assert signed_json(signature, trust, datetime.now(UTC)) == content
        without = _document(base, first["name"], **{"api-version": "2020-09-01"})
        assert read_document(without.content)[1]["nonce"] != NONCE  # IMDS puts the time in its place
        refused = {
            "no Metadata header": requests.get(
                f"{base}/vm/{first['name']}/metadata/attested/document?api-version=2020-09-01", timeout=10
            ),
            "a nonce of 9 digits": _document(base, first["name"], **{"api-version": "2020-09-01", "nonce": "12345678"}),
            "an api-version it lacks": _document(base, first["name"], **{"api-version": "2017-08-01"}),
        }
        assert {case: r.status_code for case, r in refused.items()} == dict.fromkeys(refused, 400)


def test_a_generated_root_is_written_out_and_a_bad_one_is_one_line_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "generated-root.pem"
    with _running("--attestation-root-out", str(out)) as base:
        vm = requests.get(f"{base}/_sim/vms", timeout=10).json()[0]["name"]
        signature, _ = read_document(_document(base, vm, **{"api-version": "2021-02-01", "nonce": NONCE}).content)
        trust = Trust(tuple(x509.load_pem_x509_certificates(out.read_bytes())))
        assert signed_json(signature, trust, datetime.now(UTC))["nonce"] == NONCE
    missing = tmp_path / "nope.pem"
    failed = subprocess.run([*SIM, "--attestation-root", str(missing), str(missing)], capture_output=True, text=True)
    assert failed.returncode == 2
    assert failed.stderr.startswith("sevents-imds-sim: attestation root: ") and failed.stderr.count("\n") == 1
