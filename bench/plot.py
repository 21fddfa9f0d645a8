"""A scatter plot as a PNG, written with the standard library only (no plotting package is
installed on the benchmark machines): a white canvas, axes with tick labels drawn from a 3x5
pixel font, and one dot per point."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

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
