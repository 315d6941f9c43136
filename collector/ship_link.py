"""The Event Hubs producer's link, used through the sync SDK's producer directly: opened without the SDK's 50 ms
sleeps between handshake frames, and sent on without its slow rebuild after a failure.

Opening. The sync SDK opens a producer (``_open``) by looping ``client_ready()``, which reads at most one frame
from the socket (waiting for it up to the socket's read timeout), then sleeping 50 ms. An open takes about
eight frames from the service (SASL, open, begin, the claims-based-auth link attaches and put-token answer, the
sender's attach and credit), so the first send of a collector, and the first after a dropped connection, waited
about 0.4 s in those sleeps alone. ``open_promptly`` is the SDK's own ``_open`` for the producer that
partition-key sends use (``ALL_PARTITIONS``) with the sleep taken out (the loop only bounds a spin), and the
client's ``_get_max_message_size`` (which ``create_batch`` needs) then finds it open.

Sending. ``EventHubProducerClient.send_batch`` answers any failure of its producer by reading the hub's
partition ids over a management link of its own and sending again on a rebuilt producer, opened with the
sleeps: 1.6 s on loopback after the connection was dropped, whatever ``retry_total`` says. ``send_on_link``
sends on the producer itself (what ``send_batch`` calls), so a failure reaches the sink at once and the sink
decides (``collector.ship_eventhubs``).

Both rely on SDK internals unchanged from azure-eventhub 5.11 to 5.15. Any surprise while opening closes the
half-opened handler and leaves the producer unopened (the send then opens it the SDK's way and reports its
error); a client without the producer attribute is sent to through ``send_batch``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

log = logging.getLogger(__name__)

SPIN_S = 0.001  # client_ready() waited on the socket already; this only bounds a spin


def send_on_link(client: Any, batch: Any, timeout: float) -> None:
    """Send ``batch`` (an ``EventDataBatch`` made by ``client.create_batch``) on the partition-key producer."""
    producer = _producer(client)
    if producer is None:
        client.send_batch(batch, timeout=timeout)
        return
    producer.send(batch, partition_key=batch._partition_key, timeout=timeout)


def _producer(client: Any) -> Any:
    from azure.eventhub._constants import ALL_PARTITIONS

    producers = getattr(client, "_producers", None)
    return producers.get(ALL_PARTITIONS) if isinstance(producers, dict) else None


def open_promptly(client: Any, timeout: float) -> bool:
    """Open the partition-key producer of ``client`` (an ``EventHubProducerClient``) if it is not; whether it is."""
    producer = None
    try:
        producer = _producer(client)
        if not producer.running:
            _open(producer, time.monotonic() + timeout)
        client._get_max_message_size()  # no I/O now: the producer is open
    except Exception as error:  # noqa: BLE001 - the send opens it the SDK's way instead
        log.info("opening the Event Hubs link promptly failed; the send opens it", extra={"error": repr(error)})
        if producer is not None:
            with contextlib.suppress(Exception):
                producer._close_handler()
        return False
    return True


def _open(producer: Any, deadline: float) -> None:
    client = producer._client
    if producer._handler:
        producer._handler.close()
    auth = client._create_auth(auth_uri=client._auth_uri)
    producer._create_handler(auth)
    connection = client._conn_manager.get_connection(endpoint=client._address.hostname, auth=auth)
    handler = producer._handler
    handler.open(connection=connection)
    while not handler.client_ready():
        if time.monotonic() > deadline:
            raise TimeoutError("the Event Hubs link did not open in time")
        time.sleep(SPIN_S)
    transport = producer._amqp_transport
    producer._max_message_size_on_link = (
        transport.get_remote_max_message_size(handler) or transport.MAX_MESSAGE_LENGTH_BYTES
    )
    producer.running = True
