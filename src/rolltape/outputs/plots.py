"""Small hand-written SVG charts for the run report: no matplotlib, no JavaScript.

Each chart is a string of inline SVG with a ``<title>`` and ``<desc>`` (read by screen
readers and shown by browsers), axis labels, ticks and a legend. Every point carries its own
``<title>``, so hovering a point names the episode without any script.

May import: tape, envs, stats, files, errors, outputs. Never: policies, pass 1, executors.

Example:
    >>> svg = line_chart([Series("policy", [0, 1, 2], [1.0, 3.0, 2.0], "#0072B2")],
    ...                  title="Return per episode", xlabel="episode", ylabel="return")
    >>> svg.startswith("<svg")
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Sequence

__all__ = ["PALETTE", "ROLE_COLORS", "ForestRow", "Series", "Strip", "forest_chart",
           "line_chart", "nice_ticks", "strip_chart"]

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#56B4E9", "#E69F00", "#000000")
ROLE_COLORS = {"policy": "#0072B2", "baseline": "#E69F00"}

WIDTH, HEIGHT = 560, 300
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
INK, MUTED, GRID = "#1f2328", "#57606a", "#e4e7eb"
CHAR_W = 6.8  # rough width of one 12px character, enough to lay out labels and legends
MANY = 400  # more points than this are drawn smaller
MAX_TIPS = 1000  # more points than this get no tooltip each (the page would get heavy)


@dataclass
class Series:
    """One line and/or set of points. ``tips`` label each point (shown on hover);
    ``hollow[i]`` draws point i as a ring instead of a dot."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    color: str
    dash: bool = False
    line: bool = True
    markers: bool = True
    tips: Sequence[str] | None = None
    hollow: Sequence[bool] | None = None
    end_tip: str | None = None  # a dot at the last point with this tooltip
    band: tuple[Sequence[float], Sequence[float]] | None = None  # (lows, highs): a shaded CI
    key: str | None = None  # names what is drawn: the values go into data-* attributes
    links: Sequence[str | None] | None = None  # links[i]: where clicking point i goes


@dataclass
class Strip:
    """One row of a strip plot: every value as a dot, plus a marker with an interval."""

    label: str
    values: Sequence[float]
    color: str
    tips: Sequence[str] | None = None
    center: float | None = None
    interval: tuple[float, float] | None = None
    key: str | None = None  # names what is drawn: the values go into data-* attributes


@dataclass(frozen=True)
class ForestRow:
    """One line of a :func:`forest_chart`.

    A ``heading`` row is only its ``label``, in bold at the left edge: it names the rows
    below it. Any other row has its ``label`` left of the axis and, with an ``interval``
    ``(lo, point, hi)`` in axis units, a bar from lo to hi and a dot at point in ``color``
    (hovering them shows ``tip``), and ``note`` right of the axis in ``note_color``.
    Without an interval, ``missing`` stands where the bar would be."""

    label: str
    interval: tuple[float, float, float] | None = None
    color: str = INK
    tip: str = ""
    note: str = ""
    note_color: str = MUTED
    missing: str = ""
    heading: bool = False


# ------------------------------------------------------------------------------- scales


