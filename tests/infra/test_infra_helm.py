"""The collector's Helm chart: rendered by Helm's own engine, checked against the Kubernetes JSON schemas.

The schemas come from kubernetes-validate (strict: unknown fields fail too); the chart is rendered offline by
helm-python-sdk (Helm's Go library in a wheel), skipped where that wheel does not install (it is built for
x86-64 Linux only). The committed plain manifests are checked with or without it.
"""

from __future__ import annotations

import re
import runpy
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "infra/helm/manifests/sevents-collector.yaml"
VALUES = ROOT / "infra/helm/sevents-collector/values.yaml"
# The oldest Kubernetes the chart admits (Chart.yaml kubeVersion) and the newest the schema package knows.
KUBERNETES = ("1.25.0", kubernetes_validate.utils.latest_version())

render_py = runpy.run_path(str(ROOT / "infra/helm/render.py"))
# The values the chart requires (no defaults: it refuses to render without them).
REQUIRED: dict[str, Any] = {
    "image": {"repository": "myregistry.azurecr.io/sevents-collector"},
    "eventHubs": {"namespace": "myns.servicebus.windows.net"},
    "workloadIdentity": {"clientId": "8d7c6b5a-4e3f-4a2b-9c1d-0e9f8a7b6c5d"},
}


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def with_required(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` over the required ones (one level of tables merged)."""
    merged = {key: dict(value) for key, value in REQUIRED.items()}
    for key, value in values.items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
    return merged


def rendered(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's objects with the required values and ``values`` (release namespace sevents)."""
    pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's engine) is not installed here")
    return [d for text in render_py["render"](with_required(values or {})).values() for d in documents(text)]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def assert_valid(docs: list[dict[str, Any]]) -> None:
    assert docs
    for doc in docs:
        for version in KUBERNETES:
            kubernetes_validate.validate(doc, version, strict=True)


def test_committed_manifests_pass_the_kubernetes_schemas() -> None:
    """Every object of the plain manifests is valid, strictly, for the oldest and newest Kubernetes."""
    docs = documents(MANIFESTS.read_text())
    assert [d["kind"] for d in docs] == ["Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"]
    assert_valid(docs)


def test_chart_renders_and_passes_the_kubernetes_schemas() -> None:
    """The chart's output, with its defaults and with every option turned on or off, is valid (the PodMonitor, a
    custom resource the schemas do not know, is checked in test_infra_chart_config.py)."""
    assert_valid(rendered())
    assert_valid(rendered({"hostNetwork": False, "metrics": {"scrape": False}, "priorityClassName": "x"}))
    assert_valid(rendered({"metrics": {"host": "[fd00::4]"}, "probes": {"pollMaxAgeSeconds": 300}}))  # httpGet.host
    everything = rendered(
        {
            "imagePullSecrets": [{"name": "acr-pull"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "kubernetes.azure.com/mode", "operator": "In", "values": ["user"]}
                                ]
                            }
                        ]
                    }
                }
            },
            "podAnnotations": {"example.com/team": "sre"},
            "podLabels": {"example.com/tier": "agent"},
            "extraEnv": [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel:4318"}],
            "extraEnvFrom": [{"secretRef": {"name": "more"}}],
            "webhook": {"urlSecret": {"name": "hook"}},
            "eventHubs": {"connectionStringSecret": {"name": "sas"}},
            "settings": {"webhook_event_types": ["Preempt"], "poll_interval": 2},
            "approval": {"event_types": ["Reboot"], "max_duration_s": 30},
            "networkPolicy": {"enabled": True, "from": [{"namespaceSelector": {"matchLabels": {"team": "mon"}}}]},
            "podMonitor": {"enabled": True},
        }
    )
    assert {d["kind"] for d in everything} >= {"NetworkPolicy", "PodMonitor", "DaemonSet"}
    assert_valid([d for d in everything if d["kind"] != "PodMonitor"])
    assert_valid(
        rendered({"metrics": {"enabled": False}, "probes": {"enabled": False}, "networkPolicy": {"enabled": True}})
    )


def test_committed_manifests_are_the_charts_output() -> None:
    """infra/helm/manifests is exactly what render.py makes of the chart now (no hand edits, no drift)."""
    pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's engine) is not installed here")
    assert MANIFESTS.read_text() == render_py["plain"](), "run: .venv/bin/python infra/helm/render.py"


def test_daemonset_runs_on_every_node_with_imds_identity_and_durable_state() -> None:
    """Host network, every taint tolerated, node name from the downward API, workload identity, hostPath state."""
    docs = documents(MANIFESTS.read_text())
    pod = by_kind(docs, "DaemonSet")["spec"]["template"]
    spec = pod["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    (collector,) = spec["containers"]
    env = {e["name"]: e for e in collector["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    account = by_kind(docs, "ServiceAccount")
    assert account["metadata"]["name"] == spec["serviceAccountName"]
    assert "azure.workload.identity/client-id" in account["metadata"]["annotations"]
    (state,) = [v for v in spec["volumes"] if v["name"] == "state"]
    mount = next(m for m in collector["volumeMounts"] if m["name"] == "state")
    assert state["hostPath"]["path"] == mount["mountPath"] == "/var/lib/sevents-collector"


def test_config_map_is_a_valid_collector_configuration(tmp_path: Path) -> None:
    """The collector.toml the pods read ships to Event Hubs and passes the collector's own validation; /metrics
    listens on the pod's own IP (the downward API), not on every address of the node."""
    from collector.settings import load_settings

    docs = documents(MANIFESTS.read_text())
    config = by_kind(docs, "ConfigMap")["data"]["collector.toml"]
    path = tmp_path / "collector.toml"
    path.write_text(config)
    (collector,) = by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in collector["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["SEVENTS_METRICS_ADDR"]["value"] == "$(POD_IP):9464"
    settings = load_settings(file=path, env={"SEVENTS_METRICS_ADDR": "10.224.0.4:9464"})
    assert settings.sink == "eventhubs"
    assert settings.metrics_addr == "10.224.0.4:9464"
    assert "metrics_addr" not in config and "0.0.0.0" not in MANIFESTS.read_text()
    assert tomllib.loads(config)["collector"]["state_dir"] == "/var/lib/sevents-collector"


def test_pods_follow_the_restricted_profile_but_for_host_access() -> None:
    """Non-root, no escalation, all capabilities dropped, RuntimeDefault seccomp, read-only root filesystem."""
    docs = documents(MANIFESTS.read_text())
    spec = by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (collector,) = spec["containers"]
    context = collector["securityContext"]
    assert context == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    (init,) = spec["initContainers"]  # the one root step: owning the hostPath directory
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    labels = by_kind(docs, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"  # host network and hostPath need it


def test_resources_and_scrape_annotations_come_from_the_measured_budget() -> None:
    """Requests cover the peak RSS measured in BENCHMARKS.md, limits match the systemd unit, /metrics is scraped."""
    docs = documents(MANIFESTS.read_text())
    pod = by_kind(docs, "DaemonSet")["spec"]["template"]
    (collector,) = pod["spec"]["containers"]
    resources = collector["resources"]
    benchmarks = (ROOT / "BENCHMARKS.md").read_text()
    (peak,) = (float(m) for m in re.findall(r"peak RSS ([0-9.]+) MiB \(Event Hubs sink and /metrics\)", benchmarks))
    assert peak < float(resources["requests"]["memory"].removesuffix("Mi"))
    unit = (ROOT / "infra/systemd/sevents-collector.service").read_text()
    assert "MemoryMax=256M" in unit and resources["limits"]["memory"] == "256Mi"
    assert "CPUQuota=20%" in unit and resources["limits"]["cpu"] == "200m"
    annotations = pod["metadata"]["annotations"]
    port = collector["ports"][0]["containerPort"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics"
    assert yaml.safe_load(VALUES.read_text())["metrics"]["port"] == port
