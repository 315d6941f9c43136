"""Collector settings and instance metadata parsing: layering, every problem listed, identity fields."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.instance import identity_from_json, identity_to_json, parse_instance
from collector.model import VmIdentity
from collector.settings import load_approval, load_settings
from sevents.errors import ConfigError
from tests.collector_edges.fake_imds import INSTANCE, FakeImds, event

BIN = Path(sys.executable).parent


def test_layers_file_env_flags(tmp_path: Path) -> None:
    """A flag beats the environment, which beats the [collector] table of the file."""
    config = tmp_path / "collector.toml"
    config.write_text('[collector]\npoll_interval = 2.0\nheartbeat_interval = 30\nimds_url = "http://10.0.0.1"\n')
    env = {"SEVENTS_HEARTBEAT_INTERVAL": "45", "SEVENTS_IMDS_URL": "http://10.0.0.2"}
    s = load_settings(file=config, env=env, flags={"imds_url": "http://10.0.0.3"})
    assert (s.poll_interval, s.heartbeat_interval, s.imds_url) == (2.0, 45.0, "http://10.0.0.3")
    assert s.outbox_path == s.state_dir / "outbox.sqlite"


def test_every_problem_is_listed(tmp_path: Path) -> None:
    """Several bad values produce one ConfigError naming each of them."""
    env = {"SEVENTS_POLL_INTERVAL": "fast", "SEVENTS_SINK": "kafka", "SEVENTS_API_VERSION": "2021-01-01"}
    with pytest.raises(ConfigError) as caught:
        load_settings(env=env, flags={"imds_url": "https://169.254.169.254", "heartbeat_interval": "0"})
    text = str(caught.value)
    assert "SEVENTS_POLL_INTERVAL" in text
    # Conversion problems stop before validation; fix them and the rest is listed together.
    with pytest.raises(ConfigError) as caught:
        load_settings(
            env={"SEVENTS_SINK": "kafka", "SEVENTS_API_VERSION": "2021-01-01"}, flags={"imds_url": "https://x"}
        )
    problems = caught.value.problems
    assert any("sink" in p for p in problems)
    assert any("api_version" in p for p in problems)
    assert any("imds_url" in p for p in problems)
    assert len(problems) == 3


def test_eventhubs_needs_a_destination() -> None:
    """sink = eventhubs without namespace, name or connection string lists both missing pieces."""
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"SEVENTS_SINK": "eventhubs"})
    assert len(caught.value.problems) == 2
    secret = "Endpoint=sb://x/;SharedAccessKeyName=send;SharedAccessKey=c2VjcmV0;EntityPath=hub"
    ok = load_settings(env={"SEVENTS_SINK": "eventhubs", "SEVENTS_EVENTHUBS_CONNECTION_STRING": secret})
    assert ok.connection_string() == secret
    assert "Endpoint" not in repr(ok)


def test_a_connection_string_file_is_checked_like_the_environment_variable(tmp_path: Path) -> None:
    """A file holding something else is refused at start, naming the file, never its content."""
    file = tmp_path / "eventhubs.secret"
    file.write_text("Endpoint=junk-c2VjcmV0\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(
            env={"SEVENTS_SINK": "eventhubs", "SEVENTS_EVENTHUBS_NAME": "hub"},
            flags={"eventhubs_connection_string_file": str(file)},
        )
    message = str(caught.value)
    assert f"eventhubs_connection_string_file {file} is not an Event Hubs connection string" in message
    assert "c2VjcmV0" not in message
    with pytest.raises(ConfigError) as env_caught:
        load_settings(
            env={
                "SEVENTS_SINK": "eventhubs",
                "SEVENTS_EVENTHUBS_NAME": "hub",
                "SEVENTS_EVENTHUBS_CONNECTION_STRING": "Endpoint=junk-c2VjcmV0",
            }
        )
    assert "SEVENTS_EVENTHUBS_CONNECTION_STRING is not an Event Hubs connection string" in str(env_caught.value)


def test_every_problem_of_a_config_file_in_one_message_with_hints(tmp_path: Path) -> None:
    """A misspelt key, a fraction where a whole number goes (it used to be cut to 2) and a near-miss value are all
    named at once, each with a "did you mean" where one is close."""
    config = tmp_path / "collector.toml"
    config.write_text('[collector]\nship_batch = 2.7\npoll_intervl = 3\nsink = "eventhub"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(file=config, env={})
    problems = caught.value.problems
    assert len(problems) == 3, problems
    assert any("unknown setting 'poll_intervl'; did you mean 'poll_interval'?" in p for p in problems)
    assert any("ship_batch: expected an integer, got 2.7" in p for p in problems)
    assert any("got 'eventhub'; did you mean 'eventhubs'?" in p for p in problems)
    config.write_text("[collector]\nship_batch = 200.0\n")
    assert load_settings(file=config, env={}).ship_batch == 200  # a whole number written with a point is fine


def test_connection_string_never_from_flags() -> None:
    """A connection string passed as a flag is ignored (secrets stay off command lines)."""
    s = load_settings(env={}, flags={"eventhubs_connection_string": "Endpoint=sb://leak/"})
    assert s.eventhubs_connection_string == ""


def test_parse_instance_reads_every_identity_field() -> None:
    """An instance metadata document maps to every VmIdentity field, domains as integers."""
    vm = parse_instance(json.dumps(INSTANCE).encode())
    assert vm == VmIdentity(
        vm_id="02aab8a4-74ef-476e-8182-f6d2ba4166a6",
        vm_name="web-0",
        location="westeurope",
        subscription_id="8d10da13-8125-4ba9-a717-bf7490507b3d",
        resource_group="rg-web",
        resource_id=INSTANCE["compute"]["resourceId"],
        zone="2",
        fault_domain=1,
        update_domain=4,
        scale_set="",
    )
    assert identity_from_json(identity_to_json(vm)) == vm


def test_parse_instance_old_versions() -> None:
    """An old (2017-03-01) document without domains, zone or resource id still yields an identity."""
    vm = parse_instance(b'{"compute": {"vmId": "abc", "name": "old", "location": "eastus"}}')
    assert (vm.vm_id, vm.fault_domain, vm.zone, vm.resource_id) == ("abc", None, "", "")


@given(st.binary())
def test_parse_instance_raises_only_value_error(body: bytes) -> None:
    """Arbitrary bytes either parse to an identity with a vmId or raise ValueError, nothing else."""
    with contextlib.suppress(ValueError):
        assert parse_instance(body).vm_id


def test_parse_instance_odd_domain_numbers_do_not_cost_the_identity() -> None:
    """A fault domain written with a non-ASCII digit that int() refuses ("²") reads as unknown; the rest stays."""
    vm = parse_instance(
        '{"compute": {"vmId": "abc", "platformFaultDomain": "\u00b2", "platformUpdateDomain": "3"}}'.encode()
    )
    assert (vm.vm_id, vm.fault_domain, vm.update_domain) == ("abc", None, 3)


def test_connection_string_in_the_config_file_is_refused(tmp_path: Path) -> None:
    """A SAS connection string written into the (typically world-readable) config file is refused, not echoed."""
    secret = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=c2VjcmV0"
    config = tmp_path / "collector.toml"
    config.write_text(
        f'[collector]\nsink = "eventhubs"\neventhubs_name = "hub"\neventhubs_connection_string = "{secret}"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(file=config, env={})
    text = str(caught.value)
    assert "eventhubs_connection_string" in text and "SEVENTS_EVENTHUBS_CONNECTION_STRING" in text
    assert "c2VjcmV0" not in text
    settings = load_settings(file=None, env={"SEVENTS_EVENTHUBS_CONNECTION_STRING": secret})
    assert settings.connection_string() == secret and "c2VjcmV0" not in repr(settings)


def test_a_connection_string_without_an_endpoint_is_refused_without_echoing_it() -> None:
    """A garbled SEVENTS_EVENTHUBS_CONNECTION_STRING is a configuration problem whose message hides the value."""
    with pytest.raises(ConfigError) as caught:
        load_settings(
            env={
                "SEVENTS_SINK": "eventhubs",
                "SEVENTS_EVENTHUBS_NAME": "hub",
                "SEVENTS_EVENTHUBS_CONNECTION_STRING": "SharedAccessKey=TOPSECRET",
            }
        )
    assert "not an Event Hubs connection string" in str(caught.value)
    assert "TOPSECRET" not in str(caught.value)


def _command(*argv: str) -> subprocess.CompletedProcess[str]:
    """A sevents command as a real process, without the SEVENTS_* variables of the test's own environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEVENTS_") and "PROXY" not in k.upper()}
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, env=env, timeout=60)


