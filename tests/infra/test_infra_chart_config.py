"""The Helm chart configures a collector that starts: every setting type, [approval] and Secrets render into a
config the collector's own loaders accept; required values fail when left at their defaults; the chart, its
schema, its image and its README agree with the collector.

Rendering uses Helm's own engine (helm-python-sdk, see test_infra_helm.py): the values are checked against
values.schema.json and the templates run exactly as ``helm template`` runs them.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from collector.approval import APPROVABLE_TYPES, APPROVERS, SOURCES, ApprovalPolicy
from collector.imds_policy import SCHEDULED_EVENTS_VERSIONS
from collector.settings import LOG_LEVELS, CollectorSettings, load_approval, load_settings
from sevents.records import EVENT_TYPES
from tests.infra.test_infra_helm import REQUIRED, render_py, with_required

pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's engine) is not installed here")
from helm_python.errors import HelmRenderError, HelmValuesError

from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "infra/helm/sevents-collector"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
# What the chart writes or passes itself; nowhere else under `settings`.
CHART_OWNED = {
    "sink",
    "eventhubs_namespace",
    "eventhubs_name",
    "state_dir",
    "metrics_addr",
    "webhook_url",
    "eventhubs_connection_string",
    "eventhubs_connection_string_file",
}
WEBHOOK_URL = "https://hooks.example.com/services/T0/B0/token?x=1&y=<2>"
CONNECTION_STRING = "Endpoint=sb://other.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=abc="
SECRETS = {("sevents-webhook", "url"): WEBHOOK_URL, ("sevents-sas", "connection-string"): CONNECTION_STRING}


def objects(values: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
    texts = render_py["render"](values, **options).values()
    return [d for text in texts for d in yaml.safe_load_all(text) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def render_error(values: dict[str, Any] | None, **options: Any) -> str:
    with pytest.raises((HelmRenderError, HelmValuesError)) as caught:
        render_py["render"](values, **options)
    return str(caught.value)


def kubelet_env(container: dict[str, Any], pod_ip: str) -> dict[str, str]:
    """The environment kubelet gives the container: values with $(VAR) expanded from earlier ones, Secret keys
    (from SECRETS), and the downward API's fields."""
    fields = {"spec.nodeName": "aks-system-12345678-vmss000000", "status.podIP": pod_ip}
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), var["value"])
        elif "secretKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = SECRETS[(ref["name"], ref["key"])]
        else:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def pod_config(values: dict[str, Any], tmp_path: Path, pod_ip: str = "10.224.0.4") -> tuple[Path, dict[str, str]]:
    """The config file and the environment one pod of the chart rendered with ``values`` starts with."""
    docs = objects(with_required(values))
    path = tmp_path / "collector.toml"
    path.write_text(one(docs, "ConfigMap")["data"]["collector.toml"])
    (container,) = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert container["command"][-2:] == ["--config", "/etc/sevents/collector.toml"]
    return path, kubelet_env(container, pod_ip)


# ------------------------------------------------------------------------------------------------------------
# The config the collector reads


