"""The offline HTML incident report: pure rendering, the CLI against the seeded pipeline, and headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dashboards import svg
from dashboards.report import Filters, ReportData, main, parse_moment, select
from dashboards.report_html import impact_by_fault_domain, lanes_of, render
from demo.synthetic import fleet_report
from tests.dashboards.conftest import Seeded, around

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _event(event_id: str, event_type: str, **extra: Any) -> dict[str, Any]:
    base = {
        "event_id": event_id,
        "event_type": event_type,
        "event_source": "Platform",
        "outcome": "completed",
        "first_seen_at": T0,
        "not_before_first": T0 + timedelta(minutes=15),
        "approved_at": T0 + timedelta(minutes=2),
        "started_at": T0 + timedelta(minutes=2),
        "released_by": "outside",  # started before its NotBefore
        "ended_at": T0 + timedelta(minutes=3),
        "approval_latency_s": 120.0,
        "notice_s": 120.0,
        "duration_s": 7,
        "started_to_gone_s": 60.0,
        "observed_impact_s": 7.5,
        "impacted_vms": 2,
        "affected_vm_count": 1,
        "fault_domains": [0],
        "fault_domain_labels": ["web / FD 0"],
    }
    return {**base, **extra}


def _lane(
    event_id: str,
    vm: str,
    fd: int,
    started: bool = True,
    down_s: float | None = None,
    fault_set: str = "web",
    first: datetime = T0,
) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "event_type": "Reboot",
        "vm_name": vm,
        "fault_domain": fd,
        "fault_set": fault_set,
        "fault_set_id": f"id-of-{fault_set}",
        "first_seen_at": first,
        "started_at": first + timedelta(minutes=2) if started else None,
        "ended_at": first + timedelta(minutes=3),
        "outcome": "completed" if started else "cancelled",
        "observed_impact_s": down_s,
        "detected_by": "" if down_s is None else "pause",
    }


def _data(**filters: Any) -> ReportData:
    f = Filters(since=T0 - timedelta(hours=1), until=T0 + timedelta(hours=1), **filters)
    events = [
        _event("AAAA-1", "Reboot"),
        _event(
            "BBBB-2",
            "Freeze",
            fault_domains=[1],
            outcome="cancelled",
            started_at=None,
            approved_at=None,
            released_by=None,
            started_to_gone_s=None,
            observed_impact_s=None,
        ),
    ]
    lanes = [
        _lane("AAAA-1", "vm-0", 0, down_s=7.5),
        _lane("AAAA-1", "vm-3", 0, down_s=4.5),
        _lane("AAAA-1", "vm-5", 0),  # affected, never hit: no downtime measured
        _lane("BBBB-2", "vm-1", 1, started=False),
    ]
    unannounced = [{"vm_name": "vm-9", "detected_by": "pause", "duration_s": 3.25, "event_id": ""}]
    return ReportData(f, events, lanes, unannounced)


def test_render_is_self_contained() -> None:
    """One HTML file: inline SVG charts and styles, no external script, stylesheet, image or font."""
    html = render(_data(), generated_at=T0)
    assert html.startswith("<!DOCTYPE html>") and html.count('<svg class="chart"') == 4
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html) and "@import" not in html
    assert "url(" not in html and "<link" not in html
    assert html.count('class="bar"') >= 3 + 2


def test_render_escapes_names() -> None:
    """A hostile VM name or EventId is text, never markup."""
    data = _data()
    evil = "<script>alert(1)</script>"
    data.lanes.append({**_lane("AAAA-1", evil, 2)})
    data.events.append(_event(evil, "Reboot"))
    html = render(data, generated_at=T0)
    assert evil not in html and "&lt;script&gt;" in html


def test_select_filters() -> None:
    """Type, VM, fault domain and EventId filters keep the matching events and lanes only."""
    assert {e["event_id"] for e in select(_data(event_types=("Freeze",))).events} == {"BBBB-2"}
    by_vm = select(_data(vms=("vm-3",)))
    assert {e["event_id"] for e in by_vm.events} == {"AAAA-1"} and [x["vm_name"] for x in by_vm.lanes] == ["vm-3"]
    assert {e["event_id"] for e in select(_data(fault_domains=(1,))).events} == {"BBBB-2"}
    assert select(_data(fault_sets=("api",))).events == []
    assert {e["event_id"] for e in select(_data(fault_sets=("web",), fault_domains=(0,))).events} == {"AAAA-1"}
    assert select(_data(event_ids=("nope",))).events == []


def test_impact_by_fault_domain() -> None:
    """Mean and max downtime the VMs hit in each fault domain measured; VMs not hit do not count."""
    assert impact_by_fault_domain(_data()) == [("web / FD 0", [6.0, 7.5])]


def test_render_shows_the_downtime_of_each_vm() -> None:
    """Per VM: the downtime it measured for an event, and a pause no event announced, in their own table."""
    page = render(_data(), generated_at=T0)
    table = page[page.index('<table id="downtime">') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == 4  # the head, vm-0, vm-3 and vm-9; vm-5 was not hit
    assert "vm-0</td><td>Reboot AAAA-1</td><td>pause</td>" in table and '<td class="num">7.5</td>' in table
    assert "vm-9</td><td>none announced</td><td>pause</td>" in table and '<td class="num">3.25</td>' in table


def test_impact_by_fault_domain_keeps_sets_apart() -> None:
    """FD 0 of availability set web and FD 0 of availability set api are two bars, never one."""
    data = _data()
    data.lanes.append(_lane("CCCC-3", "api-0", 0, down_s=12.0, fault_set="api"))
    assert impact_by_fault_domain(data) == [("api / FD 0", [12.0, 12.0]), ("web / FD 0", [6.0, 7.5])]
    assert "api / FD 0 / Reboot CCCC-3 (1 VMs)" in render(data, generated_at=T0)


def test_lanes_group_the_vms_of_each_event_and_domain_by_set_and_domain_in_time_order() -> None:
    """One lane per event and fault domain of its set with its VMs on hover, under a heading per set and fault
    domain (set label, then domain number), each group's lanes in time order whatever their downtime; the
    announced NotBefore and the approval marked; a scope line says what the report covers."""
    lanes = lanes_of(_data())
    assert [lane.label for lane in lanes] == [
        "web / FD 0 / Reboot AAAA-1 (3 VMs)",
        "web / FD 1 / Reboot BBBB-2 (1 VMs)",
    ]
    assert [(lane.group, lane.short) for lane in lanes] == [
        ("web / FD 0", "Reboot AAAA-1 (3 VMs)"),
        ("web / FD 1", "Reboot BBBB-2 (1 VMs)"),
    ]
    assert lanes[0].detail == "3 VMs: vm-0, vm-3, vm-5; longest downtime 7.5 s"
    assert [m.kind for m in lanes[0].markers] == ["NotBefore", "approved"]
    page = render(_data(), generated_at=T0)
    assert "2 events reaching 4 VMs in 1 sets and 2 fault domains; longest downtime measured on a VM 7.5 s" in page
    assert "time (UTC), 2026-11-21" in page and 'class="mark"' in page
    # the worst downtime came last: still in time order, after the sets and domains
    data = _data()
    later, earlier = T0 + timedelta(hours=1), T0 - timedelta(hours=1)
    data.lanes.extend(
        [
            _lane("LATE-3", "vm-7", 0, down_s=99.0, first=later),
            _lane("EARLY-4", "vm-8", 0, down_s=1.0, first=earlier),
            _lane("API-5", "api-1", 2, down_s=5.0, fault_set="api", first=later),
        ]
    )
    assert [lane.label for lane in lanes_of(data)] == [
        "api / FD 2 / Reboot API-5 (1 VMs)",
        "web / FD 0 / Reboot EARLY-4 (1 VMs)",
        "web / FD 0 / Reboot AAAA-1 (3 VMs)",
        "web / FD 0 / Reboot LATE-3 (1 VMs)",
        "web / FD 1 / Reboot BBBB-2 (1 VMs)",
    ]


@pytest.mark.parametrize(
    ("span", "step"),
    [
        (timedelta(seconds=7), 1),
        (timedelta(seconds=90), 10),
        (timedelta(minutes=3, seconds=7), 30),
        (timedelta(minutes=40), 300),
        (timedelta(minutes=41), 300),
        (timedelta(hours=2), 900),
        (timedelta(hours=9), 3600),
        (timedelta(hours=35), 6 * 3600),
        (timedelta(days=4), 12 * 3600),
        (timedelta(days=9), 86400),
        (timedelta(days=40), 4 * 86400),
    ],
)
def test_time_ticks_are_round(span: timedelta, step: int) -> None:
    """Ticks every 1/2/5/10/15/30 s, 1/2/5/10/15/30 min, 1/2/3/6/12 h or whole days (at most 10), on the step's
    multiples since midnight UTC: never at the span's odd start (11:54:09)."""
    odd = datetime(2026, 11, 21, 11, 54, 9, 431000, tzinfo=UTC)
    assert svg.tick_step(span.total_seconds()) == step
    got_step, marks = svg.ticks(odd, odd + span)
    assert got_step == step and 2 <= len(marks) <= 11
    assert all(m.microsecond == 0 and int(m.timestamp()) % step == 0 for m in marks)
    assert odd <= marks[0] < odd + timedelta(seconds=step) and marks[-1] <= odd + span
    labels = [svg.tick_label(m, step, same_day=False) for m in marks]
    assert not any(label.endswith(":09") for label in labels), labels


