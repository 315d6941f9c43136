"""The command line: help, config errors listed together, audit questions in three formats, report dispatch."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo import synthetic
from ingest import cli, queries
from ingest.handler import Handler
from ingest.output import render
from ingest.queries import Result

from .conftest import deliveries

BASE = synthetic.BASE_TIME


def test_help_explains_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    """--help names migrate, run, audit and report and how secrets are passed."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for word in ("migrate", "run", "audit", "report", "SEVENTS_CLICKHOUSE_PASSWORD"):
        assert word in out


def test_bad_config_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several mistakes in file and flags are reported together, and the process refuses to run."""
    config = tmp_path / "ingest.toml"
    config.write_text('[ingest]\nbatch_max_records = "lots"\nsurprise = 1\nsource = "kafka"\n')
    code = cli.main(["run", "--config", str(config), "--clickhouse", "https://u:secret@h:8443", "--cluster", "a b"])
    err = capsys.readouterr().err
    assert code == 2
    for problem in ("batch_max_records", "unknown setting 'surprise'"):
        assert problem in err
    config.write_text('[ingest]\nsource = "kafka"\n')
    code = cli.main(["run", "--config", str(config), "--clickhouse", "https://u:secret@h:8443", "--cluster", "a b"])
    err = capsys.readouterr().err
    assert code == 2
    for problem in ("must not contain a password", "cluster 'a b'", "source 'kafka'"):
        assert problem in err
    assert "secret" not in err


def test_eventhubs_source_needs_its_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """--source eventhubs without credentials or checkpoint store names each missing piece; the hub and the
    container default to the names infra/azure/main.bicep creates, and an empty one is named too."""
    assert cli.main(["run", "--source", "eventhubs", "--clickhouse", "chdb:///tmp/x"]) == 2
    err = capsys.readouterr().err
    for name in ("eventhubs_namespace", "checkpoint_blob_url"):
        assert name in err
    assert "needs eventhubs_name\n" not in err and "checkpoint_container" not in err
    argv = ["run", "--source", "eventhubs", "--clickhouse", "chdb:///tmp/x", "--eventhubs-name", ""]
    assert cli.main([*argv, "--checkpoint-container", ""]) == 2
    err = capsys.readouterr().err
    for name in ("needs eventhubs_name\n", "checkpoint_container"):
        assert name in err


def test_run_takes_the_event_hubs_settings_as_flags_as_the_collector_does(capsys: pytest.CaptureFixture[str]) -> None:
    """The namespace, hub, consumer group and checkpoint store are flags of run, spelled as the collector's."""
    settings = cli._settings(
        cli.parser().parse_args(
            [
                "run",
                "--source",
                "eventhubs",
                "--eventhubs-namespace",
                "ns.servicebus.windows.net",
                "--eventhubs-name",
                "hub",
                "--eventhubs-consumer-group",
                "cg",
                "--checkpoint-blob-url",
                "https://acct.blob.core.windows.net",
                "--checkpoint-container",
                "cp",
            ]
        )
    )
    assert (settings.eventhubs_namespace, settings.eventhubs_name, settings.eventhubs_consumer_group) == (
        "ns.servicebus.windows.net",
        "hub",
        "cg",
    )
    assert (settings.checkpoint_blob_url, settings.checkpoint_container) == ("https://acct.blob.core.windows.net", "cp")


def test_audit_vm_takes_the_vm_as_report_spells_it_too(capsys: pytest.CaptureFixture[str]) -> None:
    """audit vm VM and audit vm --vm VM are the same; neither, or two different VMs, is exit 2 saying so."""
    assert cli.main(["audit", "vm", "--clickhouse", "chdb:///nonexistent/x"]) == 2
    assert cli.main(["audit", "vm", "a", "--vm", "b", "--clickhouse", "chdb:///nonexistent/x"]) == 2
    assert capsys.readouterr().err.count("name one VM, as VM or --vm VM") == 2


def test_an_age_reaching_before_any_record_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    for age in ("99999999999d", "999999999999999999999s", "30000d"):
        assert cli.main(["audit", "events", "--since", age, "--clickhouse", "chdb:///nonexistent/x"]) == 2
        assert "before 1970" in capsys.readouterr().err


def test_parse_when_accepts_now_ages_and_iso_times() -> None:
    """--since/--until take now, an age before now, or an ISO time (UTC when no zone is given)."""
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert cli.parse_when("now", now) == now
    assert cli.parse_when("90m", now) == now - timedelta(minutes=90)
    assert cli.parse_when("2d", now) == now - timedelta(days=2)
    assert cli.parse_when("2026-01-01T00:00:00Z", now) == datetime(2026, 1, 1, tzinfo=UTC)
    assert cli.parse_when("2026-01-01 12:00", now) == datetime(2026, 1, 1, 12, tzinfo=UTC)
    with pytest.raises(ValueError):
        cli.parse_when("yesterday", now)


