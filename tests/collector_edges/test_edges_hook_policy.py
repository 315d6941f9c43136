"""Hook settings of the policy through the real collector: hook_env, the output cap and log_hook_output."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from collector.approval import ApprovalPolicy
from collector.hooks import run_hook
from collector.settings import CollectorSettings
from collector.wiring import build_agent
from tests.collector_edges.fake_imds import FakeImds, event
from tests.collector_edges.test_edges_hook_isolation import SECRETS


def test_a_covered_events_hook_sees_no_secret_but_what_the_operator_lists(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real collector: every secret set at once, the pre-hook's environment holds none of them, its
    event fields, and the one name the operator listed in hook_env."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DRAIN_ENDPOINT", "http://127.0.0.1:9/drain")
    dump = tmp_path / "env.json"
    code = f"import json, os; open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))"
    policy = ApprovalPolicy(
        enabled=True, event_types=("Reboot",), pre_hook=(sys.executable, "-c", code), hook_env=("DRAIN_ENDPOINT",)
    )
    imds.set_document(1, [event("E1")])
    agent = build_agent(settings, approval=policy)
    try:
        agent.poll_once()
    finally:
        agent.close()
    seen = json.loads(dump.read_text())
    leaked = [name for name, value in SECRETS.items() if name in seen or any(value in v for v in seen.values())]
    assert leaked == []
    assert seen["DRAIN_ENDPOINT"] == "http://127.0.0.1:9/drain"
    assert seen["SEVENTS_EVENT_ID"] == "E1" and seen["SEVENTS_PHASE"] == "pre" and seen["SEVENTS_VM_NAME"] == "web-0"
    assert imds.approved() == ["E1"]


def test_a_hooks_output_is_capped_and_kept_out_of_the_log_unless_asked(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A failing hook printing 1 MB: the collector keeps hook_output_bytes of its tail; the log has its exit code
    and size only, and the output itself once log_hook_output = true."""
    code = "import sys; sys.stdout.write('A' * 2**20 + 'TOKEN-PRINTED-BY-THE-HOOK'); sys.exit(3)"
    direct = run_hook((sys.executable, "-c", code), {}, timeout_s=30, stop=threading.Event(), output_bytes=64)
    assert direct.exit_code == 3 and len(direct.output) == 64 and direct.output.endswith("TOKEN-PRINTED-BY-THE-HOOK")
    policy = ApprovalPolicy(enabled=True, event_types=("Reboot",), pre_hook=(sys.executable, "-c", code))

    def logged(policy: ApprovalPolicy, state: str, event_id: str) -> list[logging.LogRecord]:
        imds.set_document(int(time.time()), [event(event_id)])
        caplog.clear()
        agent = build_agent(replace(settings, state_dir=tmp_path / state), approval=policy)
        try:
            with caplog.at_level(logging.INFO, logger="collector.approver"):
                agent.poll_once()
        finally:
            agent.close()
        return [r for r in caplog.records if r.getMessage().startswith("hook failed")]

    (quiet,) = logged(policy, "quiet", "E1")
    assert "TOKEN-PRINTED-BY-THE-HOOK" not in json.dumps(quiet.__dict__, default=str)
    assert quiet.__dict__["exit_code"] == 3 and quiet.__dict__["output_chars"] == 4096
    (loud,) = logged(replace(policy, log_hook_output=True, hook_output_bytes=100), "loud", "E2")
    assert loud.__dict__["output"] == ("A" * 75 + "TOKEN-PRINTED-BY-THE-HOOK")
    assert imds.approved() == []
