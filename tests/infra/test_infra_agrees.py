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
READER_MODULE = (ROOT / "infra/azure/subscription-reader.bicep").read_text()
CLOUD_INIT_PATH = ROOT / "infra/vm/cloud-init.yaml"
CLOUD_INIT = yaml.safe_load(CLOUD_INIT_PATH.read_text())
EXTENSION = json.loads((ROOT / "infra/vm/custom-script-extension.json").read_text())
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# What scripts/bundle-collector.sh names its tarballs.
BUNDLE = re.compile(rf"sevents-collector-{re.escape(VERSION)}-cp3[0-9]+-linux-[a-z0-9_]+\.tar\.gz")


def bicep_outputs() -> set[str]:
    return set(re.findall(r"^output (\w+) ", BICEP, re.MULTILINE))


def bicep_resources(text: str) -> dict[str, str]:
    """Each ``resource`` or ``module`` declaration of a template: symbolic name -> its text up to the closing brace."""
    blocks = re.split(r"^(?=(?:resource|module|output|@description|param|var) )", text, flags=re.MULTILINE)
    return {m.group(1): block for block in blocks if (m := re.match(r"(?:resource|module) (\w+) ", block))}


def role_ids(text: str) -> dict[str, str]:
    """``var roleX = '<guid>'`` of a template: variable name -> role definition id."""
    return dict(re.findall(r"^var (role\w+) = '([0-9a-f-]{36})'", text, re.MULTILINE))


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


READER = "acdd72a7-3385-4ef5-be7c-b4b1e6b5d46c"  # built-in Reader


def test_the_reconciler_has_its_own_identity_with_reader_only() -> None:
    """`sevents-ingest reconcile` runs as an identity of its own whose only role is Reader on the subscriptions it
    reads (a subscription-scope module); its client id is the output the ingest's reconcile_client_id takes."""
    resources = bicep_resources(BICEP)
    assert "Microsoft.ManagedIdentity/userAssignedIdentities@" in resources["reconcilerIdentity"]
    # no role assignment of main.bicep names the reconciler; the module is its one assignment
    assignments = {name: text for name, text in resources.items() if "Microsoft.Authorization/roleAssignments@" in text}
    assert assignments and not [name for name, text in assignments.items() if "reconcilerIdentity" in text]
    module = resources["reconcilerReader"]
    assert "module reconcilerReader 'subscription-reader.bicep'" in module
    assert (
        "for subscriptionId in reconcileSubscriptionIds" in module and "scope: subscription(subscriptionId)" in module
    )
    assert "principalId: reconcilerIdentity.properties.principalId" in module
    assert [n for n, text in resources.items() if n != "reconcilerIdentity" and "reconcilerIdentity" in text] == [
        "reconcilerReader"
    ]
    # the module: subscription scope, one role assignment, and that role is Reader
    assert "targetScope = 'subscription'" in READER_MODULE
    (assignment,) = bicep_resources(READER_MODULE).values()
    assert "Microsoft.Authorization/roleAssignments@" in assignment
    assert role_ids(READER_MODULE) == {"roleReader": READER}
    assert "roleDefinitions', roleReader)" in assignment
    assert READER not in BICEP  # main.bicep grants Reader to no one else
    assert {"reconcilerClientId", "reconcilerIdentityId"} <= bicep_outputs()
    assert "reconcile_client_id" in BICEP and hasattr(IngestSettings(), "reconcile_client_id")


def test_the_central_scheduled_events_feed_is_off_by_default_and_sends_only_to_its_own_hub() -> None:
    """The feed's hub, the Event Grid system topic (Microsoft.ResourceNotifications.MaintenanceResources, location
    global) and its subscription exist only with centralScheduledEvents, which is false by default; they deliver
    only ScheduledEventEmitted to a hub of the feed's own (never the collectors'), with the topic's own identity,
    which has Azure Event Hubs Data Sender on that hub only; the ingest may receive from it."""
    assert re.search(r"^param centralScheduledEvents bool = false$", BICEP, re.MULTILINE)
    resources = bicep_resources(BICEP)
    grid = {name: text for name, text in resources.items() if "Microsoft.EventGrid/" in text.split("\n", 1)[0]}
    assert set(grid) == {"maintenanceTopic", "scheduledEventsToHub"}
    gated = [name for name, text in resources.items() if "= if (centralScheduledEvents)" in text.split("\n", 1)[0]]
    assert sorted(gated) == [
        "feedConsumerGroup", "feedHub", "ingestReceiveFeed", "maintenanceTopic", "maintenanceTopicSend",
        "scheduledEventsToHub",
    ]  # fmt: skip
    assert "name: feedEventHubName" in resources["feedHub"] and "param feedEventHubName string" in BICEP
    receive = resources["ingestReceiveFeed"]
    assert "scope: feedHub" in receive and "roleEventHubsDataReceiver)" in receive and "ingestPrincipalId" in receive
    topic = grid["maintenanceTopic"]
    assert "'Microsoft.EventGrid/systemTopics@" in topic and "location: 'global'" in topic
    assert "topicType: maintenanceResourcesTopicType" in topic and "source: subscription().id" in topic
    assert "var maintenanceResourcesTopicType = 'Microsoft.ResourceNotifications.MaintenanceResources'" in BICEP
    feed = grid["scheduledEventsToHub"]
    assert "'Microsoft.EventGrid/systemTopics/eventSubscriptions@" in feed and "parent: maintenanceTopic" in feed
    assert re.search(r"includedEventTypes: \[\s+scheduledEventEmitted\s+\]", feed)
    assert (
        "var scheduledEventEmitted = 'Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted'"
        in BICEP
    )
    assert "deliveryWithResourceIdentity" in feed and "endpointType: 'EventHub'" in feed
    assert "resourceId: feedHub.id" in feed
    send = resources["maintenanceTopicSend"]
    assert "scope: feedHub" in send and "roleDefinitions', roleEventHubsDataSender)" in send
    assert "principalId: maintenanceTopic.identity.principalId" in send
    assert role_ids(BICEP)["roleEventHubsDataSender"] == "2b629674-e913-4c01-ae53-ef4638d8f975"
    # the README documents the switch, the identity and the Reader command for other subscriptions
    readme = (ROOT / "infra/azure/README.md").read_text()
    for needle in ("centralScheduledEvents", "reconcilerClientId", "reconcileSubscriptionIds", READER):
        assert needle in readme, needle