def test_every_setting_type_approval_and_secrets_make_a_config_the_collector_accepts(tmp_path: Path) -> None:
    """Strings, whole and fractional numbers, booleans, lists (with characters TOML must escape), the [approval]
    table and a webhook URL from a Secret: the collector's own loaders accept the pod's config and environment,
    and read back every value as it was given."""
    values = {
        "settings": {
            "log_level": "debug",
            "api_version": "2019-08-01",
            "poll_interval": 2,
            "min_request_interval": 0.25,
            "outbox_max_bytes": 134217728,
            "discover_endpoint": True,
            "dhcp_lease_globs": ["/var/lib/dhcp/*.lease", 'C:\\odd "quoted" path', "ünïcode <&>"],
            "webhook_event_types": ["Preempt", "Terminate", "Reboot"],
            "webhook_timeout": 7.5,
        },
        "approval": {
            "event_types": ["Reboot", "Redeploy"],
            "sources": ["Platform"],
            "max_duration_s": 30,
            "pre_hook": ["/usr/local/bin/drain-node", "--grace", "60"],
            "post_hook": ["/usr/local/bin/undrain-node"],
            "hook_timeout_s": 120,
            "approver": "self",
        },
        "webhook": {"urlSecret": {"name": "sevents-webhook"}},
    }
    path, env = pod_config(values, tmp_path)
    config = path.read_text()
    assert WEBHOOK_URL not in config and "webhook_url" not in config  # the token stays in its Secret
    assert env["SEVENTS_WEBHOOK_URL"] == WEBHOOK_URL
    settings = load_settings(file=path, env=env)
    assert settings.sink == "eventhubs"
    assert settings.eventhubs_namespace == REQUIRED["eventHubs"]["namespace"]
    assert settings.eventhubs_name == "scheduled-events"
    assert settings.webhook_url == WEBHOOK_URL
    assert settings.metrics_addr == "10.224.0.4:9464"
    for name, value in values["settings"].items():
        got = getattr(settings, name)
        assert (list(got) if isinstance(got, tuple) else got) == value, name
    policy = load_approval(path)
    assert policy == ApprovalPolicy(
        enabled=True,
        event_types=("Reboot", "Redeploy"),
        sources=("Platform",),
        max_duration_s=30,
        pre_hook=("/usr/local/bin/drain-node", "--grace", "60"),
        post_hook=("/usr/local/bin/undrain-node",),
        hook_timeout_s=120.0,
        approver="self",
    )
    assert type(tomllib.loads(config)["approval"]["max_duration_s"]) is int  # not 30.0, which the policy refuses


def test_approval_can_be_written_but_off_and_is_absent_by_default(tmp_path: Path) -> None:
    """No [approval] table unless one is given (nothing approved); enabled: false writes it turned off."""
    path, env = pod_config({}, tmp_path)
    assert "[approval]" not in path.read_text()
    assert load_approval(path) == ApprovalPolicy()
    path, env = pod_config({"approval": {"enabled": False, "event_types": ["Freeze"]}}, tmp_path)
    assert load_approval(path).enabled is False and load_approval(path).event_types == ("Freeze",)
    load_settings(file=path, env=env)


def test_a_connection_string_from_a_secret_replaces_the_namespace(tmp_path: Path) -> None:
    """With eventHubs.connectionStringSecret and workload identity off, no namespace is required: the pod gets
    SEVENTS_EVENTHUBS_CONNECTION_STRING from the Secret and the collector accepts it."""
    values = {
        "eventHubs": {"namespace": "", "connectionStringSecret": {"name": "sevents-sas"}},
        "workloadIdentity": {"enabled": False, "clientId": ""},
    }
    path, env = pod_config(values, tmp_path)
    assert "eventhubs_namespace" not in path.read_text() and CONNECTION_STRING not in path.read_text()
    settings = load_settings(file=path, env=env)
    assert settings.connection_string() == CONNECTION_STRING
    pod = one(objects(with_required(values)), "DaemonSet")["spec"]["template"]
    assert "azure.workload.identity/use" not in pod["metadata"]["labels"]


@pytest.mark.parametrize("pod_ip", ["10.224.0.4", "fd00:10:224::4"])
def test_metrics_listen_on_the_pod_ip_v4_or_v6(pod_ip: str, tmp_path: Path) -> None:
    """/metrics binds the pod's IP from the downward API; the collector accepts it for IPv4 and IPv6 clusters."""
    path, env = pod_config({}, tmp_path, pod_ip=pod_ip)
    assert load_settings(file=path, env=env).metrics_addr == f"{pod_ip}:9464"
    path, env = pod_config({"metrics": {"host": "0.0.0.0", "port": 9500}}, tmp_path, pod_ip=pod_ip)
    assert load_settings(file=path, env=env).metrics_addr == "0.0.0.0:9500"
    path, env = pod_config({"metrics": {"enabled": False}}, tmp_path)
    assert load_settings(file=path, env=env).metrics_addr == ""


