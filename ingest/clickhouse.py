"""The ClickHouse edge: turn a ``--clickhouse`` target into a client, and name the errors that mean "not stored".

Targets: ``chdb:///abs/path`` (the embedded engine, one process per directory) or
``https://user@host:8443`` / ``http://user@host:8123`` (a server). The password never comes from the target
or a flag: it is read from ``SEVENTS_CLICKHOUSE_PASSWORD`` or from a file.
"""

from __future__ import annotations

import fcntl
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import clickhouse_connect
from clickhouse_connect.driver.exceptions import ClickHouseError

from ingest.errors import TargetError

# Anything the client raises when a statement was not (or not surely) carried out.
CLIENT_ERRORS: tuple[type[BaseException], ...] = (ClickHouseError, OSError)

log = logging.getLogger(__name__)

PASSWORD_ENV = "SEVENTS_CLICKHOUSE_PASSWORD"  # noqa: S105 -- a variable name, not a password


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


def connect(target: str, *, password: str = "", settings: Mapping[str, Any] | None = None) -> Any:
    """A clickhouse-connect client for ``target``; raises TargetError with a readable reason."""
    problems = target_problems(target)
    if problems:
        raise TargetError("; ".join(problems))
    parsed = urlparse(target)
    try:
        if parsed.scheme == "chdb":
            Path(parsed.path).mkdir(parents=True, exist_ok=True)
            return clickhouse_connect.get_client(dsn=f"chdb://{parsed.path}", settings=dict(settings or {}))
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
            raise TargetError(
                f"the embedded ClickHouse directory {parsed.path} is open in another process "
                "(a running sevents-ingest?): stop it first, or query a ClickHouse server"
            ) from error
        raise TargetError(f"cannot connect to ClickHouse at {_safe(target)}: {text}") from error


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
