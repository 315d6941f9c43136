"""Ingest under real-rate heartbeats: 1,667 a second sustained, and a day's backlog of a 100,000-VM fleet.

Run: ``.venv/bin/python benchmarks/bench_heartbeats.py [--rate 1667] [--minutes 10] [--json FILE]`` (sustained),
``.venv/bin/python benchmarks/bench_heartbeats.py --catch-up-hours 24 [--vms 100000] [--json FILE]`` (catch-up).

Goals (issue 32): the ingest sustains 1,667 heartbeats a second with transitions mixed in, its lag flat over 10
minutes; a day of a 100,000-VM fleet's records (144 M heartbeats) catches up in a time measured and stated,
with the ingest's memory flat.

Both modes run the ingest as ``ingest run`` wires it (``ingest.wiring.build`` with the default settings:
migrations and retention TTLs, the attestation gate, the conflict look-up, the writer with its two-minute verify
window, the stored lifecycles of the events a batch touches, refreshed or put off as ``ingest.lifecycle_refresher``
says) on an embedded ClickHouse in a temporary directory, fed by a source of this module, run by ``Pipeline.run``
(which computes what was put off when the source ends). The records are ``benchmarks.heartbeat_fleet``'s: a heartbeat a
minute per VM, spread over the minute, and an event's lifecycle on about 91 of every 100,000 VMs every three
minutes (transitions at an even 1.5 a second at 100,000 VMs), byte for byte what ``demo.synthetic`` builds.

Sustained (the default): a producer thread hands the fleet's records (``--rate`` x 60 VMs) to a queue at the
moment each is observed (``observed_at`` is the wall clock); the source batches them as the ingest's sources do
(``BatchPolicy``: 10,000 records or 1 s) and delivers them. Every ``--window`` seconds: records produced and
stored, the lag (now minus the ``observed_at`` of the newest stored record, at the window's end: a sawtooth
between the batches), the window's slowest record (the longest from observed to stored of a record stored in the
window, or the lag at its end if more: a stall shows), the backlog (produced, not yet stored) and the process's
RSS. Verdicts: the lag is flat when the median slowest record of the last third of the windows is at most that
of the first third plus 1 s (the batching wait) and the backlog at the end is under 2 s of records; the RSS is
flat when the median of the last third is at most 10% above that of the first third. Everything produced is
then drained, and counted in ClickHouse.

Catch-up (``--catch-up-hours H``): a backlog of ``H`` hours of ``--vms`` VMs ending now is delivered in batches
of 10,000 (the default batch) as fast as the ingest takes them. Timed: the deliveries (the source's making of
``Delivery`` objects and the handler: decode, look-up, insert, lifecycle refresh); the building of the payloads
happens between deliveries and is not timed (the wall time, which includes it, is printed too); the handler's
close at the end (the lifecycles put off computed) is timed. Reported: records a second, the time, a full day's
time at the measured rate when ``H`` < 24 (extrapolated, and said so), the peak RSS (``VmHWM``) and the RSS over
time, flat when the median of the last tenth of the run is at most 10% above that
of the second tenth (the first is warm-up). Progress goes to stderr every 10 s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]  # run as a script: its sibling module by its package's name

from benchmarks.heartbeat_fleet import MINUTE_MS, Fleet, same_as_synthetic  # noqa: E402
from ingest.batching import BatchPolicy  # noqa: E402
from ingest.clickhouse import as_command, connect  # noqa: E402
from ingest.output import table  # noqa: E402
from ingest.settings import IngestSettings  # noqa: E402
from ingest.source import Deliver, Delivery  # noqa: E402
from ingest.wiring import build  # noqa: E402

DATABASE = "sevents"
TICK_S = 0.02  # how often the producer hands over what its fleet observed since the last time
LAG_TOLERANCE_S = 1.0  # the batching wait: a lag this much above the first third's is still flat
RSS_TOLERANCE = 0.10
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """The process's resident set now (the embedded ClickHouse included)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * _PAGE


