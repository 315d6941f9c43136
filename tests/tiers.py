"""The test tiers, and what keeps them honest.

``bash scripts/test.sh`` runs three tiers (``SEVENTS_TEST_TIER`` tells the tests which one runs):

- **pure** (``--pure``): pure cores and unit tests: no chDB, no socket (no loopback server), no subprocess.
- **fast** (``--fast``): the pure tier and the quick edges: loopback servers and subprocesses, but neither the
  embedded ClickHouse (marker ``engine``: a database migrated per test) nor the ``slow`` tier (end to end).
- **full** (no flag): everything, as CI runs it.

A test leaves the pure tier with the marker ``io``, added here at collection (``io_reason``): when it requests a
fixture that starts an engine, a server or a process (``IO_FIXTURES``), or when its module imports the tools for
one (``IO_IMPORTS``, read from the module's source: a new test file is classified as it is written). A test may
also say ``@pytest.mark.io`` itself. ``IoWatch`` keeps the classification true: in every tier, a test without the
marker that connects or binds a socket, starts a process or opens chDB fails, naming what it did.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import hypothesis

ROOT: Final = Path(__file__).resolve().parent.parent
TIER: Final = os.environ.get("SEVENTS_TEST_TIER", "full")
FAST = TIER in ("fast", "pure")

# Fixtures and imports that say a test needs the embedded ClickHouse (chDB): the ``engine`` marker, which leaves the
# fast tier too (a database migrated per test costs a second or more). A test that needs it is ``io`` as well.
ENGINE_FIXTURES: Final = frozenset({"ch", "db", "engine"})  # tests/chdb_fixtures.py; tests/dashboards' one
ENGINE_IMPORTS: Final = ("chdb", "clickhouse_connect", "ingest.clickhouse", "tests.chdb_fixtures")

# Fixtures that start chDB, a loopback server or a process (or need one of those that do).
IO_FIXTURES: Final = ENGINE_FIXTURES | frozenset(
    {
        "imds",  # tests/collector_edges: FakeImds on loopback
        "start_sim",  # tests/simulator: the simulator's HTTP server
        "endpoint",  # tests/eventhubs: the AMQP endpoint
        "azurite",
    }
)
# Modules whose import says the test module runs a server, a process or an engine (a prefix matches submodules).
IO_IMPORTS: Final = (
    "subprocess",
    "socket",
    "socketserver",
    "http.server",
    "urllib.request",
    "requests",
    "multiprocessing",
    *ENGINE_IMPORTS,
    "tests.collector_edges.fake_imds",
    "tests.collector_edges.hostile_imds",
    "simulator.server",
    "simulator.SimServer",
    "collector.hooks.run_hook",  # runs a hook: a subprocess
    "tests.collector_edges.fullfs",
    "simulator.http_edge",
)


LONG_S: Final = 5.0  # a test that takes longer is named at the end of a pure or fast run, for the slow tier

# Tests too long for the inner loop (measured on this machine): the slow tier, run by CI.
# A name without [parameters] stands for every case of the test.
SLOW_TESTS: Final = {
    "tests/ingest/test_ingest_batch.py::"
    "test_each_field_at_each_edge_in_a_delivery_of_good_records_is_left_to_the_per_record_decoder_alike": "36 s",
    "tests/ingest/test_ingest_coordinator.py::"
    "test_two_coordinators_one_killed_mid_decision_acknowledge_each_event_once": "2 x 25 s, mostly waiting",
    "tests/simulator/test_sim_scenarios.py::test_builtin_scenario_runs_to_completion": "every scenario, 1-8 s each",
    "tests/simulator/test_sim_downtime.py::test_a_down_vm_is_answered_only_once_it_runs_again": "6 s",
    "tests/dashboards/test_dash_report_fleet.py::test_a_report_of_500_vms_and_200_events_reads_in_chromium": "5 s",
    "tests/collector_edges/test_edges_downtime_stop.py::"
    "test_a_pause_is_stored_at_stop_even_with_imds_gone_and_the_stop_stays_prompt": "5 s: a request timeout at stop",
}


def slow_listed(nodeid: str) -> bool:
    """Whether ``nodeid`` is one of ``SLOW_TESTS`` (or a case of one)."""
    return nodeid in SLOW_TESTS or nodeid.partition("[")[0] in SLOW_TESTS


# Test modules whose tests do I/O by way of the code they drive, though neither their fixtures nor their imports
# say so (the watch found them); a module listed here leaves the pure tier whole.
IO_MODULES: Final = {
    "tests/ingest/test_ingest_cli.py": "runs the CLI against ClickHouse hosts that refuse, and its subcommands",
}


# In the pure and fast tiers no property test tries more examples than this, whatever its own settings say.
FAST_MAX_EXAMPLES: Final = 50


def examples(full: int) -> int:
    """Hypothesis max_examples for a property test whose full-suite budget is ``full`` (a tenth in pure and fast)."""
    return max(10, full // 10) if FAST else full


def cap_examples(test: object) -> None:
    """In the pure and fast tiers, cap the budget of the Hypothesis test ``test`` at ``FAST_MAX_EXAMPLES`` (budgets
    written as a number rather than ``examples(n)`` included). Hypothesis reads a test's settings from this
    attribute at each run; it has no public way to lower a budget a test's own ``@settings`` gave."""
    current = getattr(test, "_hypothesis_internal_use_settings", None)
    if not FAST or not isinstance(current, hypothesis.settings) or current.max_examples <= FAST_MAX_EXAMPLES:
        return
    test._hypothesis_internal_use_settings = hypothesis.settings(current, max_examples=FAST_MAX_EXAMPLES)  # type: ignore[attr-defined]


