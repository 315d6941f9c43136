"""The collector's composition root: settings (and the seams tests replace) -> a ``Collector`` ready to run.

Everything that touches the outside world is built here, in dependency order, each part complete when built
(every callback passed to its constructor: nothing is set on a part afterwards), and released again should a
later step fail: in-process callers (the demo) may retry, and a leaked state-dir lock would refuse them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

from collector.agent import COLLECTOR_VERSION, Agent, AgentError, Parts, Records, utc_now
from collector.approval import ApprovalPolicy
from collector.approver import Approver, first_start_notice
from collector.dhcp import resolve_base_url
from collector.downtime import reboot
from collector.downtime_ledger import DowntimeLedger, RebootProof
from collector.fetch import Connections
from collector.health import PollHealth
from collector.imds import ImdsClient
from collector.imds_policy import ImdsPolicy
from collector.instance import InstanceCache, fallback_identity
from collector.liveness import AliveFile, Ticker, load_alive, read_boot_id, running_since
from collector.metrics import CollectorMetrics
from collector.outbox import Outbox, OutboxIOError
from collector.outbox_gauges import show_outbox
from collector.process import Collector
from collector.settings import CollectorSettings
from collector.ship import Shipper, Sink, make_sink
from collector.statedir import StateDirInUse, keep_ballast, load_snapshot, lock_state_dir, release_ballast
from collector.webhook import Webhook
from sevents.retry import Backoff


def build_agent(
    settings: CollectorSettings,
    *,
    connections: Connections | None = None,
    clock: Callable[[], datetime] = utc_now,
    meter_provider: MeterProvider | None = None,
    sink: Sink | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    approval: ApprovalPolicy | None = None,
) -> Collector:
    """A Collector for ``settings``; ``sink`` replaces the one the settings name (None: as configured).

    ``approval`` is the policy of the config file's ``[approval]`` table (``settings.load_approval``); None or a
    policy that is off approves nothing.
    """
    lock_fd = _lock(settings)
    with contextlib.ExitStack() as undo:
        undo.callback(os.close, lock_fd)
        # No per-collector label: the scrape's target labels tell VMs and pods apart (collector/metrics.py).
        metrics = CollectorMetrics(meter_provider or NoOpMeterProvider())
        health = PollHealth(metrics)  # what a heartbeat reports: the client, webhook and approver count into it
        outbox = _open_outbox(settings)
        undo.callback(outbox.close)
        first_start_notice(outbox, approval or ApprovalPolicy())  # polling turns Scheduled Events on: say so once
        client = ImdsClient(
            resolve_base_url(settings.imds_url, discover=settings.discover_endpoint, globs=settings.dhcp_lease_globs),
            api_version=settings.api_version,
            instance_api_version=settings.instance_api_version,
            connections=connections,
            policy=imds_policy(settings),
            monotonic=monotonic,
            on_error=health.fault,
        )
        undo.callback(client.close)
        metrics.build(version=_version, api_version=lambda: client.api_version)
        instance = InstanceCache(
            client,
            fallback=fallback_identity(settings.state_dir),
            refresh_s=settings.instance_refresh,
            store=outbox,
            monotonic=monotonic,
        )
        boot_id = read_boot_id(settings.boot_id_file)
        last_alive = load_alive(settings.state_dir)
        alive = AliveFile(settings.state_dir, boot_id)
        undo.callback(alive.close)
        snapshot = load_snapshot(outbox)
        rebooted = reboot(last_alive, boot_id, running_since(last_alive, clock()))
        ledger = DowntimeLedger(snapshot, rebooted=rebooted, collector_version=COLLECTOR_VERSION, on_fault=health.fault)
        ticker = Ticker(
            period_s=settings.tick_interval, pause_min_s=settings.pause_min, clock=clock, on_pause=ledger.seen
        )
        proof = RebootProof(alive, ticker.keep_alive_file, rebooted=rebooted is not None)
        chosen = sink if sink is not None else make_sink(settings)
        figures = functools.partial(show_outbox, metrics, outbox)
        shipper = None if chosen is None else _shipper(settings, outbox, chosen, metrics, sink is None, figures)
        webhook = _webhook(settings, metrics, health)
        approver = _approver(approval, client, outbox, clock, metrics, health)
        agent = Agent(
            Parts(
                settings=settings,
                outbox=outbox,
                client=client,
                instance=instance,
                snapshot=snapshot,
                metrics=metrics,
                health=health,
                ledger=ledger,
                clock=clock,
                approver=approver,
                on_commit=_on_commit(proof, shipper, webhook),
            )
        )
        collector = Collector(
            agent,
            lock_fd=lock_fd,
            sink=chosen,
            shipper=shipper,
            ticker=ticker,
            alive=alive,
            webhook=webhook,
            approver=approver,
            monotonic=monotonic,
        )
        if settings.metrics_addr:  # the /metrics listener's /healthz and /readyz report on this agent
            from collector.probes import watch

            watch(agent)
        undo.pop_all()
    return collector


def _on_commit(
    proof: RebootProof, shipper: Shipper | None, webhook: Webhook | None
) -> Sequence[Callable[[Records], None]]:
    """Who hears of each commit, in order: the alive file's keeper, the shipper (ships now), the webhook."""
    listeners: list[Callable[[Records], None]] = [lambda records: proof.stored()]
    if shipper is not None:
        listeners.append(lambda records: shipper.wake())
    if webhook is not None:
        listeners.append(webhook.notify)
    return listeners