def _nice_step(span: float, count: int, integer: bool) -> float:
    raw = span / max(count, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    steps = (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10)
    step = next(m * mag for m in steps if raw <= m * mag * (1 + 1e-9))
    return max(step, 1.0) if integer else step


def _padded(lo: float, hi: float) -> tuple[float, float]:
    """[lo, hi] widened when it is empty or narrower than round-off (values that differ
    only in their last bits, e.g. per-seed differences of two runs that agree): ticks
    rounded to 12 decimals would otherwise collapse onto one and the scale divide by 0."""
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo <= 1e-9 * max(abs(lo), abs(hi), 1e-3):
        mid = (lo + hi) / 2
        pad = abs(mid) * 0.1 if abs(mid) >= 1e-2 else 1.0  # about 0: a unit either side
        return mid - pad, mid + pad
    return lo, hi


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """Round tick values covering [lo, hi]: the first <= lo, the last >= hi.

    >>> nice_ticks(-3.2, 17.9)
    [-5.0, 0.0, 5.0, 10.0, 15.0, 20.0]
    """
    lo, hi = _padded(lo, hi)
    step = _nice_step(hi - lo, count, integer)
    first = math.floor(lo / step + 1e-9)
    last = math.ceil(hi / step - 1e-9)
    return [round(i * step, 12) + 0.0 for i in range(first, last + 1)]


def _tick_label(value: float, step: float) -> str:
    """``value`` with as many decimals as the tick step needs (2.5 -> one, 0.25 -> two)."""
    decimals = 0
    while decimals < 8 and abs(round(step, decimals) - step) > 1e-9 * max(1.0, abs(step)):
        decimals += 1
    text = f"{value:,.{decimals}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


class _Axis:
    """A linear map from data to pixels, with the ticks that label it."""

    def __init__(self, lo: float, hi: float, *, integer: bool = False, extend: bool = True,
                 count: int = 5) -> None:
        lo, hi = _padded(lo, hi)
        ticks = nice_ticks(lo, hi, count, integer)
        self.step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
        if extend:  # the domain ends on ticks: values axes
            lo, hi = ticks[0], ticks[-1]
        else:  # the domain is the data plus a little air: index axes
            pad = 0.5 if integer else (hi - lo) * 0.02
            lo, hi = lo - pad, hi + pad
            ticks = [t for t in ticks if lo <= t <= hi]
        self.lo, self.hi, self.ticks = lo, hi, ticks
        self.p0, self.p1 = 0.0, 1.0

    def place(self, p0: float, p1: float) -> _Axis:
        """Map the domain onto pixels p0..p1 (p0 > p1 for an upward y axis)."""
        self.p0, self.p1 = p0, p1
        return self

    def __call__(self, value: float) -> float:
        span = (self.hi - self.lo) or 1.0  # never 0 after _padded; kept safe all the same
        return self.p0 + (value - self.lo) / span * (self.p1 - self.p0)

    def label(self, value: float) -> str:
        return _tick_label(value, self.step)


# ------------------------------------------------------------------------------- drawing


def _f(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, s: str, *, anchor: str = "start", fill: str = MUTED,
          extra: str = "") -> str:
    return (f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" fill="{fill}"{extra}>'
            f"{escape(s)}</text>")


def _open(title: str, desc: str, height: float, uid: str, *, width: float = WIDTH,
          cls: str = "chart") -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_f(width)} {_f(height)}" '
            f'width="{_f(width)}" height="{_f(height)}" role="img" '
            f'aria-labelledby="{uid}-t {uid}-d" font-family="{escape(FONT)}" font-size="12" '
            f'class="{cls}">',
            f'<title id="{uid}-t">{escape(title)}</title>',
            f'<desc id="{uid}-d">{escape(desc)}</desc>']


def _legend_rows(items: list[tuple[str, str, bool, str]], left: float) -> list[list[tuple]]:
    """Lay legend entries out in rows that fit the width."""
    rows: list[list[tuple]] = [[]]
    x = left
    for item in items:
        w = 30 + len(item[0]) * CHAR_W + 18
        if rows[-1] and x + w > WIDTH - 8:
            rows.append([])
            x = left
        rows[-1].append((x, *item))
        x += w
    return rows if rows[0] else []


