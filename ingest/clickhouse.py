"""The ClickHouse edge: turn a ``--clickhouse`` target into a client, and name the errors that mean "not stored".

Targets: ``chdb:///abs/path`` (the embedded engine, one process per directory) or
``https://user@host:8443`` / ``http://user@host:8123`` (a server). The password never comes from the target
or a flag: it is read from ``SEVENTS_CLICKHOUSE_PASSWORD`` or from a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pwd
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlparse

import clickhouse_connect
from clickhouse_connect.driver.exceptions import ClickHouseError

from ingest.errors import TargetError
from ingest.readpath import ReadClient, ReadError, answering

# Anything the client raises when a statement was not (or not surely) carried out.
CLIENT_ERRORS: tuple[type[BaseException], ...] = (ClickHouseError, OSError, ReadError)

# ClickHouse error codes that depend on the inserted values, so the same rows fail the same way on any server at
# any time: retrying them would never end. Anything else (connection, timeout, memory, overload, a missing
# table) is the server's problem and is retried.
DATA_ERRORS: Final = {
    6: "CANNOT_PARSE_TEXT",
    25: "CANNOT_PARSE_ESCAPE_SEQUENCE",
    26: "CANNOT_PARSE_QUOTED_STRING",
    27: "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
    38: "CANNOT_PARSE_DATE",
    41: "CANNOT_PARSE_DATETIME",
    53: "TYPE_MISMATCH",
    69: "ARGUMENT_OUT_OF_BOUND",
    70: "CANNOT_CONVERT_TYPE",
    72: "CANNOT_PARSE_NUMBER",
    117: "INCORRECT_DATA",
    131: "TOO_LARGE_STRING_SIZE",
    153: "ILLEGAL_DIVISION",  # a materialized view dividing by a value of the row
    190: "SIZES_OF_ARRAYS_DONT_MATCH",
    321: "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
    349: "CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN",
    395: "FUNCTION_THROW_IF_VALUE_IS_NON_ZERO",  # throwIf in a constraint or a view, on a value of the row
    407: "DECIMAL_OVERFLOW",
    469: "VIOLATED_CONSTRAINT",
    691: "UNKNOWN_ELEMENT_OF_ENUM",
}
# 252 TOO_MANY_PARTS is both: "Too many parts" in a partition is the server behind on merges (retried), while
# "Too many partitions for single INSERT block" (max_partitions_per_insert_block) is a block whose rows span
# too many partitions, refused the same way every time: the rows must go in smaller blocks.
TOO_MANY_PARTS: Final = 252
_CODE: Final = re.compile(r"Code: (\d+)\.")
_PARTITIONS_PER_BLOCK: Final = re.compile(r"too many partitions for (a )?single insert block", re.IGNORECASE)


def error_code(error: BaseException) -> int | None:
    """ClickHouse's error code in ``error``'s text (``Code: 252. DB::Exception: ...``), None when there is none."""
    match = _CODE.search(str(error))
    return int(match.group(1)) if match else None


def about_the_data(error: BaseException) -> bool:
    """Whether ClickHouse refused the inserted rows themselves (the same rows fail again anywhere), not the
    server or the network failing (which a retry may get past)."""
    code = error_code(error)
    if code == TOO_MANY_PARTS:
        return _PARTITIONS_PER_BLOCK.search(str(error)) is not None
    return code in DATA_ERRORS


log = logging.getLogger(__name__)

PASSWORD_ENV = "SEVENTS_CLICKHOUSE_PASSWORD"  # noqa: S105 -- a variable name, not a password

# Every embedded client ``connect`` opened and not yet garbage: ``close_embedded`` closes them before exit.
_EMBEDDED: weakref.WeakSet[Any] = weakref.WeakSet()


def target_problems(target: str) -> list[str]:
    """What is wrong with a ``--clickhouse`` value (empty when it is usable)."""
    parsed = urlparse(target)
    if parsed.scheme == "chdb":
        if parsed.netloc or not parsed.path.startswith("/"):
            return [f"clickhouse target {target!r}: use chdb:///absolute/path for the embedded engine"]
        return []
    if parsed.scheme in ("http", "https"):
        if parsed.password is not None:
            return ["clickhouse target must not contain a password: use SEVENTS_CLICKHOUSE_PASSWORD or a file"]
        if not parsed.hostname:
            return [f"clickhouse target {target!r} has no host"]
        return []
    return [f"clickhouse target {target!r}: expected chdb:///path or https://user@host:8443"]


def is_embedded(target: str) -> bool:
    return target.startswith("chdb:")


def read_password(env: Mapping[str, str], password_file: Path | None) -> str:
    """The server password from the environment, else from the file (first line), else empty."""
    if env.get(PASSWORD_ENV):
        return env[PASSWORD_ENV]
    if password_file is not None:
        try:
            return password_file.read_text(encoding="utf-8").splitlines()[0].strip()
        except (OSError, IndexError) as error:
            raise TargetError(f"cannot read the ClickHouse password file {password_file}: {error}") from error
    return ""


def connect(target: str, *, password: str = "", settings: Mapping[str, Any] | None = None, create: bool = True) -> Any:
    """A clickhouse-connect client for ``target``; raises TargetError with a readable reason.

    ``create=False`` (commands that only read): an embedded directory that does not exist is an error, not
    created empty.
    """
    problems = target_problems(target)
    if problems:
        raise TargetError("; ".join(problems))
    parsed = urlparse(target)
    if parsed.scheme == "chdb":
        directory = Path(parsed.path)
        if not create and not directory.is_dir():
            raise TargetError(
                f"no embedded ClickHouse at {parsed.path}: nothing was ingested there (sevents-ingest migrate or "
                "run creates it), or the path is mistyped"
            )
        if not create and _locked(directory) and answering(directory):
            return ReadClient(directory)  # a running ingest holds it: ask it (ingest.readpath)
        if _held_elsewhere(directory):
            # Said here, before the engine is asked: it would print its raw "Cannot lock file" on stderr.
            raise TargetError(_in_use(parsed.path))
        problem = _directory_problem(directory, create=create)
        if problem:
            raise TargetError(problem)
    try:
        if parsed.scheme == "chdb":
            client = clickhouse_connect.get_client(dsn=f"chdb://{parsed.path}", settings=dict(settings or {}))
            _EMBEDDED.add(client)
            return client
        return clickhouse_connect.get_client(
            host=parsed.hostname,
            port=parsed.port or (8443 if parsed.scheme == "https" else 8123),
            username=unquote(parsed.username or "default"),
            password=password,
            secure=parsed.scheme == "https",
            settings=dict(settings or {}),
            # no session: partitions insert concurrently, and a session takes one query at a time
            autogenerate_session_id=False,
        )
    except CLIENT_ERRORS as error:
        text = str(error)
        if parsed.scheme == "chdb" and (_locked(Path(parsed.path)) or "already running" in text):
            raise TargetError(_in_use(parsed.path)) from error
        if parsed.scheme == "chdb" and "BAD_ARGUMENTS" in text:
            # the engine's way of saying it could not start on the directory, whatever the cause
            raise TargetError(
                f"cannot open the embedded ClickHouse directory {parsed.path}: the engine could not start there; "
                f"check that the directory and everything in it are writable by user {_user()}"
            ) from error
        raise TargetError(f"cannot connect to ClickHouse at {_safe(target)}: {text}") from error


def close_embedded() -> int:
    """Close every embedded client still open; returns how many. Each close waits for its query in flight.

    The embedded engine shuts down when its last client closes. Left open at interpreter exit, it is torn down
    by the engine's static destructors while its worker threads still run, which now and then kills the process
    with SIGSEGV after its work is done (and its exit code is then lost). A thread that queries afterwards gets
    the client's "closed" error instead of a half-destroyed engine.
    """
    clients = list(_EMBEDDED)
    for client in clients:
        client.close()
        _EMBEDDED.discard(client)
    return len(clients)


def as_command(main: Callable[[], int]) -> Callable[[], int]:
    """``main`` as the whole process (a console script): the embedded clients it leaves open are closed after it
    returns or raises, before the interpreter exits (``close_embedded``)."""

    def command() -> int:
        try:
            return main()
        finally:
            closed = close_embedded()
            log.debug("embedded clients closed before exit", extra={"clients": closed})

    return command


def connect_waiting(
    target: str,
    stop: threading.Event,
    *,
    password: str = "",
    lock_wait: float = 300.0,
    report_every: float = 10.0,
    settings: Mapping[str, Any] | None = None,
) -> Any:
    """``connect``, but an embedded directory held by another process is waited for instead of failing.

    A restarted ingest often starts while the old one is still shutting down (or a one-off ``audit`` holds the
    directory): waiting up to ``lock_wait`` seconds, or until ``stop``, spares a supervisor's restart loop. A
    clear message repeats every ``report_every`` seconds so nobody wonders why nothing happens. Other errors,
    and servers, fail at once as with ``connect``.
    """
    started = time.monotonic()
    reported = 0.0
    while True:
        try:
            return connect(target, password=password, settings=settings)
        except TargetError:
            waited = time.monotonic() - started
            if not (is_embedded(target) and _locked(Path(urlparse(target).path))) or waited >= lock_wait:
                raise
            if stop.is_set():
                raise TargetError(f"stopped while waiting for the embedded ClickHouse directory {target}") from None
            if waited >= reported:
                log.warning(
                    "the embedded ClickHouse directory is locked by another process (another sevents-ingest?); "
                    "waiting for it",
                    extra={"directory": urlparse(target).path, "waited_s": round(waited), "lock_wait_s": lock_wait},
                )
                reported = waited + report_every
            stop.wait(min(1.0, max(0.0, lock_wait - waited)))


def _in_use(directory: str) -> str:
    return (
        f"the embedded ClickHouse directory {directory} is open in another process "
        "(a running sevents-ingest?): stop it first, or query a ClickHouse server"
    )


def _directory_problem(directory: Path, *, create: bool) -> str | None:
    """Why the embedded engine could not open ``directory``, said in one line naming the path and what is missing
    (the engine itself would say "BAD_ARGUMENTS"); None when nothing is seen wrong. With ``create``, a missing
    directory is made (and a failure to make it is the problem)."""
    user = _user()
    try:
        if create:
            directory.mkdir(parents=True, exist_ok=True)
        if not directory.is_dir():
            return f"the embedded ClickHouse path {directory} is not a directory"
    except FileExistsError:
        return f"the embedded ClickHouse path {directory} exists and is not a directory"
    except NotADirectoryError:
        blocking = next((p for p in directory.parents if p.exists() and not p.is_dir()), directory)
        return f"cannot create the embedded ClickHouse directory {directory}: {blocking} is a file, not a directory"
    except OSError as error:
        where = error.filename or directory
        return (
            f"cannot create the embedded ClickHouse directory {directory}: user {user} cannot create {where} "
            f"({error.strerror})"
        )
    status = directory / "status"  # the engine's lock file: the first thing it opens, for writing
    try:
        with status.open("a"):  # made if missing, as the engine would at once
            pass
    except OSError as error:
        return (
            f"cannot open the embedded ClickHouse directory {directory}: user {user} cannot write {status} "
            f"({error.strerror}); the directory and everything in it must be writable by that user"
        )
    return None


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except (KeyError, OSError):
        return str(os.geteuid())


def _held_elsewhere(directory: Path) -> bool:
    """Whether another process holds the engine's lock on ``directory``. One held by this very process is not
    (a second client here shares its engine)."""
    return _locked(directory) and not _open_here(directory / "status")


def _open_here(path: Path) -> bool:
    """Whether this process has ``path`` open (the engine keeps its lock file open); True when it cannot tell,
    so the engine decides."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        return True
    wanted = os.path.realpath(path)
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd) == wanted:
                return True
    return False


def _locked(directory: Path) -> bool:
    """Whether another process holds the embedded engine's lock on ``directory`` (its ``status`` file)."""
    status = directory / "status"
    if not status.is_file():
        return False
    try:
        with status.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


def _safe(target: str) -> str:
    parsed = urlparse(target)
    if parsed.scheme == "chdb":
        return target
    # host:port without the user or password: which server was meant, and nothing secret
    host = parsed.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parsed.port is not None:
        netloc += f":{parsed.port}"
    return parsed._replace(netloc=netloc, query="", fragment="").geturl()
