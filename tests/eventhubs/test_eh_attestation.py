"""Issue 29.1, the strong form, through real parts: the simulator's attested data (a test CA in Azure's place),
the collector's key, attester and Event Hubs sink, the local Event Hubs endpoint, and the real consumer and
handler with ``attestation = "required"`` storing into embedded ClickHouse.

A genuine VM's signed records are stored and its key pinned; an unsigned record, one signed by another VM's
key, and one of a VM whose key no attestation proved are dead-lettered with their reasons; a VM presenting a
new key with a valid attestation is flagged and accepted; an attestation signed by a CA other than the
configured root is refused, and the records of its key with it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from collector.attestation import Attester, Signer, load_or_create_key
from collector.imds import ImdsClient
from collector.outbox import OutboxRow
from collector.settings import CollectorSettings
from collector.ship_eventhubs import ATTEST_EVERY_S, EventHubsSink
from collector.sink import SinkError
from collector.wiring import build_agent
from demo import synthetic
from ingest.attestation import ATTESTATION_REFUSED, Trust
from ingest.attestation_gate import ANOTHER_VMS_KEY, BAD_SIGNATURE, UNATTESTED_KEY, UNSIGNED, AttestationGate, PinStore
from ingest.handler import Handler
from ingest.source import Delivery, Provenance
from ingest.source_eventhubs import EventHubsSource
from ingest.writer import Writer
from sevents import records
from sevents.contract import PROPERTY_KEY_ID, PROPERTY_SIGNATURE, RECORD_ATTESTATION
from sevents.records import encode
from sevents.retry import Backoff
from simulator.attested import AttestedDocuments, TestAuthority
from simulator.loader import load_scenario
from simulator.server import SimServer
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.eh_fleet import FAST_BALANCE
from tests.helpers import eventually, outbox_rows, query_rows

AUTHORITY = TestAuthority.generate()  # the ingest's configured root; the simulator signs with it


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(load_scenario("demo"), speed=1, attested=AttestedDocuments(AUTHORITY)).start() as server:
        yield server


@pytest.fixture
def ingest(endpoint: EventHubsEndpoint, ch: Any, db: str, checkpoint_store: Any) -> Iterator[Handler]:
    """The real consumer with attestation required, trusting only AUTHORITY's root."""
    stop = threading.Event()
    gate = AttestationGate(PinStore(ch, db), Trust((AUTHORITY.root,)), required=True)
    handler = Handler(Writer(ch, db), source="eventhubs", stop=stop, backoff=Backoff(0.05, 0.5), gate=gate)
    source = EventHubsSource.from_connection_string(
        endpoint.connection_string(), checkpoint_store=checkpoint_store(), **FAST_BALANCE
    )
    thread = threading.Thread(target=source.run, args=(handler, stop), daemon=True)
    thread.start()
    yield handler
    stop.set()
    thread.join(30)
    assert source.failures == 0


class Vm:
    """One simulated VM's collector side: its key in its own state dir, its attester, its vmId."""

    def __init__(self, sim: SimServer, index: int, state_dir: Path) -> None:
        self.name = sim.vm_names[index]
        state_dir.mkdir(parents=True, exist_ok=True)
        self.attester = Attester(ImdsClient(sim.vm_base_url(self.name)), load_or_create_key(state_dir))
        self.vm_id = sim.engine.vms[self.name].view.vm_id

    @property
    def signer(self) -> Signer:
        return self.attester.signer

    def heartbeat(self, observed_at: datetime, seq: int = 1) -> dict[str, Any]:
        record = synthetic.heartbeat(vm_index=0, observed_at=observed_at, seq=seq)
        key = records.heartbeat_id(self.vm_id, record["observed_at"])
        record.update(vm_id=self.vm_id, vm_name=self.name, heartbeat_id=key, record_id=key)
        return record

    def ship(self, endpoint: EventHubsEndpoint, sent: list[dict[str, Any]]) -> None:
        """Through the collector's own sink: the attestation first, then each record signed."""
        sink = EventHubsSink.from_connection_string(endpoint.connection_string(), attester=self.attester)
        sink.send(outbox_rows(sent))
        sink.close()


def _send_raw(endpoint: EventHubsEndpoint, key: str, payload: bytes, properties: dict[str, str]) -> None:
    """One event under ``key`` with ``properties``, as a forger would send it with the shared identity."""
    with EventHubProducerClient.from_connection_string(endpoint.connection_string()) as producer:
        batch = producer.create_batch(partition_key=key)
        event = EventData(payload)
        event.properties = {"record_type": "heartbeat", **properties}  # type: ignore[assignment]
        batch.add(event)
        producer.send_batch(batch)