def test_announced_duration_never_shows_minus_one() -> None:
    """DurationInSeconds -1 (Reboot, Redeploy) means none was given: the table says so and the chart draws no bar."""
    data = _data()
    data.events[0]["duration_s"] = -1
    html = render(data, generated_at=T0)
    assert _cells(html, "AAAA-1")["Announced s"] == "—" and _cells(html, "BBBB-2")["Announced s"] == "7"
    assert ">-1<" not in html and "gave no DurationInSeconds" in html
    assert "announced: -1" not in html


def test_a_report_of_2000_vms_has_a_lane_per_event_and_domain() -> None:
    """2,000 VMs in two availability sets of 3 fault domains, 5 events each reaching every VM of one set: 15 lanes
    (not 5,000), each naming its VMs on hover."""
    data = fleet_report(2000, events=5)
    lanes = lanes_of(data)
    assert len(lanes) == 5 * 3
    assert all("VMs:" in lane.detail and "more" in lane.detail for lane in lanes)
    assert len(render(data, generated_at=T0)) < 2_000_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", T0),
        ("30m", T0 - timedelta(minutes=30)),
        ("7d", T0 - timedelta(days=7)),
        ("2026-11-21T09:00:00Z", T0 - timedelta(hours=1)),
        ("2026-11-21T11:00:00+02:00", T0 - timedelta(hours=1)),
        ("2026-11-21 09:00:00", T0 - timedelta(hours=1)),
    ],
)
def test_parse_moment(text: str, expected: datetime) -> None:
    """Times are ISO 8601 (naive means UTC), now, or a duration before now."""
    assert parse_moment(text, T0) == expected


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A time that is not a time, or an empty window, is a usage error naming the problem."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--clickhouse", "chdb:///nowhere", "--since", "yesterday"])
    assert exit_info.value.code == 2 and "'yesterday' is not a time" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--clickhouse", "chdb:///nowhere", "--since", "1h", "--until", "2h"])


