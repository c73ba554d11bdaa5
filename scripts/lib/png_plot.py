"""A line plot written as PNG with the standard library only (zlib), for `oversub
report`: live bytes over the iteration with the device capacity as a line.

The repository's scripts run on whatever python3 is first on PATH, which need not
see Debian's matplotlib; a plot this simple (axes, ticks, a step line, a
horizontal line, labels in a 3x5 pixel font) does not need it.
"""
from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

# 3x5 glyphs, rows top to bottom, '#' = ink. Text is drawn upper-case.
_FONT = {
    "0": "### #.# #.# #.# ###", "1": ".#. ##. .#. .#. ###", "2": "### ..# ### #.. ###",
    "3": "### ..# ### ..# ###", "4": "#.# #.# ### ..# ..#", "5": "### #.. ### ..# ###",
    "6": "### #.. ### #.# ###", "7": "### ..# .#. .#. .#.", "8": "### #.# ### #.# ###",
    "9": "### #.# ### ..# ###", "A": ".#. #.# ### #.# #.#", "B": "##. #.# ##. #.# ##.",
    "C": ".## #.. #.. #.. .##", "D": "##. #.# #.# #.# ##.", "E": "### #.. ##. #.. ###",
    "F": "### #.. ##. #.. #..", "G": ".## #.. #.# #.# .##", "H": "#.# #.# ### #.# #.#",
    "I": "### .#. .#. .#. ###", "J": "..# ..# ..# #.# .#.", "K": "#.# #.# ##. #.# #.#",
    "L": "#.. #.. #.. #.. ###", "M": "#.# ### ### #.# #.#", "N": "##. #.# #.# #.# #.#",
    "O": ".#. #.# #.# #.# .#.", "P": "##. #.# ##. #.. #..", "Q": ".#. #.# #.# ##. .##",
    "R": "##. #.# ##. #.# #.#", "S": ".## #.. .#. ..# ##.", "T": "### .#. .#. .#. .#.",
    "U": "#.# #.# #.# #.# ###", "V": "#.# #.# #.# #.# .#.", "W": "#.# #.# ### ### #.#",
    "X": "#.# #.# .#. #.# #.#", "Y": "#.# #.# .#. .#. .#.", "Z": "### ..# .#. #.. ###",
    ".": "... ... ... ... .#.", ":": "... .#. ... .#. ...", "-": "... ... ### ... ...",
    "(": ".#. #.. #.. #.. .#.", ")": ".#. ..# ..# ..# .#.", "/": "..# ..# .#. #.. #..",
    " ": "... ... ... ... ...", ",": "... ... ... .#. #..", "%": "#.# ..# .#. #.. #.#",
    "=": "... ### ... ### ...", "_": "... ... ... ... ###",
}


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        self.px = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: int, y: int, rgb: tuple[int, int, int]) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(rgb)

    def rect(self, x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int]) -> None:
        for y in range(max(0, min(y0, y1)), min(self.h, max(y0, y1) + 1)):
            for x in range(max(0, min(x0, x1)), min(self.w, max(x0, x1) + 1)):
                self.dot(x, y, rgb)

    def line(self, x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int],
             width: int = 1) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for s in range(steps + 1):
            x = round(x0 + (x1 - x0) * s / steps)
            y = round(y0 + (y1 - y0) * s / steps)
            self.rect(x, y, x + width - 1, y + width - 1, rgb)

    def text(self, x: int, y: int, s: str, rgb=(0, 0, 0), scale: int = 2) -> int:
        """Draws s with its top-left at (x, y); returns the width drawn."""
        start = x
        for ch in s.upper():
            rows = _FONT.get(ch, _FONT[" "]).split()
            for r, row in enumerate(rows):
                for c, bit in enumerate(row):
                    if bit == "#":
                        self.rect(x + c * scale, y + r * scale, x + c * scale + scale - 1,
                                  y + r * scale + scale - 1, rgb)
            x += 4 * scale
        return x - start

    @staticmethod
    def text_width(s: str, scale: int = 2) -> int:
        return len(s) * 4 * scale

    def save(self, path: Path) -> None:
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(tag: bytes, data: bytes) -> bytes:
            body = tag + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2,
                                                                0, 0, 0))
        png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
        path.write_bytes(png)


