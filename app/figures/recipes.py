"""One pre-trained model fine-tuned two ways, as one figure (Tour steps 3, 4 and 6): the same bars for each run, one
panel a run under its own verdict, so a class sees at a glance where the two recipes part. The bars are the runs'
own claims' numbers (core.claims.siblings.recipe_bars); nothing is measured or judged here."""

from __future__ import annotations

import textwrap

import altair as alt
import pandas as pd

from app.figures.style import CHAR_WIDTH, NARROWEST
from app.state import large
from core.claims.shift_rule import CAUSAL_SHARE
from core.claims.siblings import RECIPE_AXES, RECIPE_BARS

#: Each step's title, as a class reads the figure.
RECIPE_TITLES = {
    "module_waves": "Shifting a module kind's short waves: does the last digit follow?",
    "spectra": "Layer by layer: low band in the MLPs, short periods in attention?",
    "ablations": "Accuracy with a band, or only the paper's periods, removed",
}
#: The two recipes' colours (neither is a module's: the bars are runs, the labels name the modules).
RECIPE_COLOURS = ["#4c78a8", "#9c755f", "#72b7b2", "#b279a2"]
#: Width of each run's panel's plot, in pixels (projector, page): with the bar labels it fits the narrowest column a
#: Tour step's figure is drawn in (app.figures.style.NARROWEST).
PLOT_WIDTH = {True: 170, False: 200}


def recipe_chart(step: str, bars: pd.DataFrame, subtitle: str = ""):
    """`bars` (`recipe_bars` of `step`) as horizontal bars, one panel a recipe headed by its verdict, a tick on
    each bar at its reference (`RECIPE_AXES`); step 3 draws the rule's 50% as a dashed line; `subtitle` names the
    model the recipes trained. Returns (chart, data, caption)."""
    big = large()
    x_title, reference = RECIPE_AXES[step]
    recipes = list(dict.fromkeys(bars["recipe"]))
    data = bars.assign(header=[f"{r}|verdict: {v}" for r, v in zip(bars["recipe"], bars["verdict"])],
                       line=100 * CAUSAL_SHARE if step == "module_waves" else None)
    order = [b for b in RECIPE_BARS[step] if b in set(bars["bar"])]
    top = max(float(data["value"].max()), float(data["reference"].max(skipna=True) or 0)) if len(data) else 1.0
    domain = [0, 100] if step != "spectra" else [0, top + 1]  # room past the rule's tick
    y = alt.Y("bar:N", sort=order, title=None, axis=alt.Axis(labelLimit=0))
    x = alt.X("value:Q", title=textwrap.wrap(x_title, 30), scale=alt.Scale(domain=domain, nice=False),
              axis=alt.Axis(tickCount=5, format="d"))
    tips = [alt.Tooltip("recipe"), alt.Tooltip("bar"), alt.Tooltip("value:Q", title=x_title),
            alt.Tooltip("reference:Q", title=reference)]
    bars_drawn = alt.Chart().mark_bar().encode(
        y=y, x=x, tooltip=tips,
        color=alt.Color("recipe:N", scale=alt.Scale(domain=recipes, range=RECIPE_COLOURS[:len(recipes)]),
                        legend=None))
    ticks = alt.Chart().transform_filter("isValid(datum.reference)").mark_tick(
        color="black", thickness=3, size=16 if big else 12).encode(y=y, x=alt.X("reference:Q"), tooltip=tips)
    layers = [bars_drawn, ticks]
    if step == "module_waves":
        layers.append(alt.Chart().mark_rule(color="#555", strokeDash=[4, 3]).encode(x=alt.X("line:Q")))
    font, header_font = (16, 17) if big else (11, 13)
    title = RECIPE_TITLES[step]
    chart = (
        alt.layer(*layers, data=data)
        .properties(width=PLOT_WIDTH[big], height=alt.Step(24 if big else 18))
        .facet(row=alt.Row("header:N", title=None, sort=[h for h in dict.fromkeys(data["header"])],
                           header=alt.Header(labelExpr="split(datum.label, '|')", labelAngle=0, labelOrient="top",
                                             labelAlign="left", labelAnchor="start", labelLimit=0,
                                             labelFontSize=header_font, labelFontWeight="bold")))
        .properties(title=alt.TitleParams(
            textwrap.wrap(title, int(NARROWEST[big] / (CHAR_WIDTH * (20 if big else 15)))),
            fontSize=20 if big else 15, anchor="start",
            **({"subtitle": subtitle, "subtitleFontSize": 16 if big else 12, "subtitleColor": "#555"} if subtitle
               else {})))
        .configure(
            axis=alt.AxisConfig(labelFontSize=font, titleFontSize=font + 1),
            legend=alt.LegendConfig(labelFontSize=font, titleFontSize=font),
        )
    )
    rule = " Dashed line: 50%, the rule's line." \
        if step == "module_waves" else ""
    caption = f"Black tick: {reference}.{rule}"
    return chart, data, caption
