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
    """One row per (reading, k, set of `SETS` the table holds), in questions against the unedited model: `questions`,
    the correct answers gained (+) or lost (-) for the accuracy reading, the answers whose last digit changed for the
    other; for the random draws their mean, and `low`, `high` the mean -+ one sd; `share`, the reading as the table
    holds it (accuracy, or the share changed)."""
    table = with_matches(table)
    base = table[table["selection"] == "none"].iloc[0]
    n, unedited = int(base["n"]), float(base["accuracy"])
    rows = []
    for column, reading in (("accuracy", "correct (net)"),
                            ("last_digit_shift", "last digit changed")):
        for k in sorted(int(x) for x in table.loc[table["k"] > 0, "k"].unique()):
            for (selection, matches), (name, _) in SETS.items():
                chosen = (table["k"] == k) & (table["selection"] == selection) & (table["matches"] == matches)
                values = table.loc[chosen, column].to_numpy()
                if not len(values):
                    continue
                counts = n * (values - unedited if column == "accuracy" else values)
                sd = float(counts.std(ddof=1)) if len(counts) > 1 else 0.0
                mean = float(counts.mean())
                rows.append({"group": f"{reading}, {k} neurons", "set": name, "reading": reading, "k": k,
                             "questions": mean, "low": mean - sd, "high": mean + sd, "share": float(values.mean()),
                             "draws": len(values), "n": n})
    return pd.DataFrame(rows)


def ablation_chart(table: pd.DataFrame, label: str = ""):
    """What holding each set of neurons at its mean does, counted in questions against the unedited model: correct
    answers gained or lost, and answers whose last digit changed; bars by reading and k, side by side by set, each
    with its count written on it; the random draws' spread as a rule; the unedited model is the line at 0."""
    data = ablation_data(table)
    order = list(dict.fromkeys(data["group"]))
    shown = [(name, colour) for name, colour in SETS.values() if name in set(data["set"])]
    names = [name for name, _ in shown]
    n = int(data["n"].iloc[0])
    enc = alt.Chart(data).encode(
        x=alt.X("group:N", title=None, sort=order,
                axis=alt.Axis(labelAngle=0, labelLimit=0, labelExpr="split(datum.label, ', ')")),  # two lines each
        xOffset=alt.XOffset("set:N", sort=names),
    )
    reach = max(5.0, float(np.nanmax(np.abs(data[["questions", "low", "high"]].to_numpy()))) * 1.25)
    bars = enc.mark_bar().encode(
        y=alt.Y("questions:Q", title=f"questions (of {n:,})", scale=alt.Scale(domain=[-reach, reach])),
        color=alt.Color("set:N", title="neurons held at their mean", scale=alt.Scale(domain=names,
                                                                                   range=[c for _, c in shown]),
                        legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0, titleLimit=0)),
        tooltip=[alt.Tooltip("set:N"), alt.Tooltip("group:N"), alt.Tooltip("questions:Q", format="+.1f"),
                 alt.Tooltip("share:Q", title="share", format=".2%"), alt.Tooltip("draws:Q")],
    )
    # each bar's count written past its end (and past its rule): signed for the net change, one decimal for a mean
    signed = data["reading"] != "last digit changed"
    labels = data.assign(
        label=[(f"{q:+.1f}" if d > 1 else f"{q:+.0f}") if sign else (f"{q:.1f}" if d > 1 else f"{q:.0f}")
               for q, d, sign in zip(data["questions"], data["draws"], signed)],
        label_at=np.where(data["questions"] >= 0, data[["questions", "high"]].max(axis=1) + 0.08 * reach,
                          data[["questions", "low"]].min(axis=1) - 0.08 * reach))
    counts = alt.Chart(labels).mark_text().encode(
        x=alt.X("group:N", sort=order), xOffset=alt.XOffset("set:N", sort=names), y=alt.Y("label_at:Q"),
        text=alt.Text("label:N"))
    spread = enc.mark_rule(color="black").encode(y=alt.Y("low:Q"), y2=alt.Y2("high:Q"))
    zero = alt.Chart(pd.DataFrame({"y": [0.0]})).mark_rule(color="black", strokeWidth=1.5).encode(y=alt.Y("y:Q"))
    base = table[table["selection"] == "none"].iloc[0]
    caption = (f"Counted in questions of {n:,} against the unedited model (the line at 0, {base['accuracy']:.2%} "
               "correct): correct answers gained (+) or lost (-), net, and last digits changed; random sets: the mean "
               "of their draws, the black bar across it ± one standard deviation.")
    title = "Neurons held at their mean: answers gained, lost or changed" + (f" — {label}" if label else "")
    return styled(alt.layer(bars, spread, counts, zero), title, height=300), data, caption
