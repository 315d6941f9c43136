"""Running an approval hook: an argv list without a shell, the event in its environment and on stdin, a timeout.

Theory of operation. The hook is started with ``subprocess.Popen`` (never ``shell=True``: the argv comes from the
config file and the event's fields only reach the hook as data). Its stdout and stderr go to one temporary file
(no pipe can fill and block it, on any OS); only the last ``OUTPUT_KEPT`` bytes are read back. At the timeout, or
when the collector stops, the hook is killed (``Popen.kill``: SIGKILL on POSIX, TerminateProcess on Windows), and on
POSIX its whole process group with it, so a shell script's children do not outlive it. Windows has no process
groups to kill that way: a hook's grandchildren there may survive its timeout (documented in the README).
Nothing here raises for anything the hook does: a missing program is exit code 127 with the reason as output.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

log = logging.getLogger(__name__)

OUTPUT_KEPT: Final = 4096  # bytes of the hook's output kept for the log
EXIT_NOT_STARTED: Final = 127  # the shell's convention for "command not found"
EXIT_KILLED: Final = -9  # reported when the hook was killed at its timeout (or at shutdown)
_POSIX: Final = os.name == "posix"
# The collector's secrets are not the hook's business: never passed on (the hook gets the rest of the environment).
SECRET_ENV: Final = frozenset({"SEVENTS_EVENTHUBS_CONNECTION_STRING", "AZURE_CLIENT_SECRET"})


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


def hook_environment(fields: Mapping[str, Any], base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without the collector's secrets, plus ``SEVENTS_<FIELD>`` for each event field (lists joined with
    commas, None as "")."""
    env = {k: v for k, v in base.items() if k not in SECRET_ENV}
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
    monotonic: Callable[[], float] = time.monotonic,
) -> HookResult:
    """Run ``argv`` with ``fields`` as JSON on stdin and in the environment; killed at ``timeout_s`` or on ``stop``."""
    began = monotonic()
    payload = json.dumps(dict(fields), sort_keys=True, default=str).encode()
    env = hook_environment(fields, os.environ if environ is None else environ)
    with tempfile.TemporaryFile() as output, tempfile.TemporaryFile() as stdin:
        stdin.write(payload)
        stdin.seek(0)
        try:
            process = subprocess.Popen(  # noqa: S603 -- an argv list from the config file, never a shell
                list(argv),
                stdin=stdin,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                close_fds=True,
                start_new_session=_POSIX,  # its own process group, killed whole at the timeout
            )
        except OSError as error:
            return HookResult(EXIT_NOT_STARTED, monotonic() - began, False, f"cannot start {argv[0]!r}: {error}")
        timed_out = _wait(process, timeout_s, stop, began, monotonic)
        code = EXIT_KILLED if timed_out else process.returncode
        return HookResult(code, monotonic() - began, timed_out, _tail(output))


def _wait(
    process: subprocess.Popen[bytes],
    timeout_s: float,
    stop: threading.Event,
    began: float,
    monotonic: Callable[[], float],
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
            _kill(process)
            return True


def _kill(process: subprocess.Popen[bytes]) -> None:
    if _POSIX:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            process.kill()
    else:
        process.kill()
    process.wait()


def _tail(output: Any) -> str:
    size = output.seek(0, os.SEEK_END)
    output.seek(max(0, size - OUTPUT_KEPT))
    return str(output.read().decode("utf-8", "replace"))
