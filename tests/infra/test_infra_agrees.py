"""The deployable files agree with each other and with the code: names, outputs, identity, no connection strings."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from collector.settings import CollectorSettings, load_settings
from ingest.settings import IngestSettings

ROOT = Path(__file__).resolve().parents[2]
BICEP = (ROOT / "infra/azure/main.bicep").read_text()
CLOUD_INIT_PATH = ROOT / "infra/vm/cloud-init.yaml"
CLOUD_INIT = yaml.safe_load(CLOUD_INIT_PATH.read_text())
EXTENSION = json.loads((ROOT / "infra/vm/custom-script-extension.json").read_text())
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# What scripts/bundle-collector.sh names its tarballs.
BUNDLE = re.compile(rf"sevents-collector-{re.escape(VERSION)}-cp3[0-9]+-linux-[a-z0-9_]+\.tar\.gz")


def bicep_outputs() -> set[str]:
    return set(re.findall(r"^output (\w+) ", BICEP, re.MULTILINE))


def load_toml_text(text: str, tmp_path: Path) -> CollectorSettings:
    path = tmp_path / "collector.toml"
    path.write_text(text)
    return load_settings(file=path, env={})


def test_one_consumer_group_everywhere() -> None:
    """The template creates the group the ingest uses by default."""
    (default,) = re.findall(r"param consumerGroupName string = '([^']+)'", BICEP)
    assert default == IngestSettings().eventhubs_consumer_group == "sevents-ingest"


def test_one_shared_collector_identity_and_one_role_assignment() -> None:
    """Collectors share one user-assigned identity: no role assignment per VM, its client id is an output."""
    assert "for principalId in" not in BICEP
    assert "Microsoft.ManagedIdentity/userAssignedIdentities@" in BICEP
    sender = BICEP[BICEP.index("resource collectorsSend") :].split("\n}\n", 1)[0]
    assert "principalId: collectorIdentity.properties.principalId" in sender
    assert {"collectorClientId", "collectorIdentityId"} <= bicep_outputs()


def test_shared_keys_are_off_and_no_sample_carries_a_connection_string() -> None:
    """Shared keys are disabled by default, so no sample configuration offers a connection string."""
    assert "disableLocalAuth: !allowSasFallback" in BICEP
    assert "allowSharedKeyAccess: false" in BICEP
    samples = [
        ROOT / "infra/systemd/collector-eventhubs.toml",
        CLOUD_INIT_PATH,
        ROOT / "infra/helm/sevents-collector/values.yaml",
        ROOT / "infra/helm/manifests/sevents-collector.yaml",
    ]
    for sample in samples:
        lines = [line for line in sample.read_text().splitlines() if not line.lstrip().startswith("#")]
        assert not [line for line in lines if "connection_string" in line.lower()], sample


def test_the_event_hubs_sample_is_a_valid_collector_configuration(tmp_path: Path) -> None:
    """infra/systemd/collector-eventhubs.toml ships to Event Hubs and passes the collector's validation."""
    settings = load_settings(file=ROOT / "infra/systemd/collector-eventhubs.toml", env={})
    assert settings.sink == "eventhubs"
    assert settings.connection_string() is None  # managed identity


@pytest.mark.parametrize(
    "output", ["eventhubsNamespace", "eventhubsName", "collectorClientId", "eventhubsConsumerGroup"]
)
def test_outputs_named_in_the_docs_exist(output: str) -> None:
    """Every template output a sample or README tells people to copy exists."""
    assert output in bicep_outputs()
    named = (ROOT / "infra/azure/README.md").read_text() + (
        ROOT / "infra/helm/sevents-collector/values.yaml"
    ).read_text()
    assert output in named


def test_cloud_init_writes_a_valid_config_and_runs_the_bundle(tmp_path: Path) -> None:
    """cloud-init writes an Event Hubs config the collector accepts, the client id, and installs the bundle."""
    assert CLOUD_INIT_PATH.read_text().startswith("#cloud-config\n")
    files = {f["path"]: f for f in CLOUD_INIT["write_files"]}
    settings = load_toml_text(files["/etc/sevents/collector.toml"]["content"], tmp_path)
    assert settings.sink == "eventhubs" and settings.eventhubs_namespace.endswith(".servicebus.windows.net")
    env = files["/etc/sevents/collector.env"]
    assert env["permissions"] == "0600" and "AZURE_CLIENT_ID=" in env["content"]
    script = CLOUD_INIT["runcmd"][0][-1]
    assert BUNDLE.search(script) and "install.sh --systemd" in script


def test_custom_script_extension_downloads_the_bundle_with_the_identity() -> None:
    """The extension fetches a bundle by the name the script builds, with a managed identity, and installs it."""
    (uri,) = EXTENSION["settings"]["fileUris"]
    assert BUNDLE.search(uri)
    protected = EXTENSION["protectedSettings"]
    assert "install.sh --systemd" in protected["commandToExecute"]
    assert "clientId" in protected["managedIdentity"]


def test_install_script_puts_the_collector_where_the_unit_runs_it() -> None:
    """install.sh's default prefix is the virtualenv the systemd unit's ExecStart names."""
    unit = (ROOT / "infra/systemd/sevents-collector.service").read_text()
    (prefix,) = re.findall(r"^prefix=(\S+)$", (ROOT / "scripts/install-collector.sh").read_text(), re.MULTILINE)
    assert f"ExecStart={prefix}/bin/sevents-collector run --config /etc/sevents/collector.toml" in unit
