"""The collector's side of attestation (issue 29.1, the strong form): its key in the state dir, and the attested
document asked of a real IMDS (the simulator, over loopback HTTP) with the key's nonce, again while IMDS answers
a cached one."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collector.attestation import KEY_FILE, AttestationError, Attester, load_or_create_key
from collector.imds import ImdsClient
from collector.settings import load_settings
from ingest.attestation import Trust, prove
from sevents.errors import ConfigError
from sevents.retry import Backoff
from simulator.attested import AttestedDocuments, TestAuthority
from simulator.loader import load_scenario
from simulator.server import SimServer

AUTHORITY = TestAuthority.generate()
QUICK = Backoff(initial=0.05, cap=0.1)


def test_the_key_is_made_once_private_and_kept(tmp_path: Path) -> None:
    first = load_or_create_key(tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / KEY_FILE).st_mode) == 0o600
    again = load_or_create_key(tmp_path)
    assert again.key_id == first.key_id and again.nonce == first.nonce


def test_a_key_others_could_read_is_made_private(tmp_path: Path) -> None:
    made = load_or_create_key(tmp_path)
    os.chmod(tmp_path / KEY_FILE, 0o644)
    assert load_or_create_key(tmp_path).key_id == made.key_id
    assert stat.S_IMODE(os.stat(tmp_path / KEY_FILE).st_mode) == 0o600


def test_a_link_planted_as_the_key_is_never_followed(tmp_path: Path) -> None:
    """Someone who could write the state dir plants a link to a file the collector (root) must not touch."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    state = tmp_path / "state"
    state.mkdir()
    (state / KEY_FILE).symlink_to(victim)
    with pytest.raises(OSError):
        load_or_create_key(state)
    assert victim.read_bytes() == b"precious"


def test_attestation_needs_the_event_hubs_sink(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(flags={"attestation": True, "state_dir": tmp_path}, env={})
    assert any("needs sink" in problem for problem in refused.value.problems)


@pytest.fixture
def cached_sim() -> Iterator[SimServer]:
    """A simulated IMDS that, like IMDS, answers from its cache for a while whatever nonce is asked."""
    with SimServer(load_scenario("demo"), speed=1, attested=AttestedDocuments(AUTHORITY, cache_s=2.0)).start() as sim:
        yield sim


def test_a_cached_document_over_another_nonce_is_asked_for_again(cached_sim: SimServer, tmp_path: Path) -> None:
    """Another agent on the VM asked first (its nonce is cached): the collector asks again until the document
    carries its own key's nonce, and that document proves the key at the ingest."""
    name = cached_sim.vm_names[0]
    client = ImdsClient(cached_sim.vm_base_url(name))
    client.attested(threading.Event(), "2020-09-01", "0000000000")  # another agent's request, now cached
    attester = Attester(client, load_or_create_key(tmp_path), backoff=Backoff(initial=0.5, cap=1.0), retries=8)
    attestation = attester.attestation()
    assert attester.asked >= 2  # the first answer was the cached document over 0000000000
    vm_id = cached_sim.engine.vms[name].view.vm_id
    assert attestation.vm_id == vm_id
    proven = prove(attestation.body, vm_id, Trust((AUTHORITY.root,)), datetime.now(UTC))
    assert proven.key_id == attester.signer.key_id


def test_asking_again_is_bounded(tmp_path: Path) -> None:
    """An IMDS that keeps answering the cached document: a bounded number of asks, then AttestationError (the
    sink sends nothing and tries again at its next send)."""
    sticky = AttestedDocuments(AUTHORITY, cache_s=3600)
    with SimServer(load_scenario("demo"), speed=1, attested=sticky).start() as sim:
        client = ImdsClient(sim.vm_base_url(sim.vm_names[0]))
        client.attested(threading.Event(), "2020-09-01", "0000000000")
        attester = Attester(client, load_or_create_key(tmp_path), retries=3, backoff=QUICK)
        with pytest.raises(AttestationError, match="cached attested document"):
            attester.attestation()
        assert attester.asked == 4 and sticky.served == 5