def test_audit_queries_answer_the_questions(ch: Any, db: str, handler: Handler) -> None:
    """VM history, event per fault domain, disruptive events and silent VMs come from the stored history."""
    recs = synthetic.lifecycle("E-1", 0) + synthetic.lifecycle("E-1", 1) + synthetic.lifecycle("E-1", 4)
    recs.append(synthetic.transition(vm_index=2, event_id="E-2", event_type="Freeze"))
    recs += [
        synthetic.heartbeat(vm_index=0, observed_at=BASE),
        synthetic.heartbeat(vm_index=1, observed_at=BASE + timedelta(minutes=10)),
    ]
    handler(deliveries(recs))
    window = {"since": BASE - timedelta(hours=1), "until": BASE + timedelta(hours=1)}
    history = queries.run(ch, queries.VM_HISTORY, db, vm="vm-001", **window).dicts()
    assert [(r["kind"], r["status"]) for r in history] == [
        ("appeared", "Scheduled"),
        ("status_changed", "Started"),
        ("disappeared", ""),
    ]
    assert (
        queries.run(
            ch, queries.VM_HISTORY, db, vm="vm-001", since=BASE + timedelta(hours=1), until=BASE + timedelta(hours=2)
        ).rows
        == []
    )
    per_fd = queries.run(ch, queries.EVENT_BY_FAULT_DOMAIN, db, event_id="E-1").dicts()
    spans = [(r["fault_domain"], r["affected_vms"], r["started_to_gone_s"]) for r in per_fd]
    assert spans == [(0, 1, 30.0), (1, 2, 30.0)]
    disruptive = queries.run(ch, queries.DISRUPTIVE_EVENTS, db, types=["Reboot", "Redeploy"], **window).dicts()
    latencies = [(r["event_id"], r["approval_latency_s"], r["started_to_gone_s"]) for r in disruptive]
    assert latencies == [("E-1", 300.0, 30.0)]
    silent = queries.run(ch, queries.SILENT_VMS, db, now=BASE + timedelta(minutes=12), threshold_s=300).dicts()
    assert [r["vm_name"] for r in silent] == ["vm-000"]
    assert silent[0]["silent_for_s"] == 720.0


def test_every_query_runs_on_an_empty_schema(ch: Any, db: str) -> None:
    """Each query in the one SQL module is valid against the migrated schema."""
    values: dict[str, Any] = {"String": "x", "DateTime64": BASE, "Array(String)": ["Reboot"], "UInt32": 60}
    for query in queries.ALL:
        result = queries.run(ch, query, db, **{name: values[kind] for name, kind in query.params.items()})
        assert result.rows == ([(0, 0, 0, 0, 0, 0, 0)] if query is queries.COUNTS else [])


def test_output_formats_table_json_csv() -> None:
    """One result renders as an aligned table, JSON objects and CSV with a header."""
    at = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    result = Result(("vm", "at", "fds", "note"), [("vm-1", at, [0, 2], None), ("vm-22", at, [], "a,b")])
    table = render(result, "table").splitlines()
    assert table[0].split() == ["vm", "at", "fds", "note"]
    assert table[2].startswith("vm-1   2026-11-21T12:00:00.000Z  0,2")
    assert json.loads(render(result, "json"))[1] == {
        "vm": "vm-22",
        "at": "2026-11-21T12:00:00.000Z",
        "fds": [],
        "note": "a,b",
    }
    rows = list(csv.reader(io.StringIO(render(result, "csv"))))
    assert rows == [
        ["vm", "at", "fds", "note"],
        ["vm-1", "2026-11-21T12:00:00.000Z", "0,2", ""],
        ["vm-22", "2026-11-21T12:00:00.000Z", "", "a,b"],
    ]
    assert render(Result(("a",), []), "table") == "(no rows)\n"


def test_report_subcommand_dispatches_to_dashboards(capfd: pytest.CaptureFixture[str]) -> None:
    """`report` runs the dashboards' own report command with its arguments (here: its --help) and its exit code."""
    assert cli.main(["report", "--help"]) == 0
    assert "--out" in capfd.readouterr().out
    assert cli.main(["report", "--since", "not-a-time"]) != 0


