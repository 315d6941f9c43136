"""End-to-end latency through Event Hubs with two worker processes, one killed and restarted mid-run, and the
collectors' webhook; run several times in a row, each run reported on its own.

Run: ``.venv/bin/python benchmarks/bench_eventhubs.py [--runs 5] [--poll 0.5] [--expiry 6] [--json FILE]``
(needs Azurite: ``bash scripts/setup.sh --test``).

The pipeline: the simulator (``benchmarks/scenarios/eventhubs-load.toml``: 72 VMs, 2,400 transitions) -> one
collector per VM, as ``sevents-collector run`` builds it with ``sink = "eventhubs"`` and a webhook URL, in
``--collector-processes`` processes (``tests/eventhubs/eh_collector_proc.py``; collectors run one per VM, so
they do not share the benchmark's interpreter lock) -> the local AMQP 1.0 Event Hubs endpoint (four
partitions; tests/eventhubs), in a process of its own as the service is (``tests/eventhubs/endpoint_proc.py``)
-> two ``EventHubsSource`` worker processes (``tests/eventhubs/eh_ingest_proc.py``) with Azurite blob
checkpoints -> ClickHouse. chdb admits one process per data directory, so the workers store through this
process (``StoreService``), as they would through a ClickHouse server: a batch is checkpointed only after this
process stored it, each worker process through an ingest handler of its own (``WorkerHandlers``: the workers
started with the run stand for workers up for long, the restarted one verifies its inserts as a restarted
worker does).

Once the workers share the partitions, the scenario starts (its first change 5 s in, once the collectors poll
and have opened their Event Hubs connections); ``--kill-after`` (15) seconds later, amid the second round of
waves, worker b gets SIGKILL and is started again at once under the same owner id. Measured, per run:

- latency per transition: the row's first insert (``ingested_at``, or, for a batch a killed worker stored but
  did not checkpoint, the first store of it, which the successor's copy replaces) minus the simulator's true
  moment of the change (bench_latency.py), with the time spent in each stage (eh_stages.py); reported apart
  for the takeover window (transitions that changed from poll + 1 s before the kill, the longest a transition
  should take outside it, until the killed worker's partitions were served again) and outside it;
- ownership, read from the checkpoint store every 0.1 s: a move between healthy workers is a partition
  changing from one owner to another while the first was alive (the killed worker counts as dead from the
  kill until its new process holds a partition again);
- for the killed worker's partitions, the seconds from the kill to the first batch the restarted worker
  handed over from each;
- lost (in the hub, not in ClickHouse) and duplicated (rows beyond one per transition_id after FINAL);
- the webhook: each Preempt and Terminate transition's post, from the true change to its arrival (eh_webhook.py);
- the store service's batches: how many, their records at p50, and each store's seconds at p50 and p99;
- the load average at the start and the end of the run (the machine may be shared).

The endpoint is on loopback: the figures show what the transport's batching, the workers and the insert add,
not Azure's network latency. Goals (issue 32), in every run: p99 <= poll + 1 s outside the takeover window and
max <= ownership expiry + poll + 1 s inside it; ``observed->enqueued`` p99 <= 0.5 s; webhook p99 <= poll + 0.5 s;
and (issue 15) no move between healthy workers, the killed worker's partitions served again within the
ownership expiry, nothing lost or duplicated.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_latency import percentile, timed  # noqa: E402
from eh_stages import STAGES, journeys, slowest, summary  # noqa: E402
from eh_webhook import WebhookReceiver, webhook_latencies  # noqa: E402

from ingest import lifecycle_refresher  # noqa: E402
from ingest.clickhouse import as_command, connect  # noqa: E402
from ingest.handler import Handler  # noqa: E402
from ingest.migrate import Target, migrate  # noqa: E402
from ingest.output import table  # noqa: E402
from ingest.settings import IngestSettings  # noqa: E402
from ingest.writer import Writer  # noqa: E402
from sevents.logs import setup_logging  # noqa: E402
from simulator import SimServer, load_scenario  # noqa: E402
from tests.eventhubs.azurite import CheckpointStores, running_azurite  # noqa: E402
from tests.eventhubs.eh_fleet import hub_positions, hub_records  # noqa: E402
from tests.eventhubs.eh_ingest_proc import BatchTiming, StoreService  # noqa: E402
from tests.eventhubs.endpoint_proc import EndpointProcess  # noqa: E402
from tests.helpers import eventually  # noqa: E402

SCENARIO = ROOT / "benchmarks" / "scenarios" / "eventhubs-load.toml"
DATABASE = "bench_eventhubs"
WORKERS = ("worker-a", "worker-b")
DRAIN_S = 30.0  # the collectors' drain_timeout (tests/eventhubs/eh_collector_proc.py)


class OwnershipWatch:
    """Reads the partition owners every 0.1 s and keeps every change (time, partition, old owner, new owner)."""

    def __init__(self, store: Any, scope: tuple[str, str, str]) -> None:
        self.store, self.scope = store, scope
        self.owners: dict[str, str] = {}
        self.changes: list[tuple[float, str, str, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            try:
                listed = self.store.list_ownership(*self.scope)
            except Exception:  # Azurite busy for a moment: read again next time
                continue
            now = time.time()
            for o in listed:
                partition, owner = o["partition_id"], o.get("owner_id") or ""
                old = self.owners.get(partition)
                if old is not None and old != owner:
                    self.changes.append((now, partition, old, owner))
                self.owners[partition] = owner

    def held_by(self, owner: str) -> list[str]:
        return sorted(p for p, o in self.owners.items() if o == owner)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def healthy_moves(changes: list[tuple[float, str, str, str]], killed: str, dead_from: float, dead_until: float) -> int:
    """Changes from one live owner to another (a release to "" and its claim count once, as one move)."""
    moves = 0
    last_owner: dict[str, str] = {}
    for at, partition, old, new in changes:
        previous = old or last_owner.get(partition, "")
        if new:
            last_owner[partition] = new
            alive = not (previous == killed and dead_from <= at <= dead_until)
            if previous and previous != new and alive:
                moves += 1
    return moves


class WorkerHandlers:
    """The ingest handler each worker process stores through, as a worker stores through its own.

    A worker verifies its inserts for ``verify_window`` (120 s) after its first one: its predecessor's
    unacknowledged batches come first after a restart. The workers started with the run stand for workers up
    for long (their window long over: verify_window 0, only their first insert checked); a worker's later
    process is a restart and verifies as one does.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.handlers: dict[tuple[str, int], Handler] = {}
        self.owners: set[str] = set()

    def deliver_for(self, owner: str, pid: int) -> Handler:
        with self.lock:
            if (owner, pid) not in self.handlers:
                verify = IngestSettings().verify_window if owner in self.owners else 0.0
                self.owners.add(owner)
                # lifecycles put off while batches keep coming, as the ingest does (ingest.lifecycle_refresher)
                every = lifecycle_refresher.DEFAULT_EVERY
                writer = Writer(self.client, DATABASE, verify_window=verify, refresh_every=every)
                self.handlers[owner, pid] = Handler(writer, source="eventhubs", stop=threading.Event())
            return self.handlers[owner, pid]