def peak_rss_bytes(sampled: Iterable[int] = ()) -> int:
    """The process's largest resident set so far: ``VmHWM``, or the largest of ``sampled`` (``rss_bytes``) if that is
    more. The kernel keeps the high-water mark from counters it sums lazily, so a sample can exceed it by a few
    pages."""
    peak = 0
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    return max([peak, *sampled])


def disk_bytes(root: Path) -> int:
    """The bytes of the files under ``root``, while the engine may still merge parts away beneath the walk."""
    total = 0
    for folder, _dirs, files in os.walk(root):  # a folder gone mid-walk is skipped (os.walk ignores its error)
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue  # a part merged away since it was listed: its rows are in the merged part
    return total


def mib(size: float) -> str:
    return f"{size / 2**20:,.0f}"


def flat(first: Sequence[float], last: Sequence[float], *, plus: float = 0.0, times: float = 1.0) -> bool:
    """Whether the median of ``last`` is at most the median of ``first`` times ``times`` plus ``plus``."""
    return statistics.median(last) <= statistics.median(first) * times + plus


# ---- sustained -------------------------------------------------------------------------------------------------


@dataclass
class Producer:
    """Hands the fleet's records to ``out`` as the wall clock reaches their ``observed_at``."""

    fleet: Fleet
    out: queue.Queue[list[tuple[float, bytes]]]
    produced: int = 0

    def run(self, seconds: float) -> None:
        origin = self.fleet.start.timestamp()
        begin = int((time.time() - origin) * 1000)
        end = begin + int(seconds * 1000)
        done = begin
        while done < end:
            time.sleep(TICK_S)
            upto = min(end, int((time.time() - origin) * 1000))
            made = self.fleet.records_between(done, upto)
            done = upto
            if made:
                self.out.put([(origin + at / 1000, payload) for at, payload in made])
                self.produced += len(made)


@dataclass
class QueueSource:
    """A Source over the producer's queue: batches as ``policy`` says, until ``finished`` and the queue is empty."""

    records: queue.Queue[list[tuple[float, bytes]]]
    finished: threading.Event
    policy: BatchPolicy
    stored: int = 0  # records delivered and returned (the handler stored them)
    newest: float = 0.0  # observed_at (epoch) of the newest record stored
    slowest: float = 0.0  # seconds from observed to stored of the slowest record since last read
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, deliver: Deliver, stop: threading.Event) -> None:
        pending: list[tuple[float, bytes]] = []
        size, since = 0, 0.0
        while not stop.is_set():
            age = time.monotonic() - since if pending else 0.0
            if self.policy.due(len(pending), size, age):
                taken, pending = pending[: self.policy.max_records], pending[self.policy.max_records :]
                size, since = sum(len(p) for _, p in pending), time.monotonic()
                self._deliver(deliver, taken)
                continue
            if self.finished.is_set() and self.records.empty():
                if pending:
                    self._deliver(deliver, pending)
                return
            try:
                chunk = self.records.get(timeout=max(0.001, self.policy.max_wait_s - age) if pending else 0.1)
            except queue.Empty:
                continue
            if not pending:
                since = time.monotonic()
            pending.extend(chunk)
            size += sum(len(p) for _, p in chunk)

    def _deliver(self, deliver: Deliver, taken: list[tuple[float, bytes]]) -> None:
        first = self.stored
        deliver([Delivery(payload, f"bench#{first + i}") for i, (_, payload) in enumerate(taken)])
        now = time.time()
        with self.lock:
            self.stored += len(taken)
            self.newest = max(self.newest, max(at for at, _ in taken))
            self.slowest = max(self.slowest, now - min(at for at, _ in taken))

    def read(self) -> tuple[int, float, float]:
        """Records stored, newest observed_at stored, and the slowest record since the last read."""
        with self.lock:
            slowest, self.slowest = self.slowest, 0.0
            return self.stored, self.newest, slowest