def _dead_letters(ch: Any, db: str) -> dict[bytes, str]:
    found = query_rows(ch, f"SELECT payload, error FROM {db}.dead_letters")
    return {(p if isinstance(p, bytes) else str(p).encode()): str(e) for p, e in found}


def _heartbeats(ch: Any, db: str, vm_id: str) -> int:
    return int(query_rows(ch, f"SELECT count() FROM {db}.heartbeats FINAL WHERE vm_id = '{vm_id}'")[0][0])


def test_genuine_records_are_stored_and_unsigned_or_foreign_signed_ones_dead_lettered(
    sim: SimServer, endpoint: EventHubsEndpoint, ch: Any, db: str, ingest: Handler, tmp_path: Path
) -> None:
    """Two VMs ship through the collector's sink: their keys are pinned, their records stored. Then records
    claiming VM a under its partition key: unsigned, signed by VM b's key, signed by a key never attested,
    and a's signature over other bytes; each is dead-lettered with its reason, and a's rows are unchanged."""
    now = datetime.now(UTC)
    a, b, c = (Vm(sim, i, tmp_path / name) for i, name in enumerate("abc"))
    a.ship(endpoint, [a.heartbeat(now - timedelta(seconds=30))])
    b.ship(endpoint, [b.heartbeat(now - timedelta(seconds=30))])
    assert eventually(lambda: ingest.stored == 2 and ingest.pinned == 2, 30), (ingest.stored, ingest.pinned)
    pinned = query_rows(ch, f"SELECT vm_id, key_id, new_key FROM {db}.attested_keys ORDER BY vm_id")
    assert sorted(pinned) == sorted([(a.vm_id, a.signer.key_id, False), (b.vm_id, b.signer.key_id, False)])

    unsigned = encode(a.heartbeat(now, seq=2))
    foreign = encode(a.heartbeat(now + timedelta(seconds=1), seq=3))
    unattested = encode(a.heartbeat(now + timedelta(seconds=2), seq=4))
    tampered = encode(a.heartbeat(now + timedelta(seconds=3), seq=5))
    forgeries = [
        (unsigned, {}, UNSIGNED),
        (foreign, {PROPERTY_SIGNATURE: b.signer.sign(foreign), PROPERTY_KEY_ID: b.signer.key_id}, ANOTHER_VMS_KEY),
        (unattested, {PROPERTY_SIGNATURE: c.signer.sign(unattested), PROPERTY_KEY_ID: c.signer.key_id}, UNATTESTED_KEY),
        (tampered, {PROPERTY_SIGNATURE: a.signer.sign(unsigned), PROPERTY_KEY_ID: a.signer.key_id}, BAD_SIGNATURE),
    ]
    for payload, properties, _ in forgeries:
        _send_raw(endpoint, a.vm_id, payload, properties)
    a.ship(endpoint, [a.heartbeat(now + timedelta(seconds=4), seq=6)])  # genuine, after them: stored
    assert eventually(lambda: ingest.stored == 2 + len(forgeries) + 1, 30), ingest.stored

    dead = _dead_letters(ch, db)
    assert {payload: dead[payload].split(":")[0] for payload, _, _ in forgeries} == {
        payload: reason for payload, _, reason in forgeries
    }
    assert b.vm_id in dead[foreign]  # the reason names whose key it is
    assert _heartbeats(ch, db, a.vm_id) == 2 and _heartbeats(ch, db, b.vm_id) == 1
    assert ingest.pinned == 2  # a's attestation again (a new connection) pins nothing new


def test_a_new_key_with_a_valid_attestation_is_flagged_and_accepted(
    sim: SimServer, endpoint: EventHubsEndpoint, ch: Any, db: str, ingest: Handler, tmp_path: Path
) -> None:
    """The same VM with a fresh state dir (a reinstalled collector) makes a new key; its own attestation pins
    it beside the first, flagged new_key with an anomaly, and its records are stored."""
    now = datetime.now(UTC)
    first = Vm(sim, 0, tmp_path / "before")
    first.ship(endpoint, [first.heartbeat(now - timedelta(seconds=60))])
    assert eventually(lambda: ingest.stored == 1, 30), ingest.stored
    again = Vm(sim, 0, tmp_path / "after")
    assert again.vm_id == first.vm_id and again.signer.key_id != first.signer.key_id
    again.ship(endpoint, [again.heartbeat(now - timedelta(seconds=30), seq=2)])
    assert eventually(lambda: ingest.stored == 2, 30), ingest.stored

    pins = query_rows(ch, f"SELECT key_id, new_key, anomaly FROM {db}.attested_keys WHERE vm_id = '{first.vm_id}'")
    flagged = {key: (new, anomaly) for key, new, anomaly in pins}
    assert flagged[first.signer.key_id] == (False, "")
    assert flagged[again.signer.key_id][0] is True
    assert first.signer.key_id in flagged[again.signer.key_id][1]
    assert _heartbeats(ch, db, first.vm_id) == 2
    assert query_rows(ch, f"SELECT count() FROM {db}.dead_letters") == [(0,)]


