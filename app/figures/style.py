"""The look every figure shares: the answer's colour, the module colours, the percentage axis, readable
frequency ticks, and a chart's title (wrapped, never cut), size and fonts, bigger in presentation mode
(`styled`). No Streamlit here: `app.furniture.show_chart` draws a styled chart with its downloads."""

from __future__ import annotations

import json
import re
import textwrap

import altair as alt
import pandas as pd

from app.state import large
from core.paper import paper_findings

ANSWER_COLOUR = "#d62728"
#: Shares 0..100%: the domain has a little room beyond both ends, so a line or point at 0% or 100%
#: is drawn whole inside the plot instead of overshooting its frame; ticks stay at round values.
PCT_SCALE = alt.Scale(domain=[-0.03, 1.03], nice=False)
PCT_AXIS = alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1.0])
MODULE_COLOURS = alt.Scale(domain=["Attention", "MLP"], range=["#1f77b4", "#ff7f0e"])


def k_axis(k_max: int) -> alt.Axis:
    """Frequency ticks far enough apart to stay readable at a projector's width and type size."""
    step = 50 if k_max > 150 else 20 if k_max > 60 else 10 if k_max > 20 else 2
    return alt.Axis(values=list(range(0, int(k_max) + 1, step)), labelAngle=0)


def task_periods(task: str) -> tuple[float, ...]:
    """The periods the paper finds in the module logits of a task (core.paper): 2, 2.5, 5, 10, and for
    multiplication 3.33 too; the figures mark and name them."""
    return paper_findings(task).module_periods


def period_marks(periods, span: int, top: float, labelled=()) -> alt.LayerChart:
    """A dotted line at each of `periods` on a frequency-k axis (k = span / T), named "T = 3.33" at the height `top`
    (the top of the plot), so the periods a task's paper finding names are marked whatever the bars do; a period
    whose bar already carries its label (k in `labelled`) is not named twice."""
    data = pd.DataFrame({"k": [round(span / t) for t in periods], "label": [f"T = {t:.3g}" for t in periods],
                         "y": float(top)})
    rules = alt.Chart(data).mark_rule(color="#777", strokeDash=[2, 3]).encode(x=alt.X("k:Q"))
    named = data[~data["k"].isin([int(k) for k in labelled])]
    text = alt.Chart(named).mark_text(color="#444", angle=270, align="right", baseline="middle", dx=0, dy=-7).encode(
        x=alt.X("k:Q"), y=alt.Y("y:Q"), text=alt.Text("label:N"))
    return rules + text


#: The narrowest a chart is drawn at 1024 x 768 (a Tour or comparison column), in pixels: normal, presentation mode
#: (a Tour step's figure column with the sidebar open).
NARROWEST = {False: 250, True: 340}
#: Room in pixels an x axis takes below a plot (its labels and title), normal and presentation mode; and the least
#: height a plot is given, whatever its chart's title and axes take.
AXIS_ROOM = {False: 40, True: 52}
MIN_PLOT = {False: 100, True: 130}
#: Average width of a title character, as a share of its font size (bold sans-serif, generous).
CHAR_WIDTH = 0.6


