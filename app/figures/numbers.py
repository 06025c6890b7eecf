"""Altair figures of how a run represents numbers: the embedding spectra, the number spectrum of each
layer, the probes' period fits and the t-SNE map. Each takes a run (and choices) and returns
(chart, data, caption); data come from `core.runs.summaries`.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.figures.style import k_axis, period_marks, styled, task_periods
from app.shared import share_figures
from core.runs import summaries
from core.runs.reader import RunReader, Table
from core.tasks import task_name


def _spectrum_with_null(data, k_max: int) -> alt.LayerChart:
    """Bars of magnitude by frequency k, the shuffled-numbers threshold as a dashed line, and the
    outliers labelled with their period (the embedding and the number spectra are drawn alike)."""
    base = alt.Chart(data).encode(
        x=alt.X("k:Q", title="frequency k", scale=alt.Scale(domain=[0, k_max + 1], nice=False), axis=k_axis(k_max))
    )
    bars = base.mark_bar(width=3, color="#1f77b4").encode(
        y=alt.Y("magnitude:Q", title="magnitude", scale=alt.Scale(domainMax=float(data["magnitude"].max()) * 1.15)),
        tooltip=[
            alt.Tooltip("k"),
            alt.Tooltip("period:Q", format=".3g", title="period T"),
            alt.Tooltip("magnitude:Q", format=".3f"),
            alt.Tooltip("outlier"),
        ],
    )
    null = base.mark_line(color="gray", strokeDash=[4, 3]).encode(y=alt.Y("null_threshold:Q"))
    return bars + null + _period_labels(base)


def embedding_spectrum(run: RunReader, basis: str, matrix: str):
    data = summaries.embedding_outliers(run.table(Table.EMBEDDING_SPECTRUM), basis, matrix)
    k_max = run.basis(basis).k_max
    chart = _spectrum_with_null(data, k_max)
    side = "input rows W_E" if matrix == "input" else "unembedding rows W_U"
    caption = (
        "Bars above the dashed line are outliers, labelled with their period T: the line is the level that the same "
        "spectrum with the numbers shuffled passes anywhere in only 5% of 1,000 shuffles. Pre-trained models show T = "
        "2, 2.5, 5, 10."
    )
    return styled(chart, f"Spectrum of the numbers' {side} — {run.label}"), data, caption


def number_spectrum(run: RunReader, basis: str, layer: int):
    """Spectrum of the numbers' representations at one layer, against the shuffled-numbers threshold."""
    data = summaries.number_spectrum_at(run.table(Table.NUMBER_SPECTRUM), layer, basis)
    k_max = int(data["k"].max())
    chart = _spectrum_with_null(data, k_max) + period_marks(
        task_periods(run.task), run.basis(basis).span, float(data["magnitude"].max()) * 1.15,
        labelled=data.loc[data["label"] != "", "k"],
    )
    where = "the embedding of the last token" if layer == 0 else f"the residual stream after block {layer}"
    n = run.number_representations.get("n_numbers", run.p)
    caption = (
        f"Numbers 0..{n - 1} at layer {layer} ({where}): bars above the dashed line beat the numbers in shuffled "
        f"order (5% of 1,000 shuffles pass it); labels: period T; dotted: the paper's for {task_name(run.task)}."
    )
    if layer == 0 and run.number_representations.get("single_token") is False:
        caption += (
            " With digit tokens, layer 0 depends on the last digit alone: periods 10, 5, 3.3, 2.5, 2 by construction."
        )
    return styled(chart, f"Spectrum of the numbers at layer {layer} — {run.label}"), data, caption


def _period_labels(base: alt.Chart) -> alt.LayerChart:
    """Period labels over the labelled bars; those near an end of the axis aligned to it, so none is cut."""
    text = dict(dy=-8, fontWeight="bold")
    layers = [
        base.transform_filter(f"datum.edge == '{edge}'")
        .mark_text(align=align, dx=dx, **text)
        .encode(y=alt.Y("magnitude:Q"), text=alt.Text("label:N"))
        for edge, align, dx in (("", "center", 0), ("right", "right", 4), ("left", "left", -4))
    ]
    return alt.layer(*layers)


