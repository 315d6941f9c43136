"""Runs one approval hook on Linux so that its whole process tree ends with it: a script, standard library only.

Theory of operation. The collector (``collector.hooks``) starts this file as
``python -I -S hook_supervisor.py CAP PARENT -- ARGV...`` in a session of its own, with the hook's environment and
stdin. This process marks itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``, unprivileged, Linux 3.4+):
a descendant of the hook whose parent exits (a daemon's double fork, a child that called ``setsid`` or moved to a
process group of its own) is reparented here rather than to init, so whatever it does it stays in this process's
tree, where ``/proc`` shows it. The hook's stdout and stderr go to a pipe read here; only the last CAP bytes are
kept and written to this process's stdout at the end, so the collector's file never grows past CAP.

When the hook exits, or at SIGTERM (the collector's timeout, or its shutdown), every descendant still alive is
killed (SIGKILL) and reaped, again until none is left; then this process exits with the hook's exit code, or dies
of the signal that ended the hook. ``PR_SET_PDEATHSIG`` sends the SIGTERM should the collector's thread that
started this die first. It imports nothing of the collector: ``-I -S`` start it in a few milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import sys
import time
from typing import Any, Final

PR_SET_PDEATHSIG: Final = 1
PR_SET_CHILD_SUBREAPER: Final = 36
EXIT_NOT_STARTED: Final = 127  # the shell's convention for "command not found"
EXIT_USAGE: Final = 2
REAP_DEADLINE_S: Final = 5.0  # a process in uninterruptible sleep cannot die at once; give up on it after this
STEP_S: Final = 0.05

_stopping = False


def _on_term(signum: int, frame: Any) -> None:
    global _stopping
    _stopping = True


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: hook_supervisor.py CAP PARENT -- ARGV...\n")
        return EXIT_USAGE
    cap, parent, command = int(argv[1]), int(argv[2]), argv[4:]
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGHUP, _on_term)
    notes = _prctl_setup(parent)
    read_end, write_end = os.pipe()
    try:
        hook = os.posix_spawnp(
            command[0],
            command,
            dict(os.environ),
            file_actions=[(os.POSIX_SPAWN_DUP2, write_end, 1), (os.POSIX_SPAWN_DUP2, write_end, 2)],
            # Python ignores SIGPIPE and SIGXFSZ; the hook gets the defaults a shell would give it.
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGHUP, signal.SIGINT),
        )
    except OSError as error:
        _write_all(1, f"{notes}cannot start {command[0]!r}: {error}".encode())
        return EXIT_NOT_STARTED
    os.close(write_end)
    os.set_blocking(read_end, False)
    tail = bytearray(notes.encode())
    status = _supervise(hook, read_end, tail, cap)
    status = _end_tree(hook, status, read_end, tail, cap)
    _write_all(1, bytes(tail[-cap:] if cap else b""))
    return _exit_as(status)


def _prctl_setup(parent: int) -> str:
    """Become the subreaper of the hook's tree; SIGTERM here when the collector goes. A note when either fails."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        reaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        reaper = -1
    if os.getppid() != parent:  # the collector went before the death signal was set
        _on_term(signal.SIGTERM, None)
    if reaper != 0:
        return "sevents: cannot become a child subreaper; a hook's detached children may outlive it\n"
    return ""


def _supervise(hook: int, read_end: int, tail: bytearray, cap: int) -> int | None:
    """Keep the output's tail and reap whatever ends, until the hook exits (its wait status) or SIGTERM (None)."""
    status: int | None = None
    reading = True
    while status is None and not _stopping:
        if reading:
            ready, _, _ = select.select([read_end], [], [], STEP_S)
            if ready:
                reading = _read(read_end, tail, cap)
        else:
            time.sleep(STEP_S)
        status, _ = _reap(hook)
    return status


def _end_tree(hook: int, status: int | None, read_end: int, tail: bytearray, cap: int) -> int | None:
    """Kill every descendant left (the hook too, after SIGTERM) until none is; the hook's status if heard."""
    deadline = time.monotonic() + REAP_DEADLINE_S
    while time.monotonic() < deadline:
        for pid in descendants(os.getpid()):
            with contextlib.suppress(OSError):  # gone meanwhile, or not ours to kill (it changed its user)
                os.kill(pid, signal.SIGKILL)
        heard, children_left = _reap(hook)
        status = heard if status is None else status
        _read(read_end, tail, cap)
        if not children_left:
            break
        time.sleep(0.01)
    while _read(read_end, tail, cap):  # every writer is gone: the rest of the pipe, up to its end
        pass
    return status


def descendants(root: int) -> list[int]:
    """Every process below ``root`` as ``/proc`` shows it now (parents before their children)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:  # ended while listed
            continue
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _reap(hook: int) -> tuple[int | None, bool]:
    """Reap every child that has ended: the hook's wait status if it was one of them, and whether any is left."""
    status: int | None = None
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, False
        if pid == 0:
            return status, True
        if pid == hook:
            status = code


def _read(fd: int, tail: bytearray, cap: int) -> bool:
    """Append what the pipe holds to ``tail`` (kept to ``cap`` bytes); False at its end."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not chunk:
            return False
        tail += chunk
        if len(tail) > cap:
            del tail[: len(tail) - cap]


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _exit_as(status: int | None) -> int:
    """Exit with the hook's code, or die of its signal (the collector then sees -N, as with a direct child)."""
    if status is None:
        return 128 + signal.SIGKILL
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    number = os.WTERMSIG(status)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if number not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
        signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)
    return 128 + number


if __name__ == "__main__":
    sys.exit(main(sys.argv))
