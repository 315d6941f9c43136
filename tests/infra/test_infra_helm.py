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


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def rendered(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's engine) is not installed here")
    return [d for text in render_py["render"](values).values() for d in documents(text)]


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
    """The chart's output, with its defaults and with the host network and scrape annotations off, is valid."""
    assert_valid(rendered())
    assert_valid(rendered({"hostNetwork": False, "metrics": {"scrape": False}, "priorityClassName": "x"}))


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
    """The collector.toml the pods read ships to Event Hubs and passes the collector's own validation."""
    from collector.settings import load_settings

    config = by_kind(documents(MANIFESTS.read_text()), "ConfigMap")["data"]["collector.toml"]
    path = tmp_path / "collector.toml"
    path.write_text(config)
    settings = load_settings(file=path, env={})
    assert settings.sink == "eventhubs"
    assert settings.metrics_addr.endswith(":9464")
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
