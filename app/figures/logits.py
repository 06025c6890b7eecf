"""Altair figures: each takes a run (and choices), returns (chart, data, caption).

Data come from `core.runs.summaries`; here only the drawing. Pages and the Tour share these, so a figure
looks the same wherever it appears.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.figures.style import (
    ANSWER_COLOUR,
    MODULE_COLOURS,
    PCT_AXIS,
    PCT_SCALE,
    k_axis,
    period_marks,
    styled,
    task_periods,
)
from app.shared import share_figures
from core.runs import summaries
from core.runs.reader import RunReader, Table
from core.tasks import expression, task_name


def accuracy_by_layer(run: RunReader, final_norm: bool):
    """The logit lens: each layer's share of the run's questions answered exactly, within ±2 and within ±10, with one
    legend (colour; the marks' shapes and dashes follow it) under the plot, so the plot keeps the column's width."""
    data = summaries.accuracy_by_layer(run.table(Table.LAYER_ACCURACY), final_norm)
    how = "final norm applied" if final_norm else "no final norm (the paper's reading)"
    order = ["exact", "within ±2", "within ±10"]
    chart = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=90, filled=True))
        .encode(
            x=alt.X("layer:Q", title="layer (0 = embeddings)", axis=alt.Axis(tickMinStep=1)),
            y=alt.Y("accuracy:Q", title=f"% of {run.split} questions", axis=PCT_AXIS, scale=PCT_SCALE),
            color=alt.Color("measure:N", title="answer counted if", sort=order,
                            legend=alt.Legend(orient="bottom", direction="horizontal")),
            shape=alt.Shape("measure:N", sort=order, legend=None),
            strokeDash=alt.StrokeDash("measure:N", sort=order, legend=None),
            tooltip=[alt.Tooltip("layer"), alt.Tooltip("measure"), alt.Tooltip("accuracy:Q", format=".1%")],
        )
    )
    caption = (
        f"Logit lens, {how}: each layer read through W_U. Where the ±10 line rises layers before the exact line, the "
        "model gets near the answer first (as GPT-2-XL does on addition, layers 20-30)."
    )
    return styled(chart, f"Logit-lens accuracy by layer — {run.label}"), data, caption


#: A module-logit heatmap shows at most this many (module, layer) rows: on a deep model, the strongest.
HEATMAP_ROWS = 16


def logit_heatmap(run: RunReader, example: pd.Series, window: int = 12):
    around = summaries.logits_around_answer(
        run.table(Table.MODULE_LOGITS), example.name, int(example["answer"]), window
    )
    data, n_rows = summaries.strongest_rows(around, HEATMAP_ROWS)
    reach = summaries.robust_reach(data["centred"])  # symmetric, and a few extreme cells do not wash out the rest
    chart = (
        alt.Chart(data)
        .mark_rect()
        .encode(
            x=alt.X(
                "number:O",
                title=f"number (answer {example['answer']} in the middle)",
                axis=alt.Axis(labelAngle=0, labelOverlap="parity"),
            ),
            y=alt.Y("row:N", title="module and layer", sort=alt.SortField("layer", order="ascending")),
            color=alt.Color(
                "centred:Q",
                title="logit − row mean",
                scale=alt.Scale(scheme="redblue", domain=[-reach, reach], domainMid=0, reverse=True, clamp=True),
                legend=alt.Legend(format=".2~f"),
            ),
            tooltip=[
                alt.Tooltip("row"),
                alt.Tooltip("number"),
                alt.Tooltip("offset"),
                alt.Tooltip("centred:Q", format=".3f"),
                alt.Tooltip("logit:Q", format=".3f"),
            ],
        )
    )
    answer = (
        alt.Chart(data[data["offset"] == 0])
        .mark_rect(fill=None, stroke="black", strokeWidth=2)
        .encode(x=alt.X("number:O"), y=alt.Y("row:N", sort=alt.SortField("layer", order="ascending")))
    )
    shown = (
        f"the {HEATMAP_ROWS} of {n_rows} modules that move these logits most"
        if n_rows > HEATMAP_ROWS
        else "every module"
    )
    caption = (
        f"Each row is one module's push on the numbers near the answer (red = up, blue = down; {shown}; colour clipped "
        "at the 98th percentile). Rows that favour every 2nd, 5th or 10th number classify the parity or last digit."
    )
    question = expression(run.task, example["a"], example["b"])
    title = f"Module logits around {question} = {example['answer']} — {run.label}"
    return styled(chart + answer, title, row_step=24), data, caption


def module_wave(run: RunReader, example: pd.Series, layer: int):
    frames = []
    for module in ("attn", "mlp"):
        w = summaries.logit_wave(run.table(Table.MODULE_LOGITS), example.name, module, layer)
        w["module"] = summaries.MODULE_NAMES[module]
        frames.append(w)
    data = pd.concat(frames, ignore_index=True)
    lines = (
        alt.Chart(data)
        .mark_line(strokeWidth=1.5)
        .encode(
            x=alt.X("number:Q", title="number on the number line", scale=alt.Scale(domain=[0, run.p - 1], nice=False)),
            y=alt.Y("centred:Q", title="logit − mean"),
            color=alt.Color("module:N", scale=MODULE_COLOURS, title="module"),
            tooltip=[alt.Tooltip("module"), alt.Tooltip("number"), alt.Tooltip("centred:Q", format=".3f")],
        )
    )
    rule = (
        alt.Chart(pd.DataFrame({"number": [int(example["answer"])]}))
        .mark_rule(color=ANSWER_COLOUR, strokeDash=[4, 3])
        .encode(x=alt.X("number:Q"))
    )
    caption = (
        f"Layer {layer}'s attention and MLP logits over all numbers; the red dashed line is the answer "
        f"{example['answer']}: a wave that peaks there pushes the model towards it."
    )
    return (
        styled(lines + rule, f"Layer {layer}: module logits as waves over the number line — {run.label}"),
        data,
        caption,
    )


def final_logits(run: RunReader, example: pd.Series):
    data = summaries.centred_final_logits(run.table(Table.MODULE_LOGITS), example.name)
    line = (
        alt.Chart(data)
        .mark_line(strokeWidth=1.5, color="#1f5fa8")
        .encode(
            x=alt.X("number:Q", title="number on the number line", scale=alt.Scale(domain=[0, run.p - 1], nice=False)),
            y=alt.Y("centred:Q", title="score above its average (logit)"),
            tooltip=[alt.Tooltip("number"), alt.Tooltip("centred:Q", format=".3f")],
        )
    )
    rule = (
        alt.Chart(pd.DataFrame({"number": [int(example["answer"])]}))
        .mark_rule(color=ANSWER_COLOUR, strokeDash=[4, 3])
        .encode(x=alt.X("number:Q"))
    )
    peak = int(data.loc[data["logit"].idxmax(), "number"])
    right = "the right answer" if peak == int(example["answer"]) else f"not the right answer {example['answer']}"
    caption = (
        f"The model's final score (logit) for every number 0..{run.p - 1}, drawn above or below the average score over "
        f"those numbers: the highest is {peak}, {right} (red dashed line)."
    )
    return (
        styled(
            line + rule,
            f"What the model says after '{expression(run.task, example['a'], example['b'])}': logits over all numbers "
            f"— {run.label}",
        ),
        data,
        caption,
    )


def accuracy_by_answer(run: RunReader, bin_width: int = 20):
    data = summaries.accuracy_by_answer(run.table(Table.EXAMPLES), bin_width)
    long = data.melt(
        id_vars=["answer_from", "answer_to", "n"],
        value_vars=["accuracy", "within_10"],
        var_name="measure",
        value_name="share",
    )
    long["measure"] = long["measure"].map({"accuracy": "exact", "within_10": "within ±10"})
    chart = (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("answer_from:Q", title=f"true answer (bins of {bin_width} numbers)"),
            y=alt.Y("share:Q", title="share of prompts", axis=PCT_AXIS, scale=PCT_SCALE),
            color=alt.Color("measure:N", title="answer counted if"),
            tooltip=[alt.Tooltip("answer_from"), alt.Tooltip("answer_to"), alt.Tooltip("n"), alt.Tooltip("measure"),
                     alt.Tooltip("share:Q", format=".1%")],
        )
    )
    caption = (
        "Accuracy by the size of the answer: where on the number line the model gets sums right, and where it is only "
        "close."
    )
    return styled(chart, f"Accuracy by answer size — {run.label}"), long, caption


def spectrum_heatmap(run: RunReader, basis: str, module: str, tau: int):
    data = summaries.spectrum_heatmap(run.table(Table.MODULE_SPECTRA), basis, module)
    fourier = run.basis(basis)
    span = fourier.span
    chart = (
        alt.Chart(data)
        .mark_rect()
        .encode(
            x=alt.X(
                "k:O",
                title=f"frequency k (period T = {span}/k)",
                axis=alt.Axis(values=_k_ticks(fourier.k_max, run.task), labelAngle=0),
            ),
            # beyond 16 layers every fifth named (30 rows of 10 px); fewer, every other one dropped while rows are
            # thinner than their labels
            y=alt.Y("layer:O", title="layer", sort="descending", axis=alt.Axis(
                values=alt.Undefined if run.n_layers <= 16 else [1, *range(5, run.n_layers + 1, 5)],
                labelOverlap="parity")),
            color=alt.Color(
                "shown:Q",
                title="mean |Fourier| (log)",
                scale=alt.Scale(type="log", scheme="viridis"),
                legend=alt.Legend(format=".3~g"),
            ),
            tooltip=[
                alt.Tooltip("layer"),
                alt.Tooltip("k"),
                alt.Tooltip("period:Q", format=".3g", title="period T"),
                alt.Tooltip("magnitude:Q", format=".3f"),
            ],
        )
    )
    cut = (
        alt.Chart(pd.DataFrame({"k": [tau]}))
        .mark_rule(color="white", strokeDash=[6, 3], strokeWidth=2)
        .encode(x=alt.X("k:O"))
    )
    marked = sorted(task_periods(run.task), reverse=True)
    caption = (
        f"Each row is a layer, each column a frequency k (brighter: larger, on a log scale); k = "
        f"{', '.join(str(round(span / t)) for t in marked)} are periods {', '.join(f'{t:.3g}' for t in marked)}. "
        f"The dashed line is the cutoff tau = {tau}. The bars above show the same spectra's strongest periods at a "
        "readable size."
    )
    name = summaries.MODULE_NAMES[module]
    return (
        styled(
            chart + cut,
            f"{name}: mean Fourier magnitude of module logits, by layer and frequency — {run.label}",
            height=max(160, min(420, 14 * run.n_layers)),
        ),
        data,
        caption,
    )


def _k_ticks(K: int, task: str = "addition") -> list[int]:
    """Frequency ticks of the heatmap (on the paper's 521 numbers: periods 520, 20, 10, 5, 4, 3, 2.5, 2; for
    multiplication 3.33 instead of 3)."""
    three = 156 if any(abs(t - 10 / 3) < 1e-3 for t in task_periods(task)) else 173
    ticks = [1, 26, 52, 104, 130, three, 208, 260] if K == 260 else list(range(1, K + 1, max(1, K // 8)))
    return [t for t in ticks if t <= K]


def uncrowded_labels(data: pd.DataFrame, min_gap: int) -> pd.DataFrame:
    """`data` with the label of a peak cleared where a taller labelled peak sits within `min_gap` frequencies of it
    (slanted labels of neighbouring bars, T=32.5 and T=24.8, would print over each other)."""
    out = data.copy()
    kept: list[int] = []
    for i in out[out["label"] != ""].sort_values("magnitude", ascending=False).index:
        if any(abs(int(out.at[i, "k"]) - k) < min_gap for k in kept):
            out.at[i, "label"] = ""
        else:
            kept.append(int(out.at[i, "k"]))
    return out


def layer_spectrum(run: RunReader, basis: str, module: str, layer: int, tau: int):
    data = summaries.layer_spectrum(
        run.table(Table.MODULE_SPECTRA), basis, module, layer, tau, baseline=run.table(Table.MODULE_SPECTRA_BASELINE)
    )
    k_max = run.basis(basis).k_max
    data = uncrowded_labels(data, max(2, k_max // 20))
    base = alt.Chart(data).encode(
        x=alt.X("k:Q", title="frequency k", scale=alt.Scale(domain=[0, k_max + 1], nice=False), axis=k_axis(k_max))
    )
    bars = base.mark_bar(width=2).encode(
        y=alt.Y("magnitude:Q", title="mean |Fourier| of the logits"),
        color=alt.Color(
            "band:N",
            title="band",
            scale=alt.Scale(domain=["low (k < tau)", "high (k ≥ tau)"], range=["#ff7f0e", "#1f77b4"]),
        ),
        tooltip=[
            alt.Tooltip("k"),
            alt.Tooltip("period:Q", format=".3g", title="period T"),
            alt.Tooltip("magnitude:Q", format=".3f"),
            alt.Tooltip("band"),
        ],
    )
    # slanted up and right of their bar: "T=520" clears the y axis, neighbours (T=52, T=20) clear each other
    labels = base.mark_text(dy=-6, dx=2, angle=315, align="left", fontWeight="bold").encode(
        y=alt.Y("magnitude:Q"), text=alt.Text("label:N"))
    cut = alt.Chart(pd.DataFrame({"k": [tau]})).mark_rule(strokeDash=[6, 3], color="gray").encode(x=alt.X("k:Q"))
    null = base.mark_line(color="black", strokeWidth=1, opacity=0.7).encode(y=alt.Y("baseline:Q"))
    caption = (
        "Tall labelled bars are the frequencies this module writes most (period T); the black line is what the "
        "unembedding "
        f"alone gives random vectors of the same energy: a bar far above it is the module's own choice, a bar on it is "
        f"W_U's. Dashed line: tau = {tau}."
    )
    name = summaries.MODULE_NAMES[module]
    marks = period_marks(task_periods(run.task), run.basis(basis).span, float(data["magnitude"].max()) * 1.25,
                         labelled=data.loc[data["label"] != "", "k"])
    caption += f" Dotted: the paper's periods for {task_name(run.task)}."
    return (
        styled(
            bars + null + labels + cut + marks,
            f"{name}, layer {layer}: Fourier spectrum of the module logits — {run.label}",
        ),
        data,
        caption,
    )


def waves(run: RunReader, example: pd.Series, basis: str, top: int, window: int | None = None):
    """Top-k waves and their sum over the number line (or only answer ± window, to see short waves)."""
    comps, total = summaries.waves_for(run.table(Table.FINAL_WAVES), example.name, basis, top)
    logits = summaries.centred_final_logits(run.table(Table.MODULE_LOGITS), example.name)
    lo, hi = summaries.number_window(int(example["answer"]), window, run.p)
    peak = int(total.loc[total["value"].idxmax(), "number"])  # over the whole number line, zoomed or not
    if window is not None:
        comps = comps[comps["number"].between(lo, hi)]
        total = total[total["number"].between(lo, hi)]
    x = alt.X("number:Q", title="number on the number line", scale=alt.Scale(domain=[lo, hi], nice=False))
    comp_chart = (
        alt.Chart(comps)
        .mark_line(strokeWidth=1.2, opacity=0.8)
        .encode(
            x=x,
            y=alt.Y("value:Q", title="contribution to the logit"),
            color=alt.Color("component:N", title="component (period T)"),
            tooltip=[alt.Tooltip("component"), alt.Tooltip("number"), alt.Tooltip("value:Q", format=".3f")],
        )
    )
    sum_chart = (
        alt.Chart(total)
        .mark_line(color="black", strokeWidth=2.5 if window is not None else 1.5)
        .encode(x=x, y=alt.Y("value:Q"), tooltip=[alt.Tooltip("number"), alt.Tooltip("value:Q", format=".3f")])
    )
    rule = (
        alt.Chart(pd.DataFrame({"number": [int(example["answer"])]}))
        .mark_rule(color=ANSWER_COLOUR, strokeDash=[4, 3])
        .encode(x=alt.X("number:Q"))
    )
    data = comps[["component", "k", "period", "magnitude", "number", "value"]]
    answer, said = int(example["answer"]), int(example["prediction"])
    periods = ", ".join(f"{t:.3g}" for t in comps.drop_duplicates("component")["period"])
    where_peak = f"peaks at {peak}, the answer" if peak == answer else f"peaks at {peak}, not at the answer {answer}"
    model = "" if said == answer else f" The model itself answered {said}."
    caption = (
        f"Coloured: the {top} strongest Fourier components of the final logits (periods {periods}); black: their sum, "
        f"which {where_peak} (red line).{model}"
    )
    where = "" if window is None else f", numbers {lo}–{hi}"
    if window is not None:
        local = int(total.loc[total["value"].idxmax(), "number"])
        inside = ("" if local == peak else
                  f"; in this window it peaks at {local}" + (", the answer" if local == answer else ""))
        caption = (  # the periods are in the legend
            f"Zoomed to {lo}–{hi}. Over the whole line 0..{run.p - 1} the sum of the top {top} (black) {where_peak} "
            f"(red line){inside}.{model}"
        )
    question = expression(run.task, example["a"], example["b"])
    title = f"Top-{top} Fourier components of the final logits for {question}{where} — {run.label}"
    return styled(comp_chart + sum_chart + rule, title), data, caption, logits


def table1_chart(run: RunReader, tau: int):
    data = summaries.accuracy_by_tau(run.table(Table.ABLATIONS))
    base = alt.Chart(data).encode(
        x=alt.X("tau:Q", title="cutoff tau (frequency k)"),
        color=alt.Color("filter:N", title="filter", legend=alt.Legend(labelLimit=0)),
    )
    chart = base.mark_line(point=True).encode(
        y=alt.Y("accuracy:Q", title="accuracy under the filter", axis=PCT_AXIS, scale=PCT_SCALE),
        tooltip=[
            alt.Tooltip("filter"),
            alt.Tooltip("tau"),
            alt.Tooltip("accuracy:Q", format=".1%"),
            alt.Tooltip("low:Q", format=".1%", title="95% interval from"),
            alt.Tooltip("high:Q", format=".1%", title="95% interval to"),
            alt.Tooltip("n:Q", title="questions read"),
            alt.Tooltip("loss:Q", format=".3f"),
            alt.Tooltip("erased"),
        ],
    )
    rule = alt.Chart(pd.DataFrame({"tau": [tau]})).mark_rule(strokeDash=[6, 3], color="gray").encode(x=alt.X("tau:Q"))
    caption = (
        "Accuracy when every layer's outputs lose one band, for each cached cutoff. A line that collapses marks the "
        "band those modules need."
    )
    sampled = data["n"] < data["n"].max()
    if sampled.any():  # a deep model's sweep read on its fixed sample (core.runs.sampled_design)
        chart = chart + base.transform_filter(alt.datum.n < int(data["n"].max())).mark_rule(strokeWidth=2).encode(
            y=alt.Y("low:Q"), y2=alt.Y2("high:Q")
        )
        caption += (
            f" Cutoffs other than Table 1's were read on a sample of {int(data.loc[sampled, 'n'].max())} questions: "
            "the bars are their 95% intervals."
        )
    return styled(chart + rule, f"Accuracy under Fourier filters, by cutoff tau — {run.label}"), data, caption


def error_histogram(data: pd.DataFrame, title: str, caption: str):
    chart = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("error:Q", title="error = prediction − answer (numbers)", bin=False,
                    axis=alt.Axis(tickMinStep=1, format="d")),  # errors are whole numbers: no 0.4 ticks
            y=alt.Y("count:Q", title="wrong answers"),
            color=alt.Color(
                "multiple of 10:N",
                title="multiple of 10",
                scale=alt.Scale(domain=[True, False], range=["#d62728", "#7f7f7f"]),
            ),
            tooltip=[alt.Tooltip("error"), alt.Tooltip("count"), alt.Tooltip("multiple of 10")],
        )
    )
    return styled(chart, title), data, caption


def top_periods_bars(
    run: RunReader, basis: str, last_layers: int = 15, top: int = 6, low_share: dict | None = None, tau: int = 50,
    bar_levels: pd.DataFrame | None = None, slanted: bool = False,
):
    """MLP and attention side by side at the periods either of them carries most (mean over the last
    layers), as grouped bars: readable on a projector, unlike a heatmap of 260 thin columns. `low_share`
    (module -> share of the mean spectrum's energy below `tau`, the step 4 claim's numbers) goes into the legend.
    `bar_levels` (module "mlp"/"attn", k, level: core.claims.spectra.mean_bar_levels) draws, as a black tick on each
    bar, the W_U baseline's bar that module must reach there to count as carrying that period. `slanted` sets the
    period labels upright, for a column too narrow to set them flat (the Tour's folded panel)."""
    n = min(last_layers, run.n_layers)
    data, order = summaries.strongest_periods(
        run.table(Table.MODULE_SPECTRA), basis, n, run.basis(basis).k_max, top, also=task_periods(run.task)
    )
    ticks = None
    if bar_levels is not None and len(bar_levels):
        names = summaries.MODULE_NAMES
        levels = bar_levels.assign(module=bar_levels["module"].map(names))
        data = data.merge(levels.rename(columns={"level": "W_U bar"}), on=["module", "k"], how="left")
    legend = alt.Legend(orient="top")
    if low_share:
        names = summaries.MODULE_NAMES
        said = {names[m]: f"{names[m]}: {low_share[m]:.1%} of energy below tau = {tau}" for m in ("mlp", "attn")}
        legend = alt.Legend(
            orient="top",
            direction="vertical",
            labelLimit=0,
            labelExpr=f"datum.label == 'MLP' ? '{said['MLP']}' : '{said['Attention']}'",
        )
    chart = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("period T:N", title="period T (numbers per repetition)", sort=order,
                    axis=alt.Axis(labelAngle=-90 if slanted else 0)),
            xOffset=alt.XOffset("module:N"),
            y=alt.Y("magnitude:Q", title="mean |Fourier| of the logits"),
            color=alt.Color("module:N", title=None, scale=MODULE_COLOURS, legend=legend),
            tooltip=[
                alt.Tooltip("module"),
                alt.Tooltip("k"),
                alt.Tooltip("period:Q", format=".3g", title="period T"),
                alt.Tooltip("magnitude:Q", format=".3f"),
            ],
        )
    )
    if "W_U bar" in data.columns:
        ticks = alt.Chart(data).mark_tick(color="black", thickness=3, size=14).encode(
            x=alt.X("period T:N", sort=order),
            xOffset=alt.XOffset("module:N"),
            y=alt.Y("W_U bar:Q"),
            tooltip=[alt.Tooltip("module"), alt.Tooltip("period:Q", format=".3g", title="period T"),
                     alt.Tooltip("W_U bar:Q", format=".1f", title="W_U baseline's bar")],
        )
    shown = ", ".join(f"{t:.3g}" for t in task_periods(run.task))
    caption = (
        f"Each module's top {top} periods, mean of the last {n} layer{'s' if n > 1 else ''} (the paper's for "
        f"{task_name(run.task)}: {shown}); short ones tell the last digit, long ones the size."
    )
    if ticks is not None:
        caption += " Black tick: the W_U bar (below it, W_U's own shape)."
    if low_share:
        caption += f" Legend: share of energy below tau = {tau}."
    drawn = chart if ticks is None else alt.layer(chart, ticks)
    return styled(drawn, f"Strongest periods, MLP vs attention — {run.label}", height=280), data, caption