def test_extra_env_reaches_the_collector(tmp_path: Path) -> None:
    """extraEnv adds to the container's environment (a SEVENTS_* setting from a Secret, say), after the chart's."""
    values = {
        "extraEnv": [
            {"name": "SEVENTS_HEARTBEAT_INTERVAL", "value": "30"},
            {"name": "SEVENTS_WEBHOOK_URL", "valueFrom": {"secretKeyRef": {"name": "sevents-webhook", "key": "url"}}},
        ],
        "extraEnvFrom": [{"configMapRef": {"name": "otel"}}],
    }
    path, env = pod_config(values, tmp_path)
    settings = load_settings(file=path, env=env)
    assert settings.heartbeat_interval == 30.0 and settings.webhook_url == WEBHOOK_URL
    (container,) = one(objects(with_required(values)), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert container["envFrom"] == [{"configMapRef": {"name": "otel"}}]


# ------------------------------------------------------------------------------------------------------------
# Required values and mistakes: refused at render, with a message saying what to set


def test_defaults_without_a_namespace_fail_with_one_clear_message() -> None:
    """`helm template` with the defaults and no -n lists everything to set, in one message."""
    message = render_error(None, namespace=None)
    assert "4 value(s) to fix" in message
    assert 'the release namespace is "default"' in message and "-n sevents --create-namespace" in message
    assert "image.repository is required" in message and "infra/helm/Dockerfile" in message
    assert "eventHubs.namespace is required" in message and "eventhubsNamespace" in message
    assert "workloadIdentity.clientId is required" in message and "collectorClientId" in message


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"image": {"repository": ""}}, "image.repository is required"),
        ({"eventHubs": {"namespace": ""}}, "eventHubs.namespace is required"),
        ({"eventHubs": {"namespace": "myns"}}, 'fully qualified, e.g. myns.servicebus.windows.net, got "myns"'),
        ({"eventHubs": {"name": ""}}, "at '/eventHubs/name'"),
        ({"workloadIdentity": {"clientId": ""}}, "workloadIdentity.clientId is required"),
        ({"workloadIdentity": {"clientId": "00000000-0000-0000-0000-000000000000"}}, "clientId is required"),
        ({"workloadIdentity": {"clientId": "/subscriptions/x/resourceGroups/y"}}, "at '/workloadIdentity/clientId'"),
        ({"settings": {"webhook_url": "https://hooks.example.com/t"}}, "put it in a Secret and set webhook.urlSecret"),
        ({"settings": {"state_dir": "/tmp"}}, "settings.state_dir is set by the chart: set stateDir"),
        ({"settings": {"poll_intervall": 2}}, "at '/settings'"),
        ({"settings": {"poll_interval": "fast"}}, "at '/settings/poll_interval'"),
        ({"settings": {"webhook_event_types": ["Preemt"]}}, "at '/settings/webhook_event_types/0'"),
        ({"approval": {"event_types": ["Reboot"], "max_duration_s": 1.5}}, "at '/approval/max_duration_s'"),
        ({"approval": {"approver": "leader"}}, "at '/approval/approver'"),
        ({"imagePullSecret": [{"name": "x"}]}, "imagePullSecret"),
    ],
)
def test_a_missing_or_wrong_value_is_refused_with_its_name(values: dict[str, Any], expected: str) -> None:
    """Each required value left at its default, and each value of the wrong shape, fails the render naming it."""
    assert expected in render_error(with_required(values))


def test_the_default_namespace_alone_is_refused() -> None:
    """Everything set but the namespace: the one problem is the namespace."""
    message = render_error(with_required({}), namespace="default")
    assert "1 value(s) to fix" in message and "the release namespace" in message


def test_settings_the_chart_owns_are_refused_even_without_the_schema() -> None:
    """The templates refuse what the schema refuses too (helm --skip-schema-validation): a key the chart writes
    (invalid TOML twice), the webhook URL (a token, for a Secret), a table under settings."""
    helpers = (CHART / "templates/_helpers.tpl").read_text()
    owned = helpers.split('define "sevents-collector.reservedSettings"')[1].split("{{- end -}}")[0]
    assert set(re.findall(r"^(\w+):", owned, re.MULTILINE)) == CHART_OWNED
    assert 'webhook_url: "it holds a token: put it in a Secret' in owned
    assert 'kindIs "map" $value' in helpers


