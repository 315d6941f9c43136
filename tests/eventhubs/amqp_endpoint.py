"""A local AMQP 1.0 endpoint that behaves like Event Hubs for the real azure-eventhub SDK (tests only).

Theory of operation: one background thread owns a listening socket on 127.0.0.1 and every accepted
connection. Each connection is a qpid-proton engine (Transport + Connection) driven by this loop: bytes
read from the socket are pushed into the transport, the engine's events go to the ``Broker`` (protocol
logic, amqp_broker.py), and the transport's output goes through ``FrameRewriter`` (amqp_frames.py) onto the
socket as fast as the peer reads it (non-blocking: with a blocking write, one peer that stops reading, as a
worker busy inserting may, could hold up every connection). The SDK talks to it when its connection string says
``UseDevelopmentEmulator=true``: plain TCP, SASL ANONYMOUS, the port taken from ``Endpoint=sb://127.0.0.1:PORT``.

Events live in a ``HubStore`` owned by the endpoint object, so ``stop()`` (every socket closed at once, as
when the service becomes unreachable) and a later ``start()`` bring it back on the same port with the same
data: the outage test.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from proton import Collector, Connection, Transport

from tests.eventhubs.amqp_broker import Broker
from tests.eventhubs.amqp_frames import FrameRewriter
from tests.eventhubs.hub_store import HubStore

_TICK = 0.02


@dataclass
class _Wire:
    sock: socket.socket
    transport: Any
    connection: Any
    rewriter: FrameRewriter = field(default_factory=FrameRewriter)
    inbound: bytes = b""
    outbound: bytes = b""  # written as the socket takes it: a peer slow to read never blocks the loop


class EventHubsEndpoint:
    """Start with ``start()`` (or as a context manager); ``stop()`` drops every connection and the listener."""

    def __init__(
        self,
        store: HubStore | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        key_name: str = "k",
        key: str = "v",
    ) -> None:
        self.store = store or HubStore()
        self.host, self.port = host, port
        self.broker = Broker(self.store, key_name=key_name, key=key)
        self._key_name, self._key = key_name, key
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.accepted = 0  # connections accepted since construction, across restarts

    @property
    def busy(self) -> bool:
        return bool(self.broker.busy)

    @busy.setter
    def busy(self, value: bool) -> None:
        self.broker.busy = value

    def connection_string(self, *, key: str | None = None) -> str:
        """The SAS connection string the SDK needs to reach this endpoint."""
        return (
            f"Endpoint=sb://{self.host}:{self.port};SharedAccessKeyName={self._key_name};"
            f"SharedAccessKey={key or self._key};EntityPath={self.store.name};UseDevelopmentEmulator=true"
        )

    def start(self) -> EventHubsEndpoint:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, args=(listener,), name="eventhubs-endpoint", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> EventHubsEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the I/O loop ----------------------------------------------------------------------------------
    def _serve(self, listener: socket.socket) -> None:
        collector = Collector()
        wires: dict[socket.socket, _Wire] = {}
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, events in selector.select(_TICK):
                    if key.fileobj is listener:
                        wire = self._accept(listener, collector)
                        wires[wire.sock] = wire
                        selector.register(wire.sock, selectors.EVENT_READ)
                    elif events & selectors.EVENT_READ:
                        self._read(wires[key.fileobj])  # type: ignore[index]
                self._dispatch(collector)
                self.broker.tick()
                self._dispatch(collector)
                for wire in list(wires.values()):
                    if not self._write(wire):
                        selector.unregister(wire.sock)
                        self._drop(wires.pop(wire.sock))
                        continue
                    wanted = selectors.EVENT_READ | (selectors.EVENT_WRITE if wire.outbound else 0)
                    if selector.get_key(wire.sock).events != wanted:
                        selector.modify(wire.sock, wanted)
                self._dispatch(collector)
        finally:
            for wire in wires.values():
                self._drop(wire)
            selector.close()
            listener.close()

    def _accept(self, listener: socket.socket, collector: Any) -> _Wire:
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)  # one thread serves every connection: no read or write may wait
        transport = Transport(Transport.SERVER)
        transport.sasl().allowed_mechs("ANONYMOUS")
        # The SDK reads Open's idle time-out field unconditionally; proton only sends it when set.
        transport.idle_timeout = 240.0
        connection = Connection()
        connection.collect(collector)
        transport.bind(connection)
        self.accepted += 1
        return _Wire(sock, transport, connection)

    def _read(self, wire: _Wire) -> None:
        try:
            data = wire.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            with contextlib.suppress(Exception):
                wire.transport.close_tail()
            return
        wire.inbound += data
        capacity = wire.transport.capacity()
        if capacity > 0:
            chunk, wire.inbound = wire.inbound[:capacity], wire.inbound[capacity:]
            wire.transport.push(chunk)

    def _write(self, wire: _Wire) -> bool:
        """Flush the transport's output; False once the connection is finished."""
        if wire.inbound and wire.transport.capacity() > 0:
            capacity = wire.transport.capacity()
            chunk, wire.inbound = wire.inbound[:capacity], wire.inbound[capacity:]
            wire.transport.push(chunk)
        wire.transport.tick(time.time())
        pending = wire.transport.pending()
        if pending > 0:
            out = wire.transport.peek(pending)
            wire.transport.pop(pending)
            wire.outbound += wire.rewriter.feed(bytes(out))
        if wire.outbound:
            try:
                sent = wire.sock.send(wire.outbound)
            except BlockingIOError:
                sent = 0
            except OSError:
                return False
            wire.outbound = wire.outbound[sent:]
        return not (pending < 0 and wire.transport.capacity() < 0 and not wire.outbound)

    def _dispatch(self, collector: Any) -> None:
        while (event := collector.peek()) is not None:
            event.dispatch(self.broker)
            collector.pop()

    def _drop(self, wire: _Wire) -> None:
        self.broker.forget(wire.connection)
        with contextlib.suppress(OSError):
            wire.sock.close()
        with contextlib.suppress(Exception):
            wire.transport.unbind()
