"""The committed Grafana JSON, provisioning and compose files: generated, well formed, consistent."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import filters, generate, grafana
from dashboards.alerts import CONTACT_POINT, RULES
from ingest import cli
from ingest.event_sql import SILENT_AFTER_S
from tests.dashboards.dash_helpers import alert_rules, dashboards, panel_queries

ROOT = Path(__file__).resolve().parents[2]
PROVISIONING = ROOT / "dashboards" / "provisioning"
COMPOSE = ROOT / "infra" / "compose"
REQUIRED_VARIABLES = ("datasource", "subscription", "location", "scale_set", "fault_domain", "vm", "event_type")


def test_committed_files_equal_generator_output() -> None:
    """Every generated file is committed exactly as the generator writes it (run python -m dashboards.generate)."""
    for path, text in generate.outputs().items():
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale"
    assert generate.main(["--check"]) == 0


def test_stale_finds_drift(tmp_path: Path) -> None:
    """A file that differs from the generator's text, or is missing, is reported; an equal one is not."""
    same, changed, missing = tmp_path / "same.json", tmp_path / "changed.json", tmp_path / "missing.json"
    same.write_text("{}\n", encoding="utf-8")
    changed.write_text("{}\n", encoding="utf-8")
    files = {same: "{}\n", changed: '{"a": 1}\n', missing: "{}\n"}
    assert generate.stale(files) == [changed, missing]


def test_the_five_dashboards_exist() -> None:
    """Fleet overview, timeline, approval latency, impact and pipeline health, each with a unique uid."""
    assert set(dashboards()) == {
        "sevents-fleet",
        "sevents-timeline",
        "sevents-approval",
        "sevents-impact",
        "sevents-pipeline",
    }


def _overlaps(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]
    )