def test_eventhubs_settings_build_the_eventhubs_source_without_secrets_on_the_command_line() -> None:
    """source=eventhubs with connection strings from the environment yields the Event Hubs engineer's source."""
    from ingest.settings import load
    from ingest.source_eventhubs import EventHubsSource
    from ingest.wiring import make_source

    env = {
        "SEVENTS_SOURCE": "eventhubs",
        "SEVENTS_EVENTHUBS_NAME": "records",
        "SEVENTS_EVENTHUBS_CONNECTION_STRING": "Endpoint=sb://127.0.0.1;SharedAccessKeyName=k;SharedAccessKey=s;"
        "UseDevelopmentEmulator=true",
        "SEVENTS_CHECKPOINT_CONTAINER": "checkpoints",
        "SEVENTS_CHECKPOINT_CONNECTION_STRING": "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        "AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;",
    }
    settings = load(file=None, env=env, flags={"clickhouse": "chdb:///tmp/unused"})
    assert "SharedAccessKey" not in repr(settings)
    assert isinstance(make_source(settings), EventHubsSource)


def test_audit_on_a_missing_database_is_one_line_not_a_traceback(
    ch: Any, ch_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An audit against a database that was never migrated exits 1 and says how to fix it."""
    code = cli.main(["audit", "counts", "--clickhouse", f"chdb://{ch_path}", "--database", "never_migrated"])
    err = capsys.readouterr().err
    assert code == 1
    assert "never_migrated" in err and "sevents-ingest migrate" in err and "Traceback" not in err


def test_audit_rejects_an_empty_window_and_names_accepted_times(capsys: pytest.CaptureFixture[str]) -> None:
    """--since after --until, or a time that is not one, exit 2 before ClickHouse is touched."""
    assert cli.main(["audit", "events", "--since", "1h", "--until", "2h", "--clickhouse", "chdb:///nowhere"]) == 2
    assert "must be before --until" in capsys.readouterr().err
    assert cli.main(["audit", "vm", "web-0", "--since", "yesterday", "--clickhouse", "chdb:///nowhere"]) == 2
    assert "90m/24h/7d" in capsys.readouterr().err
    assert not Path("/nowhere").exists()


def test_audit_of_an_unknown_vm_or_event_says_so_on_stderr(
    ch: Any, ch_path: Path, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty answer about one named VM or EventId is explained on stderr; stdout stays valid JSON."""
    target = ["--clickhouse", f"chdb://{ch_path}", "--database", db, "--format", "json"]
    assert cli.main(["audit", "vm", "no-such-vm", *target]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == [] and "no records for VM 'no-such-vm'" in captured.err
    assert cli.main(["audit", "event", "NO-SUCH-EVENT", *target]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == [] and "no records for EventId 'NO-SUCH-EVENT'" in captured.err


def test_silent_threshold_must_be_a_positive_number_of_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    """A negative --threshold is a usage error (exit 2) naming the flag, not a ClickHouse parameter error."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["audit", "silent", "--threshold", "-5", "--clickhouse", "chdb:///nowhere"])
    assert exited.value.code == 2 and "--threshold: must be at least 1" in capsys.readouterr().err


def test_disruptive_names_an_unknown_event_type_instead_of_answering_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--event-type Bogus`` used to return no rows and exit 0; it is a usage error naming the types, with a hint."""
    argv = ["audit", "disruptive", "--since", "1h", "--clickhouse", "chdb:///nowhere"]
    assert cli.main([*argv, "--event-type", "Reboot,reboto", "--event-type", "Bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sevents-ingest: --event-type: unknown event type 'reboto'")
    assert "did you mean Reboot?" in err and "'Bogus'" in err
    assert "Freeze, Reboot, Redeploy, Preempt, Terminate" in err
    assert cli.main([*argv, "--event-type", ","]) == 2 and "names no event type" in capsys.readouterr().err
    assert cli.main([*argv, "--types", "Rebot"]) == 2 and "did you mean Reboot?" in capsys.readouterr().err
    assert not Path("/nowhere").exists()  # refused before ClickHouse was opened


def test_report_checks_its_event_type_filter_too(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """``sevents-ingest report`` is sevents-report: the same --event-type, the same refusal of a typo."""
    out = tmp_path / "r.html"
    assert cli.main(["report", "--clickhouse", "chdb:///nowhere", "--out", str(out), "--event-type", "Preemt"]) == 2
    assert "--event-type: unknown event type 'Preemt'" in capfd.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    ("flags", "types", "note"),
    [
        ([], ["Reboot", "Redeploy"], False),
        (["--event-type", "Freeze"], ["Freeze"], False),
        (["--event-type", "Freeze", "--event-type", "Preempt"], ["Freeze", "Preempt"], False),
        (["--event-type", "Freeze,Preempt"], ["Freeze", "Preempt"], False),
        (["--types", "Freeze,Preempt"], ["Freeze", "Preempt"], True),  # the old spelling, with a note
    ],
)
def test_disruptive_event_type_filter_spellings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flags: list[str], types: list[str], note: bool
) -> None:
    """One spelling everywhere: --event-type, repeatable or comma-separated; --types still works and says so."""
    asked: dict[str, Any] = {}

    def run(client: Any, query: Any, database: str, **params: Any) -> Result:
        asked.update(params)
        return Result(columns=("event_id",), rows=[])

    monkeypatch.setattr(cli, "open_client", lambda *a, **k: None)
    monkeypatch.setattr(cli.queries, "run", run)
    argv = ["audit", "disruptive", "--since", "1h", "--format", "json", "--clickhouse", "chdb:///nowhere"]
    assert cli.main([*argv, *flags]) == 0
    assert asked["types"] == types
    err = capsys.readouterr().err
    if note:
        assert err == (
            "sevents-ingest audit disruptive: note: --types is the old spelling of --event-type (still accepted); "
            "write --event-type TYPE, repeatable or comma-separated\n"
        )
    else:
        assert "note" not in err


def test_draining_an_outbox_that_is_not_there_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``run --until-idle`` on a glob that matches nothing, or a missing path, used to exit 0 having done nothing."""
    target = ["--clickhouse", f"chdb://{tmp_path / 'ch'}"]
    assert cli.main(["run", "--until-idle", "--source", f"outbox:{tmp_path}/vms/*", *target]) == 2
    assert f"no outbox matches {tmp_path}/vms/*" in capsys.readouterr().err
    assert cli.main(["run", "--until-idle", "--source", f"outbox:{tmp_path / 'missing'}", *target]) == 2
    assert "no outbox matches" in capsys.readouterr().err
    assert not (tmp_path / "ch").exists()  # nothing was opened, nothing created


def test_a_connection_error_names_the_host_and_port(capsys: pytest.CaptureFixture[str]) -> None:
    """A refused connection says which server, host:port (the port used to be dropped), in one line, no traceback."""
    assert cli.main(["audit", "counts", "--clickhouse", "http://reader@127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert "cannot connect to ClickHouse at http://127.0.0.1:1" in err
    assert "Traceback" not in err and "reader" not in err


def test_read_only_commands_create_no_embedded_directory(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """``audit`` and ``report`` on a chdb:// path that does not exist say so (exit 1) instead of creating it empty."""
    missing = tmp_path / "no-such-clickhouse"
    assert cli.main(["audit", "counts", "--clickhouse", f"chdb://{missing}"]) == 1
    assert f"no embedded ClickHouse at {missing}" in capfd.readouterr().err
    out = tmp_path / "report.html"
    assert cli.main(["report", "--since", "1h", "--clickhouse", f"chdb://{missing}", "--out", str(out)]) == 1
    assert f"no embedded ClickHouse at {missing}" in capfd.readouterr().err
    assert not missing.exists() and not out.exists()


def test_log_level_is_a_choice_in_any_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--log-level takes the levels the logging setup accepts, in any case; another word is a usage error, exit 2."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["migrate", "--log-level", "loud", "--clickhouse", f"chdb://{tmp_path}/ch"])
    assert exited.value.code == 2
    assert "invalid choice: 'loud'" in capsys.readouterr().err
    args = cli.parser().parse_args(["migrate", "--log-level", "WARNING"])
    assert args.log_level == "warning"


def test_migrate_help_reads_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """migrate --help kept its examples one per line (they were reflowed into one garbled paragraph)."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["migrate", "--help"])
    assert exited.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  sevents-ingest migrate --clickhouse chdb:///var/lib/sevents/ch" in lines
    assert not any("audit" in line or "report" in line for line in lines)  # other commands' examples
    assert max(len(line) for line in lines) <= 110


def test_a_config_error_is_one_line_per_problem(capsys: pytest.CaptureFixture[str]) -> None:
    """An invalid setting is one line on stderr (no header line before it), exit 2."""
    assert cli.main(["migrate", "--database", "x y"]) == 2
    assert (
        capsys.readouterr().err == "sevents-ingest: invalid configuration: database 'x y' is not a plain identifier\n"
    )


def test_an_unreachable_clickhouse_is_one_line(capfd: pytest.CaptureFixture[str]) -> None:
    """The driver's own warnings about the failure are not printed before our one line saying it, exit 1."""
    assert cli.main(["migrate", "--clickhouse", "http://127.0.0.1:1"]) == 1
    (line,) = capfd.readouterr().err.splitlines()
    assert line.startswith("sevents-ingest: cannot connect to ClickHouse at http://127.0.0.1:1"), line