def sustained(args: argparse.Namespace, client: Any) -> dict[str, Any]:
    vms = round(args.rate * 60)
    now = datetime.now(UTC)
    fleet = _checked_fleet(vms, now.replace(second=0, microsecond=0))
    settings = IngestSettings(clickhouse="chdb://", database=DATABASE, source="bench")
    stop, finished = threading.Event(), threading.Event()
    records: queue.Queue[list[tuple[float, bytes]]] = queue.Queue()
    source = QueueSource(records, finished, settings.policy)
    pipeline = build(settings, stop, client=client, source=source)
    producer = Producer(fleet, records)
    consumer = threading.Thread(target=pipeline.run, args=(stop,), name="ingest")
    making = threading.Thread(target=producer.run, args=(args.minutes * 60,), name="producer")
    windows: list[dict[str, Any]] = []
    started = time.monotonic()
    consumer.start()
    making.start()
    window_end = started + args.window
    while True:  # a window ends every ``--window`` seconds; the last, partial one is left out of the table
        making.join(timeout=max(0.0, window_end - time.monotonic()))
        if time.monotonic() < window_end:
            if making.is_alive():
                continue
            break
        produced, (stored, newest, slowest) = producer.produced, source.read()
        previous = windows[-1] if windows else {"produced": 0, "stored": 0}
        windows.append(
            {
                "t_s": round(time.monotonic() - started, 1),
                "produced": produced,
                "stored": stored,
                "produced_in_window": produced - previous["produced"],
                "stored_in_window": stored - previous["stored"],
                "lag_s": round(time.time() - newest, 3) if newest else None,
                # a record not stored yet is younger than the newest stored one: a stall shows here too
                "slowest_s": round(max(slowest, time.time() - newest if newest else 0.0), 3),
                "backlog": produced - stored,
                "rss_bytes": rss_bytes(),
            }
        )
        print(_window_line(windows[-1]), file=sys.stderr, flush=True)
        window_end += args.window
    finished.set()
    consumer.join()
    counts = _counts(client)
    # the windows with a record stored; on a machine too loaded to store any while producing, every window that
    # produced (their lag unknown): the verdict is then judged on the slowest record alone
    measured = [w for w in windows if w["lag_s"] is not None and w["produced_in_window"] > 0]
    measured = measured or [w for w in windows if w["produced_in_window"] > 0] or windows
    third = max(1, len(measured) // 3)
    first, last = measured[:third], measured[-third:]
    end_backlog = windows[-1]["backlog"]
    lag_flat = flat([w["slowest_s"] for w in first], [w["slowest_s"] for w in last], plus=LAG_TOLERANCE_S)
    lag_flat = lag_flat and end_backlog < 2 * args.rate
    rss_flat = flat([w["rss_bytes"] for w in first], [w["rss_bytes"] for w in last], times=1 + RSS_TOLERANCE)
    return {
        "mode": "sustained",
        "rate": args.rate,
        "vms": vms,
        "minutes": args.minutes,
        "window_s": args.window,
        "windows": windows,
        "made": dict(fleet.made),
        "stored_counts": counts,
        "handler": _handler_counts(pipeline.handler),
        "slowest_first_third_median_s": statistics.median(w["slowest_s"] for w in first),
        "slowest_last_third_median_s": statistics.median(w["slowest_s"] for w in last),
        "lag_max_s": max((w["lag_s"] for w in measured if w["lag_s"] is not None), default=math.nan),
        "slowest_record_s": max(w["slowest_s"] for w in windows),
        "backlog_at_end": end_backlog,
        "rss_first_third_median_bytes": statistics.median(w["rss_bytes"] for w in first),
        "rss_last_third_median_bytes": statistics.median(w["rss_bytes"] for w in last),
        "peak_rss_bytes": peak_rss_bytes([w["rss_bytes"] for w in windows]),
        "lag_flat": lag_flat,
        "rss_flat": rss_flat,
    }


def _window_line(w: dict[str, Any]) -> str:
    return (
        f"{w['t_s']:>7.1f} s  produced {w['produced_in_window']:>6,}  stored {w['stored_in_window']:>6,}  "
        f"lag {w['lag_s'] if w['lag_s'] is not None else '-':>6} s  slowest {w['slowest_s']:>6.2f} s  "
        f"backlog {w['backlog']:>6,}  RSS {mib(w['rss_bytes'])} MiB"
    )


def print_sustained(r: dict[str, Any]) -> None:
    print(
        f"Sustained ingest: {r['rate']:,} heartbeats/s ({r['vms']:,} VMs) with transitions, {r['minutes']:g} min, "
        f"windows of {r['window_s']:g} s (embedded ClickHouse)"
    )
    rows = [
        [
            f"{w['t_s']:.0f}",
            f"{w['produced_in_window']:,}",
            f"{w['stored_in_window']:,}",
            "-" if w["lag_s"] is None else f"{w['lag_s']:.2f}",
            f"{w['slowest_s']:.2f}",
            f"{w['backlog']:,}",
            mib(w["rss_bytes"]),
        ]
        for w in r["windows"]
    ]
    print(table(["t (s)", "produced", "stored", "lag (s)", "slowest (s)", "backlog", "RSS (MiB)"], rows))
    print(f"stored: {_stored_line(r)}")
    print(
        f"lag flat: {'yes' if r['lag_flat'] else 'NO'} (slowest record of a window: median "
        f"{r['slowest_first_third_median_s']:.2f} s in the first third of the windows, "
        f"{r['slowest_last_third_median_s']:.2f} s in the last, tolerance {LAG_TOLERANCE_S:g} s; slowest of all "
        f"{r['slowest_record_s']:.2f} s; newest stored at most {r['lag_max_s']:.2f} s old at a window's end; "
        f"backlog at the end {r['backlog_at_end']:,})"
    )
    print(
        f"RSS flat: {'yes' if r['rss_flat'] else 'NO'} (median {mib(r['rss_first_third_median_bytes'])} MiB in the "
        f"first third, {mib(r['rss_last_third_median_bytes'])} MiB in the last, tolerance "
        f"{RSS_TOLERANCE:.0%}; peak {mib(r['peak_rss_bytes'])} MiB)"
    )


# ---- catch-up --------------------------------------------------------------------------------------------------


@dataclass
class BacklogSource:
    """A Source over ``minutes`` of the fleet's records, delivered in full batches as fast as they are taken."""

    fleet: Fleet
    minutes: int
    batch: int
    ingest_s: float = 0.0  # wall seconds inside deliveries
    ingest_cpu_s: float = 0.0
    stored: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)  # every 10 s of ingest time
    ended: float = 0.0  # monotonic: when the last delivery returned

    def run(self, deliver: Deliver, stop: threading.Event) -> None:
        try:
            self._run(deliver, stop)
        finally:
            self.ended = time.monotonic()

    def _run(self, deliver: Deliver, stop: threading.Event) -> None:
        pending: list[bytes] = []
        started = time.monotonic()
        next_sample = 0.0
        end = self.minutes * MINUTE_MS
        step = max(1, self.batch * MINUTE_MS // self.fleet.vms)  # about a batch of heartbeats: little held here
        for begin in range(0, end, step):
            if stop.is_set():
                return
            pending.extend(p for _, p in self.fleet.records_between(begin, min(end, begin + step)))
            while len(pending) >= self.batch or (begin + step >= end and pending):
                taken, pending = pending[: self.batch], pending[self.batch :]
                self._deliver(deliver, taken)
                if self.ingest_s >= next_sample:
                    self._sample(time.monotonic() - started, begin // MINUTE_MS)
                    next_sample += 10.0

    def _deliver(self, deliver: Deliver, taken: list[bytes]) -> None:
        first = self.stored
        clock, cpu = time.perf_counter(), time.process_time()
        deliver([Delivery(payload, f"bench#{first + i}") for i, payload in enumerate(taken)])
        self.ingest_s += time.perf_counter() - clock
        self.ingest_cpu_s += time.process_time() - cpu
        self.stored += len(taken)

    def _sample(self, wall: float, minute: int) -> None:
        sample = {
            "ingest_s": round(self.ingest_s, 1),
            "wall_s": round(wall, 1),
            "stored": self.stored,
            "backlog_minute": minute,
            "rss_bytes": rss_bytes(),
        }
        self.samples.append(sample)
        rate = self.stored / self.ingest_s if self.ingest_s else 0.0
        print(
            f"{sample['ingest_s']:>8.1f} s ingest ({wall:.0f} s wall)  {self.stored:>12,} stored  "
            f"minute {minute + 1:,}/{self.minutes:,}  {rate:,.0f} records/s  RSS {mib(sample['rss_bytes'])} MiB",
            file=sys.stderr,
            flush=True,
        )


def catch_up(args: argparse.Namespace, client: Any) -> dict[str, Any]:
    minutes = round(args.catch_up_hours * 60)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    fleet = _checked_fleet(args.vms, now - timedelta(minutes=minutes))
    settings = IngestSettings(clickhouse="chdb://", database=DATABASE, source="bench")
    source = BacklogSource(fleet, minutes, settings.batch_max_records)
    stop = threading.Event()
    pipeline = build(settings, stop, client=client, source=source)
    wall = time.monotonic()
    pipeline.run(stop)  # the source's deliveries, then the handler's close: the lifecycles put off are computed
    closed = time.monotonic()
    source.ingest_s += closed - source.ended
    wall_s = closed - wall
    if source.samples[-1]["stored"] != source.stored:
        source._sample(wall_s, minutes - 1)
    counts = _counts(client)
    made = sum(fleet.made.values())
    rate = made / source.ingest_s
    day_records = 1440 * args.vms + round(fleet.made["transitions"] * 1440 / minutes)
    samples = source.samples
    tenth = max(1, len(samples) // 10)
    second, last = samples[tenth : 2 * tenth] or samples[:tenth], samples[-tenth:]
    rss_flat = flat([s["rss_bytes"] for s in second], [s["rss_bytes"] for s in last], times=1 + RSS_TOLERANCE)
    return {
        "mode": "catch-up",
        "vms": args.vms,
        "hours": minutes / 60,
        "batch": settings.batch_max_records,
        "made": dict(fleet.made),
        "stored_counts": counts,
        "handler": _handler_counts(pipeline.handler),
        "ingest_s": round(source.ingest_s, 1),
        "ingest_cpu_s": round(source.ingest_cpu_s, 1),
        "wall_s": round(wall_s, 1),
        "records_per_s": round(rate),
        "day_records": day_records,
        "day_s": round(day_records / rate) if minutes < 1440 else round(source.ingest_s),
        "day_extrapolated": minutes < 1440,
        "samples": samples,
        "rss_second_tenth_median_bytes": statistics.median(s["rss_bytes"] for s in second),
        "rss_last_tenth_median_bytes": statistics.median(s["rss_bytes"] for s in last),
        "peak_rss_bytes": peak_rss_bytes([s["rss_bytes"] for s in samples]),
        "rss_flat": rss_flat,
    }


def print_catch_up(r: dict[str, Any]) -> None:
    made = sum(r["made"].values())
    print(
        f"Catch-up: {r['hours']:g} h of {r['vms']:,} VMs ({r['made']['heartbeats']:,} heartbeats, "
        f"{r['made']['transitions']:,} transitions) in batches of {r['batch']:,} (embedded ClickHouse)"
    )
    tenth = max(1, len(r["samples"]) // 10)
    shown = r["samples"][::tenth] + ([r["samples"][-1]] if (len(r["samples"]) - 1) % tenth else [])
    rows, before = [], {"ingest_s": 0.0, "stored": 0}
    for s in shown:
        rate = (s["stored"] - before["stored"]) / max(1e-9, s["ingest_s"] - before["ingest_s"])
        rows.append(
            [f"{s['ingest_s']:.0f}", f"{s['wall_s']:.0f}", f"{s['stored']:,}", f"{rate:,.0f}", mib(s["rss_bytes"])]
        )
        before = s
    print(table(["ingest (s)", "wall (s)", "stored", "records/s since the row before", "RSS (MiB)"], rows))
    print(f"stored: {_stored_line(r)}")
    print(
        f"catch-up: {made:,} records in {r['ingest_s']:,.1f} s of ingest ({r['records_per_s']:,} records/s; "
        f"CPU {r['ingest_cpu_s']:,.1f} s); wall {r['wall_s']:,.1f} s with the untimed building of the payloads"
    )
    day = r["day_s"]
    how = "extrapolated from this run's rate" if r["day_extrapolated"] else "measured"
    print(f"a day of {r['vms']:,} VMs ({r['day_records']:,} records): {day:,} s = {day / 3600:.2f} h ({how})")
    print(
        f"RSS flat: {'yes' if r['rss_flat'] else 'NO'} (median {mib(r['rss_second_tenth_median_bytes'])} MiB in the "
        f"second tenth of the run, {mib(r['rss_last_tenth_median_bytes'])} MiB in the last, tolerance "
        f"{RSS_TOLERANCE:.0%}); peak RSS {mib(r['peak_rss_bytes'])} MiB"
    )


# ---- common ----------------------------------------------------------------------------------------------------


def _checked_fleet(vms: int, start: datetime) -> Fleet:
    fleet = Fleet(vms, start)
    samples = [(0, 0), (vms - 1, 1), (vms // 2, 5)]
    if not same_as_synthetic(fleet, samples):
        raise SystemExit("the fleet's heartbeats differ from demo.synthetic's: fix benchmarks/heartbeat_fleet.py")
    return fleet


def _counts(client: Any) -> dict[str, int]:
    """Rows of each record table, and the events with transitions whose lifecycle is not stored."""
    counts = {
        name: int(client.query(f"SELECT count() FROM {DATABASE}.{name}").result_rows[0][0])  # our names
        for name in ("heartbeats", "transitions", "dead_letters")
    }
    unstored = f"""SELECT count() FROM (SELECT DISTINCT event_id FROM {DATABASE}.transitions)
        WHERE event_id NOT IN (SELECT event_id FROM {DATABASE}.event_history)"""  # our names
    counts["events_without_lifecycle"] = int(client.query(unstored).result_rows[0][0])
    return counts


def _handler_counts(handler: Any) -> dict[str, int]:
    return {"stored": handler.stored, "dead_letters": handler.dead_letters, "dropped": handler.dropped}


def _stored_line(r: dict[str, Any]) -> str:
    made, counts = r["made"], r["stored_counts"]
    every = counts["heartbeats"] == made["heartbeats"] and counts["transitions"] == made["transitions"]
    every = every and counts["dead_letters"] == 0 and r["handler"]["dropped"] == 0
    every = every and counts["events_without_lifecycle"] == 0
    return (
        f"{'every record' if every else 'NOT every record'} ({counts['heartbeats']:,} of {made['heartbeats']:,} "
        f"heartbeats, {counts['transitions']:,} of {made['transitions']:,} transitions, "
        f"{counts['dead_letters']:,} dead letters, {r['handler']['dropped']:,} dropped; "
        f"{counts['events_without_lifecycle']:,} events without their lifecycle stored)"
    )


def _positive(kind: type[float] | type[int]) -> Any:
    def parse(text: str) -> float | int:
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--rate", type=_positive(int), default=1667, help="sustained: heartbeats a second (default 1667)"
    )
    parser.add_argument("--minutes", type=_positive(float), default=10.0, help="sustained: minutes (default 10)")
    parser.add_argument(
        "--window", type=_positive(float), default=10.0, help="sustained: seconds a window (default 10)"
    )
    parser.add_argument("--catch-up-hours", type=_positive(float), help="catch up a backlog of this many hours instead")
    parser.add_argument("--vms", type=_positive(int), default=100_000, help="catch-up: the fleet (default 100,000)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.catch_up_hours is not None and round(args.catch_up_hours * 60) < 1:
        parser.error("--catch-up-hours must cover at least a minute")
    workdir = Path(tempfile.mkdtemp(prefix="bench-heartbeats-"))
    client = connect(f"chdb://{workdir}")
    load_before = os.getloadavg()
    try:
        result = catch_up(args, client) if args.catch_up_hours is not None else sustained(args, client)
        result["disk_bytes"] = disk_bytes(workdir)
    finally:
        client.close()
        shutil.rmtree(workdir, ignore_errors=True)
    load_after = os.getloadavg()
    (print_catch_up if result["mode"] == "catch-up" else print_sustained)(result)
    print(f"data on disk {mib(result['disk_bytes'])} MiB")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({os.cpu_count()} CPUs)")
    result.update(load_average_before=round(load_before[0], 2), load_average_after=round(load_after[0], 2))
    result["cpus"] = os.cpu_count()
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(as_command(main)())  # the embedded engine closed before the interpreter exits