def test_an_attestation_signed_by_another_ca_is_refused(
    endpoint: EventHubsEndpoint, ch: Any, db: str, ingest: Handler, tmp_path: Path
) -> None:
    """An IMDS whose documents a rogue CA signs (same shape, same signer name): the attestation is dead-lettered
    as refused, saying it does not chain to the configured root; the records of its key are not stored."""
    rogue = AttestedDocuments(TestAuthority.generate(common_name="rogue root"))
    with SimServer(load_scenario("demo"), speed=1, attested=rogue).start() as other:
        vm = Vm(other, 0, tmp_path / "rogue")
        record = vm.heartbeat(datetime.now(UTC))
        vm.ship(endpoint, [record])
    assert eventually(lambda: ingest.stored == 2, 30), ingest.stored
    dead = _dead_letters(ch, db)
    refusals = [error for payload, error in dead.items() if payload != encode(record)]
    assert len(refusals) == 1 and refusals[0].startswith(f"{ATTESTATION_REFUSED}: ")
    assert "does not chain to the configured root" in refusals[0]
    assert dead[encode(record)].startswith(f"{UNATTESTED_KEY}: ")
    assert query_rows(ch, f"SELECT count() FROM {db}.attested_keys") == [(0,)]
    assert _heartbeats(ch, db, vm.vm_id) == 0


def test_without_a_root_attestations_are_counted_as_dropped_and_records_stored(
    sim: SimServer, endpoint: EventHubsEndpoint, ch: Any, db: str, checkpoint_store: Any, tmp_path: Path
) -> None:
    """Attestation off and no root (the default): a collector with attestation on still gets its records stored;
    its attestation is neither a record nor a dead letter, but a drop counted with its reason."""
    stop = threading.Event()
    gate = AttestationGate(PinStore(ch, db), None, required=False)
    handler = Handler(Writer(ch, db), source="eventhubs", stop=stop, backoff=Backoff(0.05, 0.5), gate=gate)
    source = EventHubsSource.from_connection_string(
        endpoint.connection_string(), checkpoint_store=checkpoint_store(), **FAST_BALANCE
    )
    thread = threading.Thread(target=source.run, args=(handler, stop), daemon=True)
    thread.start()
    try:
        vm = Vm(sim, 0, tmp_path / "vm")
        vm.ship(endpoint, [vm.heartbeat(datetime.now(UTC))])
        assert eventually(lambda: handler.stored == 1 and handler.dropped == 1, 30), (handler.stored, handler.dropped)
    finally:
        stop.set()
        thread.join(30)
    assert _heartbeats(ch, db, vm.vm_id) == 1
    assert query_rows(ch, f"SELECT count() FROM {db}.dead_letters") == [(0,)]
    assert query_rows(ch, f"SELECT count() FROM {db}.attested_keys") == [(0,)]


def test_without_an_attested_document_the_sink_sends_nothing(endpoint: EventHubsEndpoint, tmp_path: Path) -> None:
    """IMDS keeps answering a cached document over another nonce: the send fails (the outbox keeps the rows for
    the shipper's next try) and not one event reaches the hub unattested."""
    sticky = AttestedDocuments(AUTHORITY, cache_s=3600)
    with SimServer(load_scenario("demo"), speed=1, attested=sticky).start() as other:
        vm = Vm(other, 0, tmp_path / "vm")
        ImdsClient(other.vm_base_url(vm.name)).attested(threading.Event(), "2020-09-01", "0000000000")
        vm.attester.retries, vm.attester.backoff = 1, Backoff(0.01, 0.02)
        sink = EventHubsSink.from_connection_string(endpoint.connection_string(), attester=vm.attester)
        record = vm.heartbeat(datetime.now(UTC))
        with pytest.raises(SinkError, match="cached attested document"):
            sink.send([OutboxRow(1, "heartbeat", encode(record))])
        assert sink.events_sent == 0
        sink.close()


