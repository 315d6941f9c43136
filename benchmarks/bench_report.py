"""How long the HTML incident report of a large fleet takes to load in headless Chromium, against an empty page.

Run: ``.venv/bin/python benchmarks/bench_report.py [--vms 2000] [--events 10] [--runs 5]``

The page of ``--vms`` VMs (``demo.synthetic.fleet_report``: two availability sets, three fault domains each) is
rendered by ``dashboards.report_html.render`` and opened ``--runs`` times, interleaved with a page holding
nothing; each load reports ``performance.now()`` at DOMContentLoaded after forcing the layout of every chart
(``getBBox``). The goal (issue 16): under 2 s for 2,000 VMs.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dashboards.report_html import render
from demo.synthetic import fleet_report

PROBE = """<script>
document.addEventListener('DOMContentLoaded', function () {
  document.querySelectorAll('svg.chart').forEach(function (c) { c.getBBox(); });
  document.body.setAttribute('data-loaded-ms', String(performance.now()));
});
</script>"""
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run")
GOAL_MS = 2000.0


def load_ms(chromium: str, page: Path, profile: Path) -> float:
    dom = subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    found = re.search(r'data-loaded-ms="([0-9.]+)"', dom)
    if found is None:
        raise RuntimeError("the page did not report its load time")
    return float(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vms", type=int, default=2000)
    parser.add_argument("--events", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("chromium is required (bash scripts/setup.sh --test, as root)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        report = root / "report.html"
        html = render(fleet_report(args.vms, events=args.events), generated_at=datetime.now(UTC))
        report.write_text(html.replace("</head>", PROBE + "</head>", 1), encoding="utf-8")
        blank = root / "blank.html"
        blank.write_text(f"<!DOCTYPE html><html><head>{PROBE}</head><body></body></html>", encoding="utf-8")
        times: dict[str, list[float]] = {"report": [], "empty page": []}
        for run in range(args.runs):
            times["empty page"].append(load_ms(chromium, blank, root / f"profile-b{run}"))
            times["report"].append(load_ms(chromium, report, root / f"profile-r{run}"))
    base = statistics.median(times["empty page"])
    print(f"report of {args.vms:,} VMs, {args.events} events: {len(html) / 1e6:.2f} MB of HTML, {args.runs} loads each")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<11} load (ms): median {median:7.1f}  max {max(values):7.1f}  ratio {median / base:5.1f}")
    worst = max(times["report"])
    print(f"goal: under {GOAL_MS:.0f} ms -> {'met' if worst < GOAL_MS else 'missed'} (slowest {worst:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
