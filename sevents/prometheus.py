"""``--metrics-addr``: the process's OpenTelemetry figures served at /metrics in the Prometheus text format.

Theory of operation: the instruments stay OpenTelemetry ones (``collector.metrics``, ``ingest.metrics``); a
reader registered on the MeterProvider is collected on each scrape, and each OpenTelemetry metric becomes a
prometheus_client family (counters get ``_total``, seconds and bytes their unit suffix, dots become
underscores). prometheus_client writes the text format; ``MetricsListener`` serves it.

The listener is one thread with one selector, whatever the number of connections: a thread per connection
(prometheus_client's own server) let 80 idle local connections use up the collector's task limit
(``TasksMax=64``) and fail every IMDS poll ("can't start new thread") while they were held. Each connection
has ``TIMEOUT_S`` to send its request and as long again to take the answer; at most ``MAX_CONNECTIONS`` are
held, and the oldest is closed when another arrives, so idle connections cost neither threads nor more than a
bounded number of file descriptors, and a scrape opened after them is still answered. One request per
connection (``Connection: close``), as before. Imported only when an address is configured: a collector
without one never loads it.

The same listener answers ``/healthz`` (live) and ``/readyz`` (ready) from the checks the process registered with
``HEALTH.watch`` (the collector: ``collector.probes``; ``sevents-ingest run``: ready while ClickHouse takes its
writes): 200 and ``ok``, or 503 and the reason on one line; 503 ``starting`` while nothing is registered yet
(before the pipeline is built). ``?max_age=SECONDS`` passes
another age limit to the check (a probe's configuration); an invalid one is a 400. Every other path answers as
before: the metrics.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import math
import re
import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Optional
from urllib.parse import parse_qs, urlsplit

from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader, Metric, Sum
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from sevents.config import split_host_port

log = logging.getLogger(__name__)

MAX_CONNECTIONS: Final = 64  # held at once; another one arriving closes the oldest
TIMEOUT_S: Final = 10.0  # to send the request, and again to take the answer
MAX_REQUEST_BYTES: Final = 16 * 1024  # request line and headers (a scrape sends a few hundred bytes)
BACKLOG: Final = 128

# OpenTelemetry unit -> Prometheus name suffix; annotations such as ``{poll}`` say nothing Prometheus keeps.
_UNIT_SUFFIX: Mapping[str, str] = {"s": "seconds", "By": "bytes", "ms": "milliseconds"}
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(name: str, unit: str) -> str:
    """``sevents.collector.imds_latency`` in ``s`` -> ``sevents_collector_imds_latency_seconds``."""
    base = _INVALID.sub("_", name)
    suffix = _UNIT_SUFFIX.get(unit, "")
    return f"{base}_{suffix}" if suffix and not base.endswith(suffix) else base


def _labels(attributes: Mapping[str, Any] | None) -> dict[str, str]:
    out = {}
    for key, value in (attributes or {}).items():
        out[_INVALID.sub("_", key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def families(metrics: Iterable[Metric]) -> Iterator[Any]:
    """Prometheus metric families for OpenTelemetry metrics (sums, gauges and explicit-bucket histograms)."""
    for metric in metrics:
        name = prometheus_name(metric.name, metric.unit or "")
        data = metric.data
        points: list[Any] = list(data.data_points)
        keys = sorted({k for p in points for k in _labels(p.attributes)})
        family: Any
        if isinstance(data, Sum) and data.is_monotonic:
            family = CounterMetricFamily(name.removesuffix("_total"), metric.description or "", labels=keys)
        elif isinstance(data, (Sum, Gauge)):
            family = GaugeMetricFamily(name, metric.description or "", labels=keys)
        elif isinstance(data, Histogram):
            family = HistogramMetricFamily(name, metric.description or "", labels=keys)
        else:
            continue  # exponential histograms: none of ours
        for point in points:
            labels = _labels(point.attributes)
            values = [labels.get(k, "") for k in keys]
            if isinstance(data, Histogram):
                buckets, running = [], 0
                for bound, count in zip(point.explicit_bounds, point.bucket_counts):
                    running += count
                    buckets.append((repr(float(bound)), running))
                buckets.append(("+Inf", point.count))
                family.add_metric(values, buckets, point.sum)
            else:
                family.add_metric(values, point.value)
        yield family


class OpenTelemetryCollector(Collector):
    """A prometheus_client collector that reads a MeterProvider through its own reader on every scrape."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self._reader = reader

    def collect(self) -> Iterator[Any]:
        data = self._reader.get_metrics_data()
        if data is None:
            return
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                yield from families(scope.metrics)


