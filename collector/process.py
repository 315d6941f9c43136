"""One collector process: the poll step driven by a loop, its worker threads, the drain at the end, the release.

``Collector.run(stop)`` polls every ``poll_interval`` with a heartbeat every ``heartbeat_interval`` until
``stop``, while workers refresh the instance metadata, ship the outbox, post to the webhook, act on approvals
and tick (pauses, the alive file). A clean stop stores the downtimes measured since the last poll, then writes
the final heartbeat. ``flush(timeout)`` ships what is pending; ``shutdown(timeout)`` drains for
up to ``timeout`` and releases every part; both return the rows left. ``collector.wiring.build_agent`` builds it;
the demo runs dozens in one process, ``sevents-collector run`` one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from collector.agent import Agent
from collector.approver import Approver
from collector.decode import DecodeError
from collector.health import PollHealth
from collector.imds import ImdsClient, ImdsError, ImdsInterrupted
from collector.instance import InstanceCache
from collector.liveness import AliveFile, Ticker
from collector.outbox import Outbox, OutboxError
from collector.settings import CollectorSettings
from collector.ship import Shipper, Sink
from collector.webhook import Webhook

# The collector's log lines keep the one logger name they always had (collector.health does the same).
log = logging.getLogger("collector.agent")
JOIN_S = 5.0  # how long each worker thread gets to see the stop


class Collector:
    """The process around one ``Agent``: ``run(stop)``, ``flush(timeout)``, ``shutdown(timeout)`` (or ``close()``)."""

    def __init__(
        self,
        agent: Agent,
        *,
        lock_fd: int,
        sink: Sink | None,
        shipper: Shipper | None,
        ticker: Ticker,
        alive: AliveFile,
        webhook: Webhook | None = None,
        approver: Approver | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.agent = agent
        self.sink = sink
        self._lock_fd, self._shipper, self._ticker, self._alive = lock_fd, shipper, ticker, alive
        self._webhook, self._approver = webhook, approver
        self._monotonic = monotonic

    # What callers read of the poll step (``sevents-collector once``, the demo, the harnesses).
    @property
    def settings(self) -> CollectorSettings:
        return self.agent.settings

    @property
    def outbox(self) -> Outbox:
        return self.agent.outbox

    @property
    def client(self) -> ImdsClient:
        return self.agent.client

    @property
    def instance(self) -> InstanceCache:
        return self.agent.instance

    @property
    def health(self) -> PollHealth:
        return self.agent.health

    @property
    def polls(self) -> int:
        """Polls made since start."""
        return self.agent.polls

    @property
    def last_poll_ok(self) -> bool:
        """Whether the last poll read a document and committed its changes."""
        return self.agent.last_poll_ok

    def poll_once(self, stop: threading.Event | None = None) -> list[dict[str, Any]]:
        """One poll without the loop (``once``, harnesses): see ``Agent.poll_once``."""
        return self.agent.poll_once(stop)

    def heartbeat(self, *, final: bool = False) -> dict[str, Any] | None:
        """Commit one heartbeat record: see ``Agent.heartbeat``."""
        return self.agent.heartbeat(final=final)

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Poll and beat until ``stop`` (or a worker fails: raised here); on a clean stop, store the downtimes
        measured since the last poll and beat a final time; then drain for ``drain_timeout``."""
        shipper_stop = threading.Event()
        failure: list[BaseException] = []
        ticking = _start(self._ticker.run, stop, "collector-ticker")
        threads = [ticking, *self._start_workers(stop, shipper_stop, failure)]
        log.info(
            "collector started",
            extra={
                "imds_url": self.client.base_url,
                "state_dir": str(self.settings.state_dir),
                "sink": self.settings.sink,
            },
        )
        try:
            self._loop(stop)
            if not failure:  # a clean stop (signal): say so before the drain below ships it
                ticking.join(timeout=JOIN_S)  # its last tick finds a pause the stop came at the end of
                self._store_downtimes()
                self.agent.heartbeat(final=True)
        finally:
            shipper_stop.set()
            if self._approver is not None:
                self._approver.wake()  # its thread sees stop now rather than at its next wait's end
            for thread in threads:
                thread.join(timeout=JOIN_S)
            if self._shipper is not None and not failure:
                self._shipper.flush(self.settings.drain_timeout)
        if failure:
            raise failure[0]
        log.info("collector stopped", extra={"polls": self.health.polls, "outbox_depth": self.outbox.depth()})

    def _loop(self, stop: threading.Event) -> None:
        next_heartbeat = self._monotonic()
        self._await_identity(stop)
        while not stop.is_set():
            tick = self._monotonic()
            if not self._poll_guarded(stop):
                return
            if self._monotonic() >= next_heartbeat:
                self._heartbeat_guarded()
                next_heartbeat = self._monotonic() + self.settings.heartbeat_interval
            stop.wait(max(0.0, tick + self.settings.poll_interval - self._monotonic()))

    def _await_identity(self, stop: threading.Event) -> None:
        """Before the first poll, if the identity is not known yet, wait for the instance worker up to
        ``request_timeout`` (it retries within it), so that a VM whose instance metadata fails once, or answers
        slowly under load, does not record its first events as the stand-in. Events stay in the document for
        minutes, so the wait misses none; past it, the polls go on as the stand-in until the identity is known
        (``Agent._baseline`` then closes the stand-in's records)."""
        deadline = self._monotonic() + self.settings.request_timeout
        known = self.instance.known
        while not known.wait(0.05) and not stop.is_set() and self._monotonic() < deadline:
            pass

    def _poll_guarded(self, stop: threading.Event) -> bool:
        """One poll whatever happens in it; False once shutdown interrupted it."""
        try:
            self.agent.poll_once(stop, refresh_identity=False)  # the instance worker keeps the identity fresh
        except ImdsInterrupted:
            return False
        except (ImdsError, DecodeError):
            pass  # counted and logged; the next tick polls again
        except Exception as error:
            self.health.fault("internal")
            self.health.failed("internal", error)
            log.exception("poll failed unexpectedly")
        return True

    def _store_downtimes(self) -> None:
        """Store the downtimes no poll has stored yet, which the process would take with it: by one more poll, for
        a real read after them (its moment, the event Started across them), or without a read if it fails.

        ``stop`` would end that poll at once, so it runs under its own bound: ``request_timeout``, the time IMDS
        has to answer, whatever the client's first-call timeout and retry deadline would allow."""
        held = self.agent.downtimes_held()
        if not held:
            return
        bound = threading.Event()
        timer = threading.Timer(self.settings.request_timeout, bound.set)
        timer.daemon = True
        timer.start()
        try:
            self._poll_guarded(bound)
        finally:
            timer.cancel()
        unread = self.agent.downtimes_held()  # what that poll did not store: no answer in time, or none decoded
        if not unread or self.agent.store_downtimes():  # a refused commit is logged as such by the agent
            log.info("downtime stored at stop", extra={"downtimes": held, "read_imds": not unread})

    def _heartbeat_guarded(self) -> None:
        try:
            self.agent.heartbeat()
        except OutboxError as error:
            self.health.fault("outbox_error")
            log.error("heartbeat not stored", extra={"error": str(error)})

    def _start_workers(
        self, stop: threading.Event, shipper_stop: threading.Event, failure: list[BaseException]
    ) -> list[threading.Thread]:
        workers = [_start(self.instance.run, stop, "collector-instance")]
        if self._webhook is not None:
            # stops with the shipper, after the last poll: what the last commits queued is still sent
            workers.append(_start(self._webhook.run, shipper_stop, "collector-webhook"))
        if self._approver is not None and self._approver.policy.enabled:
            workers.append(_start(self._approver.run, stop, "collector-approver"))
        shipper = self._shipper
        if shipper is None:
            return workers

        def ship(shipper_stop: threading.Event) -> None:
            try:
                shipper.run(shipper_stop)
            except BaseException as error:
                log.critical("shipper failed", exc_info=True)
                failure.append(error)
                stop.set()

        return [*workers, _start(ship, shipper_stop, "collector-shipper")]

    # -- the end -----------------------------------------------------------------------------------------
    def flush(self, timeout: float) -> int:
        """Ship what is pending for up to ``timeout`` seconds (no-op for the local sink); rows left."""
        if self._shipper is not None:
            self._shipper.flush(timeout)
        return self.outbox.depth()

    def shutdown(self, timeout: float) -> int:
        """Drain for up to ``timeout`` seconds, then release every part (``close``); the rows left in the outbox."""
        try:
            return self._shipper.shutdown(timeout) if self._shipper is not None else self.outbox.depth()
        finally:
            self._release()

    def close(self) -> None:
        """Release the sink, the outbox, the HTTP connections and the state-dir lock; say what was not shipped."""
        try:
            if self._shipper is not None:
                self._shipper.shutdown(0.0)
        finally:
            self._release()

    def _release(self) -> None:
        self.client.close()
        self.outbox.close()
        self._alive.close()
        os.close(self._lock_fd)


def _start(target: Callable[[threading.Event], None], stop: threading.Event, name: str) -> threading.Thread:
    thread = threading.Thread(target=target, args=(stop,), name=name, daemon=True)
    thread.start()
    return thread
