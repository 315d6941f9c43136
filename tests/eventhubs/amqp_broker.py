"""The Event Hubs side of the AMQP conversation: token checks, management reads, storing and serving events.

| link address                                   | who sends   | what happens here                          |
|------------------------------------------------|-------------|--------------------------------------------|
| ``$cbs``                                       | client      | put-token: SAS signature checked, 202      |
| ``$management``                                | client      | READ of hub / partition properties, 200    |
| ``<hub>`` or ``<hub>/Partitions/<id>``         | client      | events stored (batches unpacked), accepted |
| ``<hub>/ConsumerGroups/<cg>/Partitions/<id>``  | this server | events from the filter's position onward   |

Links to the hub need an accepted token on the connection first (claims-based auth). Receivers with a
``com.microsoft:epoch`` (owner level) take the partition from lower or absent epochs, as Event Hubs does.
``busy = True`` makes it refuse events with ``com.microsoft:server-busy`` (throttling).
"""

from __future__ import annotations

import time
from typing import Any

from proton import Condition, Delivery, Endpoint, Handler, Link, Message, symbol, timestamp

from tests.eventhubs.amqp_codec import MAX_MESSAGE_SIZE, sas_valid, selector_of, unpack, with_annotations
from tests.eventhubs.hub_store import HubStore, SelectorError

_EPOCH = symbol("com.microsoft:epoch")
_CREDIT = 100  # messages a client may send on a link before the next flow frame


