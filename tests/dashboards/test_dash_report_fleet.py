"""The report of a fleet (500 VMs, 200 events) stays readable in headless Chromium (issue 30): lanes grouped by set
and fault domain in time order, round ticks, full width, the axis sticky, long tables summarised, no -1, "Detected
by" filled. The screenshot is kept under artifacts/ (its path printed); the load time is benchmarks/bench_report.py's.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from dashboards import svg
from dashboards.report_html import lanes_of, render, time_span
from demo.synthetic import fleet_report
from tests.dashboards.test_dash_report import ARTIFACTS, CHROMIUM_FLAGS, T0, _png_size

VMS, EVENTS = 500, 200
WIDTH, HEIGHT = 1280, 1600
SHOT = "report-500-vms-200-events.png"

# Injected by this test only (users never get it): what the laid-out page shows, as JSON in <pre id="check">.
CHECK_SCRIPT = """
document.addEventListener('DOMContentLoaded', function () {
  var chart = document.querySelector('.timeline svg.chart');
  var groups = [], lanes = 0;
  Array.prototype.forEach.call(chart.children, function (node) {
    if (node.getAttribute('class') === 'group') {
      groups.push({name: node.querySelector('text.head').textContent, starts: []});
    } else if (node.getAttribute('class') === 'lane') {
      lanes++;
      var bar = node.querySelector('rect.bar');
      groups[groups.length - 1].starts.push(bar ? bar.getBBox().x : null);
    }
  });
  var visibleRows = Array.prototype.filter.call(document.querySelectorAll('tr'), function (tr) {
    return tr.checkVisibility();  // false inside a closed <details>
  }).length;
  var axis = document.querySelector('.axis-top');
  var page = document.documentElement.clientWidth;
  var result = {
    groups: groups, lanes: lanes, visibleRows: visibleRows, rows: document.querySelectorAll('tr').length,
    ticks: Array.prototype.map.call(document.querySelectorAll('svg.axis text.tick'), function (t) {
      return t.textContent;
    }),
    chartWidth: chart.getBoundingClientRect().width, axisWidth: axis.querySelector('svg').getBoundingClientRect().width,
    pageWidth: page, height: document.body.offsetHeight
  };
  window.scrollTo(0, chart.getBoundingClientRect().top + window.scrollY + 3000);
  result.axisTopWhenScrolled = axis.getBoundingClientRect().top;
  result.chartTopWhenScrolled = chart.getBoundingClientRect().top;
  var pre = document.createElement('pre');
  pre.id = 'check';
  pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
});
"""


def _chromium() -> str:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is required: bash scripts/setup.sh --test (as root)"
    return chromium


def _laid_out(page: Path, tmp_path: Path) -> dict[str, Any]:
    checked = tmp_path / "checked.html"
    checked.write_text(page.read_text().replace("</head>", f"<script>{CHECK_SCRIPT}</script></head>", 1))
    dom = subprocess.run(
        [
            _chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--window-size={WIDTH},{HEIGHT}",
            "--dump-dom",
            checked.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    found = re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return dict(json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")))


def _screenshot(page: Path, tmp_path: Path) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / SHOT
    shot.unlink(missing_ok=True)
    subprocess.run(
        [
            _chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile-shot'}",
            f"--screenshot={shot}",
            f"--window-size={WIDTH},{HEIGHT}",
            "--hide-scrollbars",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    return shot


def _clock_s(label: str) -> int:
    """Seconds since midnight of a tick label (``11-21 18:00``, ``18:00`` or ``18:00:30``)."""
    parts = [int(p) for p in label.split()[-1].split(":")]
    return parts[0] * 3600 + parts[1] * 60 + (parts[2] if len(parts) == 3 else 0)


def test_a_report_of_500_vms_and_200_events_reads_in_chromium(tmp_path: Path) -> None:
    """The fleet's rows arrive in no particular order; the laid-out page groups its lanes by set and fault domain,
    each group in time order, ticks at round instants, the timeline as wide as the page with its axis sticky, the
    per-VM rows (50,000) and the event rows summarised one click away, Announced never -1, Detected by filled."""
    data = fleet_report(VMS, events=EVENTS)
    random.Random(30).shuffle(data.lanes)
    random.Random(31).shuffle(data.events)
    page = tmp_path / "report.html"
    html = render(data, generated_at=T0)
    page.write_text(html, encoding="utf-8")
    shot = _screenshot(page, tmp_path)
    shutil.copy(page, ARTIFACTS / SHOT.replace(".png", ".html"))
    print(f"\nscreenshot of the {VMS}-VM, {EVENTS}-event report: {shot}")
    assert _png_size(shot.read_bytes()) == (WIDTH, HEIGHT) and shot.stat().st_size > 20_000

    seen = _laid_out(page, tmp_path)
    # lanes: one per event and fault domain of its set, under six headings (2 sets x 3 domains), in time order
    assert seen["lanes"] == len(lanes_of(data)) == EVENTS * 3
    names = [g["name"] for g in seen["groups"]]
    assert names == [f"{s} / FD {fd} ({EVENTS // 2} lanes)" for s in ("api", "web") for fd in range(3)], names
    for group in seen["groups"]:
        starts = group["starts"]
        assert None not in starts and starts == sorted(starts) and starts[0] < starts[-1], group["name"]
    # ticks: at the round instants of one step of the ladder (the span crosses midnight: dates shown)
    step, marks = svg.ticks(*time_span(data))
    assert step in svg.TICK_STEPS_S and 4 <= len(seen["ticks"]) <= svg.MOST_TICKS + 1
    assert seen["ticks"] == [svg.tick_label(m, step, same_day=False) for m in marks]
    assert all(_clock_s(t) % step == 0 for t in seen["ticks"]), seen["ticks"]
    # full width (the page's margins and the labels' column aside), and the axis stays at the top of the window
    # while the lanes scroll under it
    assert seen["chartWidth"] + svg.LABEL_W + svg.RIGHT_W >= seen["pageWidth"] - 2 * 24 - 1, seen
    assert abs(seen["axisWidth"] - seen["chartWidth"]) < 1
    assert abs(seen["axisTopWhenScrolled"]) < 1 and seen["chartTopWhenScrolled"] < -2000, seen
    # long tables summarised: 50,000 per-VM rows and 200 event rows in the file, a few dozen on the page
    assert seen["rows"] > VMS // 2 * EVENTS and 7 <= seen["visibleRows"] < 50, seen["visibleRows"]
    assert '<table id="downtime-summary">' in html and "Per event: 200 events" in html
    # -1 never shown; every downtime says how it was detected
    events = html[html.index('<table id="events">') :]
    assert ">-1<" not in events and "\u2014</td>" in events
    detail = re.findall(r"<tr><td>([^<]+)<td>([^<]*)<td>([^<]*)<td>([0-9.]+)", html)
    assert len(detail) == VMS // 2 * EVENTS and {how for _, _, how, _ in detail} == {"pause", "reboot"}
