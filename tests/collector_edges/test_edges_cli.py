"""The ``sevents-collector`` command as a real subprocess: once, run + SIGTERM, proxies, bad config, status."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from collector.outbox import Outbox
from sevents import records
from tests.collector_edges.fake_imds import FakeImds, Scripted, event
from tests.helpers import wait_for

COLLECTOR = str(Path(sys.executable).parent / "sevents-collector")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEVENTS_") and "PROXY" not in k.upper()}
    env.update(extra)
    return env


def once(imds: FakeImds, state: Path, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    result = subprocess.run(
        [COLLECTOR, "once", "--imds-url", imds.base_url, "--state-dir", str(state), "--min-request-interval", "0"],
        capture_output=True,
        env=env or clean_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_once_repeated_follows_the_documents(imds: FakeImds, tmp_path: Path) -> None:
    """Repeated `once` runs print exactly the new transitions of each document change, nothing twice."""
    state = tmp_path / "state"
    steps: list[tuple[int, list[dict[str, Any]], list[tuple[str, str]]]] = [
        (1, [event("a")], [("appeared", "a")]),
        (1, [event("a")], []),
        (2, [event("a"), event("b", event_type="Freeze")], [("appeared", "b")]),
        (3, [event("a", status="Started"), event("b", event_type="Freeze")], [("status_changed", "a")]),
        (4, [event("b", event_type="Freeze")], [("disappeared", "a")]),
        (5, [], [("disappeared", "b")]),
        (5, [], []),
    ]
    printed: list[dict[str, Any]] = []
    for incarnation, events, expected in steps:
        imds.set_document(incarnation, events)
        lines = once(imds, state)
        assert [(r["kind"], r["event_id"]) for r in lines] == expected
        for record in lines:
            assert set(record) == set(records.TRANSITION_FIELDS)
        printed += lines
    assert [r["seq"] for r in printed] == list(range(1, len(printed) + 1))
    assert len({r["transition_id"] for r in printed}) == len(printed)
    with Outbox(state / "outbox.sqlite") as outbox:
        assert [json.loads(r.payload) for r in outbox.pending()] == printed


def test_black_hole_proxy_does_not_stop_polling(imds: FakeImds, tmp_path: Path) -> None:
    """HTTP_PROXY/HTTPS_PROXY pointing at a closed port are ignored: the poll reaches IMDS directly."""
    hole = f"http://127.0.0.1:{closed_port()}"
    env = clean_env(HTTP_PROXY=hole, HTTPS_PROXY=hole, http_proxy=hole, https_proxy=hole, ALL_PROXY=hole)
    imds.set_document(1, [event("a")])
    assert [r["event_id"] for r in once(imds, tmp_path / "state", env)] == ["a"]
    assert all(s.headers.get("Metadata") == "true" for s in imds.seen)


def run_collector(imds: FakeImds, state: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [COLLECTOR, "run", "--imds-url", imds.base_url, "--state-dir", str(state), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )


def test_sigterm_drains_and_exits_zero(imds: FakeImds, tmp_path: Path) -> None:
    """The daemon polls, writes a heartbeat, and on SIGTERM exits 0 with its records committed."""
    imds.set_document(1, [event("a")])
    state = tmp_path / "state"
    process = run_collector(imds, state, "--poll-interval", "0.1", "--min-request-interval", "0")
    try:
        wait_for(lambda: len(imds.scheduled()) >= 3)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.wait()
    _, err = process.communicate()
    assert b"collector stopped" in err
    with Outbox(state / "outbox.sqlite") as outbox:
        types = [r.record_type for r in outbox.pending()]
    assert types.count("transition") == 1
    assert types.count("heartbeat") >= 1


def test_sigterm_interrupts_a_slow_first_call(imds: FakeImds, tmp_path: Path) -> None:
    """While IMDS is in its slow first call, SIGTERM still ends the daemon promptly with status 0."""
    imds.instance = {"compute": {"vmId": "x"}}
    imds.script.append(Scripted(200, b'{"DocumentIncarnation": 1, "Events": []}', delay=60))
    process = run_collector(imds, tmp_path / "state", "--min-request-interval", "0")
    try:
        wait_for(lambda: len(imds.scheduled()) >= 1)  # the 60 s answer is now being waited for
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0  # well before the 60 s answer (generous for loaded CI)
    finally:
        process.kill()
        process.wait()


def test_bad_config_lists_every_problem(tmp_path: Path) -> None:
    """`run` with several bad settings exits 2 and names each of them."""
    config = tmp_path / "collector.toml"
    config.write_text('[collector]\nsink = "kafka"\npoll_intervall = 1\n')
    result = subprocess.run(
        [COLLECTOR, "run", "--config", str(config), "--imds-url", "https://imds", "--api-version", "1999-01-01"],
        capture_output=True,
        env=clean_env(),
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    err = result.stderr.decode()
    assert "poll_intervall" in err  # unknown key in the file (reported before conversion)
    fixed = config.read_text().replace("poll_intervall = 1\n", "")
    config.write_text(fixed)
    result = subprocess.run(
        [COLLECTOR, "run", "--config", str(config), "--imds-url", "https://imds", "--api-version", "1999-01-01"],
        capture_output=True,
        env=clean_env(SEVENTS_HEARTBEAT_INTERVAL="-5"),
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    err = result.stderr.decode()
    for name in ("sink", "imds_url", "api_version", "heartbeat_interval"):
        assert name in err


def test_a_bad_approval_policy_refuses_to_start(tmp_path: Path) -> None:
    """A mistaken [approval] table is a configuration error at start (exit 2, each problem named), never a silent
    approve-all nor a collector that quietly approves nothing."""
    config = tmp_path / "collector.toml"
    config.write_text(
        '[collector]\nsink = "local"\n\n[approval]\nevent_types = ["Rebot"]\npre_hook = "drain --now"\n'
        'approver = "everyone"\n'
    )
    result = subprocess.run(
        [COLLECTOR, "once", "--config", str(config), "--state-dir", str(tmp_path / "state")],
        capture_output=True,
        env=clean_env(),
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    err = result.stderr.decode()
    for word in ("Rebot", "pre_hook", "approver"):
        assert word in err
    assert not (tmp_path / "state").exists()  # refused before anything was opened


def test_status_reports_the_outbox(imds: FakeImds, tmp_path: Path) -> None:
    """`status` prints depth, last seq, drops, the last document and the last moment alive of a state dir as JSON,
    and writes nothing there (it used to open the outbox read-write, creating its WAL files)."""
    imds.set_document(1, [event("a"), event("b")])
    state = tmp_path / "state"
    once(imds, state)
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in state.iterdir()}
    result = subprocess.run(
        [COLLECTOR, "status", "--state-dir", str(state)], capture_output=True, timeout=30, check=True
    )
    status = json.loads(result.stdout)
    assert (status["depth"], status["last_seq"], status["drops"], status["has_snapshot"]) == (2, 2, {}, True)
    assert status["pending_by_type"] == {"transition": 2}
    assert [(e["event_id"], e["status"]) for e in status["snapshot"]["events"]] == [
        ("a", "Scheduled"),
        ("b", "Scheduled"),
    ]
    assert status["snapshot"]["incarnation"] == 1
    assert status["last_alive_at"] is not None and status["last_alive_age_s"] >= 0
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in state.iterdir()} == before


def test_outbox_failure_is_fatal_and_loud(imds: FakeImds, tmp_path: Path) -> None:
    """An outbox that cannot be opened stops the collector with status 3 and says why."""
    state = tmp_path / "state"
    (state / "outbox.sqlite").mkdir(parents=True)
    result = subprocess.run(
        [COLLECTOR, "once", "--imds-url", imds.base_url, "--state-dir", str(state)],
        capture_output=True,
        env=clean_env(),
        timeout=30,
        check=False,
    )
    assert result.returncode == 3
    assert b"fatal" in result.stderr and b"outbox" in result.stderr
    assert imds.seen == []


def retry_lines(process: subprocess.Popen[bytes], count: int) -> list[dict[str, Any]]:
    """Read the process's JSON log lines from stderr until ``count`` of them announce a retry."""
    assert process.stderr is not None
    found: list[dict[str, Any]] = []
    for raw in process.stderr:
        if not raw.startswith(b"{"):
            continue  # e.g. a Python warning: not one of our log lines
        line = json.loads(raw)
        if line.get("message") == "IMDS request failed; retrying":
            found.append(line)
            if len(found) == count:
                return found
    raise AssertionError(f"stderr ended after {len(found)} retry lines")