class Broker(Handler):  # type: ignore[misc]
    """The protocol side; every method runs on the endpoint's I/O thread."""

    def __init__(self, store: HubStore, *, key_name: str, key: str) -> None:
        super().__init__()
        self.store = store
        self.key_name, self.key = key_name, key
        self.busy = False
        self.cursors: dict[Any, int] = {}  # outgoing hub link -> index of the next event
        self.reply_queues: dict[Any, list[bytes]] = {}
        self.authorized: set[Any] = set()

    # -- connections ------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Send what arrived since the last call to every receiver with credit."""
        for link in list(self.cursors):
            self._pump(link)

    def forget(self, connection: Any) -> None:
        """The connection is gone (closed, reset or the endpoint stopped): drop what belongs to it."""
        self.authorized.discard(connection)
        for link in [lk for lk in self.cursors if lk.connection == connection]:
            del self.cursors[link]
        for link in [lk for lk in self.reply_queues if lk.connection == connection]:
            del self.reply_queues[link]

    def on_connection_remote_open(self, event: Any) -> None:
        # The SDK also reads Open's last field (properties) unconditionally.
        event.connection.properties = {symbol("product"): "sevents local Event Hubs endpoint"}
        event.connection.open()

    def on_connection_remote_close(self, event: Any) -> None:
        event.connection.close()

    def on_session_remote_open(self, event: Any) -> None:
        event.session.open()

    def on_session_remote_close(self, event: Any) -> None:
        event.session.close()

    def on_link_remote_close(self, event: Any) -> None:
        self.cursors.pop(event.link, None)
        self.reply_queues.pop(event.link, None)
        event.link.close()

    # -- attach ----------------------------------------------------------------------------------------
    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.max_message_size = MAX_MESSAGE_SIZE
        address = (link.remote_target.address if link.is_receiver else link.remote_source.address) or ""
        problem = self._attach(link, address)
        link.open()
        if problem is not None:
            link.condition = Condition(*problem)
            link.close()
        elif link.is_receiver:
            link.flow(_CREDIT)

    def _attach(self, link: Any, address: str) -> tuple[str, str] | None:
        if address in ("$cbs", "$management"):
            if link.is_sender:
                self.reply_queues[link] = []
            return None
        if link.connection not in self.authorized:
            return ("amqp:unauthorized-access", "put a token on $cbs first")
        if "://" in address:  # the SDK addresses entities as amqps://<namespace>/<path>
            address = address.split("://", 1)[1].partition("/")[2]
        parts = address.strip("/").split("/")
        if parts[0] != self.store.name:
            return ("amqp:not-found", f"no event hub {parts[0]!r}")
        if link.is_receiver:
            if len(parts) == 1 or (len(parts) == 3 and parts[1] == "Partitions" and parts[2] in self.store.partitions):
                link.eh_partition = parts[2] if len(parts) == 3 else None
                return None
            return ("amqp:not-found", f"no such target {address!r}")
        if len(parts) != 5 or parts[1] != "ConsumerGroups" or parts[3] != "Partitions":
            return ("amqp:not-found", f"no such source {address!r}")
        group, partition = parts[2], parts[4]
        if group not in self.store.consumer_groups or partition not in self.store.partitions:
            return ("amqp:not-found", f"no consumer group {group!r} or partition {partition!r}")
        return self._open_receiver(link, group, partition)

    def _open_receiver(self, link: Any, group: str, partition: str) -> tuple[str, str] | None:
        props = link.remote_properties or {}
        epoch = props.get(_EPOCH)
        for other in list(self.cursors):
            if other.eh_slot != (group, partition):
                continue
            other_epoch = other.eh_epoch
            if other_epoch is not None and (epoch is None or other_epoch > epoch):
                return (
                    "com.microsoft:receiver-disconnected",
                    f"a receiver with epoch {other_epoch} owns the partition",
                )
            if epoch is not None:
                other.condition = Condition("amqp:link:stolen", f"a receiver with epoch {epoch} took the partition")
                other.close()
                del self.cursors[other]
        selector = selector_of(link.remote_source.filter)
        try:
            with self.store.lock:
                start = self.store.partitions[partition].start_index(selector)
        except SelectorError as error:
            return ("amqp:invalid-field", str(error))
        link.eh_slot, link.eh_epoch = (group, partition), epoch
        link.snd_settle_mode = Link.SND_SETTLED  # Event Hubs does not wait for receivers to settle
        self.cursors[link] = start
        return None

    # -- transfers -------------------------------------------------------------------------------------
    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if link in self.cursors:
            self._pump(link)
        elif link in self.reply_queues:
            self._flush_replies(link)

    def _pump(self, link: Any) -> None:
        if link.state & Endpoint.LOCAL_CLOSED:
            return
        _, partition = link.eh_slot
        events = self.store.events(partition)
        while link.credit > 0 and self.cursors[link] < len(events):
            stored = events[self.cursors[link]]
            annotations = {symbol(k): v for k, v in stored.annotations}
            annotations[symbol("x-opt-sequence-number")] = stored.sequence_number
            annotations[symbol("x-opt-offset")] = str(stored.offset)
            annotations[symbol("x-opt-enqueued-time")] = timestamp(stored.enqueued_ms)
            if stored.partition_key is not None:
                annotations[symbol("x-opt-partition-key")] = stored.partition_key
            _send_settled(link, with_annotations(stored.sections, annotations))
            self.cursors[link] += 1

    def on_delivery(self, event: Any) -> None:
        delivery, link = event.delivery, event.link
        if not link.is_receiver or delivery.partial:
            return
        raw = bytes(link.recv(delivery.pending))
        link.advance()
        address = link.remote_target.address or ""
        if address in ("$cbs", "$management"):
            self._request(link, address, raw)
            outcome = Delivery.ACCEPTED
        elif self.busy:
            delivery.local.condition = _refusal("com.microsoft:server-busy", "the endpoint is told to be busy")
            outcome = Delivery.REJECTED
        elif len(raw) > MAX_MESSAGE_SIZE:
            delivery.local.condition = _refusal("amqp:link:message-size-exceeded", "over 1 MB")
            outcome = Delivery.REJECTED
        else:
            for sections, annotations, key in unpack(raw):
                self.store.append(getattr(link, "eh_partition", None), sections, key, annotations)
            outcome = Delivery.ACCEPTED
        delivery.update(outcome)
        delivery.settle()
        if link.credit <= _CREDIT // 2:
            # Topped up in bulk, not after every message: each flow frame is one more frame the SDK reads (in
            # its 50 ms handshake polls while opening a link) that Event Hubs, which grants credit in bulk, sends not.
            link.flow(_CREDIT - link.credit)
        for other in list(self.cursors):
            self._pump(other)

    # -- $cbs and $management --------------------------------------------------------------------------
    def _request(self, link: Any, address: str, raw: bytes) -> None:
        request = Message()
        request.decode(raw)
        props = request.properties or {}
        if address == "$cbs":
            ok = props.get("operation") == "put-token" and self._token_ok(props, request.body)
            if ok:
                self.authorized.add(link.connection)
            status, body = (202, None) if ok else (401, None)
        else:
            status, body = self._management(props)
        reply = Message(
            body=body,
            correlation_id=request.id,
            properties={"status-code": status, "status-description": "OK" if status < 300 else "refused"},
        )
        for out in self.reply_queues:
            if out.session == link.session and out.remote_source.address == address:
                self.reply_queues[out].append(bytes(reply.encode()))
                self._flush_replies(out)

    def _token_ok(self, props: dict[Any, Any], token: Any) -> bool:
        if props.get("type") == "jwt":  # a token credential (managed identity): no directory here to check it
            return True
        return sas_valid(str(token), str(props.get("name", "")), self.key_name, self.key, time.time())

    def _management(self, props: dict[Any, Any]) -> tuple[int, Any]:
        if props.get("operation") != "READ" or props.get("name") != self.store.name:
            return 404, None
        with self.store.lock:
            if props.get("type") == "com.microsoft:eventhub":
                return 200, {
                    "name": self.store.name,
                    "type": "com.microsoft:eventhub",
                    "created_at": timestamp(self.store.created_ms),
                    "partition_count": len(self.store.partitions),
                    "partition_ids": self.store.partition_ids,
                }
            partition = self.store.partitions.get(str(props.get("partition")))
            if props.get("type") != "com.microsoft:partition" or partition is None:
                return 404, None
            last = partition.events[-1] if partition.events else None
            return 200, {
                "name": self.store.name,
                "type": "com.microsoft:partition",
                "partition": partition.partition_id,
                "begin_sequence_number": 0,
                "last_enqueued_sequence_number": last.sequence_number if last else -1,
                "last_enqueued_offset": str(last.offset) if last else "-1",
                "last_enqueued_time_utc": timestamp(last.enqueued_ms if last else 0),
                "is_partition_empty": last is None,
            }

    def _flush_replies(self, link: Any) -> None:
        queue = self.reply_queues.get(link, [])
        while queue and link.credit > 0:
            _send_settled(link, queue.pop(0))


def _send_settled(link: Any, payload: bytes) -> None:
    delivery = link.delivery(link.delivery_tag())
    link.stream(payload)
    link.advance()
    delivery.settle()


def _refusal(condition: str, description: str) -> Condition:
    # The SDK reads all three fields of a rejection's error; proton leaves out a null ``info``.
    return Condition(condition, description, {symbol("sevents-test-endpoint"): True})
