"""How long the HTML incident report of a large fleet takes to load in headless Chromium, against an empty page.

Run: ``.venv/bin/python benchmarks/bench_report.py [--vms 2000 --events 10] [--runs 5]``

Each report (``demo.synthetic.fleet_report``: two availability sets, three fault domains each) is rendered by
``dashboards.report_html.render`` and opened ``--runs`` times, interleaved with a page holding nothing (the
baseline, measured in the same run); each load reports ``performance.now()`` at DOMContentLoaded after forcing
the layout of every chart (``getBBox``) and of the whole page (``offsetHeight``). Without ``--vms``, the two
fleets of the goals: 2,000 VMs and 10 events under 2 s (issue 16), 500 VMs and 200 events under 3 s (issue 30).
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
  document.body.setAttribute('data-height', String(document.body.offsetHeight));
  document.body.setAttribute('data-loaded-ms', String(performance.now()));
});
</script>"""
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run")
FLEETS = ((2000, 10, 2000.0), (500, 200, 3000.0))  # VMs, events, goal (ms): issues 16 and 30


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
    parser.add_argument("--vms", type=int, help="one fleet of this many VMs (default: the goals' fleets)")
    parser.add_argument("--events", type=int, default=10, help="with --vms: its events")
    parser.add_argument("--goal-ms", type=float, default=3000.0, help="with --vms: the goal")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("chromium is required (bash scripts/setup.sh --test, as root)", file=sys.stderr)
        return 2
    fleets = FLEETS if args.vms is None else ((args.vms, args.events, args.goal_ms),)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        blank = root / "blank.html"
        blank.write_text(f"<!DOCTYPE html><html><head>{PROBE}</head><body></body></html>", encoding="utf-8")
        pages: dict[str, Path] = {}
        sizes: dict[str, int] = {}
        for vms, events, _ in fleets:
            name = f"{vms:,} VMs x {events}"
            html = render(fleet_report(vms, events=events), generated_at=datetime.now(UTC))
            pages[name] = root / f"report-{vms}-{events}.html"
            pages[name].write_text(html.replace("</head>", PROBE + "</head>", 1), encoding="utf-8")
            sizes[name] = len(html.encode())
        times: dict[str, list[float]] = {"empty page": [], **{name: [] for name in pages}}
        for run in range(args.runs):
            times["empty page"].append(load_ms(chromium, blank, root / f"profile-b{run}"))
            for index, (name, page) in enumerate(pages.items()):
                times[name].append(load_ms(chromium, page, root / f"profile-{index}-{run}"))
    base = statistics.median(times["empty page"])
    print(f"report load in headless Chromium, {args.runs} loads each, interleaved (ms to DOMContentLoaded, laid out)")
    print(f"  {'page':<18} {'HTML MB':>7}  {'median':>8}  {'max':>8}  {'ratio':>6}")
    for name, values in times.items():
        median = statistics.median(values)
        size = f"{sizes[name] / 1e6:7.2f}" if name in sizes else " " * 7
        print(f"  {name:<18} {size}  {median:8.1f}  {max(values):8.1f}  {median / base:6.1f}")
    for (_, _, goal), name in zip(fleets, pages, strict=True):
        worst = max(times[name])
        print(f"goal {name}: under {goal:.0f} ms -> {'met' if worst < goal else 'missed'} (slowest {worst:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
