"""Step 4 read layer by layer: the two counts its verdict makes (core.claims.spectra.layer_counts), one figure each,
each marking the layers it counts and naming them in its caption. Each takes a run (and the cutoff) and returns
(chart, data, caption), as every figure does."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.figures.style import MODULE_COLOURS, styled
from app.shared import share_figures
from core.claims.spectra import LAYER_SHARE_MARGIN, layer_counts, spectra_by_layer
from core.runs import summaries
from core.runs.reader import RunReader

#: What a layer's bar says in the low-band count, and its colour (the leading module's; grey: neither leads).
LEADS = {"the MLP leads": "#ff7f0e", "attention leads": "#1f77b4", "neither by 10 points": "#9e9e9e"}


def layers_said(layers: list[int]) -> str:
    """Layers as a caption lists them: "18, 20" (none: "none")."""
    return ", ".join(str(x) for x in sorted(layers)) or "none"


def layer_low_gaps(run: RunReader, tau: int = 50):
    """Step 4's first count layer by layer: each layer's MLP share of energy below tau minus its attention's, in
    points, with the rule's +10 and -10 lines; each bar coloured by what the count reads in it (the MLP leads,
    attention leads, neither), so that a bar drawn at the line is read as the count reads it."""
    rows = spectra_by_layer(run, tau)
    counts = layer_counts(rows)
    wide = rows.pivot(index="layer", columns="module", values="low_share")
    layers = [int(x) for x in wide.index]
    data = pd.DataFrame({
        "layer": layers,
        "gap": 100 * (wide["mlp"] - wide["attn"]).to_numpy(),
        "counted": ["the MLP leads" if x in counts["mlp_low"] else "attention leads" if x in counts["attn_low"]
                    else "neither by 10 points" for x in layers],
    })
    bars = alt.Chart(data).mark_bar().encode(
        x=alt.X("layer:O", title="layer", axis=alt.Axis(labelAngle=0, labelOverlap="greedy")),
        y=alt.Y("gap:Q", title="MLP minus attention (points)"),
        color=alt.Color("counted:N", title=None, scale=alt.Scale(domain=list(LEADS), range=list(LEADS.values())),
                        legend=alt.Legend(orient="top")),
        tooltip=[alt.Tooltip("layer"), alt.Tooltip("gap:Q", format=".2f", title="points"), alt.Tooltip("counted")])
    margin = 100 * LAYER_SHARE_MARGIN
    lines = alt.Chart(pd.DataFrame({"y": [margin, -margin]})).mark_rule(color="black", strokeDash=[4, 3]).encode(
        y=alt.Y("y:Q"))
    n, mlp, attn = counts["n"], counts["mlp_low"], counts["attn_low"]
    caption = (f"Each layer on its own: MLP's share of its energy below tau = {tau} minus attention's. The MLP leads "
               f"by {margin:g} points or more in {len(mlp)} of {n} layers ({layers_said(mlp)}), attention in "
               f"{len(attn)} ({layers_said(attn)}); grey: neither.")
    title = f"Low band in each of the last {n} layers: MLP's share minus attention's — {run.label}"
    return styled(alt.layer(bars, lines), title, height=300), data, caption


def layer_short_ratios(run: RunReader, tau: int = 50):
    """Step 4's second count layer by layer: for each layer and module, its strongest of periods 2, 2.5, 5, 10 as a
    multiple of the W_U baseline's bar there (the rows step 4's verdict counts); the bar itself is the line at 1. A
    point is filled where the module carries the period (what the count reads), hollow where it falls short."""
    names = summaries.MODULE_NAMES
    rows = spectra_by_layer(run, tau)
    counts = layer_counts(rows)
    data = rows[["module", "layer", "short_over_bar", "short_best_period"]].copy()
    carried = {"attn": counts["attn_short"], "mlp": counts["mlp_short"]}
    data["carries"] = [layer in carried[m] for m, layer in zip(rows["module"], rows["layer"])]
    data["module"] = data["module"].map(names)
    n = counts["n"]
    x = alt.X("layer:Q", title="layer", axis=alt.Axis(tickMinStep=1), scale=alt.Scale(zero=False))
    y = alt.Y("short_over_bar:Q", title="strongest short period ÷ W_U bar (x)")
    colour = alt.Color("module:N", title=None, scale=MODULE_COLOURS, legend=alt.Legend(orient="top"))
    lines = alt.Chart(data).mark_line().encode(x=x, y=y, color=colour)
    points = alt.Chart(data).mark_point(size=70, strokeWidth=2, opacity=1).encode(
        x=x, y=y, color=colour,
        fill=alt.Fill("module:N", scale=MODULE_COLOURS, legend=None,
                      condition={"test": "!datum.carries", "value": "white"}),
        tooltip=[alt.Tooltip("module"), alt.Tooltip("layer"),
                 alt.Tooltip("short_best_period:Q", format=".3g", title="period T"),
                 alt.Tooltip("short_over_bar:Q", format=".3f", title="÷ bar"), alt.Tooltip("carries")],
    )
    bar = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(color="black", strokeDash=[4, 3]).encode(y=alt.Y("y:Q"))
    caption = (f"Each layer on its own: its strongest of periods 2, 2.5, 5, 10 divided by the W_U bar. Filled, at or "
               f"above the dashed line at 1: the module carries that period in that layer (attention in "
               f"{len(counts['attn_short'])} of {n} layers, the MLP in {len(counts['mlp_short'])}); hollow: below it.")
    title = f"Periods 2, 2.5, 5, 10 in each of the last {n} layers, against the W_U bar — {run.label}"
    return styled(alt.layer(lines, points, bar), title, height=300), data, caption


share_figures(globals())
