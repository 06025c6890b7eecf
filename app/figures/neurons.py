"""Altair figures of the neuron-level test (core.runs.neuron_run): each neuron's held-out R^2 under the two fits as a
binned map, and what mean-ablating the best-fitted neurons of each kind does beside random neurons. Each takes the
run's tables (`neuron_fits`, `neurons`) and returns (chart, data, caption).
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from app.figures.style import styled
from core.analysis.neurons import with_matches

#: Width of a bin of the R^2 map.
BIN = 0.05
#: The sets drawn, by (selection, matches), in the order drawn, with their colour: each top set, then its random control
#: drawn in its layers; a table of version 1 has one control over every layer read (matches "").
SETS = {("helix", ""): ("best fitted by the helix of a+b", "#d62728"),
        ("random", "helix"): ("random, in the helix set's layers (mean ± sd)", "#ff9896"),
        ("heuristic", ""): ("best fitted by digit patterns", "#1f77b4"),
        ("random", "heuristic"): ("random, in the digit set's layers (mean ± sd)", "#aec7e8"),
        ("random", ""): ("random, of the layers read (mean ± sd)", "#7f7f7f")}


def fit_map_data(fits: pd.DataFrame) -> pd.DataFrame:
    """Neurons counted in bins of `BIN` of (helix R^2, heuristic R^2), each clipped to [-0.1, 1]."""
    edges = np.arange(-0.1, 1.0 + BIN / 2, BIN)
    h = np.clip(fits["helix_r2"].to_numpy(), -0.1, 1.0 - 1e-9)
    d = np.clip(fits["heuristic_r2"].to_numpy(), -0.1, 1.0 - 1e-9)
    counts, _, _ = np.histogram2d(h, d, bins=[edges, edges])
    i, j = np.nonzero(counts)
    return pd.DataFrame({"helix_low": edges[i], "helix_high": edges[i + 1], "digits_low": edges[j],
                         "digits_high": edges[j + 1], "neurons": counts[i, j].astype(int)})


def fit_map_chart(fits: pd.DataFrame, label: str = ""):
    """The binned map of the neurons' held-out R^2: helix of a+b across, digit patterns up; the diagonal where the two
    fits explain the same."""
    data = fit_map_data(fits)
    scale = alt.Scale(domain=[-0.1, 1.0], nice=False)
    cells = alt.Chart(data).mark_rect().encode(
        x=alt.X("helix_low:Q", title="held-out R² of the helix of a+b (share of variance)", scale=scale),
        x2=alt.X2("helix_high:Q"),
        y=alt.Y("digits_low:Q", title="held-out R² of the digit patterns", scale=scale), y2=alt.Y2("digits_high:Q"),
        color=alt.Color("neurons:Q", title="neurons", scale=alt.Scale(type="log", scheme="viridis")),
        tooltip=[alt.Tooltip("helix_low:Q", title="helix R² from", format=".2f"),
                 alt.Tooltip("digits_low:Q", title="digits R² from", format=".2f"), alt.Tooltip("neurons:Q")],
    )
    diagonal = alt.Chart(pd.DataFrame({"x": [-0.1, 1.0], "y": [-0.1, 1.0]})).mark_line(
        color="black", strokeDash=[4, 3], opacity=0.6).encode(x=alt.X("x:Q"), y=alt.Y("y:Q"))
    first, last = int(fits["layer"].min()), int(fits["layer"].max())
    above = int((fits["heuristic_r2"] > fits["helix_r2"]).sum())
    caption = (f"Each cell counts neurons of MLPs {first}-{last} by how much of their held-out variance each fit "
               f"explains (below -0.1 drawn at -0.1); {above:,} of {len(fits):,} lie above the dashed diagonal (digit "
               "patterns fit better).")
    title = "Which fit explains each neuron? Helix of a+b against digit patterns" + (f" — {label}" if label else "")
    return styled(cells + diagonal, title, height=320), data, caption


def ablation_data(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (reading, k, set of `SETS` the table holds): the share, and for the random draws their mean and mean
    +- sd; `unedited`, the unedited model's accuracy on the accuracy rows (empty on the others)."""
    table = with_matches(table)
    base = float(table.loc[table["selection"] == "none", "accuracy"].iloc[0])
    rows = []
    for column, reading in (("accuracy", "accuracy"), ("last_digit_shift", "last digit changed")):
        for k in sorted(int(x) for x in table.loc[table["k"] > 0, "k"].unique()):
            for (selection, matches), (name, _) in SETS.items():
                chosen = (table["k"] == k) & (table["selection"] == selection) & (table["matches"] == matches)
                values = table.loc[chosen, column].to_numpy()
                if not len(values):
                    continue
                sd = float(values.std(ddof=1)) if len(values) > 1 else 0.0
                rows.append({"group": f"{reading}, {k} neurons", "set": name, "reading": reading, "k": k,
                             "share": float(values.mean()), "low": float(values.mean()) - sd,
                             "high": float(values.mean()) + sd, "draws": len(values),
                             "unedited": base if column == "accuracy" else np.nan})
    return pd.DataFrame(rows)


def ablation_chart(table: pd.DataFrame, label: str = ""):
    """Accuracy and the share of answers whose last digit changed, with each set of neurons set to its mean: bars by
    reading and k, side by side by set; the random draws' spread as a rule; the unedited accuracy a black tick."""
    data = ablation_data(table)
    order = list(dict.fromkeys(data["group"]))
    shown = [(name, colour) for name, colour in SETS.values() if name in set(data["set"])]
    names = [name for name, _ in shown]
    enc = alt.Chart(data).encode(
        x=alt.X("group:N", title=None, sort=order,
                axis=alt.Axis(labelAngle=0, labelLimit=0, labelExpr="split(datum.label, ', ')")),  # two lines each
        xOffset=alt.XOffset("set:N", sort=names),
    )
    bars = enc.mark_bar().encode(
        y=alt.Y("share:Q", title="share of the questions (%)", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("set:N", title="neurons averaged", scale=alt.Scale(domain=names,
                                                                          range=[c for _, c in shown]),
                        legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0)),
        tooltip=[alt.Tooltip("set:N"), alt.Tooltip("group:N"), alt.Tooltip("share:Q", format=".1%"),
                 alt.Tooltip("draws:Q")],
    )
    spread = enc.mark_rule(color="black").encode(y=alt.Y("low:Q"), y2=alt.Y2("high:Q"))
    unedited = enc.mark_tick(color="black", thickness=2, size=40).encode(y=alt.Y("unedited:Q"))
    base = table[table["selection"] == "none"].iloc[0]
    caption = (f"Over {int(base['n']):,} questions; black ticks: accuracy unedited ({base['accuracy']:.1%}); the rule "
               "on each random set's bar spans its draws' mean ± one standard deviation.")
    title = "Neurons set to their mean: accuracy and last digit" + (f" — {label}" if label else "")
    return styled(alt.layer(bars, spread, unedited), title, height=300), data, caption
