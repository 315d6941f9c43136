"""Every config file the project ships or shows loads in every program, now that unknown tables and settings outside
any table are refused: the systemd samples (with their commented [approval] table turned on), the cloud-init and
Helm manifests' embedded files, and the TOML examples of the READMEs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from collector.approval import SECTION as APPROVAL_SECTION
from collector.settings import SECTION as COLLECTOR_SECTION
from collector.settings import load_approval, load_settings
from ingest.coordinator_settings import SECTION as COORDINATOR_SECTION
from ingest.settings import SECTION as INGEST_SECTION
from ingest.settings import load
from sevents.config import TABLES

ROOT = Path(__file__).resolve().parents[2]
DOCS = (
    "README.md",
    "collector/README.md",
    "ingest/README.md",
    *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("infra/**/*.md")),
)


def _uncommented_approval(text: str) -> str:
    """``infra/systemd/collector.toml`` with its commented ``# [approval]`` sample turned on."""
    head, _, sample = text.partition("# [approval]\n")
    return head + "[approval]\n" + "".join(line.removeprefix("# ") + "\n" for line in sample.splitlines())


def _shipped() -> dict[str, str]:
    """Every config file of the repository, by where it is: name -> TOML text."""
    found = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(ROOT.glob("infra/**/*.toml"))}
    found["infra/systemd/collector.toml with [approval]"] = _uncommented_approval(found["infra/systemd/collector.toml"])
    # the files cloud-init writes, and the ConfigMaps of the manifests rendered from the Helm chart
    for manifest in (ROOT / "infra/vm/cloud-init.yaml", *sorted(ROOT.glob("infra/helm/manifests/*.yaml"))):
        for doc in yaml.safe_load_all(manifest.read_text()):
            embedded = {f["path"]: f["content"] for f in doc.get("write_files", [])} if doc else {}
            embedded.update(doc["data"] if doc and doc.get("kind") == "ConfigMap" else {})
            for name, content in embedded.items():
                if name.endswith(".toml"):
                    found[f"{manifest.relative_to(ROOT)}: {name}"] = content
    for doc in DOCS:
        path = ROOT / doc
        blocks = re.findall(r"^```toml\n(.*?)^```", path.read_text(), re.MULTILINE | re.DOTALL) if path.exists() else []
        found.update({f"{doc} example {i + 1}": block for i, block in enumerate(blocks)})
    return found


SHIPPED = _shipped()


def test_the_shipped_files_are_found() -> None:
    """The samples this test exists for are among those it loads (a moved file must not pass by going unread)."""
    names = set(SHIPPED)
    assert {"infra/systemd/collector.toml", "infra/systemd/collector-eventhubs.toml"} <= names
    assert any(name.startswith("infra/vm/cloud-init.yaml") for name in names)
    assert any(name.startswith("infra/helm/manifests/") for name in names)
    assert any(name.startswith("collector/README.md") for name in names)
    assert "event_types" in SHIPPED["infra/systemd/collector.toml with [approval]"]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_config_loads_in_every_program(name: str, tmp_path: Path) -> None:
    """The collector (settings and approval policy) and the ingest each accept the file."""
    path = tmp_path / "sevents.toml"
    path.write_text(SHIPPED[name])
    load_settings(file=path, env={})
    assert load_approval(path).enabled == ("\n[approval]\n" in f"\n{SHIPPED[name]}")
    load(file=path, env={}, flags={})


def test_every_program_table_is_a_known_table() -> None:
    """The tables the programs read are the ones a config file may hold, and no other."""
    assert {COLLECTOR_SECTION, APPROVAL_SECTION, INGEST_SECTION, COORDINATOR_SECTION} == set(TABLES)
