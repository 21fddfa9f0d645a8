"""Plots written with the standard library only (no plotting package is installed on the
benchmark machines): a scatter plot as a PNG (a white canvas, axes with tick labels drawn from a
3x5 pixel font, and one dot per point), and, as SVG text, a strip plot of samples per system and
line plots of series over time (:func:`strip_svg`, :func:`lines_svg`). The SVG functions are
pure, data in and text out, so the report's plots are tested without running a benchmark."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

#: 3x5 glyphs for the characters tick labels and titles use (other characters are blank).
_FONT = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111",
    "6": "111100111101111", "7": "111001001001001", "8": "111101111101111",
    "9": "111101111001111", ".": "000000000000010", "-": "000000111000000",
    "s": "000011010001110", "m": "000110111101101", "t": "010111010010011",
    "=": "000111000111000", "(": "001010010010001", ")": "100010010010100",
}  # fmt: skip


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        self.px = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: int, y: int, rgb: tuple[int, int, int], size: int = 1) -> None:
        for dx in range(size):
            for dy in range(size):
                xx, yy = x + dx, y + dy
                if 0 <= xx < self.w and 0 <= yy < self.h:
                    i = (yy * self.w + xx) * 3
                    self.px[i : i + 3] = bytes(rgb)

    def line(self, x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int]) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for k in range(steps + 1):
            self.dot(x0 + (x1 - x0) * k // steps, y0 + (y1 - y0) * k // steps, rgb)

    def text(self, x: int, y: int, s: str, scale: int = 2) -> None:
        for ch in s:
            glyph = _FONT.get(ch)
            if glyph:
                for i, bit in enumerate(glyph):
                    if bit == "1":
                        self.dot(x + (i % 3) * scale, y + (i // 3) * scale, (0, 0, 0), scale)
            x += 4 * scale

    def png(self) -> bytes:
        raw = b"".join(
            b"\x00" + bytes(self.px[y * self.w * 3 : (y + 1) * self.w * 3]) for y in range(self.h)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


def line_png(
    path: Path,
    points: Sequence[tuple[float, float]],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    width: int = 900,
    height: int = 420,
) -> None:
    """Plot ``points`` (x, y) as dots; axes from the data's range (y from 0). The labels are
    given for the caller's documentation: the small font draws digits and a few symbols only,
    so the axes carry numbers and the caption in the document says what they are."""
    left, right, top, bottom = 70, 20, 20, 40
    c = Canvas(width, height)
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y1 = max(ys) * 1.05 or 1.0
    pw, ph = width - left - right, height - top - bottom

    def at(x: float, y: float) -> tuple[int, int]:
        return (
            left + int((x - x0) / ((x1 - x0) or 1) * pw),
            top + ph - int(y / y1 * ph),
        )

    black = (0, 0, 0)
    c.line(left, top, left, top + ph, black)
    c.line(left, top + ph, left + pw, top + ph, black)
    for k in range(6):
        y = y1 * k / 5
        px, py = at(x0, y)
        c.line(px - 4, py, px, py, black)
        c.text(4, py - 5, f"{y:.2f}s")
        x = x0 + (x1 - x0) * k / 5
        px, py = at(x, 0)
        c.line(px, py, px, py + 4, black)
        c.text(px - 12, py + 10, f"{x:.1f}")
    zero = at(0.0, 0)[0]
    if left <= zero <= left + pw:
        c.line(zero, top, zero, top + ph, (200, 0, 0))
    for x, y in points:
        px, py = at(x, y)
        c.dot(px, py, (30, 90, 200), 2)
    del title, xlabel, ylabel
    path.write_bytes(c.png())


# -- SVG ---------------------------------------------------------------------------------------

#: Series colours, in order (colour-blind safe: Okabe and Ito's palette).
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000")
#: Marks (a p99, a target) are drawn in this colour, apart from the series.
MARK = "#c00000"
_FONT_CSS = "font-family:sans-serif;font-size:12px"


@dataclass(frozen=True)
class Strip:
    """One row of a strip plot: a system's samples, and values to mark on its row
    (``{"p99": 2.03}``)."""

    name: str
    samples: Sequence[float]
    marks: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Series:
    """One line of a line plot: (x, y) points in x order."""

    name: str
    points: Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Level:
    """A horizontal reference line on a panel: a value known without its series (another
    system's p99 from a report, a target)."""

    name: str
    value: float


@dataclass(frozen=True)
class Panel:
    """One plot of :func:`lines_svg`, with its own title and y axis."""

    title: str
    series: Sequence[Series]
    levels: Sequence[Level] = ()


def _span(lo: float, hi: float) -> tuple[float, float]:
    """An axis range holding [lo, hi] with 5 % to spare each side (one value: +- 1 %)."""
    pad = (hi - lo) * 0.05 or abs(hi) * 0.01 or 1.0
    return lo - pad, hi + pad


def _text(x: float, y: float, s: str, anchor: str = "start", css: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" style="{_FONT_CSS};{css}">'
        f"{escape(s)}</text>"
    )


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    # The title is a <title> for screen readers and drawn at the top for everyone else.
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">',
            f"<title>{escape(title)}</title>",
            f'<rect width="{width}" height="{height}" fill="white"/>',
            _text(width / 2, 18, title, "middle", "font-size:14px;font-weight:bold"),
            *body,
            "</svg>",
            "",
        ]
    )


