"""Suite-wide test tiers (tests/tiers.py): ``slow`` and ``engine`` leave the fast tier, ``io`` the pure tier;
``IoWatch`` fails a test without ``io`` that connects a socket, starts a process or opens chDB, in every tier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.tiers import LONG_S, TIER, IoWatch, cap_examples, engine_reason, io_reason, slow_listed

# Every Event Hubs test talks to a real AMQP endpoint and Azurite with timeouts measured in seconds: the whole
# directory is the slow tier (test_eh_pure.py excepted: it is pure and stays in the inner loop).
_SLOW_DIRS = (Path(__file__).parent / "eventhubs",)
_FAST_FILES = {"test_eh_pure.py"}

_WATCH = IoWatch()

# Hypothesis's own timing checks (a 200 ms deadline per example, slow generation) are bounds a loaded machine
# breaks: the full suite runs two workers beside collector processes and the embedded engine. Speed is measured
# in benchmarks/, not asserted here.
settings.register_profile("sevents", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("sevents")


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    """The pure and fast tiers do not even import a test module whose every test they would leave out (collecting
    is a fifth of their time): one in a slow directory; for the pure tier, one whose imports or listing say I/O;
    for the fast tier, one whose imports say chDB."""
    if TIER not in ("pure", "fast") or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if any(collection_path.is_relative_to(d) for d in _SLOW_DIRS) and collection_path.name not in _FAST_FILES:
        return True
    left_out = io_reason if TIER == "pure" else engine_reason
    return True if left_out(collection_path, ()) else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        cap_examples(getattr(item, "obj", None))
        slow_dir = any(path.is_relative_to(d) for d in _SLOW_DIRS) and path.name not in _FAST_FILES
        if slow_dir or slow_listed(item.nodeid):
            item.add_marker(pytest.mark.slow)
        fixtures = getattr(item, "fixturenames", ())
        if item.get_closest_marker("engine") is None and engine_reason(path, fixtures):
            item.add_marker(pytest.mark.engine)
        if item.get_closest_marker("io") is not None:
            continue
        if item.get_closest_marker("slow") or item.get_closest_marker("engine") or io_reason(path, fixtures):
            item.add_marker(pytest.mark.io)  # end to end, an engine, or said by its fixtures or imports


def _watched(item: pytest.Item) -> bool:
    return item.get_closest_marker("io") is None


def _fail_on_io(item: pytest.Item, done: list[str]) -> None:
    if done:
        pytest.fail(
            f"{item.nodeid} {', '.join(done)} without the io marker: mark it @pytest.mark.io, or add what it uses to "
            "IO_FIXTURES or IO_IMPORTS in tests/tiers.py (the pure tier must not do I/O)",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if _watched(item):
        _WATCH.start()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    result = yield
    if _watched(item):
        _fail_on_io(item, _WATCH.take())
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    result = yield
    if _watched(item):
        _fail_on_io(item, _WATCH.stop())
    return result


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """In the pure and fast tiers, name the tests too long for them (timing is no pass or fail, but it is shown)."""
    if TIER not in ("pure", "fast"):
        return
    reports = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, ())]
    long = sorted((r.duration, r.nodeid) for r in reports if getattr(r, "when", "") == "call" and r.duration > LONG_S)
    if long:
        terminalreporter.write_line(
            f"{len(long)} tests took over {LONG_S:g} s in the {TIER} tier (mark them slow, tests/tiers.py SLOW_TESTS):"
        )
        for duration, nodeid in reversed(long[-10:]):
            terminalreporter.write_line(f"  {duration:6.1f} s  {nodeid}")