def table1_bars(run: RunReader, tau: int):
    """Table 1 as grouped bars: accuracy under each band filter, this run next to GPT-2-XL and to the random control."""
    t1 = summaries.table1(run.table(Table.ABLATIONS), tau)
    data = summaries.table1_long(t1, tau)
    order = ["this run", "random control", "GPT-2-XL"]
    energy = "control matched on" in t1.columns and (t1["control matched on"] == "rank and energy").any()
    chart = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X(
                "filter:N",
                title=None,
                sort=list(dict.fromkeys(data["filter"])),
                # at 45 degrees the seven labels clear each other in a Tour column with the sidebar open
                axis=alt.Axis(labelAngle=-45, labelLimit=0),
            ),
            xOffset=alt.XOffset("source:N", sort=order),
            y=alt.Y("accuracy:Q", title="accuracy", axis=PCT_AXIS, scale=PCT_SCALE),
            color=alt.Color(
                "source:N",
                title=None,
                sort=order,
                scale=alt.Scale(domain=order, range=["#1f77b4", "#9ecae1", "#7f7f7f"]),
                legend=alt.Legend(orient="top", labelLimit=0, columns=2),  # three in a row overran a narrow column
            ),
            tooltip=[
                alt.Tooltip("filter"),
                alt.Tooltip("source"),
                alt.Tooltip("accuracy:Q", format=".1%"),
                alt.Tooltip("spread:Q", format=".1f", title="± (points, sd over draws)"),
            ],
        )
    )
    caption = (
        f"Accuracy with one band removed from every layer (tau = {tau}); light bars: as many random directions "
        + ("of as much energy instead, " if energy else "instead, ") + "grey: the paper's GPT-2-XL."
    )
    if "spread" in data.columns and data["spread"].notna().any():  # the random control's spread over its draws
        spread = (
            alt.Chart(data[data["spread"].notna()])
            .transform_calculate(lo="datum.accuracy - datum.spread / 100", hi="datum.accuracy + datum.spread / 100")
            .mark_rule(color="#08306b", strokeWidth=1.5)
            .encode(
                x=alt.X("filter:N", sort=list(dict.fromkeys(data["filter"]))),
                xOffset=alt.XOffset("source:N", sort=order, scale=alt.Scale(domain=order)),
                y=alt.Y("lo:Q"),
                y2=alt.Y2("hi:Q"),
            )
        )
        chart = alt.layer(chart, spread)
        caption += " Dark ticks: the control's spread (± one sd over its random draws)."
    return styled(chart, f"Accuracy with one band removed (Table 1) — {run.label}", height=320), data, caption


# Every figure above is built once per process for a run version and its choices, and shared by all
# sessions together with its converted spec (app/shared.py): a class on one link pays for it once.
share_figures(globals())
