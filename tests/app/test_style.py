"""The size rule every styled chart shares (app.figures.style.styled): fitted to its column's width only, so that Vega
lays the title out above the plot in full (the browser walk, tests/app/test_browser.py, sees any title clipped at a
chart's top), with the plot given what one title line and the x axis leave of the chart's height;
and a file (a download, the handout: app.furniture.file_spec) draws the plot as wide as asked, the rest around it."""

from __future__ import annotations

import json
import re

import altair as alt
import pandas as pd
import vl_convert as vlc

from app.figures import style
from app.furniture import file_spec

POINTS = pd.DataFrame({"k": [1, 2, 3, 1, 2, 3], "value": [0.1, 0.5, 0.2, 0.3, 0.2, 0.6], "module": ["MLP"] * 3 + [
    "Attention"] * 3})
LONG = "Periods 2, 2.5, 5 and 10 in each of the last 15 layers against W_U"
RUN = "SmolLM2-135M fine-tuned, number tokens addition test"


def chart(title: str, height: int = 320) -> alt.Chart:
    return style.styled(alt.Chart(POINTS).mark_line().encode(x="k:Q", y="value:Q", color="module:N"), title,
                        height=height)


def plot_height(title: str, height: int = 320) -> int:
    spec = chart(title, height).to_dict()
    assert spec["autosize"] == {"type": "fit-x", "contains": "padding", "resize": True}
    return spec["height"]


def test_the_plot_gets_what_one_title_line_and_the_x_axis_leave_and_more_lines_add_to_the_chart():
    """A plot as tall under a title of one line as under one of three and a subtitle: the chart grows by them instead
    (Vega lays them out above the plot), so a title that wraps in a narrow column never squeezes its plot."""
    assert plot_height("Accuracy by layer") == 320 - int(15 * 1.2) - style.AXIS_ROOM[False]
    assert plot_height(f"{LONG} — {RUN}") == plot_height("Accuracy by layer")


def test_on_a_projector_the_chart_shrinks_a_little_and_its_type_grows(monkeypatch):
    monkeypatch.setattr("app.figures.style.large", lambda: True)
    assert plot_height(LONG) == int(320 * 0.9) - int(20 * 1.2) - style.AXIS_ROOM[True]


def test_a_short_chart_keeps_a_readable_plot():
    assert plot_height("Which module carries the short waves?", height=90) == style.MIN_PLOT[False]


def test_a_file_draws_the_plot_as_wide_as_asked_with_the_axis_and_legend_around_it():
    """On the page the chart's whole width is its column's; a file has none, so its plot keeps the width asked and the
    y axis and the legend beside it widen the file (the screen's own spec at that width would not)."""
    def drawn_width(spec: dict) -> float:
        return float(re.search(r'<svg[^>]* width="([\d.]+)"', vlc.vegalite_to_svg(json.dumps(spec))).group(1))

    made = chart("Accuracy by layer")
    assert drawn_width(file_spec(made, 400)) > 400 + 60
    assert drawn_width({**made.to_dict(), "width": 400}) <= 400


def test_a_file_holds_a_chart_of_more_cells_than_altair_s_limit():
    """The 30-layer run's Spectra heatmap has 7,800 cells; Altair refuses more than 5,000 unless told not to."""
    cells = pd.DataFrame({"layer": [i // 260 for i in range(7_800)], "k": [i % 260 for i in range(7_800)],
                          "value": 1.0})
    heatmap = style.styled(alt.Chart(cells).mark_rect().encode(x="k:O", y="layer:O", color="value:Q"), "Heatmap")
    assert len(file_spec(heatmap)["datasets"].popitem()[1]) == 7_800
