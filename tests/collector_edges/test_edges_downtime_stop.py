"""A downtime measured and not yet stored by a poll when the collector is told to stop is stored all the same.

A pause: real ``sevents-collector run`` processes, really stopped (SIGSTOP), continued and stopped cleanly as soon
as the pause is measured (SIGCONT, SIGTERM), an hour before their next poll. A reboot: the collector in-process,
started with another boot id than its state dir's and stopped before its first poll.

Each figure is compared with what the system could know: when the process was really stopped and continued.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from collector.outbox import Outbox
from collector.settings import CollectorSettings
from collector.wiring import build_agent
from sevents import records
from tests.collector_edges.fake_imds import FakeImds, event
from tests.collector_edges.test_edges_cli import COLLECTOR, clean_env
from tests.helpers import LogReader, wait_for

FREEZE = event("freeze-1", status="Started", event_type="Freeze")
STOPPED_S = 3.0  # twice the default pause_min (1.5 s): the ticker cannot take it for anything but a pause
CLOCKS_S = 0.05  # millisecond wire times, boot-time to wall-time conversion
RETRY_DEADLINE_S = 300.0  # how long one fetch would retry an unreachable IMDS, were the stop not bounded
POLL_S = 20.0  # one poll, then none until long after the stop: only the stop can store the pause


def _start(imds: FakeImds, state: Path, *flags: str) -> tuple[subprocess.Popen[bytes], LogReader]:
    command = [COLLECTOR, "run", "--imds-url", imds.base_url, "--state-dir", str(state), "--min-request-interval", "0"]
    process = subprocess.Popen(
        [*command, "--poll-interval", str(POLL_S), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert process.stderr is not None
    return process, LogReader(process.stderr)


def _freeze_committed(logs: LogReader) -> None:
    """Wait until the first poll committed the Started Freeze (it logs each transition stored)."""
    wait_for(
        lambda: any(line.get("message") == "transition" and line.get("event_id") == "freeze-1" for line in logs.lines),
        what="the Freeze committed",
    )


def _pause_then_stop(
    process: subprocess.Popen[bytes], logs: LogReader, before_resume: Callable[[], None] | None = None
) -> tuple[datetime, datetime]:
    """SIGSTOP for ``STOPPED_S``, SIGCONT, and SIGTERM as soon as the pause is measured (its tick logs it), long
    before the next poll: when it was really stopped and continued.

    Not at once after SIGCONT: a signal sent as the threads wake may be taken by any of them, and the main thread,
    which runs the handler, then sees it only when its wait for the next poll ends (``POLL_S``); once they sleep
    again, the kernel gives it to the main thread."""
    process.send_signal(signal.SIGSTOP)
    down_at = datetime.now(UTC)
    time.sleep(STOPPED_S)
    if before_resume is not None:
        before_resume()
    up_at = datetime.now(UTC)
    process.send_signal(signal.SIGCONT)
    wait_for(lambda: any(line.get("message") == "the VM was paused" for line in logs.lines), what="the pause")
    process.send_signal(signal.SIGTERM)
    return down_at, up_at


def _stored(state: Path) -> list[dict[str, Any]]:
    with Outbox(state / "outbox.sqlite") as outbox:
        return [json.loads(row.payload) for row in outbox.pending()]


def _the_pause(stored: list[dict[str, Any]], down_at: datetime, up_at: datetime) -> dict[str, Any]:
    """The one impact record whose stretch covers the real stop (it began at the last tick before it)."""
    clocks = timedelta(seconds=CLOCKS_S)
    covering = []
    for record in stored:
        if record["record_type"] != records.RECORD_IMPACT:
            continue
        began = records.parse_time(record["began_at"])
        ended = began + timedelta(milliseconds=record["duration_ms"])
        if began <= down_at + clocks and ended >= up_at - clocks:
            covering.append(record)
    assert len(covering) == 1, stored
    return covering[0]


def _ends_with_the_final_heartbeat(stored: list[dict[str, Any]], impact: dict[str, Any]) -> dict[str, Any]:
    last = stored[-1]
    assert (last["record_type"], last["final"]) == (records.RECORD_HEARTBEAT, True)
    assert impact["seq"] < last["seq"]
    return last


def test_a_pause_ending_as_the_collector_stops_is_stored_with_a_read_after_it(imds: FakeImds, tmp_path: Path) -> None:
    """Stopped as soon as the pause is measured, the collector stores it before its final heartbeat, read after it:
    the Freeze Started across it, and the moment of a real read of IMDS made after the pause ended."""
    imds.set_document(1, [FREEZE])
    state = tmp_path / "state"
    process, logs = _start(imds, state)
    try:
        _freeze_committed(logs)
        down_at, up_at = _pause_then_stop(process, logs)
        assert process.wait(timeout=60) == 0, logs.lines[-5:]
    finally:
        process.kill()
        process.wait()

    stored = _stored(state)
    impact = _the_pause(stored, down_at, up_at)
    assert (impact["detected_by"], impact["event_id"], impact["event_type"]) == ("pause", "freeze-1", "Freeze")
    assert impact["read_at"] is not None
    ended = records.parse_time(impact["began_at"]) + timedelta(milliseconds=impact["duration_ms"])
    assert records.parse_time(impact["read_at"]) >= ended  # a read made after the pause, not one from before it
    _ends_with_the_final_heartbeat(stored, impact)


def test_a_pause_is_stored_at_stop_even_with_imds_gone_and_the_stop_stays_prompt(
    imds: FakeImds, tmp_path: Path
) -> None:
    """IMDS unreachable once the VM runs again: the stop's last poll cannot read it, so the pause is stored without a
    read (read_at null), with the Freeze the last committed snapshot shows Started; the process exits 0 long before
    a fetch would stop retrying (``--retry-deadline``): its last poll is bounded by ``--request-timeout``."""
    imds.set_document(1, [FREEZE])
    state = tmp_path / "state"
    process, logs = _start(imds, state, "--request-timeout", "2", "--retry-deadline", str(RETRY_DEADLINE_S))
    try:
        _freeze_committed(logs)

        def imds_gone() -> None:
            imds.stop()  # new connections are refused
            imds.hang_up_idle()  # and the kept-alive one is closed

        down_at, up_at = _pause_then_stop(process, logs, imds_gone)
        # far sooner than a fetch retrying until its deadline would let it
        assert process.wait(timeout=RETRY_DEADLINE_S / 5) == 0, logs.lines[-5:]
    finally:
        process.kill()
        process.wait()

    stored = _stored(state)
    impact = _the_pause(stored, down_at, up_at)
    assert (impact["detected_by"], impact["event_id"], impact["event_type"]) == ("pause", "freeze-1", "Freeze")
    assert impact["read_at"] is None
    _ends_with_the_final_heartbeat(stored, impact)
    wait_for(lambda: any(line.get("message") == "downtime stored at stop" for line in logs.lines), what="the log")
    (said,) = [line for line in logs.lines if line.get("message") == "downtime stored at stop"]
    assert said["read_imds"] is False


def _rebooted(imds: FakeImds, settings: CollectorSettings, tmp_path: Path) -> CollectorSettings:
    """``settings`` for a VM rebooted since its collector last ran, polled once and stopped (another boot id now);
    the Reboot was Started then."""
    imds.set_document(1, [event("reboot-1", status="Started")])
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("boot-a\n")
    settings = dataclasses.replace(settings, boot_id_file=boot_id, request_timeout=1.0, retry_deadline=300.0)
    before = build_agent(settings)
    try:
        before.poll_once()  # the identity and the Reboot Started, stored; boot-a and its moment in the alive file
    finally:
        before.close()
    time.sleep(0.01)  # the next start is a later millisecond: a downtime of some length
    boot_id.write_text("boot-b\n")
    return settings


def _stopped_before_any_poll(settings: CollectorSettings) -> tuple[list[dict[str, Any]], float]:
    """Run a collector with ``stop`` already set; the records it stored, and how long ``run`` took."""
    collector = build_agent(settings)
    after = collector.outbox.last_seq()
    stop = threading.Event()
    stop.set()
    began = time.monotonic()
    try:
        collector.run(stop)
        took = time.monotonic() - began
    finally:
        collector.close()
    return [r for r in _stored(settings.state_dir) if r["seq"] > after], took


def test_a_reboot_held_at_start_is_stored_by_a_stop_before_the_first_poll(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    """``stop`` would end a poll at once: the stop's own poll is given ``request_timeout``, and reads IMDS."""
    settings = _rebooted(imds, settings, tmp_path)
    stored, _ = _stopped_before_any_poll(settings)
    assert [r["record_type"] for r in stored] == ["impact", "heartbeat"]
    impact, heartbeat = stored
    assert (impact["detected_by"], impact["event_id"]) == ("reboot", "reboot-1")
    ended = records.parse_time(impact["began_at"]) + timedelta(milliseconds=impact["duration_ms"])
    assert impact["read_at"] is not None and records.parse_time(impact["read_at"]) >= ended
    assert (heartbeat["final"], heartbeat["last_poll_ok"]) == (True, True)


def test_a_reboot_is_stored_by_a_stop_whose_imds_never_answers(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    """IMDS accepts the connection and never answers (its first call may take 130 s, a fetch retries for 300):
    the stop's poll ends at ``request_timeout`` (1 s) and the reboot is stored without a read, with the Reboot
    the last committed snapshot shows Started, the final heartbeat saying no poll succeeded."""
    settings = _rebooted(imds, settings, tmp_path)
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(8)  # the kernel completes the handshake; nobody ever reads the request
        settings = dataclasses.replace(settings, imds_url=f"http://127.0.0.1:{hole.getsockname()[1]}")
        stored, took = _stopped_before_any_poll(settings)
    assert [r["record_type"] for r in stored] == ["impact", "heartbeat"]
    impact, heartbeat = stored
    assert (impact["detected_by"], impact["event_id"], impact["read_at"]) == ("reboot", "reboot-1", None)
    assert (heartbeat["final"], heartbeat["last_poll_ok"]) == (True, False)
    assert took < settings.first_call_timeout / 2  # not held by the first call's own timeout