def _problems(stderr: str) -> list[str]:
    """The problems of an "invalid configuration" message: one line each, nothing else printed (no traceback)."""
    prefix = "sevents-collector: invalid configuration: "
    lines = stderr.splitlines()
    assert lines and all(line.startswith(prefix) for line in lines), stderr
    return [line.removeprefix(prefix) for line in lines]


def test_a_misspelt_table_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    """[colector] was silently ignored (exit 0, every setting at its default: a VM meant to ship to Event Hubs kept
    everything in its outbox); now `once` refuses it before polling, exit 2, one line naming the table to write."""
    config = tmp_path / "collector.toml"
    config.write_text('[colector]\nsink = "eventhubs"\neventhubs_name = "hub"\n')
    result = _command("sevents-collector", "once", "--config", str(config), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2, result.stderr
    assert _problems(result.stderr) == [f"config file {config}: unknown table [colector]; did you mean [collector]?"]
    assert not (tmp_path / "state").exists()  # refused before anything was attempted


def test_settings_outside_any_table_are_refused_by_name(tmp_path: Path) -> None:
    """Keys before the first header (or in a file with no header) belong to no table: exit 2 naming each of them
    and the table to write them under, never a collector running on defaults."""
    config = tmp_path / "collector.toml"
    config.write_text('sink = "eventhubs"\neventhubs_name = "hub"\n\n[collector]\nlog_level = "info"\n')
    result = _command("sevents-collector", "once", "--config", str(config), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2, result.stderr
    (problem,) = _problems(result.stderr)
    assert "'sink', 'eventhubs_name' are outside any table; did you mean to write them under [collector]?" in problem
    config.write_text("poll_interval = 2\n")
    with pytest.raises(ConfigError, match=r"'poll_interval' is outside any table; .* it under \[collector\]"):
        load_settings(file=config, env={})


def test_the_approval_table_goes_at_the_top_level(tmp_path: Path) -> None:
    """[collector.approval] would be an unknown setting of [collector]: the message says where the table goes."""
    config = tmp_path / "collector.toml"
    config.write_text('[collector]\n\n[collector.approval]\nevent_types = ["Reboot"]\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(file=config, env={})
    assert caught.value.problems == [
        f"config file {config}: [collector.approval] is a table of its own: write it as [approval], at the top level"
    ]


def test_one_file_serves_both_commands(imds: FakeImds, tmp_path: Path) -> None:
    """A file with [collector], [approval] and [ingest] is accepted by sevents-collector (which reads its own two
    tables) and by sevents-ingest (which reads [ingest]); each reads its own table, not the other's."""
    config = tmp_path / "sevents.toml"
    config.write_text(
        f'[collector]\nstate_dir = "{tmp_path / "state"}"\nmin_request_interval = 0\n\n'
        '[approval]\nevent_types = ["Reboot"]\n\n'
        f'[ingest]\nclickhouse = "chdb://{tmp_path / "clickhouse"}"\nsource = "outbox:{tmp_path / "state"}"\n'
    )
    assert load_approval(config).event_types == ("Reboot",)
    imds.set_document(1, [event("a", event_type="Freeze")])  # not covered by the policy: nothing to approve
    collector = _command("sevents-collector", "once", "--config", str(config), "--imds-url", imds.base_url)
    assert collector.returncode == 0, collector.stderr
    assert [json.loads(line)["event_id"] for line in collector.stdout.splitlines()] == ["a"]
    assert (tmp_path / "state" / "outbox.sqlite").is_file()  # state_dir came from [collector]
    ingest = _command("sevents-ingest", "migrate", "--config", str(config))
    assert ingest.returncode == 0, ingest.stderr
    assert (tmp_path / "clickhouse").is_dir()  # clickhouse came from [ingest]