def strip_svg(
    strips: Sequence[Strip], *, title: str, xlabel: str, unit: str = "s", width: int = 900
) -> str:
    """A strip plot as SVG text: one row per strip, one dot (``<circle class="sample">``) per
    sample at its value on a shared x axis, spread a little up and down so equal values stay
    visible, and each mark a red tick across its row with its value (``<line class="mark">``).
    The x axis spans every sample and mark."""
    left, right, top, row, bottom = 130, 30, 40, 50, 50
    height = top + row * max(len(strips), 1) + bottom
    values = [v for s in strips for v in (*s.samples, *s.marks.values())]
    x0, x1 = _span(min(values, default=0.0), max(values, default=1.0))
    pw = width - left - right

    def at(v: float) -> float:
        return left + (v - x0) / (x1 - x0) * pw

    body: list[str] = []
    axis_y = top + row * len(strips)
    body.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + pw}" y2="{axis_y}" stroke="black"/>')
    for k in range(6):
        v = x0 + (x1 - x0) * k / 5
        x = at(v)
        body.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#ddd"/>')
        body.append(_text(x, axis_y + 18, f"{v:.2f} {unit}", "middle"))
    body.append(_text(left + pw / 2, axis_y + 38, xlabel, "middle"))
    for i, s in enumerate(strips):
        mid = top + row * i + row / 2
        colour = PALETTE[i % len(PALETTE)]
        body.append(_text(left - 8, mid + 4, s.name, "end"))
        body.append(f'<g class="strip" fill="{colour}" fill-opacity="0.7">')
        for j, v in enumerate(s.samples):
            # A fixed spread (no randomness): the same results draw the same file.
            dy = ((j * 7) % 11 - 5) * 2.4
            body.append(f'<circle class="sample" cx="{at(v):.1f}" cy="{mid + dy:.1f}" r="3.5"/>')
        body.append("</g>")
        for name, v in s.marks.items():
            x = at(v)
            body.append(
                f'<line class="mark" x1="{x:.1f}" y1="{mid - row / 2 + 4}" x2="{x:.1f}" '
                f'y2="{mid + row / 2 - 4}" stroke="{MARK}" stroke-width="2"/>'
            )
            # Near the right edge the label goes to the line's left, so it is not cut off.
            right_half = x > left + pw * 0.8
            body.append(
                _text(
                    x - 4 if right_half else x + 4,
                    mid - row / 2 + 14,
                    f"{name} {v:.3f} {unit}",
                    "end" if right_half else "start",
                    f"fill:{MARK}",
                )
            )
    return _svg(width, height, title, body)