def _nice_step(span: float, ticks: int) -> float:
    raw = span / max(ticks, 1)
    mag = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _fmt_bytes(v: float) -> str:
    for unit, div in (("GIB", 1 << 30), ("MIB", 1 << 20), ("KIB", 1 << 10)):
        if v >= div:
            return f"{v / div:.1f} {unit}"
    return f"{int(v)} B"


def log_ratio_axes(c: Canvas, box: tuple[int, int, int, int], xmin: float, xmax: float,
                   ymax_log: float, ticks: list[float], label) -> tuple:
    """Axes of a plot of a ratio (1 and up, log scale) against bytes: grey lines at the
    ticks up to 10**ymax_log, each labelled label(tick), six byte ticks below, the two
    axes. box: the margins (left, right, top, bottom). Answers the functions from a
    byte count and from a ratio to pixels."""
    left, right, top, bottom = box
    w, h = c.w, c.h
    px = lambda x: left + round((w - left - right) * (x - xmin) / (xmax - xmin))  # noqa: E731
    py = lambda s: h - bottom - round((h - top - bottom) * math.log10(max(s, 1.0)) / ymax_log)  # noqa: E731,E501
    grey, black = (200, 200, 200), (0, 0, 0)
    for s in ticks:
        if math.log10(s) > ymax_log:
            break
        c.line(left, py(s), w - right, py(s), grey)
        text = label(s)
        c.text(left - 8 - Canvas.text_width(text), py(s) - 5, text)
    for k in range(6):
        x = xmin + (xmax - xmin) * k / 5
        c.line(px(x), h - bottom, px(x), h - bottom + 5, black)
        text = _fmt_bytes(x)
        c.text(px(x) - Canvas.text_width(text) // 2, h - bottom + 10, text)
    c.line(left, top, left, h - bottom, black, 2)
    c.line(left, h - bottom, w - right, h - bottom, black, 2)
    return px, py


def plot_live_bytes(path: Path, live: list[int], capacity: int, title: str) -> None:
    """Step plot of live[i] (bytes before launch i) with capacity as a red line."""
    w, h = 960, 540
    left, right, top, bottom = 110, 30, 50, 70
    c = Canvas(w, h)
    peak = max(live) if live else 0
    cap_on_scale = capacity > 0 and capacity <= 4 * max(peak, 1)
    ymax = max(peak, capacity if cap_on_scale else 0) * 1.1 or 1
    n = max(len(live), 1)
    px = lambda i: left + round((w - left - right) * i / n)  # noqa: E731
    py = lambda v: h - bottom - round((h - top - bottom) * v / ymax)  # noqa: E731
    grey, black = (200, 200, 200), (0, 0, 0)
    unit = next((u for u in (1 << 30, 1 << 20, 1 << 10) if ymax >= 2 * u), 1)
    step = _nice_step(ymax / unit, 6) * unit  # round steps in the axis' binary unit
    v = 0.0
    while v <= ymax:
        c.line(left, py(v), w - right, py(v), grey)
        label = _fmt_bytes(v)
        c.text(left - 8 - Canvas.text_width(label), py(v) - 5, label)
        v += step
    xstep = max(1, int(_nice_step(n, 8)))
    for i in range(0, n + 1, xstep):
        c.line(px(i), h - bottom, px(i), h - bottom + 5, black)
        c.text(px(i) - Canvas.text_width(str(i)) // 2, h - bottom + 10, str(i))
    c.line(left, top, left, h - bottom, black, 2)
    c.line(left, h - bottom, w - right, h - bottom, black, 2)
    blue = (31, 119, 180)
    for i, v in enumerate(live):
        x0, x1 = px(i), px(i + 1)
        c.line(x0, py(v), x1, py(v), blue, 2)
        if i + 1 < len(live):
            c.line(x1, py(v), x1, py(live[i + 1]), blue, 2)
    red = (214, 39, 40)
    if cap_on_scale:
        c.line(left, py(capacity), w - right, py(capacity), red, 2)
        c.text(w - right - Canvas.text_width("DEVICE CAPACITY " + _fmt_bytes(capacity)) - 4,
               py(capacity) - 16, "device capacity " + _fmt_bytes(capacity), red)
    elif capacity > 0:
        c.text(left + 10, top - 18, f"device capacity {_fmt_bytes(capacity)} (above the plot)",
               red)
    c.text(left, 14, title)
    c.text(w // 2 - Canvas.text_width("launch in the iteration") // 2, h - 30,
           "launch in the iteration")
    c.text(8, top - 18, "live bytes", blue)
    c.save(path)