def test_malformed_clickhouse_target_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A malformed target is invalid configuration, as for every command: reported, exit 2, no file written."""
    out = tmp_path / "r.html"
    assert main(["--clickhouse", "ftp://x", "--out", str(out)]) == 2
    assert "clickhouse target" in capsys.readouterr().err and not out.exists()


class _Collected(Exception):
    """Raised by the stand-in collect: the filters the command line built."""


@pytest.mark.parametrize(
    ("flags", "types"),
    [
        ([], ()),
        (["--event-type", "Reboot"], ("Reboot",)),
        (["--event-type", "Reboot", "--event-type", "Redeploy"], ("Reboot", "Redeploy")),
        (["--event-type", "Reboot,Redeploy"], ("Reboot", "Redeploy")),
    ],
)
def test_event_type_filter_spellings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flags: list[str], types: tuple[str, ...]
) -> None:
    """--event-type as on every command: repeatable or comma-separated; none given keeps every type."""
    import dashboards.report
    import ingest.clickhouse

    def collect(client: Any, filters: Filters, database: str = "sevents") -> ReportData:
        raise _Collected(filters)

    class Client:
        def close(self) -> None:
            pass

    monkeypatch.setattr(ingest.clickhouse, "connect", lambda *a, **k: Client())
    monkeypatch.setattr(dashboards.report, "collect", collect)
    with pytest.raises(_Collected) as collected:
        main(["--clickhouse", "chdb:///nowhere", *flags])
    assert collected.value.args[0].event_types == types
    assert "note" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv", [["--event-type", "Reboot,Redeplyo"], ["--event-type", "Reboot", "--event-type", "redeploy"]]
)
def test_a_misspelt_event_type_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    """A typo used to give an empty report; it is refused (exit 2) with the closest type, nothing written."""
    out = tmp_path / "r.html"
    assert main(["--clickhouse", "chdb:///nowhere", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sevents-report: --event-type: unknown event type")
    assert "did you mean Redeploy?" in err and not out.exists() and not Path("/nowhere").exists()


def _report(seeded: Seeded, out: Path, *extra: str) -> str:
    start, end = around(seeded)
    argv = ["--clickhouse", seeded.target, "--since", start.isoformat(), "--until", end.isoformat(), "--out", str(out)]
    assert main([*argv, *extra]) == 0
    return out.read_text(encoding="utf-8")


def test_report_from_the_pipeline(seeded: Seeded, tmp_path: Path) -> None:
    """The CLI's table lists every true event; --event-type keeps only that type, --fault-set one set."""
    html = _report(seeded, tmp_path / "all.html")
    truth = seeded.events()
    rows = re.findall(r"<tr><td>([0-9A-F-]{36})</td><td>(\w+)</td>", html)
    assert sorted(rows) == sorted((e, t["event_type"]) for e, t in truth.items())
    reboots = _report(seeded, tmp_path / "reboot.html", "--event-type", "Reboot")
    assert sorted(re.findall(r"<tr><td>([0-9A-F-]{36})</td>", reboots)) == sorted(
        e for e, t in truth.items() if t["event_type"] == "Reboot"
    )
    # FD 0 of web and FD 0 of api were both hit: two bars, and the filters pick one domain of one set
    assert "web / FD 0" in html and "api / FD 0" in html
    # every downtime a VM measured for an event says how it was detected (impacts.detected_by: pause, reboot)
    downtime = html[html.index('<table id="downtime">') : html.index("<h2>Events</h2>")]
    rows = re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td><td>([^<]*)</td><td class=\"num\">", downtime)
    for_events = [(vm, event, how) for vm, event, how in rows if event != "none announced"]
    assert for_events and all(how in ("pause", "reboot", "pause, reboot") for _, _, how in for_events), rows
    api = _report(seeded, tmp_path / "api.html", "--fault-set", "api", "--fault-domain", "0")
    assert re.findall(r"<tr><td>([0-9A-F-]{36})</td>", api) == [
        e for e, t in truth.items() if seeded.groups[t["vm_name"]] == "api"
    ]