def test_pins_outlive_the_ingest_that_made_them(sim: SimServer, ch: Any, db: str, tmp_path: Path) -> None:
    """A restarted ingest (a new gate, nothing in memory) reads the VM's pinned key from attested_keys: the VM's
    signed records are taken without its attestation coming again, another VM's key is still refused."""
    a, b = Vm(sim, 0, tmp_path / "a"), Vm(sim, 1, tmp_path / "b")
    now = datetime.now(UTC)

    def delivery(vm: Vm, payload: bytes, signer: Signer, position: str) -> Delivery:
        properties = {"record_type": "heartbeat", PROPERTY_SIGNATURE: signer.sign(payload)}
        return Delivery(payload, position, {**properties, PROPERTY_KEY_ID: signer.key_id}, Provenance(vm.vm_id, now))

    attestation = a.attester.attestation()
    first = AttestationGate(PinStore(ch, db), Trust((AUTHORITY.root,)), required=True)
    sent = Delivery(
        attestation.body,
        "eventhubs:0:1",
        {
            "record_type": RECORD_ATTESTATION,
            PROPERTY_SIGNATURE: a.signer.sign(attestation.body),
            PROPERTY_KEY_ID: a.signer.key_id,
        },
        Provenance(a.vm_id, now),
    )
    assert first([sent]).pinned == 1
    restarted = AttestationGate(PinStore(ch, db), Trust((AUTHORITY.root,)), required=True)
    own, foreign = encode(a.heartbeat(now)), encode(a.heartbeat(now, seq=2))
    passed = restarted([delivery(a, own, a.signer, "eventhubs:0:2"), delivery(a, foreign, b.signer, "eventhubs:0:3")])
    assert [d.payload for d in passed.kept] == [own]
    assert [error.reason for _, error in passed.refused] == [UNATTESTED_KEY]  # b's key: never attested here


def test_a_collector_with_attestation_on_gets_everything_stored(
    sim: SimServer, endpoint: EventHubsEndpoint, ch: Any, db: str, ingest: Handler, tmp_path: Path
) -> None:
    """The whole collector as its settings build it (attestation = true, sink eventhubs): it makes its key in the
    state dir, fetches its attested document from the simulated IMDS, and every record it ships is stored by an
    ingest that requires attestation; its key is the one pinned, nothing is dead-lettered."""
    name = sim.vm_names[0]
    settings = dataclasses.replace(
        CollectorSettings(sink="eventhubs"),
        imds_url=sim.vm_base_url(name),
        state_dir=tmp_path / "collector",
        attestation=True,
        eventhubs_connection_string=endpoint.connection_string(),
        heartbeat_interval=0.5,
        min_request_interval=0.0,
        first_call_timeout=10.0,
    )
    settings.state_dir.mkdir()
    collector = build_agent(settings)
    stop = threading.Event()
    thread = threading.Thread(target=collector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert eventually(lambda: ingest.stored >= 3 and ingest.pinned == 1, 60), (ingest.stored, ingest.pinned)
    finally:
        stop.set()
        thread.join(60)
        collector.close()
    key = load_or_create_key(settings.state_dir)  # the key the collector made and kept
    vm_id = sim.engine.vms[name].view.vm_id
    assert query_rows(ch, f"SELECT vm_id, key_id, new_key FROM {db}.attested_keys") == [(vm_id, key.key_id, False)]
    assert query_rows(ch, f"SELECT count() FROM {db}.dead_letters") == [(0,)]
    assert _heartbeats(ch, db, vm_id) >= 2


def test_a_refresh_imds_does_not_answer_holds_nothing_back(
    endpoint: EventHubsEndpoint, ch: Any, db: str, ingest: Handler, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Once attested, the sink's periodic refresh is best effort: when IMDS answers only a cached document over
    another nonce, the records still go (under the attestation already sent) and are stored."""
    documents = AttestedDocuments(AUTHORITY)
    with SimServer(load_scenario("demo"), speed=1, attested=documents).start() as other:
        vm = Vm(other, 0, tmp_path / "vm")
        vm.attester.retries, vm.attester.backoff = 1, Backoff(0.01, 0.02)
        sink = EventHubsSink.from_connection_string(endpoint.connection_string(), attester=vm.attester)
        now = datetime.now(UTC)
        sink.send([OutboxRow(1, "heartbeat", encode(vm.heartbeat(now - timedelta(seconds=2))))])
        ImdsClient(other.vm_base_url(vm.name)).attested(threading.Event(), "2020-09-01", "0000000000")
        documents.cache_s = 3600  # from now on IMDS answers that document, another agent's
        sink._attested_at = time.monotonic() - ATTEST_EVERY_S  # the refresh is due
        asked = vm.attester.asked
        sink.send([OutboxRow(2, "heartbeat", encode(vm.heartbeat(now - timedelta(seconds=1), seq=2)))])
        assert vm.attester.asked == asked + 2  # it did try to refresh, twice (retries = 1), and gave up
        assert "could not send the attestation again" in caplog.text
        sink.close()
    assert eventually(lambda: ingest.stored == 2, 30), ingest.stored
    assert _heartbeats(ch, db, vm.vm_id) == 2