def styled(chart: alt.Chart, title: str, height: int | None = 320, row_step: int | None = None,
           shrink_on_projector: bool = True) -> alt.Chart:
    """Title, size and font sizes (bigger in presentation mode). `height`: the chart's height without its legends,
    subtitle and title lines after the first (less in presentation mode); `row_step`: pixels per row of a chart with a
    discrete y axis (a heatmap) instead. A title "what — run" is split: the run's name goes to a subtitle. The title
    wraps to the chart's drawn width in the browser (`wrapped_title`), so it is never cut, however narrow the column
    the chart is drawn in."""
    big = large()
    # on a projector a row of a heatmap grows with the type, and a chart shrinks a little, so that a Tour step's claim
    # and figure share one 1024x768 screen (`shrink_on_projector` False: a page's chart whose labels need its whole
    # height)
    row_scale = 1.1 if big else 1
    height_scale = 0.9 if big and shrink_on_projector else 1
    what, _, run = title.partition(" — ")
    run = run_subtitle(run)
    size_px, sub_px = (20, 16) if big else (15, 12)
    params = dict(fontSize=size_px, anchor="start", limit=10_000)  # no cut: the text wraps instead
    if run:
        sub = _lines(run, NARROWEST[big], sub_px)
        params.update(subtitle=sub if len(sub) > 1 else sub[0], subtitleFontSize=sub_px, subtitleColor="#555")
    # `height` is the chart's without its legends, its subtitle and its title's lines after the first: the plot gets
    # what one title line and the x axis leave of it, and the other lines and a legend above or below add theirs. The
    # chart is fitted to its column's width only (`fit-x`): its height is the plot's and whatever Vega lays out around
    # it, so a title is never drawn above the chart's top (under `fit`, Vega reserved less room above the plot than a
    # title took, and clipped up to 46 px of it on a projector) and a plot is never squeezed by a legend below it.
    size = (alt.Step(int(row_step * row_scale)) if row_step else
            max(MIN_PLOT[big], int(height * height_scale) - int(size_px * 1.2) - AXIS_ROOM[big]))
    # one copy of the chart (each `configure_*` call would deep-copy the whole chart again); the chart brings no
    # configuration of its own, which this would replace
    assert chart.config is alt.Undefined, "styled() sets the chart's configuration: configure it through styled"
    config = alt.Config(
        axis=alt.AxisConfig(labelFontSize=16 if big else 11, titleFontSize=18 if big else 12),
        legend=alt.LegendConfig(labelFontSize=16 if big else 11, titleFontSize=16 if big else 12),
        text=alt.MarkConfig(fontSize=16 if big else 11),
    )
    # drawn as SVG however many marks (Streamlit draws a chart of more than 2,000 data points on a canvas, where Vega
    # left a heatmap's title lines above the top after wrapping it to the column)
    return chart.properties(title=alt.TitleParams(wrapped_title(what, size_px), **params), height=size, config=config,
                            autosize=alt.AutoSizeParams(type="fit-x", contains="padding", resize=True),
                            usermeta={"embedOptions": {"renderer": "svg"}})


def run_subtitle(label: str) -> str:
    """A run's name as a chart's subtitle: whole on a page, and on a projector (presentation mode) without its
    parenthesised details, so that it takes one line (the page names the run whole)."""
    return " ".join(re.sub(r"\s*\([^)]*\)", "", label).split()) if large() else label


def wrapped_title(text: str, font_px: int) -> alt.ExprRef:
    """A title as a Vega expression that breaks it into lines fitting the chart's drawn width, so it wraps instead of
    being cut with an ellipsis: the width of the chart's container on a page (Streamlit's column), else (a file) the
    `width` signal. Not the `width` signal on a page: Vega sets it to the plot's width after laying the chart out, and
    a title wrapped again then was drawn with more lines than the layout had room for, above the chart's top, until
    the next event laid it out again."""
    drawn = "(containerSize()[0] > 0 ? containerSize()[0] - 10 : isFinite(width) ? width : 600)"  # less the padding
    chars = f"max(8, floor({drawn} / {CHAR_WIDTH * font_px:g}))"
    pattern = "regexp('(.{1,' + " + chars + " + '})( +|$)', 'g')"  # breaks at plain spaces only
    kept = re.sub(r" ([+=−-]) ", "\u00a0\\1\u00a0", text)  # "15 + 93" stays on one line
    return alt.ExprRef(f"split(trim(replace({json.dumps(kept, ensure_ascii=False)}, {pattern}, '$1\\n')), '\\n')")


def title_text(title) -> str:
    """The plain text of a chart title as a spec holds it: a string, lines, or `wrapped_title`'s expression."""
    text = title.get("text", "") if isinstance(title, dict) else title
    if isinstance(text, dict) and "expr" in text:
        text = json.JSONDecoder().raw_decode(text["expr"], text["expr"].index('"'))[0]
    return (" ".join(text) if isinstance(text, list) else str(text)).replace("\u00a0", " ")


def _lines(text: str, width_px: int, font_px: int) -> list[str]:
    """`text` wrapped to lines that fit `width_px` at `font_px` (the subtitle, which Vega-Lite cannot wrap)."""
    return textwrap.wrap(text, max(8, int(width_px / (CHAR_WIDTH * font_px)))) or [""]