def io_reason(path: Path, fixturenames: Iterable[str]) -> str:
    """Why a test of module ``path`` requesting ``fixturenames`` is not pure; "" when nothing says so."""
    listed = IO_MODULES.get(path.relative_to(ROOT).as_posix()) if path.is_relative_to(ROOT) else None
    if listed:
        return listed
    fixtures = sorted(IO_FIXTURES.intersection(fixturenames))
    if fixtures:
        return f"fixture {fixtures[0]}"
    imported = io_imports(path)
    return f"imports {imported[0]}" if imported else ""


def engine_reason(path: Path, fixturenames: Iterable[str]) -> str:
    """Why a test of module ``path`` requesting ``fixturenames`` needs chDB; "" when nothing says so."""
    fixtures = sorted(ENGINE_FIXTURES.intersection(fixturenames))
    if fixtures:
        return f"fixture {fixtures[0]}"
    imported = io_imports(path, ENGINE_IMPORTS)
    return f"imports {imported[0]}" if imported else ""


@functools.cache
def io_imports(path: Path, modules: tuple[str, ...] = IO_IMPORTS) -> tuple[str, ...]:
    """The ``modules`` (default ``IO_IMPORTS``) that the test module at ``path`` imports at its top (an import
    inside a test is that test's: the watch sees what it does)."""
    tree = ast.parse(path.read_text(), str(path))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return tuple(sorted({n for n in names if any(n == m or n.startswith(m + ".") for m in modules)}))


# The audit events (sys.addaudithook) that are I/O a pure test must not do, and what each is called in the failure.
_WATCHED: Final = {
    "socket.connect": "connected a socket",
    "socket.bind": "bound a socket",
    "subprocess.Popen": "started a subprocess",
    "os.system": "started a shell",
    "os.posix_spawn": "spawned a process",
    "os.spawn": "spawned a process",
    "os.fork": "forked",
    "os.forkpty": "forked",
    "os.exec": "exec'd",
    "sevents.chdb": "opened chDB",
}


class IoWatch:
    """Records the I/O a test does, from its own thread and the threads it starts (not from threads an earlier
    test left running). One audit hook for the session (they cannot be removed); off between tests."""

    def __init__(self) -> None:
        self._on = False
        self._test_thread: threading.Thread | None = None
        self._before: frozenset[threading.Thread] = frozenset()
        self._seen: list[str] = []
        self._lock = threading.Lock()
        sys.addaudithook(self._audit)

    def start(self) -> None:
        _watch_chdb()
        with self._lock:
            self._seen = []
            self._test_thread = threading.current_thread()
            # the threads themselves, not their idents: a thread started later may reuse a finished one's ident
            self._before = frozenset(threading.enumerate())
            self._on = True

    def take(self) -> list[str]:
        """What the test did so far (first occurrences, in order), and watch on with a clean slate."""
        with self._lock:
            seen, self._seen = list(dict.fromkeys(self._seen)), []
            return seen

    def stop(self) -> list[str]:
        """Stop watching; what the test did since ``take``."""
        with self._lock:
            self._on = False
            self._test_thread, self._before = None, frozenset()
        return self.take()

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self._on:
            return
        what = _WATCHED.get(event)
        if what is None and event == "import" and args and args[0] == "chdb":
            what = "imported chDB"
        if what is None:
            return
        thread = threading.current_thread()
        if thread is not self._test_thread and thread in self._before:
            return  # a thread an earlier test left running: not this test's doing
        with self._lock:
            self._seen.append(what)


def _watch_chdb() -> None:
    """Make chDB's entry points raise an audit event (it has none of its own), once chdb has been imported."""
    chdb = sys.modules.get("chdb")
    if chdb is None or getattr(chdb, "_sevents_watched", False):
        return
    for name in ("connect", "query"):
        original = getattr(chdb, name, None)
        if callable(original):
            setattr(chdb, name, _audited(original))
    chdb._sevents_watched = True  # type: ignore[attr-defined]


def _audited(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        sys.audit("sevents.chdb")
        return original(*args, **kwargs)

    return call
