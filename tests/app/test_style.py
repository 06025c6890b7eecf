"""The size rule every chart shares (app.figures.style.styled): fitted to its column's width only, so that Vega lays
out the title above the plot in full (the browser walk, tests/app/test_browser.py, sees any title clipped at a chart's
top), with the plot given what the title's lines, the subtitle's and the x axis leave of the chart's height."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.figures import style

POINTS = pd.DataFrame({"k": [1, 2, 3], "value": [0.1, 0.5, 0.2]})


def plot_height(title: str, height: int = 320) -> int:
    spec = style.styled(alt.Chart(POINTS).mark_line().encode(x="k:Q", y="value:Q"), title, height=height).to_dict()
    assert spec["autosize"] == {"type": "fit-x", "contains": "padding", "resize": True}
    return spec["height"]


def test_the_plot_gets_what_the_title_and_the_x_axis_leave():
    one_line = plot_height("Accuracy by layer")
    assert one_line == 320 - int(15 * 1.2) - style.AXIS_ROOM[False]
    # at 250 px and 15 px type (27 characters a line) the title takes 3 lines; the subtitle at 12 px (34 a line), 2
    long = "Periods 2, 2.5, 5 and 10 in each of the last 15 layers against W_U"
    run = "SmolLM2-135M fine-tuned, number tokens addition test"
    assert plot_height(f"{long} — {run}") == 320 - 3 * int(15 * 1.2) - 2 * int(12 * 1.25) - style.AXIS_ROOM[False]


def test_a_short_chart_keeps_a_readable_plot():
    assert plot_height("Which module carries the short waves?", height=90) == style.MIN_PLOT[False]
