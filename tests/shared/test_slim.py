"""What a VM installs stays small and old-Python friendly: the collector side runs on 3.9 with the base dependencies.

The collector side is ``collector/`` and ``sevents/`` (everything ``sevents-collector`` imports). Checked
statically here (vermin for the minimum version, the imports against ``[project] dependencies``); the install
from the bundle into a fresh virtualenv is ``tests/shared/test_bundle.py``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR_SIDE = ("collector", "sevents")
# The central side's console scripts: they run on a collector-only install to say what is missing, so they must
# import on 3.9 too (what they share is sevents/central.py, already on the collector side).
ON_EVERY_INSTALL = ("ingest/entry.py", "dashboards/entry.py", "demo/entry.py")
# Import name (two levels inside a namespace package) -> distribution, where they differ.
DISTRIBUTIONS = {
    "prometheus_client": "prometheus-client",
    "azure.eventhub": "azure-eventhub",
    "azure.identity": "azure-identity",
    "opentelemetry.sdk": "opentelemetry-sdk",
    "opentelemetry.exporter": "opentelemetry-exporter-otlp-proto-http",
    "opentelemetry.metrics": "opentelemetry-api",
    "opentelemetry.trace": "opentelemetry-api",
    "opentelemetry.context": "opentelemetry-api",
    "opentelemetry": "opentelemetry-api",  # ``from opentelemetry import trace``: the API's modules
}
NAMESPACES = ("azure", "opentelemetry")
VERMIN = "import sys; from vermin.main import main; sys.exit(main())"


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def _vermin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # vermin has no __main__ module; its console script is this one call.
        [sys.executable, "-c", VERMIN, "--no-tips", "--violations", "-t=3.9-", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_collector_side_needs_python_3_9_at_most() -> None:
    """vermin finds nothing in collector/ and sevents/ that Python 3.9 lacks."""
    result = _vermin(*COLLECTOR_SIDE, *ON_EVERY_INSTALL)
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.search(r"Minimum required versions: 3\.([0-9]+)", result.stdout)
    assert found is not None, result.stdout
    assert int(found.group(1)) <= 9, result.stdout


def test_evaluated_annotations_need_python_3_9_at_most() -> None:
    """Settings annotations are evaluated at start-up (sevents.config uses get_type_hints): no ``X | None`` there."""
    result = _vermin("--eval-annotations", "collector/settings.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_requires_python_says_3_9() -> None:
    """The package admits the Python versions the collector supports."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert project["requires-python"] == ">=3.9"


def _third_party_imports(package: str) -> set[str]:
    stdlib = sys.stdlib_module_names
    found: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in stdlib and top not in COLLECTOR_SIDE:
                    found.add(".".join(name.split(".")[:2]) if top in NAMESPACES else top)
    return found


def test_collector_side_imports_only_base_dependencies() -> None:
    """Every third-party package collector/ and sevents/ import is a base dependency, none from the central extra."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    base = {re.split(r"[<>=;! \[]", d)[0].lower() for d in project["dependencies"]}
    imported = set().union(*(_third_party_imports(p) for p in COLLECTOR_SIDE))
    assert imported, "the scan found no third-party import at all"
    for name in sorted(imported):
        dist = DISTRIBUTIONS.get(name, name)
        assert dist in base, f"{name} is imported by the collector side but {dist} is not a base dependency"


def test_central_extra_holds_the_heavy_packages() -> None:
    """chDB and ClickHouse's client come with ``sevents[central]`` only."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    central = " ".join(project["optional-dependencies"]["central"])
    base = " ".join(project["dependencies"])
    for heavy in ("chdb", "clickhouse-connect", "msgspec", "orjson"):
        assert heavy in central
        assert heavy not in base
