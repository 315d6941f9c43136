"""Hostile IMDS answers against a real `sevents-collector run`: never an exit or a stall, every good document kept."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.outbox import Outbox
from tests.collector_edges.hostile_imds import VM_ID, Answer, HostileImds, answers, expected_ids, largest_document
from tests.collector_edges.test_edges_cli import COLLECTOR, clean_env
from tests.helpers import wait_for

# The collector's memory budget is 34 MiB peak RSS (issue 17). Measured on the project's machine: 29.5-29.7 MiB
# in the 2,000-answer run (three runs), 27.9 MiB polling every 10 ms through its good documents alone, 25.9 MiB at
# 1 Hz (BENCHMARKS.md); of that, 24.9 MiB is the interpreter with the collector imported (a bare interpreter:
# 10.6 MiB). Hostile answers may add a few transient buffers of at most the 256 KiB body cap, never the body
# IMDS tries to send (before the cap: 610 MiB). While the collector still imported requests and the OpenTelemetry
# SDK it peaked at 41.6-43.0 MiB here: the budget catches such regressions as well as unbounded buffers.
RSS_BUDGET_KIB = 34 * 1024
REQUEST_TIMEOUT_S = 0.25


@dataclass(frozen=True)
class Figures:
    """What one hostile run measured."""

    answers: int
    exited: int | None
    longest_gap_s: float
    peak_rss_kib: int
    recorded: int


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def hostile_run(tmp_path: Path, hostile_count: int, seed: int) -> Figures:
    """Serve ``hostile_count`` hostile answers between good documents to a real collector; check what it kept."""
    return collector_run(tmp_path, answers(seed, hostile_count), REQUEST_TIMEOUT_S)


def collector_run(tmp_path: Path, sequence: list[Answer], request_timeout_s: float) -> Figures:
    """Serve ``sequence`` to a real collector; check that it kept every transition the pure core predicts."""
    state = tmp_path / "state"
    with HostileImds(sequence) as imds:
        command = [COLLECTOR, "run", "--imds-url", imds.base_url, "--state-dir", str(state)]
        command += ["--poll-interval", "0.01", "--min-request-interval", "0", "--heartbeat-interval", "0.5"]
        command += ["--request-timeout", str(request_timeout_s), "--first-call-timeout", "2", "--retry-deadline", "0.3"]
        command += ["--instance-refresh", "1", "--log-level", "error"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
        try:
            # Two requests past the sequence: the poll after the last answer starts only once it was committed.
            def served_all() -> bool:
                assert process.poll() is None, f"collector exited ({process.returncode}) at answer {imds.served}"
                return imds.served >= len(sequence) + 2

            wait_for(served_all, float("inf"), what="every answer served")  # bounded by the suite's test timeout
            rss = peak_rss_kib(process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            exited = process.wait(timeout=30)
        arrivals = list(imds.arrivals)
    with Outbox(state / "outbox.sqlite") as outbox:
        stored = [json.loads(r.payload) for r in outbox.pending(limit=1_000_000)]
    transitions = [r for r in stored if r["record_type"] == "transition"]
    assert {r["vm_id"] for r in stored} == {VM_ID}
    assert sorted(r["transition_id"] for r in transitions) == sorted(expected_ids(sequence))
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    return Figures(len(sequence), exited, max(gaps), rss, len(transitions))


def check(figures: Figures, request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
    assert figures.exited == 0
    # A stall would show as a long gap between requests: every answer ends within the request timeout, and
    # a retry waits at most the retry deadline (1 s) before the next poll asks again.
    assert figures.longest_gap_s < 10 * (request_timeout_s + 1.0)  # generous: a stall would be the 30 s a trickle lasts
    assert figures.peak_rss_kib <= RSS_BUDGET_KIB, f"peak RSS {figures.peak_rss_kib} KiB"


@pytest.mark.slow  # a real collector through 200 hostile answers, some of which wait out a timeout
def test_hostile_answers_never_crash_stall_or_lose_a_good_document(tmp_path: Path) -> None:
    """Two hundred hostile answers between good documents: no exit, no stall, every transition, RSS in budget."""
    figures = hostile_run(tmp_path, 200, seed=17)
    check(figures)


@pytest.mark.slow  # a real collector storing 2,000 transitions, each commit written through to disk
def test_largest_legal_document_twice_within_budget(tmp_path: Path) -> None:
    """1,000 events just under the body cap, then each of them Started: 2,000 transitions, RSS in budget.

    Before the fix it peaked at 36.1-36.9 MiB: the snapshot's JSON made in one piece, every payload of the
    commit held at once, and SQLite's default 2 MiB page cache (BENCHMARKS.md, issue 17).
    """
    sequence = [Answer("good", body=largest_document(1, "Scheduled"))] * 2
    sequence += [Answer("good", body=largest_document(2, "Started"))] * 2
    # A timeout this long: an answer a loaded machine was slow to read must not change what is recorded.
    figures = collector_run(tmp_path, sequence, request_timeout_s=10.0)
    print(figures)  # for BENCHMARKS.md (with -s)
    assert figures.recorded == 2_000
    check(figures, request_timeout_s=10.0)


# A stress run, by hand like the benchmarks (pytest -m benchmark): on a machine loaded by other tests, a slow good
# answer can outlast the request timeout, and the replay that predicts the transitions cannot know that.
@pytest.mark.benchmark
@pytest.mark.timeout(1800)  # about 0.15 s an answer: trickles wait out the request timeout, 429s a backoff
def test_two_thousand_hostile_answers(tmp_path: Path) -> None:
    """The issue's full run: 2,000 hostile answers (figures printed for the record)."""
    figures = hostile_run(tmp_path, int(os.environ.get("SEVENTS_HOSTILE_ANSWERS", "2000")), seed=2000)
    print(figures)
    check(figures)