def _legend(rows: list[list[tuple]], top: float) -> list[str]:
    out = []
    for r, row in enumerate(rows):
        y = top + r * 18
        for x, label, color, dash, kind in row:
            if kind == "line":
                d = ' stroke-dasharray="5 3"' if dash else ""
                out.append(f'<line x1="{_f(x)}" y1="{_f(y)}" x2="{_f(x + 22)}" y2="{_f(y)}" '
                           f'stroke="{color}" stroke-width="2.2"{d}/>')
                out.append(f'<circle cx="{_f(x + 11)}" cy="{_f(y)}" r="3" fill="{color}"/>')
            elif kind == "ring":
                out.append(f'<circle cx="{_f(x + 11)}" cy="{_f(y)}" r="3.4" fill="#fff" '
                           f'stroke="{color}" stroke-width="1.6"/>')
            elif kind == "diamond":
                out.append(f'<line x1="{_f(x)}" y1="{_f(y)}" x2="{_f(x + 22)}" y2="{_f(y)}" '
                           f'stroke="{color}" stroke-width="2.5"/>')
                out.append(_diamond(x + 11, y, 5, color))
            else:
                out.append(f'<circle cx="{_f(x + 11)}" cy="{_f(y)}" r="3.4" fill="{color}"/>')
            out.append(_text(x + 28, y + 4, label, fill=INK))
    return out


def _diamond(x: float, y: float, r: float, color: str, tip: str | None = None) -> str:
    pts = f"{_f(x)},{_f(y - r)} {_f(x + r)},{_f(y)} {_f(x)},{_f(y + r)} {_f(x - r)},{_f(y)}"
    inner = f"<title>{escape(tip)}</title>" if tip else ""
    return (f'<polygon points="{pts}" fill="{color}" stroke="#fff" stroke-width="1">'
            f"{inner}</polygon>")


def _frame(x: _Axis | None, y: _Axis, left: float, top: float, right: float, bottom: float,
           xlabel: str, ylabel: str) -> list[str]:
    """Grid lines, tick labels, the axis lines and the axis titles."""
    out = ['<g class="grid">']
    for t in y.ticks:
        py = y(t)
        out.append(f'<line x1="{_f(left)}" y1="{_f(py)}" x2="{_f(right)}" y2="{_f(py)}" '
                   f'stroke="{GRID}" stroke-width="1"/>')
        out.append(_text(left - 8, py + 4, y.label(t), anchor="end"))
    if x is not None:
        for t in x.ticks:
            px = x(t)
            out.append(f'<line x1="{_f(px)}" y1="{_f(bottom)}" x2="{_f(px)}" y2="{_f(bottom + 5)}" '
                       f'stroke="{MUTED}" stroke-width="1"/>')
            out.append(_text(px, bottom + 19, x.label(t), anchor="middle"))
    out.append("</g>")
    out.append(f'<line x1="{_f(left)}" y1="{_f(bottom)}" x2="{_f(right)}" y2="{_f(bottom)}" '
               f'stroke="{MUTED}" stroke-width="1"/>')
    if y.lo < 0 < y.hi and x is not None:  # the zero line matters for returns
        out.append(f'<line x1="{_f(left)}" y1="{_f(y(0))}" x2="{_f(right)}" y2="{_f(y(0))}" '
                   f'stroke="#8c959f" stroke-width="1"/>')
    if xlabel:
        out.append(_text((left + right) / 2, bottom + 40, xlabel, anchor="middle", fill=INK))
    if ylabel:
        cy = (top + bottom) / 2
        out.append(_text(16, cy, ylabel, anchor="middle", fill=INK,
                         extra=f' transform="rotate(-90 16 {_f(cy)})"'))
    return out


def _left_margin(axis: _Axis) -> float:
    widest = max((len(axis.label(t)) for t in axis.ticks), default=1)
    return 40 + widest * CHAR_W


def _thin(xs: Sequence[float], ys: Sequence[float], limit: int = 1000
          ) -> tuple[list[float], list[float]]:
    """At most ``limit`` points, evenly strided, always keeping the last."""
    n = len(xs)
    if n <= limit:
        return list(xs), list(ys)
    stride = math.ceil(n / limit)
    idx = list(range(0, n, stride))
    if idx[-1] != n - 1:
        idx.append(n - 1)
    return [xs[i] for i in idx], [ys[i] for i in idx]


# ------------------------------------------------------------------------------- charts