PROBE_COLOURS = alt.Scale(
    domain=["n mod 2", "n mod 5", "n mod 10", "n mod 100", "n mod 3 (control)", "n mod 7 (control)"],
    range=["#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#bdbdbd", "#7f7f7f"],
)


def probe_kappa(run: RunReader, layer: int | None = None):
    """Cohen's kappa of the linear probes by layer, the paper's moduli in colour, the controls grey and dashed."""
    data = summaries.probe_curves(run.table(Table.NUMBER_PROBES))
    base = alt.Chart(data).encode(
        x=alt.X("layer:Q", title="layer (0 = embedding)", axis=alt.Axis(tickMinStep=1)),
        color=alt.Color(
            "series:N",
            title="probe reads",
            scale=PROBE_COLOURS,
            legend=alt.Legend(orient="right", labelLimit=0, symbolOpacity=1, symbolType="circle"),
        ),
    )
    band = base.mark_area(opacity=0.15).encode(
        y=alt.Y("low:Q", title="Cohen's kappa (held-out numbers)", scale=alt.Scale(domain=[-0.6, 1.05], nice=False)),
        y2=alt.Y2("high:Q"),
    )
    line = base.mark_line(point=alt.OverlayMarkDef(size=30)).encode(
        y=alt.Y("kappa_mean:Q"),
        strokeDash=alt.StrokeDash(
            "kind:N", scale=alt.Scale(domain=["paper period", "control"], range=[[1, 0], [5, 3]]), legend=None
        ),
        tooltip=[
            alt.Tooltip("series"),
            alt.Tooltip("layer"),
            alt.Tooltip("kappa_mean:Q", format=".2f", title="kappa"),
            alt.Tooltip("kappa_sd:Q", format=".2f", title="sd"),
        ],
    )
    zero = alt.Chart(pd.DataFrame({"y": [0.0]})).mark_rule(color="black", opacity=0.4).encode(y=alt.Y("y:Q"))
    layers = [band, line, zero]
    if layer is not None:
        layers.append(
            alt.Chart(pd.DataFrame({"layer": [layer]}))
            .mark_rule(color="black", strokeDash=[2, 2])
            .encode(x=alt.X("layer:Q"))
        )
    caption = (
        "Kappa 1: a linear probe reads n mod T perfectly on numbers it never saw; 0: chance. Controls (grey, dashed): "
        "below 0 means the nearest numbers in this representation (n±10, n±100) never share n's remainder."
    )
    return styled(alt.layer(*layers), f"Linear probes by layer — {run.label}", height=340), data, caption


def embedding_map(run: RunReader, matrix: str, colour: str):
    data = run.table(Table.EMBEDDING_CLUSTERS)
    data = data[data["matrix"] == matrix]
    enc = (
        alt.Color("number:Q", title="number", scale=alt.Scale(scheme="viridis"))
        if colour == "magnitude"
        else alt.Color("last_digit:N", title="last digit", scale=alt.Scale(scheme="category10"))
    )
    chart = (
        alt.Chart(data)
        .mark_circle(size=28, opacity=0.8)
        .encode(
            x=alt.X("x:Q", title="t-SNE 1 (no unit)", axis=alt.Axis(labels=False)),
            y=alt.Y("y:Q", title="t-SNE 2 (no unit)", axis=alt.Axis(labels=False)),
            color=enc,
            tooltip=[alt.Tooltip("number"), alt.Tooltip("last_digit"), alt.Tooltip("cluster")],
        )
    )
    what = "size of the number" if colour == "magnitude" else "last digit"
    caption = (
        f"Each dot is one number's embedding, coloured by its {what}: neighbouring colours mean the embedding encodes "
        "it."
    )
    return styled(chart, f"t-SNE of number embeddings by {what} — {run.label}", height=300), data, caption


# Built once per process for a run version and its choices, and shared by all sessions (app/shared.py).
share_figures(globals())