@pytest.mark.parametrize("uid", sorted(dashboards()))
def test_dashboard_is_well_formed(uid: str) -> None:
    """Unique panel ids, grid positions inside 24 columns without overlap, datasources through $datasource."""
    model = dashboards()[uid]
    panels = model["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    for panel in panels:
        pos = panel["gridPos"]
        assert set(pos) == {"x", "y", "w", "h"} and pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": grafana.PLUGIN_ID, "uid": "${datasource}"}
        assert panel["title"] and panel["targets"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert target["editorType"] == "sql" and target["format"] in (0, 1, 2)
            assert isinstance(target["rawSql"], str) and "sevents." in target["rawSql"]
            assert target["refId"] == "A"
    for i, a in enumerate(panels):
        for b in panels[i + 1 :]:
            assert not _overlaps(a["gridPos"], b["gridPos"]), f"{a['title']} overlaps {b['title']}"
    names = [v["name"] for v in model["templating"]["list"]]
    assert names[: len(REQUIRED_VARIABLES)] == list(REQUIRED_VARIABLES)
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == {"type": grafana.PLUGIN_ID, "uid": "${datasource}"}
        if variable["name"] in REQUIRED_VARIABLES[1:]:
            assert variable["multi"] and variable["includeAll"], variable["name"]
    requires = {r["id"]: r["version"] for r in model["__requires"]}
    assert requires[grafana.PLUGIN_ID] == grafana.MIN_PLUGIN_VERSION
    assert json.loads(json.dumps(model)) == model


def test_every_variable_reference_is_defined() -> None:
    """No panel refers to a variable the dashboard does not define (typos would stay as literal text)."""
    builtin = {
        "__all",
        "__interval",
        "__interval_s",
        "__timeFilter",
        "__fromTime",
        "__toTime",
        "__timeInterval",
        "__conditionalAll",
        "__value",
        "__url_time_range",
        "__data",
    }
    for uid, model in dashboards().items():
        defined = {v["name"] for v in model["templating"]["list"]}
        text = json.dumps(model["panels"])
        used = set(re.findall(r"\$\{?(\w+)", text))
        assert used - defined - builtin == set(), uid


def test_minimum_plugin_version_is_pinned() -> None:
    """The pinned minimum is at least 4.19.0 (macropro engine, ClickHouse-native $__timeGroup)."""
    major, minor, _ = (int(p) for p in grafana.MIN_PLUGIN_VERSION.split("."))
    assert (major, minor) >= (4, 19)
    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text(encoding="utf-8"))
    installed = compose["services"]["grafana"]["environment"]["GF_INSTALL_PLUGINS"].split()
    assert installed[0] == grafana.PLUGIN_ID
    assert tuple(int(p) for p in installed[1].split(".")) >= (major, minor, 0)


def test_alert_rules_are_well_formed() -> None:
    """Each rule: a ClickHouse table query (no frontend variables), reduce, threshold; labels for routing."""
    rules = alert_rules()
    assert [r["uid"] for r in rules] == [r.uid for r in RULES]
    for rule in rules:
        query, reduce, threshold, *figures = rule["data"]
        queries = [query, *figures[0::2]]
        for item in queries:
            assert item["datasourceUid"] == grafana.DATASOURCE_UID
            assert item["model"]["format"] == grafana.FORMAT_TABLE
            sql = item["model"]["rawSql"]
            assert "$__conditionalAll" not in sql and not re.search(r"\$(?!__)\w", sql), "no variables in alerts"
        for figure_query, figure in zip(figures[0::2], figures[1::2], strict=True):
            assert figure["model"]["type"] == "reduce" and figure["model"]["expression"] == figure_query["refId"]
            assert "$values." + figure["refId"] + "." in str(rule["annotations"]), "each figure is shown"
        assert reduce["model"]["expression"] == "A" and threshold["model"]["expression"] == "B"
        assert rule["condition"] == "C" and rule["labels"]["severity"] in ("page", "ticket")
        assert rule["noDataState"] == "OK"
    paging = {r["title"] for r in rules if r["labels"]["severity"] == "page"}
    assert paging == {"Reboot or Redeploy scheduled", "Preempt or Terminate scheduled"}


def test_every_read_of_events_names_its_months() -> None:
    """Each panel or alert query that reads ``events`` bounds ``stored_month`` (migration 0029), so it reads the
    months its events can be in, not the history; alert rules do it without the range's macros."""
    alerts = [
        (rule["title"], item["model"]["rawSql"])
        for rule in alert_rules()
        for item in rule["data"]
        if "rawSql" in item["model"]
    ]
    panels = [(f"{q.dashboard}: {q.title}", q.sql) for q in panel_queries()]
    reads = re.compile(r"\bsevents\.events\b")
    reading = [(name, sql) for name, sql in panels + alerts if reads.search(sql)]
    assert len(reading) > 20
    for name, sql in reading:
        assert len(reads.findall(sql)) == sql.count("stored_month >= toString(toYYYYMM("), name
        assert (name, sql) not in alerts or "$__" not in sql, name


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_provisioning_files() -> None:
    """The datasource (read-only user, password from the environment), dashboard provider and notifications."""
    source = _yaml(PROVISIONING / "datasources" / "sevents-clickhouse.yaml")["datasources"][0]
    assert source["uid"] == grafana.DATASOURCE_UID and source["type"] == grafana.PLUGIN_ID
    assert source["jsonData"]["username"] == "grafana" and source["jsonData"]["defaultDatabase"] == "sevents"
    assert source["secureJsonData"]["password"].startswith("${")
    provider = _yaml(PROVISIONING / "dashboards" / "sevents.yaml")["providers"][0]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards/sevents"
    notifications = _yaml(PROVISIONING / "alerting" / "sevents-notifications.yaml")
    assert [c["name"] for c in notifications["contactPoints"]] == [CONTACT_POINT]


def test_no_notification_policy_tree_is_provisioned() -> None:
    """Grafana's file provisioning of `policies` replaces the organization's whole policy tree (an operator's own
    routing included), and a policy has no other provisioned form: no file Grafana reads from sevents, and no
    example contact point, carries one. Each rule names the sevents contact point itself (simplified routing),
    with group_by holding the labels Grafana requires of it."""
    provisioned = [p for p in PROVISIONING.rglob("*") if p.suffix in (".yaml", ".yml", ".json")]
    provisioned += sorted((PROVISIONING.parent / "contact-points").glob("*.yaml"))
    assert len(provisioned) >= 8
    for path in provisioned:
        document = json.loads(path.read_text()) if path.suffix == ".json" else _yaml(path)
        assert not {"policies", "resetPolicies"} & set(document), f"{path.name} provisions a policy tree"
    points = {c["name"] for c in _yaml(PROVISIONING / "alerting" / "sevents-notifications.yaml")["contactPoints"]}
    rules = alert_rules()
    assert rules
    for rule in rules:
        settings = rule["notification_settings"]
        assert settings["receiver"] in points, rule["uid"]
        assert {"alertname", "grafana_folder"} <= set(settings["group_by"]), rule["uid"]
        assert all(re.fullmatch(r"\d+[smh]", settings[k]) for k in ("group_wait", "group_interval", "repeat_interval"))
        expected = "1h" if rule["labels"]["severity"] == "page" else "4h"
        assert settings["repeat_interval"] == expected, rule["uid"]
    for name in ("README.md", "contact-points/README.md"):
        text = " ".join((PROVISIONING.parent / name).read_text(encoding="utf-8").split())
        assert "notification_settings" in text and "whole policy tree" in text, name


# what Grafana requires of each receiver type, and where its secret goes
RECEIVER_SETTINGS = {"webhook": ("url",), "slack": ("url",), "teams": ("url",), "email": ("addresses",)}


def test_contact_point_examples_replace_the_provisioned_one() -> None:
    """Slack, Teams, e-mail and webhook examples: each defines the contact point the rules name, with its
    required setting taken from the environment (no secret in a file)."""
    examples = sorted((PROVISIONING.parent / "contact-points").glob("*.yaml"))
    found = set()
    for path in examples:
        doc = _yaml(path)
        assert doc["apiVersion"] == 1
        (point,) = doc["contactPoints"]
        assert point["name"] == CONTACT_POINT, path.name
        for receiver in point["receivers"]:
            found.add(receiver["type"])
            for key in RECEIVER_SETTINGS[receiver["type"]]:
                value = receiver["settings"][key]
                assert value.startswith("${SEVENTS_") and value.endswith("}"), (path.name, key)
    assert found == set(RECEIVER_SETTINGS)


def test_compose_stack() -> None:
    """ClickHouse with the two users, migrations before the ingest, Grafana with provisioning; secrets required."""
    compose = _yaml(COMPOSE / "docker-compose.yml")
    services = compose["services"]
    assert set(services) == {"clickhouse", "migrate", "ingest", "grafana"}
    assert services["ingest"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    mounts = {m.split(":")[1] for m in services["grafana"]["volumes"] if m.startswith("../")}
    assert mounts == {"/etc/grafana/provisioning", "/var/lib/grafana/dashboards/sevents"}
    for service in services.values():
        for mount in service.get("volumes", []):
            if mount.startswith(("./", "../")):
                assert (COMPOSE / mount.split(":")[0]).exists(), mount
    text = (COMPOSE / "docker-compose.yml").read_text(encoding="utf-8")
    for secret in ("CLICKHOUSE_WRITER_PASSWORD", "CLICKHOUSE_GRAFANA_PASSWORD", "GRAFANA_ADMIN_PASSWORD"):
        assert f"${{{secret}:?" in text, f"{secret} must be required, not defaulted"
    # alerting never starts pointed at a black hole (it used to default to 127.0.0.1:9)
    assert "${SEVENTS_ALERT_WEBHOOK_URL:?" in text and "127.0.0.1:9" not in text
    for service in services.values():
        for key, value in (service.get("environment") or {}).items():
            if "PASSWORD" in key or "CONNECTION_STRING" in key:
                assert str(value).startswith("${"), f"{key} must come from the operator's environment"


def test_clickhouse_users_xml() -> None:
    """grafana: readonly=1 with max_execution_time changeable_in_readonly, SELECT only; the writer owns sevents."""
    users = ET.parse(COMPOSE / "clickhouse" / "users.d" / "sevents.xml").getroot()
    profile = users.find("profiles/grafana_readonly")
    assert profile is not None and profile.findtext("readonly") == "1"
    constraint = profile.find("constraints/max_execution_time")
    assert constraint is not None and constraint.find("changeable_in_readonly") is not None
    grafana_user = users.find("users/grafana")
    assert grafana_user is not None and grafana_user.findtext("profile") == "grafana_readonly"
    assert grafana_user.find("password").get("from_env") == "CLICKHOUSE_GRAFANA_PASSWORD"
    assert [q.text for q in grafana_user.findall("grants/query")] == ["GRANT SELECT ON sevents.*"]
    writer = users.find("users/sevents_writer")
    assert writer is not None and writer.find("password").get("from_env") == "CLICKHOUSE_WRITER_PASSWORD"
    config = ET.parse(COMPOSE / "clickhouse" / "config.d" / "sevents.xml").getroot()
    assert config.findtext("access_control_improvements/settings_constraints_replace_previous") == "true"


def test_one_silence_threshold() -> None:
    """`sevents-ingest audit silent`, the silent-collector alert, the heartbeat-age panel, the views
    (custom_sevents_silent_after_s's default in every migration) and the compose stack's ClickHouse profiles call a
    collector silent after the same number of seconds."""
    threshold = SILENT_AFTER_S
    assert threshold == filters.SILENT_AFTER_S
    assert cli.parser().parse_args(["audit", "silent"]).threshold == threshold
    rule = next(r for r in alert_rules() if r["uid"] == "sevents-collector-silent")
    assert rule["data"][2]["model"]["conditions"][0]["evaluator"] == {"type": "gt", "params": [threshold]}
    age = next(p for p in dashboards()["sevents-pipeline"]["panels"] if p["title"] == "Heartbeat age")
    (steps,) = [
        p["value"]["steps"] for p in age["fieldConfig"]["overrides"][0]["properties"] if p["id"] == "thresholds"
    ]
    assert [step["value"] for step in steps] == [None, threshold]
    migrations = "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "ingest" / "migrations").glob("*.sql")))
    defaults = re.findall(r"getSettingOrDefault\('custom_sevents_silent_after_s', (\d+)\)", migrations)
    assert defaults and {int(d) for d in defaults} == {threshold}
    users = ET.parse(COMPOSE / "clickhouse" / "users.d" / "sevents.xml").getroot()
    profiles = [int(e.text or "") for e in users.iter("custom_sevents_silent_after_s")]
    assert profiles and set(profiles) == {threshold}
