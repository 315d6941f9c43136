"""Running an approval hook: an argv list without a shell, an allow-listed environment, bounded output, a timeout.

Theory of operation. A hook gets the event as JSON on stdin and as ``SEVENTS_<FIELD>`` variables, and of the
collector's own environment only ``ALLOWED_ENV`` plus the names the operator lists (``hook_env``): the collector's
secrets (webhook URL, connection strings, identity endpoints' headers, passwords) are never the hook's business,
and an allow-list cannot miss a new one. Nothing runs through a shell: the argv comes from the config file and the
event's fields only reach the hook as data. Nothing here raises for anything the hook does: a missing program is
exit code 127 with the reason as output.

On Linux the hook runs under ``collector.hook_supervisor`` (a few-millisecond Python process of its own session,
marked a child subreaper): whatever the hook starts stays in that process's tree even if it calls ``setsid``,
moves to another process group or double-forks, and it is all killed when the hook exits or at the timeout. The
supervisor keeps only the last ``output_bytes`` of the hook's output. Elsewhere the hook is started directly: on
other POSIX systems in a session of its own, killed with its process group at the timeout; on Windows alone
(``Popen.kill``), its children may outlive it there (documented in the README). Either way, output goes to a
temporary file (no pipe can fill and block the hook) and only its last ``output_bytes`` are read back.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

OUTPUT_KEPT: Final = 4096  # default bytes of the hook's output kept (hook_output_bytes)
EXIT_NOT_STARTED: Final = 127  # the shell's convention for "command not found"
EXIT_KILLED: Final = -9  # reported when the hook was killed at its timeout (or at shutdown)
_POSIX: Final = os.name == "posix"
_LINUX: Final = sys.platform.startswith("linux")
SUPERVISOR: Final = str(Path(__file__).with_name("hook_supervisor.py"))
KILL_GRACE_S: Final = 8.0  # the supervisor's own deadline to kill and reap a tree is 5 s
# What a hook gets of the collector's environment, besides the names the operator lists and its SEVENTS_* fields.
ALLOWED_ENV: Final = ("PATH", "HOME", "LANG", "TZ") + (("SYSTEMROOT",) if os.name == "nt" else ())


@dataclass(frozen=True)
class HookResult:
    """How a hook ended: its exit code (EXIT_KILLED when killed), how long it ran, and its output's tail."""

    exit_code: int
    duration_s: float
    timed_out: bool
    output: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def hook_environment(fields: Mapping[str, Any], base: Mapping[str, str], allow: Sequence[str] = ()) -> dict[str, str]:
    """``ALLOWED_ENV`` and ``allow`` as ``base`` has them, plus ``SEVENTS_<FIELD>`` for each event field (lists
    joined with commas, None as ""); nothing else of ``base``."""
    env = {name: base[name] for name in (*ALLOWED_ENV, *allow) if name in base}
    for name, value in fields.items():
        if isinstance(value, (list, tuple)):
            text = ",".join(str(v) for v in value)
        else:
            text = "" if value is None else str(value)
        env[f"SEVENTS_{name.upper()}"] = text.replace("\x00", "")
    return env


def run_hook(
    argv: Sequence[str],
    fields: Mapping[str, Any],
    *,
    timeout_s: float,
    stop: threading.Event,
    environ: Mapping[str, str] | None = None,
    allow_env: Sequence[str] = (),
    output_bytes: int = OUTPUT_KEPT,
    monotonic: Callable[[], float] = time.monotonic,
) -> HookResult:
    """Run ``argv`` with ``fields`` as JSON on stdin and in the environment; killed, with everything it started,
    at ``timeout_s`` or on ``stop``."""
    began = monotonic()
    payload = json.dumps(dict(fields), sort_keys=True, default=str).encode()
    env = hook_environment(fields, os.environ if environ is None else environ, allow_env)
    supervised = _LINUX and bool(sys.executable)
    command = list(argv)
    if supervised:
        command = [sys.executable, "-I", "-S", SUPERVISOR, str(output_bytes), str(os.getpid()), "--", *argv]
    with tempfile.TemporaryFile() as output, tempfile.TemporaryFile() as stdin:
        stdin.write(payload)
        stdin.seek(0)
        try:
            process = subprocess.Popen(  # noqa: S603 -- an argv list from the config file, never a shell
                command,
                stdin=stdin,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                close_fds=True,
                start_new_session=_POSIX,  # its own session and process group, killed whole at the timeout
            )
        except OSError as error:
            return HookResult(EXIT_NOT_STARTED, monotonic() - began, False, f"cannot start {argv[0]!r}: {error}")
        timed_out = _wait(process, timeout_s, stop, began, monotonic, supervised)
        code = EXIT_KILLED if timed_out else process.returncode
        return HookResult(code, monotonic() - began, timed_out, _tail(output, output_bytes))


def _wait(
    process: subprocess.Popen[bytes],
    timeout_s: float,
    stop: threading.Event,
    began: float,
    monotonic: Callable[[], float],
    supervised: bool,
) -> bool:
    """Wait for the hook; kill it at the deadline or on stop. Whether it was killed."""
    while True:
        left = began + timeout_s - monotonic()
        try:
            process.wait(timeout=max(0.0, min(0.1, left)))
            return False
        except subprocess.TimeoutExpired:
            pass
        if left <= 0 or stop.is_set():
            _kill(process, supervised)
            return True


def _kill(process: subprocess.Popen[bytes], supervised: bool) -> None:
    if supervised:  # the supervisor kills and reaps the hook's tree, then exits
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            log.warning("hook supervisor did not end in time; killing its process group")
    if _POSIX:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            process.kill()
    else:
        process.kill()
    process.wait()


def _tail(output: Any, kept: int) -> str:
    size = output.seek(0, os.SEEK_END)
    output.seek(max(0, size - kept))
    return str(output.read(kept).decode("utf-8", "replace")) if kept else ""
