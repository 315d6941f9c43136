"""Open a partition consumer's AMQP link as the SDK does, without its 50 ms sleep between handshake frames.

The async SDK opens a consumer (``_open``) by looping ``client_ready_async()``, which reads at most one frame
from the socket, then sleeping 50 ms. Opening a receiver takes about eight frames from the service (open,
begin, two claims-based-auth link attaches, the credit, the put-token's outcome and answer, the receiver's
attach), so a worker restarted after a crash waited about 0.4 s in those sleeps alone before its first batch.
``client_ready_async()`` already waits on the socket for the next frame, so the loop below only yields
instead of sleeping. Every other step is the SDK's own ``_open`` (azure-eventhub 5.11 to 5.15).

Any surprise (an SDK whose internals differ, a refused token, a time-out) closes the half-opened handler and
leaves the consumer unopened: its ``receive`` then opens it the SDK's way, with the SDK's retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

log = logging.getLogger(__name__)


async def open_promptly(consumer: Any, timeout: float = 60.0) -> bool:
    """Open ``consumer`` (an ``azure.eventhub.aio`` partition consumer); whether it is open."""
    try:
        await asyncio.wait_for(_open(consumer), timeout)
    except Exception as error:  # noqa: BLE001 - receive() opens it the SDK's way instead
        log.info("opening the receiver promptly failed; the SDK opens it", extra={"error": repr(error)})
        with contextlib.suppress(Exception):
            await consumer._close_handler_async()
        return False
    return True


async def _open(consumer: Any) -> None:
    client = consumer._client
    auth = await client._create_auth_async(auth_uri=client._auth_uri)
    consumer._create_handler(auth)
    connection = await client._conn_manager_async.get_connection(endpoint=client._address.hostname, auth=auth)
    handler = consumer._handler
    await handler.open_async(connection=connection)
    while not await handler.client_ready_async():
        await asyncio.sleep(0.001)  # client_ready_async() waited on the socket already; 1 ms bounds a spin
    transport = client._amqp_transport
    consumer._max_message_size_on_link = (
        transport.get_remote_max_message_size(handler) or transport.MAX_MESSAGE_LENGTH_BYTES
    )
    consumer.running = True
