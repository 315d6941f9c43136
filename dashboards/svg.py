"""Inline SVG charts for the offline incident report (pure: data in, markup out, no JavaScript needed).

Every chart spans the page's width: its SVG is as wide as its box (``width="100%"``, no viewBox, so text keeps
its size) and places what varies along the width in percent of it, while the labels sit left of the plot, in
the box's padding (negative x, ``overflow: visible``). The page's style gives ``.plot`` that padding (LABEL_W).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape

STATE_COLOURS = {"Scheduled": "#e0b400", "Started": "#d44a3a"}
LABEL_W = 300  # px left of every plot, for its labels
RIGHT_W = 40  # px right of every plot, for the last tick's label
ROW_H = 18
GROUP_H = 24  # a group's head in the timeline: its name and the time ticks again
AXIS_H = 34
PAD = 24
MOST_TICKS = 10
REPEAT_TICKS_AFTER = 30  # lanes
# Tick steps, in seconds: the smallest that gives at most MOST_TICKS ticks over the span is used, and ticks fall
# on its multiples since midnight UTC (12:00, 12:15, 12:30; never 11:54:09). Beyond a day, whole days.
TICK_STEPS_S = (
    *(1, 2, 5, 10, 15, 30),
    *(60 * m for m in (1, 2, 5, 10, 15, 30)),
    *(3600 * h for h in (1, 2, 3, 6, 12)),
    86400,
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_APPROVED = "sevents-approved-mark"  # the approval triangle, defined once per timeline and placed with <use>


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
    """One row of the timeline: its label, coloured spans, marks, and what hovering it tells.

    ``group``: the heading the lane is drawn under (lanes of one group are consecutive); ``short``: the text shown
    beside it under that heading (the label is then its hover text).
    """

    label: str
    segments: tuple[Segment, ...]
    markers: tuple[Marker, ...] = ()
    detail: str = ""
    group: str = ""
    short: str = ""


def _svg(height: float, title: str, body: list[str], cls: str = "chart") -> str:
    return (
        f'<svg class="{cls}" xmlns="http://www.w3.org/2000/svg" width="100%" height="{height:.0f}" '
        f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>{"".join(body)}</svg>'
    )


def _text(
    x: float | str, y: float, text: str, anchor: str = "start", size: int = 11, cls: str = "", dx: float = 0
) -> str:
    extra = (f' class="{cls}"' if cls else "") + (f' dx="{dx:g}"' if dx else "")
    where = x if isinstance(x, str) else f"{x:.1f}"
    return (
        f'<text x="{where}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-family="sans-serif"{extra}>{escape(text)}</text>'
    )


def _pct(fraction: float) -> str:
    return f"{100 * min(max(fraction, 0.0), 1.0):.3f}%"


def tick_step(span_s: float, most: int = MOST_TICKS) -> int:
    """Seconds between ticks: the smallest step of TICK_STEPS_S giving at most ``most`` ticks, else whole days."""
    for step in TICK_STEPS_S:
        if span_s / step <= most:
            return step
    return 86400 * -(-int(span_s) // (86400 * most))


def ticks(start: datetime, end: datetime, most: int = MOST_TICKS) -> tuple[int, list[datetime]]:
    """The tick step (seconds) and the ticks in [start, end]: the step's multiples since midnight UTC."""
    step = tick_step((end - start).total_seconds(), most)
    step_us = step * 1_000_000
    first = -(-((start - _EPOCH) // _US) // step_us) * step_us  # the first multiple at or after start
    out, at = [], _EPOCH + first * _US
    while at <= end:
        out.append(at)
        at += timedelta(seconds=step)
    return step, out


def tick_label(moment: datetime, step: int, same_day: bool) -> str:
    """A tick's text: seconds only when the step is under a minute, the date when the span crosses midnight."""
    if step >= 86400:
        return f"{moment:%m-%d}"
    clock = f"{moment:%H:%M:%S}" if step < 60 else f"{moment:%H:%M}"
    return clock if same_day else f"{moment:%m-%d} {clock}"


@dataclass(frozen=True)
class _Scale:
    start: datetime
    end: datetime

    def x(self, moment: datetime) -> str:
        total = max((self.end - self.start).total_seconds(), 1e-3)
        return _pct((moment - self.start).total_seconds() / total)

    def width(self, start: datetime, end: datetime) -> str:
        total = max((self.end - self.start).total_seconds(), 1e-3)
        return f"{max(100 * (end - start).total_seconds() / total, 0.15):.3f}%"


def _tick_texts(scale: _Scale, marks: list[datetime], step: int, same_day: bool, y: float, cls: str) -> list[str]:
    return [_text(scale.x(t), y, tick_label(t, step, same_day), "middle", 10, cls) for t in marks]


def _legend(y: float) -> list[str]:
    out, x = [], -LABEL_W
    for state, colour in STATE_COLOURS.items():
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colour}"/>')
        out.append(_text(x + 14, y, state))
        x += 82
    out.append(f'<line x1="{x + 4}" y1="{y - 10}" x2="{x + 4}" y2="{y + 2}" stroke="#222" stroke-dasharray="3,2"/>')
    out.append(_text(x + 10, y, "NotBefore"))
    out.append(f'<use href="#{_APPROVED}" x="{x + 86}" y="{y - 10}"/>')
    out.append(_text(x + 94, y, "approved"))
    return out


def timeline(lanes: Sequence[Lane], start: datetime, end: datetime) -> str:
    """Horizontal lanes with coloured spans (Scheduled, Started), under their group's heading; gaps mean the event
    was gone. The time axis heads the chart and stays at the top of the window while its lanes scroll by (sticky),
    beyond REPEAT_TICKS_AFTER lanes every group's heading repeats the ticks, and the axis closes the chart."""
    scale = _Scale(start, end)
    step, marks = ticks(start, end)
    same_day = start.date() == end.date()
    day = f"{start:%Y-%m-%d}" if same_day else f"{start:%Y-%m-%d} to {end:%Y-%m-%d}"
    caption = f"time (UTC), {day}; a tick every {_step_words(step)}"
    defs = f'<defs><path id="{_APPROVED}" d="M0,2 l4,6 l-8,0 z" fill="#1f60c4"/></defs>'
    axis = [defs, *_legend(14), *_tick_texts(scale, marks, step, same_day, 30, "tick")]
    axis.append(_text(-8, 30, "time (UTC)", "end", 10))
    counts = Counter(lane.group for lane in lanes)
    repeat = len(lanes) > REPEAT_TICKS_AFTER  # a long timeline: every group's heading repeats the ticks
    body: list[str] = []
    y = 0.0
    group = None
    for lane in lanes:
        if lane.group and lane.group != group:
            group = lane.group
            count = counts[group]
            body.append(
                f'<g class="group"><rect x="{-LABEL_W}" y="{y + 2:.0f}" width="{LABEL_W}" height="{GROUP_H - 4}" '
                f'fill="#eef2f7"/><rect x="0" y="{y + 2:.0f}" width="100%" height="{GROUP_H - 4}" fill="#eef2f7"/>'
                f"{_text(-LABEL_W + 4, y + GROUP_H - 8, f'{group} ({count} lanes)', size=12, cls='head')}"
                f"{''.join(_tick_texts(scale, marks, step, same_day, y + GROUP_H - 8, 'tick')) if repeat else ''}</g>"
            )
            y += GROUP_H
        body.append(_lane(lane, y, scale))
        y += ROW_H
    if not lanes:
        body.append(_text("50%", PAD, "no events in this window", "middle"))
        y = PAD * 2
    height = y + AXIS_H
    grid = [f'<line x1="{scale.x(t)}" y1="0" x2="{scale.x(t)}" y2="{y:.0f}" stroke="#ddd"/>' for t in marks]
    bottom = [*_tick_texts(scale, marks, step, same_day, y + 14, "tick"), _text("50%", y + 30, caption, "middle", 10)]
    return (
        '<div class="timeline"><div class="plot axis-top">'
        f"{_svg(AXIS_H + 2, 'Time axis of the maintenance timeline', axis, 'axis')}</div>"
        f'<div class="plot">{_svg(height, "Maintenance timeline", grid + body + bottom)}</div></div>'
    )


def _step_words(step: int) -> str:
    for unit, seconds in (("d", 86400), ("h", 3600), ("min", 60)):
        if step >= seconds and step % seconds == 0:
            return f"{step // seconds} {unit}"
    return f"{step} s"


def _lane(lane: Lane, y: float, scale: _Scale) -> str:
    # the lane's VMs on hover of its label; a bar tells its state and times (the VMs once per lane: a fleet's page
    # stays small)
    hover = (
        f"<title>{escape(lane.label)}. {escape(lane.detail)}</title>"
        if lane.detail
        else f"<title>{escape(lane.label)}</title>"
    )
    parts = [f'<g class="lane">{hover}{_text(-6, y + ROW_H - 5, lane.short or lane.label, "end")}']
    for seg in lane.segments:
        colour = STATE_COLOURS.get(seg.state, "#888")
        parts.append(
            f'<rect class="bar" x="{scale.x(seg.start)}" y="{y + 2:.0f}" width="{scale.width(seg.start, seg.end)}" '
            f'height="{ROW_H - 4}" fill="{colour}"><title>{escape(lane.label)}: {escape(seg.state)} '
            f"{seg.start:%H:%M:%S}-{seg.end:%H:%M:%S}</title></rect>"
        )
    for mark in lane.markers:
        x = scale.x(mark.at)
        if mark.kind == "NotBefore":
            parts.append(
                f'<line class="mark" x1="{x}" y1="{y:.0f}" x2="{x}" y2="{y + ROW_H:.0f}" stroke="#222" '
                f'stroke-dasharray="3,2"><title>NotBefore {mark.at:%Y-%m-%d %H:%M:%S}</title></line>'
            )
        else:
            parts.append(
                f'<use class="mark" href="#{_APPROVED}" x="{x}" y="{y:.0f}"><title>{escape(mark.kind)} '
                f"{mark.at:%Y-%m-%d %H:%M:%S}</title></use>"
            )
    parts.append("</g>")
    return "".join(parts)


def bars(
    title: str,
    items: Sequence[tuple[str, Sequence[float | None]]],
    series: Sequence[str],
    *,
    unit: str = "s",
) -> str:
    """Grouped horizontal bars: one group per label, one bar per series (None draws nothing); the longest bar
    takes most of the width, its value written after it."""
    colours = ("#3274d9", "#56a64b", "#e0b400", "#d44a3a")
    group_h = ROW_H * len(series) + 8
    height = PAD * 2 + group_h * max(len(items), 1) + 10
    top = max([v for _, values in items for v in values if v is not None] + [1e-9])
    body = []
    for index, name in enumerate(series):
        body.append(f'<rect x="{index * 160}" y="4" width="10" height="10" fill="{colours[index]}"/>')
        body.append(_text(index * 160 + 14, 13, name))
    for row, (label, values) in enumerate(items):
        y = PAD + row * group_h
        body.append(_text(-6, y + group_h / 2 + 2, label, "end"))
        for index, value in enumerate(values):
            if value is None:
                continue
            fraction = 0.9 * max(value, 0.0) / top
            by = y + index * ROW_H
            body.append(
                f'<rect class="bar" x="0" y="{by}" width="{max(100 * fraction, 0.1):.3f}%" height="{ROW_H - 3}" '
                f'fill="{colours[index]}"><title>{escape(label)} {escape(series[index])}: '
                f"{value:g} {escape(unit)}</title></rect>"
            )
            body.append(_text(_pct(fraction), by + ROW_H - 6, f"{value:g} {unit}", size=10, dx=4))
    if not items:
        body.append(_text("50%", PAD + 12, "nothing to show", "middle"))
    return f'<div class="plot">{_svg(height, title, body)}</div>'