def _approver(
    policy: ApprovalPolicy | None,
    client: ImdsClient,
    outbox: Outbox,
    clock: Callable[[], datetime],
    metrics: CollectorMetrics,
    health: PollHealth,
) -> Approver | None:
    if policy is None or not policy.enabled:
        return None
    return Approver(
        policy,
        client,
        outbox,
        clock=clock,
        collector_version=COLLECTOR_VERSION,
        on_fault=health.fault,
        on_decision=metrics.approval_decision,
        on_hook=metrics.hook_run,
    )


def _version() -> str:
    """The version build_info shows: the installed distribution's (read at the first export, never without one)."""
    from sevents.version import version

    return version()


def imds_policy(settings: CollectorSettings) -> ImdsPolicy:
    """The IMDS client's timeouts, pacing and retry, from the settings."""
    return ImdsPolicy(
        first_call_timeout_s=settings.first_call_timeout,
        read_timeout_s=settings.request_timeout,
        min_interval_s=settings.min_request_interval,
        deadline_s=settings.retry_deadline,
        retry_newer_after_s=settings.api_version_retry,
        backoff=Backoff(initial=0.5, cap=10.0),
    )


def _lock(settings: CollectorSettings) -> int:
    try:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        return lock_state_dir(settings.state_dir)
    except StateDirInUse as error:
        raise AgentError(str(error)) from error
    except OSError as error:
        raise AgentError(f"cannot use state directory {settings.state_dir}: {error.strerror or error}") from error


def _open_outbox(settings: CollectorSettings) -> Outbox:
    """The outbox; on a full disk, once more after releasing the state dir's ballast (see statedir)."""
    try:
        outbox = Outbox(settings.outbox_path, max_bytes=settings.outbox_max_bytes)
    except OutboxIOError:
        if not release_ballast(settings.state_dir):
            raise
        outbox = Outbox(settings.outbox_path, max_bytes=settings.outbox_max_bytes)
    keep_ballast(settings.state_dir)
    return outbox


def _webhook(settings: CollectorSettings, metrics: CollectorMetrics, health: PollHealth) -> Webhook | None:
    if not settings.webhook_url:
        return None
    metrics.webhook_ready()
    return Webhook(
        settings.webhook_url,
        settings.webhook_event_types,
        timeout_s=settings.webhook_timeout,
        fmt=settings.webhook_format,
        on_drop=health.fault,  # shown in the heartbeat's error counts
        on_post=metrics.webhook_post,
    )


def _shipper(
    settings: CollectorSettings,
    outbox: Outbox,
    sink: Sink,
    metrics: CollectorMetrics,
    configured: bool,
    on_shipped: Callable[[], None],
) -> Shipper:
    # The ``sink`` label: the configured sink's name, or the class of one a caller passed in.
    name = settings.sink if configured else type(sink).__name__
    metrics.sink_ready(name)
    return Shipper(
        outbox,
        sink,
        batch=settings.ship_batch,
        max_wait_s=settings.ship_max_wait,
        on_shipped=lambda n: on_shipped(),  # the outbox's figures changed
        on_sent=lambda n: metrics.sink_sent(name, n),
        on_failed=lambda reason: metrics.sink_failed(name, reason),
    )