def _refused(batch: Sequence[Any]) -> None:
    raise RuntimeError("a worker that did not say which it is")


def start_collectors(
    sim: SimServer, processes: int, workdir: Path, poll: float, webhook_url: str, env: dict[str, str]
) -> list[subprocess.Popen[str]]:
    """``processes`` collector processes sharing the simulator's VMs; each says ``sending`` once all of its
    collectors have sent to the hub."""
    names = sim.vm_names
    started = []
    for i in range(processes):
        vms = {name: sim.vm_base_url(name) for name in names[i::processes]}
        config = {"vms": vms, "state_dir": str(workdir / "collectors"), "poll": poll, "webhook_url": webhook_url}
        command = [sys.executable, "-m", "tests.eventhubs.eh_collector_proc"]
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert process.stdin is not None
        process.stdin.write(json.dumps(config))
        process.stdin.close()
        started.append(process)
    return started


def start_worker(owner: str, container: str, port: int, expiry: float, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.eventhubs.eh_ingest_proc", container, owner, str(port), str(expiry)]
    return subprocess.Popen(command, cwd=ROOT, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenario", default=str(SCENARIO))
    parser.add_argument("--speed", type=float, default=None)
    parser.add_argument("--poll", type=float, default=0.5, help="collector poll interval, seconds")
    parser.add_argument("--expiry", type=float, default=6.0, help="ownership expiry of the workers, seconds")
    parser.add_argument("--kill-after", type=float, default=15.0, help="seconds into the scenario to kill worker b")
    parser.add_argument("--runs", type=int, default=1, help="run this many times in a row, each reported")
    parser.add_argument("--collector-processes", type=int, default=4, help="processes the collectors run in")
    parser.add_argument("--json", type=Path, help="also write the figures of every run to this file")
    parser.add_argument("--slowest", type=int, default=12, help="show this many slowest transitions stage by stage")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.collector_processes < 1:
        parser.error("--runs and --collector-processes must be at least 1")
    setup_logging("error")
    runs = []
    for index in range(1, args.runs + 1):
        runs.append(run_once(args, index))
        if args.json is not None:
            args.json.write_text(json.dumps(runs, indent=2) + "\n", encoding="utf-8")
    if args.runs > 1:
        print(f"\n{args.runs} runs in a row (poll {args.poll:g} s, ownership expiry {args.expiry:g} s)")
        print(table(RUN_COLUMNS, [run_row(f) for f in runs]))
        met = sum(all(f["goals_met"].values()) for f in runs)
        print(f"every goal met in {met} of {args.runs} runs")
    return 0


RUN_COLUMNS = ["run", "load", "p50", "p99 out", "max out", "p99 in", "max in", "obs->enq p99", "webhook p99", "goals"]


def run_row(f: dict[str, Any]) -> list[str]:
    """One run's line in the table of runs."""
    missed = [goal for goal, met in f["goals_met"].items() if not met]
    return [
        str(f["run"]),
        f"{f['load_start']:.1f}-{f['load_end']:.1f}",
        f"{f['p50_s']:.3f}",
        f"{f['outside_takeover']['p99_s']:.3f}",
        f"{f['outside_takeover']['max_s']:.3f}",
        f"{f['inside_takeover']['p99_s']:.3f}",
        f"{f['inside_takeover']['max_s']:.3f}",
        str(f["stages_s"]["observed->enqueued"]["p99"]),
        f"{f['webhook']['p99_s']:.3f}",
        "all met" if not missed else "missed: " + "; ".join(missed),
    ]


def run_once(args: argparse.Namespace, index: int) -> dict[str, Any]:
    """One run of the whole pipeline; prints and returns its figures."""
    load_start = os.getloadavg()[0]
    workdir = Path(tempfile.mkdtemp(prefix="bench-eventhubs-"))
    client = connect(f"chdb://{workdir / 'clickhouse'}")
    migrate(client, Target(database=DATABASE))
    key = secrets.token_hex(16)
    service = StoreService(_refused, key.encode(), deliver_for=WorkerHandlers(client).deliver_for)
    webhook = WebhookReceiver()
    processes: dict[str, subprocess.Popen[bytes]] = {}
    collectors: list[subprocess.Popen[str]] = []
    sim = SimServer(load_scenario(args.scenario), speed=args.speed)
    try:
        with running_azurite(workdir / "azurite") as azurite, EndpointProcess() as endpoint:
            store = endpoint.store
            assert store is not None
            stores = CheckpointStores.create(azurite, "bench")
            env = {
                **os.environ,
                "SEVENTS_TEST_HUB": endpoint.connection_string(),
                "SEVENTS_TEST_CHECKPOINTS": azurite.connection_string,
                "SEVENTS_TEST_STORE_KEY": key,
            }
            for owner in WORKERS:
                processes[owner] = start_worker(owner, stores.container, service.port, args.expiry, env)
            watch = OwnershipWatch(stores(), (f"{endpoint.host}:{endpoint.port}", store.name, "$Default"))
            settled = eventually(lambda: sorted(watch.owners.values()) == ["worker-a"] * 2 + ["worker-b"] * 2, 90)
            if not settled:
                raise RuntimeError(f"the workers did not share the partitions: {watch.owners}")
            settled_changes = len(watch.changes)
            sim.start()
            started = time.time()
            collectors = start_collectors(sim, args.collector_processes, workdir, args.poll, webhook.url, env)
            try:
                warm = all([_said(process, "sending", args.kill_after) for process in collectors])
                warm_s = time.time() - started
                time.sleep(max(0.0, args.kill_after - warm_s))
                victim_partitions = watch.held_by("worker-b")
                killed_at = time.time()
                processes["worker-b"].send_signal(signal.SIGKILL)
                processes["worker-b"].wait(10)
                processes["worker-b"] = start_worker("worker-b", stores.container, service.port, args.expiry, env)
                sim.wait_done(600)
                time.sleep(2 * args.poll + 0.5)  # the collectors see the last changes
                for process in collectors:
                    process.send_signal(signal.SIGTERM)  # each drains its outbox into the hub
                stuck = [process for process in collectors if not _ended(process, DRAIN_S + 30)]
                for process in stuck:
                    process.send_signal(signal.SIGUSR1)  # where its threads are, on its stderr
                    time.sleep(1.0)
                    process.kill()
                expected = {k for k, kind in hub_records(endpoint).items() if kind == "transition"}  # type: ignore[arg-type]
                stored = eventually(lambda: expected <= _stored_ids(client), 120)
                served_again = [_handed_over_after(service.timings, killed_at, p) for p in victim_partitions]
                back = [at for at, _, _, new in watch.changes if new == "worker-b" and at > killed_at]
                resumed_at = min(back) if back else float("inf")
                moves = healthy_moves(watch.changes[settled_changes:], "worker-b", killed_at, resumed_at)
            finally:
                for worker in processes.values():
                    worker.send_signal(signal.SIGTERM)
                for worker in processes.values():
                    worker.wait(30)
                for process in collectors:
                    if process.poll() is None:
                        process.kill()
                watch.close()
            truth = sim.truth()
            positions = hub_positions(endpoint)  # type: ignore[arg-type]
            found = journeys(timed(client, DATABASE, truth), positions, service.timings)
            rows, unique = client.query(
                f"SELECT count(), uniqExact(transition_id) FROM {DATABASE}.transitions FINAL"
            ).result_rows[0]
            lost = len(expected - _stored_ids(client))
            partitions = len(store.partition_ids)
    finally:
        for worker in processes.values():
            if worker.poll() is None:
                worker.kill()
        sim.stop()
        webhook.close()
        service.close()
        client.close()
    served = [t - killed_at if t is not None else None for t in served_again]
    served_max = max((s for s in served if s is not None), default=None)
    # The takeover window: from the longest a transition should take outside it (poll + 1 s) before the kill
    # until the last of the killed worker's partitions was served again (the expiry after the kill if one never was).
    window = (killed_at - (args.poll + 1.0), killed_at + (served_max if served_max is not None else args.expiry))
    inside = [j.total for j in found if window[0] <= j.moments[0] <= window[1]]
    outside = [j.total for j in found if not window[0] <= j.moments[0] <= window[1]]
    values = [j.total for j in found]
    figures: dict[str, Any] = {
        "run": index,
        "poll_s": args.poll,
        "load_start": round(load_start, 2),
        "load_end": round(os.getloadavg()[0], 2),
        "p50_s": round(statistics.median(values), 3),
        "p99_s": round(percentile(values, 0.99), 3),
        "max_s": round(max(values), 3),
        "takeover_window_s": [round(window[0] - killed_at, 2), round(window[1] - killed_at, 2)],
        "outside_takeover": spread(outside),
        "inside_takeover": spread(inside),
        "webhook": spread(webhook_latencies(webhook.received, truth)),
        "moves_between_healthy_workers": moves,
        "transitions": len(values),
        "workers": len(WORKERS),
        "partitions": partitions,
        "collector_processes": args.collector_processes,
        "ownership_expiry_s": args.expiry,
        "killed_worker_partitions": victim_partitions,
        "killed_worker_partitions_served_again_s": [None if s is None else round(s, 2) for s in served],
        "lost": lost,
        "duplicated_after_final": rows - unique,
        "all_stored": stored,
        "collectors_sending_after_s": round(warm_s, 2) if warm else None,
        "collector_processes_stuck_at_the_end": len(stuck),
        "stores": store_figures(service.timings),
    }
    stage_rows = summary(found, percentile)
    figures["stages_s"] = {row[0]: {"p50": row[1], "p99": row[2], "max": row[3]} for row in stage_rows}
    figures["goals_met"] = goals(figures, args.poll, args.expiry, served_max)
    report(figures, args, found, stage_rows, killed_at)
    return figures


def store_figures(timings: Sequence[BatchTiming]) -> dict[str, Any]:
    """How the workers' batches were stored: how many, their records (transitions, heartbeats and the rest), and
    the seconds each store took in the store service (from the batch's arrival to its ``deliver`` returning)."""
    took = [t.stored_at - t.arrived_at for t in timings]
    sizes = [len(t.positions) for t in timings]
    return {
        "batches": len(timings),
        "records_p50": statistics.median(sizes) if sizes else 0,
        "store_p50_s": round(statistics.median(took), 3) if took else math.nan,
        "store_p99_s": round(percentile(took, 0.99), 3) if took else math.nan,
    }


def spread(values: list[float]) -> dict[str, Any]:
    """Count, p50, p99 and max of ``values`` (NaN when there are none: no goal is met by nothing)."""
    if not values:
        return {"n": 0, "p50_s": math.nan, "p99_s": math.nan, "max_s": math.nan}
    p50, p99 = statistics.median(values), percentile(values, 0.99)
    return {"n": len(values), "p50_s": round(p50, 3), "p99_s": round(p99, 3), "max_s": round(max(values), 3)}


def goals(f: dict[str, Any], poll: float, expiry: float, served_max: float | None) -> dict[str, bool]:
    """The goals of one run (see the module docstring)."""
    inside_bound = expiry + poll + 1.0
    return {
        "p99 outside the takeover window <= poll + 1.0 s": f["outside_takeover"]["p99_s"] <= poll + 1.0,
        "max inside the takeover window <= expiry + poll + 1.0 s": f["inside_takeover"]["max_s"] <= inside_bound,
        "observed->enqueued p99 <= 0.5 s": float(f["stages_s"]["observed->enqueued"]["p99"]) <= 0.5,
        "webhook p99 <= poll + 0.5 s": f["webhook"]["p99_s"] <= poll + 0.5,
        "no move between healthy workers": f["moves_between_healthy_workers"] == 0,
        "killed worker's partitions served again within the expiry": served_max is not None and served_max <= expiry,
        "nothing lost or duplicated after FINAL": not f["lost"] and not f["duplicated_after_final"] and f["all_stored"],
        "every collector drained and stopped": not f["collector_processes_stuck_at_the_end"],
    }


def report(
    f: dict[str, Any], args: argparse.Namespace, found: list[Any], stage_rows: list[list[str]], killed_at: float
) -> None:
    """Print one run's figures."""
    out, inside, hooks = f["outside_takeover"], f["inside_takeover"], f["webhook"]
    print(
        f"\nrun {f['run']}: end-to-end latency through Event Hubs, simulator change -> row in ClickHouse "
        f"({f['transitions']:,} transitions, poll {args.poll:g} s, {f['workers']} workers / {f['partitions']} "
        f"partitions, worker b killed at {args.kill_after:g} s and restarted; load average {f['load_start']:.1f} "
        f"at the start, {f['load_end']:.1f} at the end)"
    )
    print(table(["p50 s", "p99 s", "max s"], [[f"{f['p50_s']:.3f}", f"{f['p99_s']:.3f}", f"{f['max_s']:.3f}"]]))
    print(f"every collector had sent to the hub {f['collectors_sending_after_s']} s into the scenario")
    start, end = f["takeover_window_s"]
    print(
        f"outside the takeover window ({out['n']:,} transitions): p99 {out['p99_s']} s, max {out['max_s']} s; "
        f"inside it (changed {start:+g} to {end:+g} s from the kill, {inside['n']:,} transitions): "
        f"p99 {inside['p99_s']} s, max {inside['max_s']} s"
    )
    print(
        f"webhook, IMDS change -> post received ({hooks['n']} Preempt and Terminate transitions): "
        f"p50 {hooks['p50_s']} s, p99 {hooks['p99_s']} s, max {hooks['max_s']} s"
    )
    print(
        f"moves between healthy workers: {f['moves_between_healthy_workers']}; killed worker's partitions "
        f"{f['killed_worker_partitions']} served again after {f['killed_worker_partitions_served_again_s']} s "
        f"(expiry {args.expiry:g} s); lost {f['lost']}, duplicated after FINAL {f['duplicated_after_final']}"
    )
    kept = f["stores"]
    print(
        f"stored in {kept['batches']:,} batches of {kept['records_p50']:g} records at p50; a store took "
        f"{kept['store_p50_s']} s at p50, {kept['store_p99_s']} s at p99"
    )
    for goal, met in f["goals_met"].items():
        print(f"goal: {goal} -> {'met' if met else 'NOT met'}")
    print(f"\nwhere the time goes ({len(found):,} transitions traced; seconds per stage)")
    print(table(["stage", "p50", "p99", "max"], stage_rows))
    if args.slowest:
        print(f"\nslowest transitions (worker b killed at {killed_at:.3f})")
        print(table(["total", "position", "change at", *STAGES], slowest(found, args.slowest)))


def _ended(process: subprocess.Popen[str], timeout: float) -> bool:
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def _said(process: subprocess.Popen[str], word: str, timeout: float) -> bool:
    """Whether ``process`` printed the line ``word`` within ``timeout`` seconds."""
    stdout = process.stdout
    assert stdout is not None
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return bool(line) and line[0].strip() == word


def _handed_over_after(timings: Sequence[BatchTiming], moment: float, partition: str) -> float | None:
    """When the first batch of ``partition`` was handed over after ``moment`` (by the restarted worker: a batch
    the killed one had sent before it died may still be stored after the kill, and does not count)."""
    times = [t.called_at for t in timings if t.called_at > moment and t.positions[0].split(":")[1] == partition]
    return min(times) if times else None


def _stored_ids(client: Any) -> set[str]:
    rows = client.query(f"SELECT DISTINCT transition_id FROM {DATABASE}.transitions").result_rows
    return {str(r[0]) for r in rows}


if __name__ == "__main__":
    sys.exit(as_command(main)())  # the embedded engine closed before the interpreter exits
