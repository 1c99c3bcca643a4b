"""The round's success chart (`creditline.plots`), drawn with Pillow: ticks and pixels by hand."""

import io

import pytest
from PIL import Image

from creditline.plots import BLUE, HEIGHT, ORANGE, WIDTH, nice_step, success_by_round, ticks


def test_ticks_are_one_two_five_steps_inside_the_range():
    assert nice_step(1.15, 6) == pytest.approx(0.2)  # 1.15 / 6 = 0.19 → 0.2
    assert ticks(-0.1, 1.05, 6) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert ticks(-0.85, 1.05, 6) == pytest.approx([-0.5, 0.0, 0.5, 1.0])  # 1.9 / 6 = 0.32 → 0.5
    assert ticks(-0.8, 20.8, 10, integer=True) == [0, 5, 10, 15, 20]  # 21.6 / 10 = 2.16 → 5
    assert ticks(-0.5, 1.5, 10, integer=True) == [0, 1]  # 0.2 → whole rounds only


def test_each_point_is_drawn_where_its_value_lies():
    png = success_by_round([0, 2], [0.0, 1.0], [0.0, 0.5], "t")
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    # x ∈ [−0.5, 2.5] over 438 px from 50; y ∈ [−0.1, 1.05] over 234 px from 26, top down
    # success (2, 1.0) → (50 + 2.5/3·438, 26 + 0.05/1.15·234) = (415, 36.2); (0, 0.0) → (123, 239.7)
    assert image.getpixel((415, 36)) == BLUE and image.getpixel((123, 240)) == BLUE
    # mean return (2, 0.5) → (415, 26 + 0.55/1.15·234) = (415, 137.9)
    assert image.getpixel((415, 138)) == ORANGE
    assert image.getpixel((300, 200)) != BLUE  # nothing drawn between the lines there


def test_the_same_history_gives_the_same_bytes_and_one_round_draws():
    history = ([0, 1, 2], [0.0, 0.5, 1.0], [-1.0, 0.0, 1.0])
    assert success_by_round(*history, "t") == success_by_round(*history, "t")
    assert Image.open(io.BytesIO(success_by_round([0], [0.0], [-0.3], "baseline"))).size == (WIDTH, HEIGHT)


def test_a_value_that_is_not_a_number_leaves_a_gap_and_the_axis_fits_the_returns():
    # success (0, 0.0) → (1, NaN) → (2, 1.0): no segment either side of the NaN; returns up to 1.5 widen y to
    # [−0.1, 1.55] (matplotlib's chart stopped at 1.05)
    png = success_by_round([0, 1, 2], [0.0, float("nan"), 1.0], [0.0, 1.5, 0.5], "t")
    image = Image.open(io.BytesIO(png)).convert("RGB")
    # x ∈ [−0.5, 2.5]: round 0 at x = 123, round 1 at 269. Had round 1 a success of 0.5, the line from round 0
    # would pass its midpoint (196, 26 + (1.55 − 0.25)/1.65·234) = (196, 210.4): with NaN there is no line
    assert image.getpixel((196, 210)) != BLUE
    # the return 1.5 at round 1 → (269, 26 + 0.05/1.65·234) = (269, 33.1), inside the frame
    assert image.getpixel((269, 33)) == ORANGE
    outside = [(x, y) for x in range(WIDTH) for y in range(0, 25)]  # the title band, above the frame
    assert all(image.getpixel(p) != ORANGE for p in outside)


def test_a_success_rate_outside_the_axis_is_cut_at_the_frame():
    # y ∈ [−0.1, 1.05]: a success of 50 (a bad value) leaves the frame; nothing is drawn over the title
    image = Image.open(io.BytesIO(success_by_round([0, 1], [0.0, 50.0], [0.0, 0.0], "t"))).convert("RGB")
    assert all(image.getpixel((x, y)) != BLUE for x in range(WIDTH) for y in range(0, 25))