def line_chart(series: Sequence[Series], *, title: str, desc: str = "", xlabel: str = "",
               ylabel: str = "", integer_x: bool = False, integer_y: bool = False,
               uid: str = "chart",
               extra_legend: Sequence[tuple[str, str, bool, str]] = (),
               height: int = HEIGHT) -> str:
    """Lines and/or points of several series on shared axes, with a legend on top.
    The first series is drawn last, so it lies on top of the others."""
    xs = [float(v) for s in series for v in s.xs]
    ys = [float(v) for s in series for v in s.ys]
    ys += [float(v) for s in series if s.band for side in s.band for v in side]
    if not xs:
        xs, ys = [0.0], [0.0]
    items = [(s.label, s.color, s.dash, "line" if s.line else "dot") for s in series
             if s.label]  # an unlabelled series (the second edge of a band) has no entry
    items += list(extra_legend)
    y = _Axis(min(ys), max(ys), integer=integer_y)
    x = _Axis(min(xs), max(xs), integer=integer_x, extend=False, count=7)
    # The last x label is centred on its tick: room for its half ('50,000' was cut off).
    last = x.label(x.ticks[-1]) if x.ticks else ""
    left, right = _left_margin(y), WIDTH - max(16.0, len(last) * CHAR_W / 2 + 4)
    rows = _legend_rows(items, left)
    top, bottom = 26 + 18 * len(rows), height - 50
    y.place(bottom, top)
    x.place(left, right)
    out = _open(title, desc, height, uid)
    out += _legend(rows, 14)
    out += _frame(x, y, left, top, right, bottom, xlabel, ylabel)
    for s in reversed(series):
        sx, sy = [float(v) for v in s.xs], [float(v) for v in s.ys]
        out.append(f'<g class="series" fill="{s.color}" stroke="{s.color}"'
                   f'{_data(s.key, xs=sx, ys=sy)}>')
        if s.band and len(sx) > 1:
            lows, highs = ([float(v) for v in side] for side in s.band)
            ring = [(a, b) for a, b in zip(sx, highs)] + [(a, b) for a, b in
                                                           zip(reversed(sx), reversed(lows))]
            pts = " ".join(f"{_f(x(a))},{_f(y(b))}" for a, b in ring)
            out.append(f'<polygon points="{pts}" fill-opacity="0.16" stroke="none"/>')
        if s.line and len(set(sx)) > 1:
            lx, ly = _thin(sx, sy)
            pts = " ".join(f"{_f(x(a))},{_f(y(b))}" for a, b in zip(lx, ly))
            dash = ' stroke-dasharray="5 3"' if s.dash else ""
            width = "2" if not s.markers else "1.2"
            opacity = "" if not s.markers else ' stroke-opacity="0.55"'
            out.append(f'<polyline points="{pts}" fill="none" stroke-width="{width}" '
                       f'stroke-linejoin="round"{dash}{opacity}/>')
        if s.line and not s.markers and sx and len(set(sx)) == 1:  # one x: dots, not nothing
            out.extend(f'<circle cx="{_f(x(sx[0]))}" cy="{_f(y(b))}" r="2.6"/>' for b in set(sy))
        if s.markers:
            radius = "3.4" if len(sx) <= MANY else "2"
            tips = s.tips if s.tips and len(sx) <= MAX_TIPS else None
            for i, (a, b) in enumerate(zip(sx, sy)):
                hollow = bool(s.hollow[i]) if s.hollow is not None else False
                style = (' fill="#fff" stroke-width="1.4"' if hollow
                         else ' stroke="#fff" stroke-width="0.6"')
                tip = f"<title>{escape(tips[i])}</title>" if tips else ""
                dot = (f'<circle cx="{_f(x(a))}" cy="{_f(y(b))}" r="{radius}"{style}>'
                       f"{tip}</circle>")
                link = s.links[i] if s.links is not None else None
                out.append(f'<a href="{escape(link)}">{dot}</a>' if link else dot)
        if s.end_tip and sx:
            out.append(f'<circle cx="{_f(x(sx[-1]))}" cy="{_f(y(sy[-1]))}" r="3.6" '
                       f'stroke="#fff" stroke-width="1">'
                       f"<title>{escape(s.end_tip)}</title></circle>")
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _data(key: str | None, **values: Sequence[float]) -> str:
    """``data-key`` and the drawn numbers (``data-xs``, ...) as exact JSON, so that a page's
    charts can be checked against the numbers they claim to draw; nothing without a key."""
    if key is None:
        return ""
    import json

    attrs = "".join(f" data-{name}='{json.dumps([float(v) for v in vs])}'"
                    for name, vs in values.items())
    return f' data-key="{escape(key)}"{attrs}'