# Injected by the Chromium test only (users never get it): records that every chart was laid out with a real size.
CHECK_SCRIPT = """
document.addEventListener('DOMContentLoaded', function () {
  var charts = document.querySelectorAll('svg.chart');
  var drawn = 0;
  charts.forEach(function (c) { var b = c.getBBox(); if (b.width > 0 && b.height > 0) { drawn++; } });
  document.body.setAttribute('data-charts-drawn', String(drawn));
  document.body.setAttribute('data-bars-drawn', String(document.querySelectorAll('svg.chart rect.bar').length));
});
"""


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _in_chromium(page: Path, tmp_path: Path, shot_name: str, height: int) -> tuple[str, bytes]:
    """The DOM headless Chromium built from ``page`` (with CHECK_SCRIPT's counts) and a screenshot of it, kept
    under artifacts/."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is required: bash scripts/setup.sh --test (as root)"
    page.write_text(page.read_text().replace("</head>", f"<script>{CHECK_SCRIPT}</script></head>", 1))
    flags = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / shot_name
    shot.unlink(missing_ok=True)
    subprocess.run(
        [*flags, f"--screenshot={shot}", f"--window-size=1280,{height}", "--hide-scrollbars", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    return dom, shot.read_bytes()


def test_report_renders_in_chromium(seeded: Seeded, tmp_path: Path) -> None:
    """Headless Chromium lays out every chart with its bars; a screenshot is kept under artifacts/."""
    page = tmp_path / "report.html"
    _report(seeded, page)
    dom, shot = _in_chromium(page, tmp_path, "dashboards-report.png", 1800)
    assert 'data-charts-drawn="4"' in dom, dom[:500]
    bars = int(re.search(r'data-bars-drawn="(\d+)"', dom).group(1))  # type: ignore[union-attr]
    # a lane per event and fault domain of its set, Scheduled or Started or both, plus the charts' bars
    assert bars >= len({(t["event_id"], seeded.fd_label(t)) for t in seeded.truth if t["affected"]})
    assert _png_size(shot) == (1280, 1800) and len(shot) > 20_000
    shutil.copy(page, ARTIFACTS / "dashboards-report.html")


@pytest.mark.slow
def test_a_report_of_2000_vms_renders_in_chromium(tmp_path: Path) -> None:
    """The report of a 2,000-VM fleet lays out in headless Chromium; its screenshot is kept under artifacts/
    (load time: benchmarks/bench_report.py)."""
    page = tmp_path / "report.html"
    page.write_text(render(fleet_report(2000, events=5), generated_at=T0))
    dom, shot = _in_chromium(page, tmp_path, "report-2000-vms.png", 1400)
    assert 'data-charts-drawn="4"' in dom, dom[:500]
    assert _png_size(shot) == (1280, 1400) and len(shot) > 20_000


def test_out_that_cannot_be_written_exits_1(seeded: Seeded, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An --out whose directory cannot be created is one line naming the file, exit 1, no traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "r.html"
    start, end = around(seeded)
    argv = ["--clickhouse", seeded.target, "--since", start.isoformat(), "--until", end.isoformat(), "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"cannot write --out {out}" in err and "Traceback" not in err


def _cells(html: str, event_id: str) -> dict[str, str]:
    """The events table's row of ``event_id``, by column title."""
    table = html[html.index('<table id="events">') :]
    head = re.findall(r"<th>(.*?)</th>", table[: table.index("</thead>")])
    row = re.search(rf"<tr><td>{re.escape(event_id)}</td>(.*?)</tr>", table)
    assert row, event_id
    return dict(zip(head, [event_id, *re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))], strict=True))


