"""What many test modules need, written once (they used to carry two or three copies each):

- ``wait_for`` / ``eventually``: poll a condition of a real part (a process, a thread, a loopback server) until it
  holds, instead of sleeping a guessed time; ``wait_for`` fails the test at its deadline, ``eventually`` says
  whether it held, for a caller that adds its own diagnostics.
- ``FakeClock``: time that passes only when the test says, for code that takes a ``clock``/``now``/``monotonic``
  callable, so a test advances time instead of sleeping through it.
- ``scrape``, ``scrape_samples``, ``value``: a Prometheus /metrics page read over real loopback HTTP.
- ``metric_points``: what an in-memory OpenTelemetry reader holds, by metric name.
- ``LogReader``: a process's JSON log lines, read from its stderr on a thread, so a test can wait for one.
- ``query_rows``: a query's rows from a ClickHouse client, as tuples.
- ``numbered_transition``, ``numbered_transitions``, ``outbox_rows``: records and outbox rows for the sink and
  shipping tests.

It opens no socket, process or engine at import, so a pure test may use it (tests/tiers.py reads a test module's
own imports to place it in a tier).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import IO, Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from collector.outbox import OutboxRow
from demo.synthetic import transition
from sevents.records import encode, transition_id

# -- waiting for real parts ------------------------------------------------------------------------------------


def eventually(condition: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes; whether it held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


def wait_for(condition: Callable[[], object], timeout: float = 30.0, *, what: str = "", interval: float = 0.05) -> None:
    """Poll ``condition`` until it holds; fail the test (naming ``what``) if it does not within ``timeout`` seconds,
    a bound generous enough for a loaded 2-core machine. A condition may itself fail the test (a process that
    died while awaited), which ends the wait at once."""
    if not eventually(condition, timeout, interval):
        raise AssertionError(f"timed out after {timeout} s waiting for {what or 'the condition'}")


class FakeClock:
    """Time that moves only when the test calls ``advance``: ``now`` (aware UTC), ``time`` (epoch seconds) and
    ``monotonic`` (seconds since the clock was made) all read the same instant. Pass a bound method where the code
    takes a clock. ``reads`` counts the readings: how a test knows the code ran on while time stood still."""

    def __init__(self, start: datetime | None = None) -> None:
        self.start = start or datetime(2026, 1, 1, tzinfo=UTC)
        self.elapsed = 0.0
        self.reads = 0

    def now(self) -> datetime:
        self.reads += 1
        return self.start + timedelta(seconds=self.elapsed)

    def time(self) -> float:
        return self.now().timestamp()

    def monotonic(self) -> float:
        self.reads += 1
        return self.elapsed

    def __call__(self) -> datetime:
        return self.now()

    def advance(self, seconds: float) -> None:
        self.elapsed += seconds

    def wait_reads(self, count: int, timeout: float = 30.0) -> None:
        """Wait (in real time) until the code read this clock ``count`` more times."""
        target = self.reads + count
        wait_for(lambda: self.reads >= target, timeout, what=f"{count} readings of the clock", interval=0.01)


# -- Prometheus /metrics ---------------------------------------------------------------------------------------

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape_samples(port: int) -> list[Sample]:
    """Every sample of the /metrics page on loopback ``port``, labels kept; the page must be Prometheus text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def scrape(port: int) -> Samples:
    """The /metrics page as name -> {sorted labels: value}, without the per-process ``collector`` label."""
    out: Samples = {}
    for sample in scrape_samples(port):
        labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "collector"))
        out.setdefault(sample.name, {})[labels] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when absent: a counter not yet incremented)."""
    return samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


# -- OpenTelemetry figures in memory ---------------------------------------------------------------------------


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Metric name -> its data points, as an exporter would see them ({} before anything was recorded)."""
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = list(metric.data.data_points)
    return found


# -- a process's log -------------------------------------------------------------------------------------------


class LogReader:
    """Reads a process's JSON log lines from stderr on a thread, so the test can wait for one of them."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            try:
                self.lines.append(json.loads(raw))
            except ValueError:
                self.lines.append({"message": raw.decode(errors="replace")})

    def metrics_port(self) -> int:
        """The port the process said it serves /metrics on (waiting for the line)."""
        wait_for(lambda: any(line.get("message") == "serving /metrics" for line in self.lines), what="/metrics")
        return next(int(line["metrics_port"]) for line in self.lines if line.get("message") == "serving /metrics")


# -- ClickHouse ------------------------------------------------------------------------------------------------


def query_rows(client: Any, sql: str) -> list[tuple[Any, ...]]:
    """The rows ``sql`` returns through a clickhouse-connect ``client``, each a tuple."""
    return [tuple(row) for row in client.query(sql).result_rows]


# -- records and outbox rows -----------------------------------------------------------------------------------


def numbered_transition(vm_id: str, n: int, pad: int = 0) -> dict[str, object]:
    """A small transition of ``vm_id`` numbered ``n`` (its own key), padded by ``pad`` bytes: what a sink ships."""
    return {
        "record_type": "transition",
        "record_id": transition_id(vm_id, f"ev-{n}", n, "appeared"),
        "vm_id": vm_id,
        "n": n,
        "pad": "x" * pad,
    }


def numbered_transitions(start: int, count: int, vms: int) -> list[dict[str, Any]]:
    """Full appeared transitions E-start.. spread over ``vms`` VMs, each with the outbox seq it would get."""
    return [
        {**transition(vm_index=i % vms, event_id=f"E-{i}", incarnation=i, kind="appeared"), "seq": i + 1}
        for i in range(start, start + count)
    ]


def outbox_rows(records: Iterable[dict[str, Any]], *, record_seq: bool = False) -> list[OutboxRow]:
    """The outbox rows of ``records``, in order, numbered from 1 by place (or by each record's own ``seq``)."""
    return [OutboxRow(r["seq"] if record_seq else i + 1, r["record_type"], encode(r)) for i, r in enumerate(records)]