def _jitter(i: int) -> float:
    """A deterministic spread in [-1, 1] (golden-ratio sequence): no two runs differ."""
    return ((i * 0.6180339887498949) % 1.0) * 2 - 1


def strip_chart(strips: Sequence[Strip], *, title: str, desc: str = "", xlabel: str = "",
                uid: str = "strip", marker_label: str = "IQM, bar: 95% CI") -> str:
    """One row per group: each value a dot (spread vertically so they do not hide each
    other), plus a diamond for ``center`` with a bar for ``interval``."""
    values = [float(v) for s in strips for v in s.values]
    values += [float(v) for s in strips if s.interval for v in s.interval]
    if not values:
        values = [0.0]
    left = 24 + max((len(s.label) for s in strips), default=4) * CHAR_W
    right = WIDTH - 16
    rows = _legend_rows([(marker_label, INK, False, "diamond")], left)
    top = 26 + 18 * len(rows)
    height = HEIGHT
    bottom = height - 50
    band = (bottom - top) / max(len(strips), 1)
    x = _Axis(min(values), max(values), count=6).place(left, right)
    out = _open(title, desc, height, uid)
    out += _legend(rows, 14)
    for t in x.ticks:
        px = x(t)
        out.append(f'<line x1="{_f(px)}" y1="{_f(top)}" x2="{_f(px)}" y2="{_f(bottom)}" '
                   f'stroke="{GRID}" stroke-width="1"/>')
        out.append(f'<line x1="{_f(px)}" y1="{_f(bottom)}" x2="{_f(px)}" y2="{_f(bottom + 5)}" '
                   f'stroke="{MUTED}" stroke-width="1"/>')
        out.append(_text(px, bottom + 19, x.label(t), anchor="middle"))
    if x.lo < 0 < x.hi:
        out.append(f'<line x1="{_f(x(0))}" y1="{_f(top)}" x2="{_f(x(0))}" y2="{_f(bottom)}" '
                   f'stroke="#8c959f" stroke-width="1"/>')
    out.append(f'<line x1="{_f(left)}" y1="{_f(bottom)}" x2="{_f(right)}" y2="{_f(bottom)}" '
               f'stroke="{MUTED}" stroke-width="1"/>')
    if xlabel:
        out.append(_text((left + right) / 2, bottom + 40, xlabel, anchor="middle", fill=INK))
    for r, s in enumerate(strips):
        cy = top + band * r + band / 2
        out.append(_text(left - 10, cy + 4, s.label, anchor="end", fill=INK))
        out.append(f'<g class="series" fill="{s.color}" fill-opacity="0.7"'
                   f'{_data(s.key, values=[float(v) for v in s.values])}>')
        tips = s.tips if s.tips and len(s.values) <= MAX_TIPS else None
        radius = "3.4" if len(s.values) <= MANY else "2"
        spread = min(band * 0.32, 28)
        for i, v in enumerate(s.values):
            tip = f"<title>{escape(tips[i])}</title>" if tips else ""
            out.append(f'<circle cx="{_f(x(float(v)))}" cy="{_f(cy + _jitter(i) * spread)}" '
                       f'r="{radius}">{tip}</circle>')
        out.append("</g>")
        if s.interval is not None:
            lo, hi = (x(float(v)) for v in s.interval)
            out.append(f'<line x1="{_f(lo)}" y1="{_f(cy)}" x2="{_f(hi)}" y2="{_f(cy)}" '
                       f'stroke="{INK}" stroke-width="2.5" stroke-linecap="round"/>')
        if s.center is not None:
            out.append(_diamond(x(float(s.center)), cy, 6, INK,
                                f"{s.label}: {marker_label.split(',')[0]} {s.center:.2f}"))
    out.append("</svg>")
    return "\n".join(out)