def test_the_report_names_who_approved_each_event() -> None:
    """An approval sevents made shows its VM, rule, hook and notice saved; another early start is 'outside sevents'."""
    data = _data()
    data.events[0]["released_by"] = "sevents"
    data.events.append(_event("CCCC-3", "Reboot"))
    approval = {
        "event_id": "AAAA-1",
        "event_type": "Reboot",
        "vm_name": "vm-0",
        "decision": "approved",
        "rule": "first-in-resources",
        "hook_exit": 0,
        "hook_s": 2.5,
        "http_status": 200,
        "notice_saved_s": 897.5,
    }
    left = {**approval, "vm_name": "vm-3", "decision": "left_to_approver", "http_status": None}
    chosen = select(ReportData(data.filters, data.events, data.lanes, data.unannounced, [approval, left]))
    assert chosen.approvals == [approval]  # decisions other than approved are the dashboard's, not the report's
    html = render(chosen, generated_at=T0)
    table = html[html.index('<table id="approvals">') :]
    assert "vm-0" in table and "first-in-resources" in table and "897.5" in table and "2.5" in table
    assert _cells(html, "AAAA-1")["Released by"] == "sevents: vm-0"
    assert _cells(html, "CCCC-3")["Released by"] == "approved outside sevents"


def test_the_report_says_who_released_each_event_as_the_dashboard_does() -> None:
    """NotBefore reached, started without notice, cancelled and an end not seen read as on the approval
    dashboard; the outcome 'end_not_seen' reads 'end not seen' in the table and the summary."""
    data = _data()
    unseen = dict(started_at=None, approved_at=None, released_by=None, started_to_gone_s=None, ended_at=None)
    data.events.extend(
        [
            _event("DDDD-4", "Redeploy", approved_at=None, released_by="not_before"),
            _event("EEEE-5", "Reboot", approved_at=None, not_before_first=None, released_by="no_notice"),
            _event("FFFF-6", "Freeze", outcome="end_not_seen", **unseen),
            _event("GGGG-7", "Reboot", outcome="active", **unseen),
        ]
    )
    html = render(data, generated_at=T0)
    expected = {
        "AAAA-1": ("completed", "approved outside sevents"),  # no sevents approval among the report's
        "BBBB-2": ("cancelled", "cancelled"),
        "DDDD-4": ("completed", "platform (NotBefore reached)"),
        "EEEE-5": ("completed", "started without notice"),
        "FFFF-6": ("end not seen", "end not seen"),
        "GGGG-7": ("active", "pending"),
    }
    for event_id, (outcome, released) in expected.items():
        cells = _cells(html, event_id)
        assert (cells["Outcome"], cells["Released by"]) == (outcome, released), event_id
    assert '<div class="card"><b>1</b>end not seen</div>' in html


def test_the_report_marks_a_time_that_is_a_bound() -> None:
    """A start known from a VM's downtime and an end from its first poll once back read '<=', with the note."""
    data = _data()
    data.events.append(_event("HHHH-8", "Reboot", started_at_source="downtime", ended_at_source="after_downtime"))
    html = render(data, generated_at=T0)
    bound, seen = _cells(html, "HHHH-8"), _cells(html, "AAAA-1")
    assert bound["Started"].startswith("&lt;= ") and bound["Ended"].startswith("&lt;= ")
    assert not seen["Started"].startswith("&lt;=") and "marks a bound, not a sighting" in html
    assert "marks a bound" not in render(_data(), generated_at=T0), "no note where every time was seen"