def lines_svg(
    panels: Sequence[Panel], *, title: str, xlabel: str, ylabel: str, width: int = 900
) -> str:
    """Line plots stacked as SVG text, one per panel with its own y axis from 0 and a shared x
    label: a ``<polyline class="series">`` per series (one point per (x, y), ``data-points``
    says how many) and a dashed ``<line class="level">`` per level, both named in the panel's
    legend."""
    left, right, top, ph, gap, bottom = 70, 30, 40, 220, 50, 40
    height = top + len(panels) * (ph + gap) - gap + bottom
    body: list[str] = []
    for i, p in enumerate(panels):
        body += _panel(
            p, left, top + i * (ph + gap) + 16, width - left - right, ph - 16, ylabel=ylabel
        )
    body.append(_text(left + (width - left - right) / 2, height - 10, xlabel, "middle"))
    return _svg(width, height, title, body)


def _panel(p: Panel, left: float, top: float, pw: float, h: float, *, ylabel: str) -> list[str]:
    """Panel ``p`` drawn in the box (left, top, pw wide, h high)."""
    xs = [x for s in p.series for x, _ in s.points]
    ys = [y for s in p.series for _, y in s.points] + [lv.value for lv in p.levels]
    x0, x1 = min(xs, default=0.0), max(xs, default=1.0)
    x1 = x1 if x1 > x0 else x0 + 1.0
    y1 = max(ys, default=0.0) * 1.1 or 1.0

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + h - y / y1 * h

    out = [
        _text(left, top - 4, p.title, css="font-weight:bold"),
        f'<polyline points="{left},{top} {left},{top + h} {left + pw},{top + h}" '
        'fill="none" stroke="black"/>',
        f'<text transform="translate(16,{top + h / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle" style="{_FONT_CSS}">{escape(ylabel)}</text>',
    ]
    for k in range(6):
        y = py(y1 * k / 5)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(_text(left - 6, y + 4, f"{y1 * k / 5:.3f}", "end"))
        x = x0 + (x1 - x0) * k / 5
        out.append(_text(px(x), top + h + 16, f"{x:.1f}", "middle"))
    keys: list[str] = []
    legend = 0
    for j, s in enumerate(p.series):
        colour = PALETTE[j % len(PALETTE)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.points)
        out.append(
            f'<polyline class="series" data-name="{escape(s.name)}" '
            f'data-points="{len(s.points)}" points="{pts}" fill="none" '
            f'stroke="{colour}" stroke-width="1.2"/>'
        )
        keys.append(_legend(left + pw, top, legend, s.name, colour, dashed=False))
        legend += 1
    for j, lv in enumerate(p.levels):
        colour = PALETTE[(len(p.series) + j) % len(PALETTE)]
        y = py(lv.value)
        out.append(
            f'<line class="level" x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" '
            f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="6 4"/>'
        )
        label = f"{lv.name} {lv.value:.3f}"
        keys.append(_legend(left + pw, top, legend, label, colour, dashed=True))
        legend += 1
    # The legend last, on a white box: it sits over the data's top right, above the lines.
    out.append(
        f'<rect x="{left + pw - 306}" y="{top + 1}" width="304" height="{16 * legend + 4}" '
        'fill="white" fill-opacity="0.85"/>'
    )
    return out + keys


def _legend(right: float, top: float, k: int, name: str, colour: str, *, dashed: bool) -> str:
    """Legend entry ``k`` of a panel: a short line in the entry's colour and its name, in a
    column at the panel's top right."""
    y = top + 10 + 16 * k
    dash = ' stroke-dasharray="6 4"' if dashed else ""
    return (
        f'<line x1="{right - 300}" y1="{y - 4}" x2="{right - 276}" y2="{y - 4}" '
        f'stroke="{colour}" stroke-width="2"{dash}/>' + _text(right - 270, y, name)
    )