FOREST_TOP = 34  # from the chart's top to the first row: room for the caption line
NOTE_GAP = 10  # from the axis' end to a row's note: clear of a dot (radius 5) drawn there


def forest_chart(rows: Sequence[ForestRow], *, title: str, desc: str, caption: str,
                 ticks: Sequence[float], tick_format: str = "{:g}",
                 marks: Sequence[float] = (), left: float = 170, right: float = 40,
                 width: float = WIDTH, row_height: float = 22, uid: str = "forest") -> str:
    """A forest plot: one row per :class:`ForestRow`, every interval on one horizontal axis
    from ``ticks[0]`` to ``ticks[-1]``, with a grid line and a label (``tick_format``) at
    each tick and a dashed line at each of ``marks`` (a reference value such as a coin
    flip's 0.5) in place of its grid line. ``left`` and ``right`` are the margins that hold
    the labels and the notes (a note starts ``NOTE_GAP`` right of the axis); the chart is as
    tall as its rows need.

    >>> svg = forest_chart([ForestRow("suite", heading=True),
    ...                     ForestRow("task", (20.0, 50.0, 80.0), "#0072B2", note="5/10"),
    ...                     ForestRow("other", missing="n/a")],
    ...                    title="Rates", desc="One row per task.", caption="rate",
    ...                    ticks=(0, 50, 100), tick_format="{:g}%")
    >>> svg.count("<circle"), "n/a</text>" in svg
    (1, True)
    """
    lo, hi = float(ticks[0]), float(ticks[-1])
    if not hi > lo:
        raise ValueError(f"forest_chart needs ticks that rise, got {list(ticks)}.")
    top = FOREST_TOP
    height = top + row_height * len(rows) + 36  # + the tick labels under the last row
    span = width - left - right

    def x(value: float) -> float:
        return left + span * (value - lo) / (hi - lo)

    out = _open(title, desc, height, uid, width=width, cls="chart forest")
    out.append(_text(left, 16, caption, fill=INK))
    for t in ticks:
        if t not in marks:
            out.append(f'<line x1="{_f(x(t))}" x2="{_f(x(t))}" y1="{_f(top - 6)}" '
                       f'y2="{_f(height - 30)}" stroke="{GRID}"/>')
        out.append(_text(x(t), height - 14, tick_format.format(t), anchor="middle"))
    for m in marks:
        out.append(f'<line x1="{_f(x(m))}" x2="{_f(x(m))}" y1="{_f(top - 6)}" '
                   f'y2="{_f(height - 30)}" stroke="{MUTED}" stroke-dasharray="4 3"/>')
    for k, row in enumerate(rows):
        y = top + row_height * k + row_height / 2
        if row.heading:
            out.append(_text(8, y + 4, row.label, fill=INK, extra=' font-weight="bold"'))
            continue
        out.append(_text(left - 8, y + 4, row.label, anchor="end", fill=INK))
        if row.interval is None:
            out.append(_text(left + 4, y + 4, row.missing))
        else:
            a, point, b = row.interval
            tip = f"<title>{escape(row.tip)}</title>" if row.tip else ""
            # One group, so hovering the bar or the dot shows the same tooltip.
            out.append(f'<g>{tip}<line x1="{_f(x(a))}" x2="{_f(x(b))}" y1="{_f(y)}" '
                       f'y2="{_f(y)}" stroke="{row.color}" stroke-width="3"/>'
                       f'<circle cx="{_f(x(point))}" cy="{_f(y)}" r="5" '
                       f'fill="{row.color}"/></g>')
        if row.note:
            out.append(_text(width - right + NOTE_GAP, y + 4, row.note, fill=row.note_color))
    out.append("</svg>")
    return "\n".join(out)
