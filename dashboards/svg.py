"""Inline SVG charts for the offline incident report (pure: data in, markup out, no JavaScript needed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape

STATE_COLOURS = {"Scheduled": "#e0b400", "Started": "#d44a3a"}
LABEL_W = 260
ROW_H = 18
PAD = 24


@dataclass(frozen=True)
class Segment:
    """A span of one lane in one state."""

    start: datetime
    end: datetime
    state: str


@dataclass(frozen=True)
class Marker:
    """A moment marked on a lane: "NotBefore" (dashed line) or "approved" (triangle)."""

    at: datetime
    kind: str


@dataclass(frozen=True)
class Lane:
    """One row of the timeline: its label, coloured spans, marks, and what hovering it tells."""

    label: str
    segments: tuple[Segment, ...]
    markers: tuple[Marker, ...] = ()
    detail: str = ""


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "start", size: int = 11, cls: str = "") -> str:
    extra = f' class="{cls}"' if cls else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-family="sans-serif"{extra}>{escape(text)}</text>'
    )


def _ticks(start: datetime, end: datetime, count: int = 6) -> list[datetime]:
    span = (end - start) / count
    return [start + span * i for i in range(count + 1)]


def timeline(lanes: Sequence[Lane], start: datetime, end: datetime, *, width: int = 1000) -> str:
    """Horizontal lanes with coloured spans (Scheduled, Started); gaps mean the event was gone."""
    plot_w = width - LABEL_W - PAD
    height = PAD * 2 + ROW_H * max(len(lanes), 1) + 30
    total = max((end - start).total_seconds(), 1e-3)

    def x_of(moment: datetime) -> float:
        return LABEL_W + plot_w * min(max((moment - start).total_seconds() / total, 0.0), 1.0)

    body = []
    same_day = start.date() == end.date()
    for tick in _ticks(start, end):
        x = x_of(tick)
        body.append(f'<line x1="{x:.1f}" y1="{PAD}" x2="{x:.1f}" y2="{height - PAD}" stroke="#ddd"/>')
        body.append(_text(x, height - 14, f"{tick:%H:%M:%S}" if same_day else f"{tick:%m-%d %H:%M}", "middle", 10))
    day = f"{start:%Y-%m-%d}" if same_day else f"{start:%Y-%m-%d} to {end:%Y-%m-%d}"
    body.append(_text(LABEL_W + plot_w / 2, height - 2, f"time (UTC), {day}", "middle", 10, "axis"))
    for row, lane in enumerate(lanes):
        y = PAD + row * ROW_H
        hover = f"<title>{escape(lane.detail)}</title>" if lane.detail else ""
        body.append(f"<g>{hover}{_text(LABEL_W - 6, y + ROW_H - 5, lane.label, 'end')}</g>")
        for seg in lane.segments:
            x0, x1 = x_of(seg.start), x_of(seg.end)
            colour = STATE_COLOURS.get(seg.state, "#888")
            body.append(
                f'<rect class="bar" x="{x0:.1f}" y="{y + 2}" width="{max(x1 - x0, 1.5):.1f}" height="{ROW_H - 4}" '
                f'fill="{colour}"><title>{escape(lane.label)}: {escape(seg.state)} '
                f"{seg.start:%H:%M:%S}-{seg.end:%H:%M:%S}. {escape(lane.detail)}</title></rect>"
            )
        for mark in lane.markers:
            x = x_of(mark.at)
            if mark.kind == "NotBefore":
                body.append(
                    f'<line class="mark" x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + ROW_H}" stroke="#222" '
                    f'stroke-dasharray="3,2"><title>NotBefore {mark.at:%Y-%m-%d %H:%M:%S}</title></line>'
                )
            else:
                body.append(
                    f'<path class="mark" d="M{x:.1f},{y + 2} l4,6 l-8,0 z" fill="#1f60c4"><title>{escape(mark.kind)} '
                    f"{mark.at:%Y-%m-%d %H:%M:%S}</title></path>"
                )
    if not lanes:
        body.append(_text(width / 2, PAD + 12, "no events in this window", "middle"))
    legend_x = LABEL_W
    for state, colour in STATE_COLOURS.items():
        body.append(f'<rect x="{legend_x}" y="4" width="10" height="10" fill="{colour}"/>')
        body.append(_text(legend_x + 14, 13, state))
        legend_x += 90
    return _svg(width, height, "Maintenance timeline", body)


def bars(
    title: str,
    items: Sequence[tuple[str, Sequence[float | None]]],
    series: Sequence[str],
    *,
    unit: str = "s",
    width: int = 1000,
) -> str:
    """Grouped horizontal bars: one group per label, one bar per series (None draws nothing)."""
    colours = ("#3274d9", "#56a64b", "#e0b400", "#d44a3a")
    group_h = ROW_H * len(series) + 8
    height = PAD * 2 + group_h * max(len(items), 1) + 10
    plot_w = width - LABEL_W - PAD - 60
    top = max([v for _, values in items for v in values if v is not None] + [1e-9])
    body = []
    for index, name in enumerate(series):
        body.append(f'<rect x="{LABEL_W + index * 160}" y="4" width="10" height="10" fill="{colours[index]}"/>')
        body.append(_text(LABEL_W + index * 160 + 14, 13, name))
    for row, (label, values) in enumerate(items):
        y = PAD + row * group_h
        body.append(_text(LABEL_W - 6, y + group_h / 2 + 2, label, "end"))
        for index, value in enumerate(values):
            if value is None:
                continue
            bar_w = max(plot_w * max(value, 0.0) / top, 1.0)
            by = y + index * ROW_H
            body.append(
                f'<rect class="bar" x="{LABEL_W}" y="{by}" width="{bar_w:.1f}" height="{ROW_H - 3}" '
                f'fill="{colours[index]}"><title>{escape(label)} {escape(series[index])}: '
                f"{value:g} {escape(unit)}</title></rect>"
            )
            body.append(_text(LABEL_W + bar_w + 4, by + ROW_H - 6, f"{value:g} {unit}", size=10))
    if not items:
        body.append(_text(width / 2, PAD + 12, "nothing to show", "middle"))
    return _svg(width, int(height), title, body)
