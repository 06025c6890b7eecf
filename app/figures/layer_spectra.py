"""Step 4 read layer by layer: the two counts its verdict makes (core.claims.spectra), one figure each. Each takes a
run (and the cutoff) and returns (chart, data, caption), as every figure does."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.figures.style import MODULE_COLOURS, styled
from app.shared import share_figures
from core.claims.spectra import spectra_by_layer
from core.runs import summaries
from core.runs.reader import RunReader


def layer_low_gaps(run: RunReader, tau: int = 50):
    """Step 4's first count layer by layer (core.claims.spectra.spectra_by_layer): each layer's MLP share of energy
    below tau minus its attention's, in points, with the rule's +10 and -10 lines."""
    rows = spectra_by_layer(run, tau)
    wide = rows.pivot(index="layer", columns="module", values="low_share")
    data = pd.DataFrame({"layer": wide.index, "gap": 100 * (wide["mlp"] - wide["attn"]).to_numpy()})
    bars = alt.Chart(data).mark_bar(color="#4c78a8").encode(
        x=alt.X("layer:O", title="layer", axis=alt.Axis(labelAngle=0, labelOverlap="greedy")),
        y=alt.Y("gap:Q", title="MLP minus attention (points)"),
        tooltip=[alt.Tooltip("layer"), alt.Tooltip("gap:Q", format=".1f", title="points")])
    lines = alt.Chart(pd.DataFrame({"y": [10.0, -10.0]})).mark_rule(color="black", strokeDash=[4, 3]).encode(
        y=alt.Y("y:Q"))
    caption = (f"Each layer on its own: above the dashed +10 line, its MLP holds at least 10 points more of its "
               f"energy below tau = {tau} than its attention; below -10, the reverse.")
    title = f"Low band in each of the last {len(data)} layers: MLP's share minus attention's — {run.label}"
    return styled(alt.layer(bars, lines), title, height=300), data, caption


def layer_short_ratios(run: RunReader, tau: int = 50):
    """Step 4's second count layer by layer: for each layer and module, its strongest of periods 2, 2.5, 5, 10 as a
    multiple of the W_U baseline's bar there (core.claims.spectra.spectra_by_layer, the rows step 4's verdict
    counts); the bar itself is the line at 1."""
    names = summaries.MODULE_NAMES
    rows = spectra_by_layer(run, tau)
    data = rows[["module", "layer", "short_over_bar", "short_best_period"]].copy()
    data["carries"] = [bool(s) for s in rows["short"]]  # what the verdict counts, not the ratio rounded for the eye
    data["module"] = data["module"].map(names)
    n = data["layer"].nunique()
    x = alt.X("layer:Q", title="layer", axis=alt.Axis(tickMinStep=1), scale=alt.Scale(zero=False))
    y = alt.Y("short_over_bar:Q", title="strongest short period ÷ W_U bar (x)")
    colour = alt.Color("module:N", title=None, scale=MODULE_COLOURS, legend=alt.Legend(orient="top"))
    lines = alt.Chart(data).mark_line().encode(x=x, y=y, color=colour)
    # filled where the module carries the period (the layers the sentence counts), hollow where it falls short: a
    # point drawn on the line at 1 is counted as its filling says
    points = alt.Chart(data).mark_point(size=70, strokeWidth=2, opacity=1).encode(
        x=x, y=y, color=colour,
        fill=alt.Fill("module:N", scale=MODULE_COLOURS, legend=None,
                      condition={"test": "!datum.carries", "value": "white"}),
        tooltip=[alt.Tooltip("module"), alt.Tooltip("layer"),
                 alt.Tooltip("short_best_period:Q", format=".3g", title="period T"),
                 alt.Tooltip("short_over_bar:Q", format=".3f", title="÷ bar"), alt.Tooltip("carries")],
    )
    bar = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(color="black", strokeDash=[4, 3]).encode(y=alt.Y("y:Q"))
    counted = data[data["short_over_bar"].notna()]
    carried = {m: int(counted.loc[counted["module"] == m, "carries"].sum()) for m in ("Attention", "MLP")}
    caption = (f"Each layer on its own: its strongest of periods 2, 2.5, 5, 10 divided by the W_U bar. Filled, at or "
               f"above the dashed line at 1: the module carries that period in that layer (attention in "
               f"{carried['Attention']} of {n} layers, the MLP in {carried['MLP']}); hollow: below it.")
    title = f"Periods 2, 2.5, 5, 10 in each of the last {n} layers, against the W_U bar — {run.label}"
    return styled(alt.layer(lines, points, bar), title, height=300), data, caption


share_figures(globals())