Answer = tuple[str, list[tuple[str, str]], bytes]  # status line text, headers, body
Handler = Callable[[str, str, Mapping[str, str]], Answer]  # method, target, headers (lower-case names)
# A health check: given the age limit asked for (None: its own), "" when healthy, else why not (one line).
Check = Callable[[Optional[float]], str]  # a runtime alias: Python 3.9 (the collector) has no "float | None" here
LIVE_PATH: Final = "/healthz"
READY_PATH: Final = "/readyz"


class Health:
    """The process's liveness and readiness: the checks a component registers once it runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checks: dict[str, Check] = {}

    def watch(self, *, live: Check, ready: Check) -> None:
        """Answer /healthz with ``live`` and /readyz with ``ready`` from now on (replacing earlier checks)."""
        with self._lock:
            self._checks = {LIVE_PATH: live, READY_PATH: ready}

    def problem(self, path: str, max_age_s: float | None = None) -> str:
        """Why the process is not live (``LIVE_PATH``) or not ready (``READY_PATH``); "" when it is."""
        with self._lock:
            check = self._checks.get(path)
        if check is None:
            return "starting: no health check registered yet"
        try:
            return check(max_age_s)
        except Exception as error:  # a check that fails is an answer, not a 500
            log.exception("health check error")
            return f"health check failed: {type(error).__name__}"


HEALTH = Health()  # one per process, as the listener is


def _max_age(query: str) -> float | None:
    """``max_age`` of the query string in seconds (None when absent); ValueError when not a positive number."""
    given = parse_qs(query).get("max_age")
    if not given:
        return None
    value = float(given[-1])
    if not math.isfinite(value) or value <= 0:
        raise ValueError(given[-1])
    return value


def health_handler(health: Health, fallback: Handler) -> Handler:
    """/healthz and /readyz from ``health`` (200 ``ok`` or 503 and the reason, never cached); other paths from
    ``fallback``."""

    def handle(method: str, target: str, headers: Mapping[str, str]) -> Answer:
        url = urlsplit(target)
        if url.path not in (LIVE_PATH, READY_PATH):
            return fallback(method, target, headers)
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", [("Allow", "GET, HEAD")], b""
        plain = [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")]
        try:
            max_age_s = _max_age(url.query)
        except ValueError:
            return "400 Bad Request", plain, b"max_age: expected a number of seconds above 0\n"
        problem = health.problem(url.path, max_age_s)
        if problem:
            return "503 Service Unavailable", plain, (problem.replace("\n", " ") + "\n").encode()
        return "200 OK", plain, b"ok\n"

    return handle


def metrics_handler(registry: CollectorRegistry) -> Handler:
    """What prometheus_client's own server answers: the registry at any path (``?name[]=`` narrows it, the
    OpenMetrics format when asked for, gzip when accepted), an empty /favicon.ico."""

    def handle(method: str, target: str, headers: Mapping[str, str]) -> Answer:
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", [("Allow", "GET, HEAD")], b""
        url = urlsplit(target)
        if url.path == "/favicon.ico":
            return "200 OK", [], b""
        params = parse_qs(url.query)
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        chosen: Any = registry.restricted_registry(params["name[]"]) if "name[]" in params else registry
        body = encoder(chosen)
        out = [("Content-Type", content_type)]
        if gzip_accepted(headers.get("accept-encoding", "")):
            body = gzip.compress(body)
            out.append(("Content-Encoding", "gzip"))
        return "200 OK", out, body

    return handle


class _Connection:
    __slots__ = ("deadline", "received", "sock", "unsent")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.received = bytearray()
        self.unsent = b""  # the answer still to send; empty while the request is read


class MetricsListener:
    """An HTTP/1.1 server on one thread: a selector over the listening socket and every connection."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: Handler,
        *,
        max_connections: int = MAX_CONNECTIONS,
        timeout: float = TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Bind and listen on ``host:port`` (OSError when it cannot); ``start`` begins answering."""
        family, kind, proto, _, address = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)[0]
        self._listener = socket.socket(family, kind, proto)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(address)
            self._listener.listen(BACKLOG)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.server_address: tuple[Any, ...] = self._listener.getsockname()
        self._handler = handler
        self._max = max_connections
        self._timeout = timeout
        self._clock = clock
        self._connections: OrderedDict[int, _Connection] = OrderedDict()  # by fd, oldest first
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, "listen")
        self._selector.register(self._wake_read, selectors.EVENT_READ, "wake")
        self._accept_paused_until = 0.0
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="metrics-listener", daemon=True)

    def start(self) -> MetricsListener:
        self._thread.start()
        return self

    def connections(self) -> int:
        """Connections held now (read from another thread: a figure for tests and logs, not a lock)."""
        return len(self._connections)

    def shutdown(self) -> None:
        """Stop answering and wait for the thread to end."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_write.send(b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def server_close(self) -> None:
        """Close the listening socket, every connection and the selector (after ``shutdown``)."""
        for connection in list(self._connections.values()):
            self._close(connection)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self._listener)
        self._listener.close()
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()

    def _serve(self) -> None:
        while not self._stopping:
            try:
                self._round()
            except Exception:  # a bug of ours must not end /metrics for the life of the process
                log.exception("metrics listener error")
                time.sleep(0.1)

    def _round(self) -> None:
        now = self._clock()
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, "listen")
        deadlines = [c.deadline for c in self._connections.values()]
        if self._accept_paused_until:
            deadlines.append(self._accept_paused_until)
        wait = max(0.0, min(min(deadlines, default=now + 1.0), now + 1.0) - now)
        for key, mask in self._selector.select(wait):
            if key.data == "listen":
                self._accept()
            elif key.data == "wake":
                with contextlib.suppress(OSError):
                    self._wake_read.recv(64)
            else:
                connection = key.data
                try:
                    if mask & selectors.EVENT_READ:
                        self._read(connection)
                    elif mask & selectors.EVENT_WRITE:
                        self._write(connection)
                except OSError:
                    self._close(connection)
        now = self._clock()
        for connection in [c for c in self._connections.values() if c.deadline <= now]:
            self._close(connection)  # an idle connection, or one that does not take its answer

    def _accept(self) -> None:
        for _ in range(self._max):  # a bounded batch, so the connections already held are served too
            try:
                sock, _address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as error:  # out of file descriptors: wait a little rather than spin
                log.warning("metrics listener cannot accept", extra={"error": str(error)})
                self._selector.unregister(self._listener)
                self._accept_paused_until = self._clock() + 0.5
                return
            while len(self._connections) >= self._max:
                self._close(next(iter(self._connections.values())))  # the oldest
            sock.setblocking(False)
            connection = _Connection(sock, self._clock() + self._timeout)
            self._connections[sock.fileno()] = connection
            self._selector.register(sock, selectors.EVENT_READ, connection)

    def _read(self, connection: _Connection) -> None:
        data = connection.sock.recv(4096)
        if not data:
            self._close(connection)
            return
        connection.received += data
        end = connection.received.find(b"\r\n\r\n")
        if end > MAX_REQUEST_BYTES or (end < 0 and len(connection.received) > MAX_REQUEST_BYTES):
            self._answer(connection, ("431 Request Header Fields Too Large", [], b""), head=False)
            return
        if end < 0:
            return
        self._answer(connection, *self._respond(bytes(connection.received[:end])))

    def _respond(self, head: bytes) -> tuple[Answer, bool]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return ("400 Bad Request", [], b""), False
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        method, target = parts[0], parts[1]
        try:
            answer = self._handler(method, target, headers)
        except Exception:
            log.exception("metrics handler error")
            answer = ("500 Internal Server Error", [], b"")
        return answer, method == "HEAD"

    def _answer(self, connection: _Connection, answer: Answer, head: bool) -> None:
        status, headers, body = answer
        lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers)]
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        connection.unsent = "\r\n".join(lines).encode("latin-1") + (b"" if head else body)
        connection.deadline = self._clock() + self._timeout
        self._selector.modify(connection.sock, selectors.EVENT_WRITE, connection)
        self._write(connection)

    def _write(self, connection: _Connection) -> None:
        try:
            sent = connection.sock.send(connection.unsent)
        except (BlockingIOError, InterruptedError):
            return
        connection.unsent = connection.unsent[sent:]
        if not connection.unsent:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_WR)
            self._close(connection)

    def _close(self, connection: _Connection) -> None:
        fd = connection.sock.fileno()
        if fd >= 0:
            self._connections.pop(fd, None)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(connection.sock)
        connection.sock.close()


@dataclass
class MetricsServer:
    """The /metrics endpoint of one process; ``reader`` goes to ``sevents.telemetry.make_meter_provider``."""

    reader: InMemoryMetricReader
    host: str
    port: int  # the bound port (an address ending in :0 picks a free one)
    _server: MetricsListener

    def close(self) -> None:
        """Stop answering scrapes and release the port."""
        self._server.shutdown()
        self._server.server_close()


def serve(addr: str, *, health: Health = HEALTH) -> MetricsServer:
    """Listen on ``HOST:PORT`` (raises OSError when it cannot bind); figures come from the returned reader,
    /healthz and /readyz from ``health``."""
    host, port = split_host_port(addr)
    reader = InMemoryMetricReader()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OpenTelemetryCollector(reader))
    ProcessCollector(registry=registry)  # resident memory, CPU seconds, open files: the collector's budget
    server = MetricsListener(host, port, health_handler(health, metrics_handler(registry))).start()
    bound = server.server_address[1]
    log.info("serving /metrics", extra={"metrics_host": host, "metrics_port": bound})
    return MetricsServer(reader=reader, host=host, port=bound, _server=server)