# ------------------------------------------------------------------------------------------------------------
# The schema, the chart's objects and the image agree with the collector


def test_the_schema_admits_exactly_the_collectors_settings_with_their_types() -> None:
    """values.schema.json's settings are the collector's, with the same types and choices: a new setting of the
    collector needs a line there (and a misspelt one fails at install)."""
    properties = SCHEMA["properties"]["settings"]["properties"]
    assert SCHEMA["properties"]["settings"]["additionalProperties"] is False
    fields = {f.name: f for f in dataclasses.fields(CollectorSettings)}
    assert set(properties) == set(fields), "keep values.schema.json settings in step with the collector"
    # what the chart owns passes the schema untyped, so that the template's message says where it goes instead
    assert {name for name, schema in properties.items() if "type" not in schema} == CHART_OWNED
    hints = typing.get_type_hints(CollectorSettings)
    json_type = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "string"}
    for name, schema in properties.items():
        if name in CHART_OWNED:
            continue
        hint = hints[name]
        expected = "array" if typing.get_origin(hint) is tuple else json_type[hint]
        assert schema["type"] == expected, name
    assert properties["log_level"]["enum"] == list(LOG_LEVELS)
    assert properties["api_version"]["enum"] == list(SCHEDULED_EVENTS_VERSIONS)
    assert properties["webhook_event_types"]["items"]["enum"] == list(EVENT_TYPES)
    approval = SCHEMA["properties"]["approval"]["properties"]
    assert set(approval) == {f.name for f in dataclasses.fields(ApprovalPolicy)}
    assert approval["event_types"]["items"]["enum"] == list(APPROVABLE_TYPES)
    assert approval["sources"]["items"]["enum"] == list(SOURCES)
    assert approval["approver"]["enum"] == list(APPROVERS)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(SCHEMA["properties"]) - {"global"} == set(values), "every value has a schema entry and back"
    assert values["stateDir"] == str(CollectorSettings().state_dir)


# The part of the PodMonitor CRD (monitoring.coreos.com/v1) the chart writes, strictly: kubernetes-validate has
# the built-in kinds only. Field names and forms as the Prometheus Operator's CRD declares them.
_DURATION = {
    "type": "string",
    "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
POD_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name", "namespace"],
            "additionalProperties": False,
            "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": _STRINGS},
        },
        "spec": {
            "type": "object",
            "required": ["selector", "podMetricsEndpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _STRINGS, "matchExpressions": {"type": "array"}},
                },
                "podMetricsEndpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "relabelings": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "sourceLabels": {"type": "array", "items": {"type": "string"}},
                                        "targetLabel": {"type": "string"},
                                        "action": {"enum": ["replace", "Replace"]},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_pod_monitor_scrapes_the_collectors_metrics_port() -> None:
    """podMonitor.enabled writes a PodMonitor (valid against the CRD's form) selecting the collector pods by
    their labels and scraping the container port named metrics, with the node as a label; off by default."""
    assert "PodMonitor" not in {d["kind"] for d in objects(with_required({}))}
    docs = objects(with_required({"podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}}))
    monitor = one(docs, "PodMonitor")
    jsonschema.validate(monitor, POD_MONITOR_SCHEMA)
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    pod = one(docs, "DaemonSet")["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = pod["spec"]["containers"]
    assert endpoint["port"] in [p["name"] for p in container["ports"]]
    assert endpoint["path"] == "/metrics"
    assert endpoint["relabelings"][0]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
    assert "PodMonitor" not in {
        d["kind"] for d in objects(with_required({"podMonitor": {"enabled": True}, "metrics": {"enabled": False}}))
    }


def test_network_policy_admits_only_the_metrics_port() -> None:
    """networkPolicy.enabled: ingress to the collector pods on the metrics port alone, from the peers given."""
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    docs = objects(with_required({"networkPolicy": {"enabled": True, "from": peers}}))
    policy = one(docs, "NetworkPolicy")
    pod = one(docs, "DaemonSet")["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (rule,) = policy["spec"]["ingress"]
    assert rule == {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": peers}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    closed = one(
        objects(with_required({"networkPolicy": {"enabled": True}, "metrics": {"enabled": False}})), "NetworkPolicy"
    )
    assert closed["spec"]["ingress"] == []


def test_pod_options_reach_the_pod() -> None:
    """imagePullSecrets, affinity, podAnnotations and priorityClassName (system-node-critical by default)."""
    default = one(objects(with_required({})), "DaemonSet")["spec"]["template"]["spec"]
    assert default["priorityClassName"] == "system-node-critical"
    assert default["nodeSelector"] == {"kubernetes.io/os": "linux"}
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}
            ]
        }
    }
    values = {
        "imagePullSecrets": [{"name": "acr-pull"}],
        "affinity": affinity,
        "podAnnotations": {"example.com/owner": "sre"},
        "priorityClassName": "",
    }
    pod = one(objects(with_required(values)), "DaemonSet")["spec"]["template"]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "acr-pull"}]
    assert pod["spec"]["affinity"] == affinity
    assert pod["metadata"]["annotations"]["example.com/owner"] == "sre"
    assert "priorityClassName" not in pod["spec"]


