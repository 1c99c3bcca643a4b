"""The round's chart for people: held-out success and mean return by round, drawn with Pillow.

It is drawn every round (the `evaluation` asset: Dagster metadata and an MLflow artifact). matplotlib took
~56 ms a round for it, and its import ~0.27 s a process (numpy, pandas and Pillow already in); this takes a
few milliseconds and imports nothing beyond Pillow. The chart: a frame with a light grid at the y ticks, the
success rate as a solid blue line with round markers, the mean return as a dashed orange line with small
markers, the title above, a legend in the top left corner, the x axis in rounds (0 = the initial policy).
y spans [min(−0.1, min return − 0.05), max(1.05, max return + 0.05)] over the finite returns (matplotlib's
chart stopped at 1.05 and hid a return above it).
"""

from __future__ import annotations

import io
import math

from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT = 500, 300  # px
LEFT, RIGHT, TOP, BOTTOM = 50, 12, 26, 40  # px: the plot area's margins
BLUE, ORANGE, GRID = (31, 119, 180), (255, 127, 14), (225, 225, 225)


def nice_step(span: float, most: int) -> float:
    """The smallest of 1, 2, 5 × 10^k that cuts `span` into at most `most` steps."""
    raw = max(span, 1e-12) / most
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))


def ticks(low: float, high: float, most: int, integer: bool = False) -> list[float]:
    """Multiples of `nice_step` inside [low, high] (whole numbers if `integer`)."""
    step = nice_step(high - low, most)
    if integer:
        step = max(1.0, math.ceil(step))
    first = math.ceil(low / step - 1e-9)
    return [k * step for k in range(first, math.floor(high / step + 1e-9) + 1)]


def _label(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


def success_by_round(rounds: list[int], success: list[float], mean_return: list[float], title: str) -> bytes:
    """A two-line chart of held-out success rate and mean return per round; returns PNG bytes
    (WIDTH × HEIGHT, the same bytes for the same input). A value that is not a finite number leaves a gap in
    its line; lines and markers are cut at the plot area's frame (a success rate outside [y_low, y_high])."""
    first, last = (min(rounds), max(rounds)) if rounds else (0, 1)
    pad = max(0.5, 0.04 * (last - first))
    x_low, x_high = first - pad, last + pad
    finite = [r for r in mean_return if math.isfinite(r)]
    y_low, y_high = min(-0.1, min(finite, default=0.0) - 0.05), max(1.05, max(finite, default=0.0) + 0.05)
    width, height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    frame = (LEFT, TOP, LEFT + width, TOP + height)

    def at(x: float, y: float) -> tuple[float, float] | None:
        """The pixel of data point (x, y); None for a value that is not a finite number."""
        if not math.isfinite(y):
            return None
        return (
            LEFT + (x - x_low) / (x_high - x_low) * width,
            TOP + (y_high - y) / (y_high - y_low) * height,
        )

    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=10)
    for y in ticks(y_low, y_high, 6):
        py = TOP + (y_high - y) / (y_high - y_low) * height
        draw.line((LEFT, py, LEFT + width, py), fill=GRID)
        draw.text((LEFT - 4, py), _label(y), fill="black", font=font, anchor="rm")
    for x in ticks(x_low, x_high, 10, integer=True):
        px = LEFT + (x - x_low) / (x_high - x_low) * width
        draw.line((px, TOP, px, TOP + height), fill=GRID)
        draw.text((px, TOP + height + 4), _label(x), fill="black", font=font, anchor="mt")
    draw.rectangle(frame, outline="black")
    for values, colour, dashed, radius in ((mean_return, ORANGE, True, 2.0), (success, BLUE, False, 3.5)):
        points = [at(x, y) for x, y in zip(rounds, values, strict=True)]
        for start, end in zip(points, points[1:], strict=False):
            seen = None if start is None or end is None else _clip(start, end, frame)
            if seen and dashed:
                _dashed(draw, *seen, colour)
            elif seen:
                draw.line((*seen[0], *seen[1]), fill=colour, width=2)
        for point in points:
            if point is not None and _inside(point, frame):
                px, py = point
                draw.ellipse((px - radius, py - radius, px + radius, py + radius), fill=colour)
    draw.text((WIDTH / 2, 6), title, fill="black", font=font, anchor="mt")
    draw.text(
        (LEFT + width / 2, HEIGHT - 14), "round (0 = initial policy)", fill="black", font=font, anchor="mt"
    )
    for row, (label, colour) in enumerate((("success rate", BLUE), ("mean return", ORANGE))):
        y = TOP + 10 + 14 * row
        draw.line((LEFT + 8, y, LEFT + 26, y), fill=colour, width=2)
        draw.text((LEFT + 32, y), label, fill="black", font=font, anchor="lm")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


Point = tuple[float, float]


def _inside(point: Point, frame: tuple[float, float, float, float]) -> bool:
    return frame[0] <= point[0] <= frame[2] and frame[1] <= point[1] <= frame[3]


def _clip(start: Point, end: Point, frame: tuple[float, float, float, float]) -> tuple[Point, Point] | None:
    """The part of the segment inside the frame (x0, y0, x1, y1), or None (Liang–Barsky)."""
    (x0, y0), (dx, dy) = start, (end[0] - start[0], end[1] - start[1])
    low, high = 0.0, 1.0
    for p, q in ((-dx, x0 - frame[0]), (dx, frame[2] - x0), (-dy, y0 - frame[1]), (dy, frame[3] - y0)):
        if p == 0:
            if q < 0:
                return None  # parallel to this edge and outside it
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return None
    return (x0 + low * dx, y0 + low * dy), (x0 + high * dx, y0 + high * dy)


def _dashed(draw: ImageDraw.ImageDraw, start: Point, end: Point, colour) -> None:
    """A dashed segment: 6 px on, 4 px off."""
    length = math.hypot(end[0] - start[0], end[1] - start[1])
    if length == 0:
        return
    dx, dy = (end[0] - start[0]) / length, (end[1] - start[1]) / length
    for on in range(0, math.ceil(length), 10):
        stop = min(on + 6, length)
        x0, y0, x1, y1 = start[0] + dx * on, start[1] + dy * on, start[0] + dx * stop, start[1] + dy * stop
        draw.line((x0, y0, x1, y1), colour, 2)