def test_once_against_an_unreachable_imds_says_what_it_does_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """`once` logs each retry with the error and a short deadline (not the daemon's 75 s); SIGINT ends it cleanly."""
    process = subprocess.Popen(
        [COLLECTOR, "once", "--imds-url", f"http://127.0.0.1:{closed_port()}", "--state-dir", str(tmp_path / "s")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    try:
        first, second = retry_lines(process, 2)
        for line in (first, second):
            assert line["kind"] == "connection" and "127.0.0.1" in line["error"]
            assert 0 < line["gives_up_in_s"] <= 10.0
        assert second["attempt"] == first["attempt"] + 1
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
    finally:
        process.kill()
        process.wait()
    _, err = process.communicate()
    assert b"Traceback" not in err
    assert b"interrupted" in err


def test_once_keeps_an_explicit_retry_deadline(tmp_path: Path) -> None:
    """A retry deadline given in the environment applies to `once` as it does to the daemon."""
    process = subprocess.Popen(
        [COLLECTOR, "once", "--imds-url", f"http://127.0.0.1:{closed_port()}", "--state-dir", str(tmp_path / "s")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(SEVENTS_RETRY_DEADLINE="40"),
    )
    try:
        (first,) = retry_lines(process, 1)
        assert 30 < first["gives_up_in_s"] <= 40
    finally:
        process.kill()
        process.wait()


def test_unusable_state_dir_is_a_clear_fatal_error(imds: FakeImds, tmp_path: Path) -> None:
    """A --state-dir that cannot be created (here: below a regular file) exits 3 naming it, without a traceback."""
    (tmp_path / "plain-file").write_text("")
    state = tmp_path / "plain-file" / "state"
    result = subprocess.run(
        [COLLECTOR, "once", "--imds-url", imds.base_url, "--state-dir", str(state)],
        capture_output=True,
        env=clean_env(),
        timeout=30,
        check=False,
    )
    assert result.returncode == 3, result.stderr.decode()
    assert b"Traceback" not in result.stderr and str(state).encode() in result.stderr
    assert imds.seen == []


def test_status_of_a_damaged_outbox_is_a_clear_fatal_error(tmp_path: Path) -> None:
    """`status` on a file that is not SQLite exits 3 and says so, without a traceback."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "outbox.sqlite").write_bytes(b"not a database" * 100)
    result = subprocess.run(
        [COLLECTOR, "status", "--state-dir", str(state)], capture_output=True, env=clean_env(), timeout=30, check=False
    )
    assert result.returncode == 3
    assert b"Traceback" not in result.stderr and b"outbox" in result.stderr


# `status` in a process that cannot read what root can: as root (CI), it drops to nobody once everything it
# needs is imported (nobody may not reach this interpreter's files), so mode 000 stops it as it stops anyone else.
STATUS_AS_ANOTHER_USER = """
import os, sys
from collector.cli import main
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
sys.exit(main(["status", "--state-dir", sys.argv[1]]))
"""


def _only_line(stderr: bytes) -> str:
    lines = stderr.decode().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr.decode(), stderr.decode()
    return lines[0]


@pytest.mark.parametrize("what", ["directory", "outbox"])
def test_status_of_an_unreadable_state_dir_is_one_line_and_exit_3(imds: FakeImds, tmp_path: Path, what: str) -> None:
    """Under the shipped unit an operator cannot read the state dir: one line naming it, the reason and the way
    (the service user or sudo), exit 3 as the help says; neither a traceback nor exit 1."""
    state = tmp_path / "state"
    imds.set_document(1, [event("a")])
    once(imds, state)
    locked = state if what == "directory" else state / "outbox.sqlite"
    mode = locked.stat().st_mode
    locked.chmod(0)
    try:
        result = subprocess.run(
            [sys.executable, "-c", STATUS_AS_ANOTHER_USER, str(state)],
            capture_output=True,
            env=clean_env(),
            timeout=30,
            check=False,
        )
    finally:
        locked.chmod(mode)
    line = _only_line(result.stderr)
    assert result.returncode == 3 and result.stdout == b""
    assert str(state) in line and "Permission denied" in line and "sudo" in line, line
    assert line.startswith("sevents-collector: cannot read the state directory"), line


@pytest.mark.parametrize("layout", ["missing", "a regular file", "outbox a directory"])
def test_status_without_an_outbox_is_one_line_and_exit_3(tmp_path: Path, layout: str) -> None:
    """No state dir, a state dir that is a file, an outbox that is a directory: the same one line and exit 3."""
    state = tmp_path / "state"
    if layout == "a regular file":
        state.write_text("not a directory")
    elif layout == "outbox a directory":
        (state / "outbox.sqlite").mkdir(parents=True)
    result = subprocess.run(
        [COLLECTOR, "status", "--state-dir", str(state)], capture_output=True, env=clean_env(), timeout=30, check=False
    )
    assert result.returncode == 3 and str(state) in _only_line(result.stderr)


def test_status_help_says_what_it_prints_and_its_exit_status() -> None:
    """`status --help` explains its output, the access it needs and its exit codes."""
    result = subprocess.run([COLLECTOR, "status", "--help"], capture_output=True, text=True, timeout=30, check=True)
    for needle in ("depth", "drops", "Read-only", "exit status: 0 ok, 3"):
        assert needle in result.stdout


# What the collector must not load: each costs megabytes of resident memory (issue 17's 34 MiB budget), and
# none is on the poll path. The Event Hubs sink and the OTLP exporter import theirs only when configured.
HEAVY = ("requests", "urllib3", "charset_normalizer", "azure", "msgspec", "orjson", "hypothesis", "prometheus_client")
HEAVY += ("ingest", "dashboards", "simulator", "demo")  # the collector's own arrows point only to sevents


def test_a_local_collector_loads_no_heavy_library(imds: FakeImds, tmp_path: Path) -> None:
    """A poll through the command, local sink and no OTLP endpoint, imports none of them, nor the OTel SDK."""
    imds.set_document(1, [event("a")])
    loaded = tmp_path / "modules.txt"
    code = (
        "import sys; from collector.cli import main; code = main(sys.argv[2:]); "
        "open(sys.argv[1], 'w').write('\\n'.join(sys.modules)); sys.exit(code)"
    )
    args = ["once", "--imds-url", imds.base_url, "--state-dir", str(tmp_path / "state"), "--min-request-interval", "0"]
    result = subprocess.run(
        [sys.executable, "-c", code, str(loaded), *args], capture_output=True, env=clean_env(), timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    modules = loaded.read_text().split()
    assert "collector.agent" in modules
    assert [m for m in modules if m.split(".")[0] in HEAVY or m.startswith("opentelemetry.sdk")] == []


@pytest.mark.parametrize(
    ("flags", "types", "note"),
    [
        ([], ("Preempt", "Terminate"), False),
        (["--webhook-event-type", "Reboot"], ("Reboot",), False),
        (["--webhook-event-type", "Reboot", "--webhook-event-type", "Redeploy"], ("Reboot", "Redeploy"), False),
        (["--webhook-event-type", "Reboot,Redeploy"], ("Reboot", "Redeploy"), False),
        (["--webhook-event-types", "Reboot,Redeploy"], ("Reboot", "Redeploy"), True),  # the old spelling
    ],
)
def test_webhook_event_type_flag_spellings(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    flags: list[str],
    types: tuple[str, ...],
    note: bool,
) -> None:
    """The event-type filter is spelled as on every command: --webhook-event-type, repeatable or comma-separated;
    --webhook-event-types still works and names the new spelling on stderr."""
    from collector import cli

    seen: list[Any] = []
    monkeypatch.setattr(cli, "_once", lambda settings, approval: seen.append(settings) or 0)
    for name in [k for k in os.environ if k.startswith("SEVENTS_")]:
        monkeypatch.delenv(name)
    assert cli.main(["once", "--state-dir", str(tmp_path), *flags]) == 0
    assert seen[0].webhook_event_types == types
    err = capsys.readouterr().err
    if note:
        assert err == (
            "sevents-collector once: note: --webhook-event-types is the old spelling of --webhook-event-type (still "
            "accepted); write --webhook-event-type TYPE, repeatable or comma-separated\n"
        )
    else:
        assert "note" not in err


ENTRY = "import sys; from collector.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize("flag", ["--webhook-event-type", "--webhook-event-types"])
def test_a_misspelt_webhook_event_type_is_one_line_and_exit_2(tmp_path: Path, flag: str) -> None:
    """A typo is refused before IMDS is asked, with the closest type."""
    result = subprocess.run(
        [sys.executable, "-c", ENTRY, "once", "--state-dir", str(tmp_path), flag, "Preempt", flag, "Terminat"],
        capture_output=True,
        env=clean_env(),
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.decode().splitlines() if " note: " not in line]
    assert lines == [
        "sevents-collector: --webhook-event-type: unknown event type 'Terminat' (one of Freeze, Reboot, Redeploy, "
        "Preempt, Terminate); did you mean Terminate?"
    ]
    assert not (tmp_path / "outbox.sqlite").exists()


def _collector(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COLLECTOR, *argv], capture_output=True, text=True, env=clean_env(), timeout=60, check=False)


def test_log_level_is_a_choice_in_any_case(imds: FakeImds, tmp_path: Path) -> None:
    """--log-level accepts debug/info/warning/error in any case; another word is exit 2 naming the choices."""
    bad = _collector("once", "--log-level", "loud", "--state-dir", str(tmp_path / "state"))
    assert bad.returncode == 2
    assert "invalid choice: 'loud' (choose from 'debug', 'info', 'warning', 'error')" in bad.stderr
    imds.set_document(1, [event("a")])
    good = _collector(
        "once", "--log-level", "WARNING", "--imds-url", imds.base_url, "--state-dir", str(tmp_path / "state")
    )
    assert good.returncode == 0, good.stderr
    assert '"level": "info"' not in good.stderr


def test_once_help_lists_only_what_once_uses(imds: FakeImds, tmp_path: Path) -> None:
    """once --help leaves out the daemon's flags; `once` still accepts them (a command line shared with run)."""
    helped = _collector("once", "--help")
    assert helped.returncode == 0
    for flag in ("--imds-url", "--state-dir", "--retry-deadline", "--first-call-timeout", "--sink", "--log-level"):
        assert flag in helped.stdout
    for flag in ("--poll-interval", "--heartbeat-interval", "--tick-interval", "--pause-min", "--metrics-addr"):
        assert f"[{flag} " not in helped.stdout and f"  {flag} " not in helped.stdout  # usage, options
    assert "--poll-interval" in _collector("run", "--help").stdout
    imds.set_document(1, [event("a")])
    result = _collector(
        "once",
        "--poll-interval",
        "5",
        "--imds-url",
        imds.base_url,
        "--state-dir",
        str(tmp_path / "s"),
        "--min-request-interval",
        "0",
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("url", "advice"),
    [
        (
            "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01",
            "pass --imds-url http://169.254.169.254 and --api-version 2020-07-01",
        ),
        ("http://127.0.0.1:8080/vm/db-0/metadata/scheduledevents", "pass --imds-url http://127.0.0.1:8080/vm/db-0 "),
    ],
)
def test_a_pasted_full_imds_url_says_what_to_pass(tmp_path: Path, url: str, advice: str) -> None:
    """A full Scheduled Events URL is refused before any request, exit 2, one line naming the base URL to pass."""
    result = _collector("once", "--imds-url", url, "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("sevents-collector: invalid configuration: imds_url must be the IMDS base URL"), line
    assert advice in line
    assert not (tmp_path / "state").exists()


def test_errors_are_one_line(tmp_path: Path) -> None:
    """A config error has no header line of its own; a failed poll is said once, not also as a log record."""
    bad = _collector("once", "--sink", "kafka", "--state-dir", str(tmp_path / "state"))
    assert bad.returncode == 2
    assert bad.stderr == "sevents-collector: invalid configuration: sink must be one of local, eventhubs, got 'kafka'\n"
    failed = _collector(
        "once",
        "--imds-url",
        f"http://127.0.0.1:{closed_port()}",
        "--retry-deadline",
        "0",
        "--state-dir",
        str(tmp_path / "state"),
        "--log-level",
        "error",
    )
    assert failed.returncode == 1
    (line,) = failed.stderr.splitlines()
    assert line.startswith("sevents-collector: poll failed: "), failed.stderr


def test_a_fatal_error_is_one_line(tmp_path: Path) -> None:
    """An unusable state directory: exit 3, one line (no critical log record saying the same)."""
    state = tmp_path / "file"
    state.write_text("not a directory")
    result = _collector("once", "--state-dir", str(state), "--imds-url", "http://127.0.0.1:1")
    assert result.returncode == 3, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("sevents-collector: fatal: "), line