def test_without_metrics_the_probes_run_the_alive_check_which_tells_a_ticking_collector_from_a_stuck_one(
    tmp_path: Path,
) -> None:
    """metrics.enabled false: startup, liveness and readiness run one command on <stateDir>/alive; run here, it
    passes on a fresh file and fails on a stale or missing one."""
    values = {"metrics": {"enabled": False}}
    (container,) = one(objects(with_required(values)), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    probes = [container[p]["exec"]["command"] for p in ("startupProbe", "livenessProbe", "readinessProbe")]
    assert probes[0] == probes[1] == probes[2]
    command = probes[0]
    assert command[0] == "python" and command[-2:] == ["/var/lib/sevents-collector/alive", "60"]
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 600

    alive = tmp_path / "alive"

    def probe() -> int:
        argv = [sys.executable, *command[1:-2], str(alive), command[-1]]
        return subprocess.run(argv, check=False, timeout=30).returncode

    assert probe() != 0  # no alive file yet
    alive.write_text("boot-id 2026-11-26T10:00:00.000000Z\n")
    assert probe() == 0
    stale = time.time() - 61
    os.utime(alive, (stale, stale))
    assert probe() == 1
    off = one(objects(with_required({"probes": {"enabled": False}})), "DaemonSet")["spec"]["template"]["spec"]
    assert "livenessProbe" not in off["containers"][0]


def probe_containers(values: dict[str, Any]) -> dict[str, Any]:
    (container,) = one(objects(with_required(values)), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return container


def test_with_metrics_the_probes_get_healthz_and_readyz_on_the_metrics_port() -> None:
    """metrics.enabled (the default): startup and liveness GET /healthz with aliveMaxAgeSeconds, readiness GET
    /readyz with pollMaxAgeSeconds, on the container port named metrics; kubelet connects to the pod's IP unless
    metrics.host names one address (an IPv6 one without brackets)."""
    container = probe_containers({})
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz?max_age=60", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz?max_age=60", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz?max_age=120", "port": "metrics"}
    assert [p["name"] for p in container["ports"]] == ["metrics"]
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] == 600
    tuned = probe_containers({"probes": {"aliveMaxAgeSeconds": 45, "pollMaxAgeSeconds": 300}})
    assert tuned["livenessProbe"]["httpGet"]["path"] == "/healthz?max_age=45"
    assert tuned["readinessProbe"]["httpGet"]["path"] == "/readyz?max_age=300"
    for host, expected in [("0.0.0.0", None), ("[::]", None), ("10.0.0.4", "10.0.0.4"), ("[fd00::4]", "fd00::4")]:
        probes = probe_containers({"metrics": {"host": host}})
        assert {probes[p]["httpGet"].get("host") for p in ("startupProbe", "livenessProbe", "readinessProbe")} == {
            expected
        }, host
    assert "livenessProbe" not in probe_containers({"probes": {"enabled": False}})
    notes = render_py["render"](with_required({}), notes=True)["sevents-collector/templates/NOTES.txt"]
    assert "answers /readyz on port 9464" in notes
    readme = (CHART / "README.md").read_text()
    assert "`/healthz?max_age=<aliveMaxAgeSeconds>`" in readme and "`/readyz?max_age=<pollMaxAgeSeconds>`" in readme


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_a_loopback_metrics_host_without_the_host_network_is_refused(host: str) -> None:
    """kubelet probes from outside the pod's network namespace: a loopback listener there never answers it."""
    message = render_error(with_required({"hostNetwork": False, "metrics": {"host": host}}))
    assert f'metrics.host "{host}" is the pod\'s own loopback' in message
    probes = probe_containers({"hostNetwork": True, "metrics": {"host": "127.0.0.1"}})  # the node's loopback: fine
    assert probes["livenessProbe"]["httpGet"]["host"] == "127.0.0.1"


def kubelet_probe(probe: dict[str, Any], container: dict[str, Any], pod_ip: str) -> bool:
    """One HTTP probe as kubelet runs it: GET the path on the probe's host (else the pod IP) and port (a name is
    the container port's), within timeoutSeconds; success is a status from 200 to 399."""
    action = probe["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    port = ports[action["port"]] if isinstance(action["port"], str) else action["port"]
    connection = http.client.HTTPConnection(action.get("host", pod_ip), port, timeout=probe["timeoutSeconds"])
    try:
        connection.request("GET", action["path"])
        return 200 <= connection.getresponse().status < 400
    except OSError:
        return False
    finally:
        connection.close()


@pytest.mark.slow
def test_the_charts_probes_pass_against_a_collector_started_from_the_pods_config(tmp_path: Path) -> None:
    """The pod's config and environment as kubelet gives them (IMDS, state dir and sink pointed at the test's own):
    every probe fails before the collector listens, then startup, liveness and readiness pass as kubelet runs them."""
    from tests.collector_edges.fake_imds import FakeImds
    from tests.collector_edges.test_edges_cli import COLLECTOR, clean_env

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    values = {"metrics": {"port": port}}
    path, env = pod_config(values, tmp_path, pod_ip="127.0.0.1")
    container = probe_containers(values)
    probes = [container[p] for p in ("startupProbe", "livenessProbe", "readinessProbe")]
    assert not any(kubelet_probe(p, container, "127.0.0.1") for p in probes)
    imds = FakeImds().start()
    overrides = {
        "SEVENTS_IMDS_URL": imds.base_url,
        "SEVENTS_STATE_DIR": str(tmp_path / "state"),
        "SEVENTS_SINK": "local",
        "SEVENTS_MIN_REQUEST_INTERVAL": "0",
    }
    process = subprocess.Popen(
        [COLLECTOR, *container["command"][1:-1], str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=clean_env(**env, **overrides),
    )

    def passes(probe: dict[str, Any]) -> bool:
        assert process.poll() is None, "the collector exited"
        return kubelet_probe(probe, container, "127.0.0.1")

    try:
        wait_for(lambda: passes(probes[0]), 60, what="the startup probe", interval=0.1)  # kubelet repeats it
        wait_for(lambda: passes(probes[2]), 60, what="the readiness probe", interval=0.1)  # after the first poll
        assert kubelet_probe(probes[1], container, "127.0.0.1")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()
        imds.stop()


def test_the_image_the_chart_runs_is_the_dockerfiles() -> None:
    """The chart's default tag (appVersion) is the version the Dockerfile installs and the package's; its user is
    the pods' user; it has the python the init container and the probes run, and the collector command."""
    dockerfile = (ROOT / "infra/helm/Dockerfile").read_text()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert CHART_META["appVersion"] == version
    assert re.search(rf"^ARG VERSION={re.escape(version)}$", dockerfile, re.MULTILINE)
    assert f"sevents-collector:{version} ." in dockerfile  # the documented build command
    assert re.search(r"^FROM python:3\.\d+-slim$", dockerfile, re.MULTILINE)
    assert "pip install --no-cache-dir . " in dockerfile and "[central]" not in dockerfile
    docs = objects(with_required({}))
    spec = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.MULTILINE)
    assert (int(user[0]), int(user[1])) == (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"])
    (container,) = spec["containers"]
    assert container["image"] == f"{REQUIRED['image']['repository']}:{version}"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert container["command"][0] in scripts
    assert f"CMD {json.dumps(container['command'])}\n" in dockerfile
    assert spec["initContainers"][0]["command"][0] == "python"


# ------------------------------------------------------------------------------------------------------------
# What a person reads: NOTES.txt, the README, helm lint


def test_notes_and_readme_say_what_windows_node_pools_get() -> None:
    """NOTES.txt (printed by helm install) and the chart README say that Windows nodes get no collector."""
    notes = render_py["render"](with_required({}), notes=True)["sevents-collector/templates/NOTES.txt"]
    assert "Windows node pools get no collector" in notes
    assert "rollout status daemonset/sevents-collector" in notes
    assert "pod-security.kubernetes.io/enforce=privileged" in notes
    readme = (CHART / "README.md").read_text()
    assert "## Windows node pools" in readme and "kubernetes.io/os: linux" in readme
    for value in (
        "image.repository",
        "eventHubs.namespace",
        "workloadIdentity.clientId",
        "webhook.urlSecret",
        "podMonitor.enabled",
        "networkPolicy.enabled",
        "extraEnv",
        "approval",
    ):
        assert f"`{value}" in readme, value


def test_the_readme_sed_line_fills_every_placeholder_of_the_plain_manifests() -> None:
    """infra/helm/README.md's command for the plain manifests replaces each placeholder render.py put there."""
    readme = (ROOT / "infra/helm/README.md").read_text()
    plain = (ROOT / "infra/helm/manifests/sevents-collector.yaml").read_text()
    placeholders: dict[str, str] = render_py["PLACEHOLDERS"]
    body = plain.split("\n---\n", 1)[1]
    for placeholder in placeholders.values():
        assert placeholder in body
    replaced = body
    for old, new in re.findall(r"-e 's\|([^|]+)\|([^|]+)\|'", readme):
        replaced = replaced.replace(old.replace("\\.", "."), new)
    for placeholder in placeholders.values():
        assert placeholder not in replaced, placeholder


def test_helm_lint_finds_nothing_to_fix() -> None:
    """`helm lint --strict` with the required values: no warning or error (an icon is only recommended)."""
    from helm_python.chart import lint

    report = lint(CHART, with_required({}), strict=True, namespace="sevents")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_kubernetes_validate_strict_passes_on_the_chart_with_every_option(tmp_path: Path) -> None:
    """The command itself, `kubernetes-validate --strict`, on the chart rendered with every option on (less the
    PodMonitor, a custom resource it has no schema for, checked above against its CRD's form)."""
    values = {
        "podMonitor": {"enabled": True},
        "networkPolicy": {"enabled": True},
        "webhook": {"urlSecret": {"name": "sevents-webhook"}},
        "eventHubs": {"connectionStringSecret": {"name": "sevents-sas"}},
        "approval": {"event_types": ["Reboot"]},
        "imagePullSecrets": [{"name": "acr-pull"}],
        "namespace": {"create": True},
    }
    docs = [d for d in objects(with_required(values)) if d["kind"] != "PodMonitor"]
    assert {"Namespace", "ServiceAccount", "ConfigMap", "DaemonSet", "NetworkPolicy"} == {d["kind"] for d in docs}
    path = tmp_path / "chart.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    for version in ("1.25.0", None):  # the oldest the chart admits, and the newest the package knows
        options = ["--strict", "--quiet", *(["-k", version] if version else [])]
        argv = [sys.executable, "-m", "kubernetes_validate", *options, str(path)]
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
