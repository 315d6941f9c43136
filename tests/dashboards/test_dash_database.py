"""The Grafana files rendered for another database (``python -m dashboards.generate --database other --out DIR``):
no SQL reads ``sevents`` any more, and every panel, variable and alert query answers from a database named ``other``
holding the same records (the seeded collectors' outboxes ingested again with ``--database other``) what the
committed files answer from ``sevents``."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import generate
from dashboards.templating import Selection
from ingest.handler import Handler
from ingest.migrate import Target, migrate
from ingest.source_outbox import OutboxSource
from ingest.writer import Writer
from tests.dashboards.conftest import Seeded, around
from tests.dashboards.dash_helpers import Frame, alert_rules, context, dashboards, run
from tests.dashboards.test_dash_concrete import _all, _concrete, _with_event

OTHER = "other"
# Panels the seeded scenario may give no row to (no approval policy, collectors heard until just before, no
# downtime without an event, no poll error): empty from sevents as from other.
NOTHING_SEEDED = {
    "sevents-approval / Approval policy decisions",
    "sevents-approval / Approved by sevents",
    "sevents-fleet / Silent and retired collectors",
    "sevents-impact / Unannounced pauses and reboots",
    "sevents-pipeline / Poll errors and drops",
    # no Azure inventory, annotations or central feed in the seeded run (test_ingest_feed_panels.py has rows)
    "sevents-fleet / Coverage per subscription, resource group and set",
    "sevents-fleet / Downtime with no scheduled event seen (gaps)",
    "sevents-fleet / Events announced to VMs without a collector",
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What an operator gets from the command line: every Grafana file for database ``other``."""
    out = tmp_path_factory.mktemp("grafana-other")
    assert generate.main(["--database", OTHER, "--out", str(out)]) == 0
    assert generate.main(["--database", OTHER, "--out", str(out), "--check"]) == 0
    return out


@pytest.fixture(scope="module")
def other(seeded: Seeded) -> Seeded:
    """The seeded records ingested again, from a copy of the same outboxes, into database ``other``."""
    migrate(seeded.client, Target(database=OTHER))
    handler = Handler(Writer(seeded.client, OTHER), source="outbox", stop=threading.Event())
    OutboxSource([str(seeded.outboxes / "*")], until_idle=True).run(handler, threading.Event())
    assert handler.stored > 0
    return seeded


def _sql(root: Path) -> list[str]:
    texts = [text for model in dashboards(root).values() for text in generate.sql_texts(model)]
    return texts + [text for rule in alert_rules(root) for text in generate.sql_texts(rule)]


def test_rendered_sql_reads_the_other_database_only(rendered: Path) -> None:
    """No SQL of the rendered dashboards and alert rules names ``sevents.``; every one that reads a table reads
    ``other.``; everything else is what is committed; the data source's default database is ``other``."""
    texts = _sql(rendered)
    assert len(texts) == len(_sql(generate.HERE)) > 50
    for text in texts:
        assert "sevents." not in text, text
        assert f"FROM {OTHER}." in text, text
    for uid, model in dashboards(rendered).items():
        assert model == generate.for_database(dashboards()[uid], OTHER), uid
    assert alert_rules(rendered) == generate.for_database(alert_rules(), OTHER)
    source = yaml.safe_load((rendered / "provisioning" / "datasources" / "sevents-clickhouse.yaml").read_text())
    assert source["datasources"][0]["jsonData"]["defaultDatabase"] == OTHER
    committed = sorted(p.relative_to(generate.HERE) for p in generate.PROVISIONING.rglob("*") if p.is_file())
    assert committed == sorted(p.relative_to(rendered) for p in (rendered / "provisioning").rglob("*") if p.is_file())


def test_database_names_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A name that is not a plain identifier (it is spliced into SQL) is refused, as the ingest refuses it; so is
    rewriting the committed files for another database."""
    for argv in (["--database", "x; DROP TABLE y", "--out", str(tmp_path)], ["--database", OTHER]):
        with pytest.raises(SystemExit) as exited:
            generate.main(argv)
        assert exited.value.code == 2
    assert "not a plain identifier" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def _same(sevents: Frame, other: Frame, where: str) -> int:
    assert other.columns == sevents.columns, where
    assert len(other.rows) == len(sevents.rows), where
    return len(other.rows)


def _variables(seeded: Seeded, uid: str, model: dict[str, Any], everything: bool) -> dict[str, Selection]:
    concrete = _concrete(seeded, model, 0)
    return _with_event(seeded, uid, _all(model, concrete) if everything else concrete)


@pytest.mark.parametrize("everything", [True, False], ids=["all", "concrete"])
def test_every_panel_answers_from_the_other_database(other: Seeded, rendered: Path, everything: bool) -> None:
    """Each panel and variable query of the rendered dashboards, with every variable on All or on one value taken
    from the rendered variable queries, answers from ``other`` the columns and as many rows as the committed one
    from ``sevents``; with All, every panel shows rows but those the scenario gives none."""
    start, end = around(other)
    ctx = context(start, end)
    committed = dashboards()
    shown: dict[str, int] = {}
    for uid, model in dashboards(rendered).items():
        variables = _variables(other, uid, model, everything)
        for index, item in enumerate(model["panels"]):
            for number, target in enumerate(item.get("targets", [])):
                original = committed[uid]["panels"][index]["targets"][number]["rawSql"]
                where = f"{uid} / {item['title']}"
                rows = _same(
                    run(other.client, original, variables, ctx),
                    run(other.client, target["rawSql"], variables, ctx),
                    where,
                )
                shown[where] = shown.get(where, 0) + rows
        for index, variable in enumerate(model["templating"]["list"]):
            if variable["type"] == "query":
                original = committed[uid]["templating"]["list"][index]["query"]["rawSql"]
                where = f"{uid} / ${variable['name']}"
                shown[where] = _same(
                    run(other.client, original, variables, ctx),
                    run(other.client, variable["query"]["rawSql"], variables, ctx),
                    where,
                )
    assert len(shown) >= 40
    empty = {name for name, rows in shown.items() if not rows}
    if everything:
        assert empty <= NOTHING_SEEDED, "with All every panel shows rows but those the scenario gives none"
    else:
        assert len(empty) < len(shown) // 3, f"too little to compare: {sorted(empty)}"


def test_every_alert_query_answers_from_the_other_database(other: Seeded, rendered: Path) -> None:
    """Each alert query of the rendered rules (conditions and figures) answers from ``other`` over the seeded run
    what the committed one answers from ``sevents``; the maintenance rules and the dead-letter rule fire."""
    start, end = around(other)
    ctx = context(start, end)
    firing = set()
    count = 0
    for rule, committed in zip(alert_rules(rendered), alert_rules(), strict=True):
        for query, original in zip(rule["data"], committed["data"], strict=True):
            if "rawSql" not in query["model"]:
                continue
            where = f"{rule['uid']} [{query['refId']}]"
            rows = _same(
                run(other.client, original["model"]["rawSql"], {}, ctx),
                run(other.client, query["model"]["rawSql"], {}, ctx),
                where,
            )
            if rows and query["refId"] == "A":
                firing.add(rule["uid"])
            count += 1
    assert count >= 15
    assert {"sevents-reboot-redeploy", "sevents-preempt-terminate", "sevents-dead-letters"} <= firing
