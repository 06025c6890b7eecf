"""Attention head by head: heatmaps of heads (x) by layers (y), and one head's spectrum.

Data come from `core.analysis.head_readings` (`head_bands`, `head_locking_grid`, the `head_spectra` table); here the
drawing, and the run's figures that read those tables first. Each figure returns (chart, data, caption), as the other
figures do, and reads at 1024 x 768 for a model of 2 layers as for one of 30. The pages call the run's figures
(`head_bands_figure`, `head_locking_figure`, `one_head_figure`), built once per run version and choice for every
session (`app.shared`).
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.figures.style import k_axis, period_marks, styled, task_periods
from app.shared import share_figures
from app.state import large
from core.analysis.head_readings import head_bands, head_locking_grid
from core.errors import CoreError
from core.runs import summaries
from core.runs.reader import RunReader, Table


def layer_ticks(n_layers: int) -> list[int]:
    """Every layer where 1 label a row fits, else 1 and every 5th (a 16 px label on a 10 px row would overlap)."""
    step = 1 if n_layers <= (12 if large() else 24) else 5
    return sorted({1, *range(step, n_layers + 1, step)})


def head_ticks(n_heads: int) -> list[int]:
    """Every head up to 16, else 0 and every 4th."""
    step = 1 if n_heads <= 16 else 4
    return list(range(0, n_heads, step))


def row_step(n_rows: int) -> int:
    """Pixels a heatmap row takes: about 280 px for the rows in all (about 9 a row for 31 layers), 30 at most. A
    heatmap is sized by its rows, not given a height, so that a 2-layer heatmap's rows are as readable as a 30-layer
    one's."""
    return max(8, min(30, 280 // max(1, int(n_rows))))


def head_grid(data: pd.DataFrame, colour: alt.Color, tooltip: list) -> alt.Chart:
    """The cells of a heads x layers heatmap: head on x, layer on y (layer 1 at the top), coloured by `colour`."""
    n_layers, n_heads = int(data["layer"].max()), int(data["head"].max()) + 1
    return alt.Chart(data).encode(
        x=alt.X("head:O", title="head (counted from 0)", axis=alt.Axis(values=head_ticks(n_heads), labelAngle=0)),
        y=alt.Y("layer:O", title="layer", sort="ascending", axis=alt.Axis(values=layer_ticks(n_layers))),
    ).mark_rect().encode(color=colour, tooltip=tooltip)


def titled(what: str, run_label: str) -> str:
    """A figure's title, with the run's name after " — " (`styled` puts it in the subtitle)."""
    return f"{what} — {run_label}" if run_label else what


def head_band_heatmap(bands: pd.DataFrame, tau: int, run_label: str = ""):
    """Per head and layer, the share of the head's spectral energy below the cutoff tau (`head_bands`)."""
    colour = alt.Color("low:Q", title=f"energy at k < {tau}", scale=alt.Scale(domain=[0, 1], scheme="oranges"),
                       legend=alt.Legend(format="%", values=[0, 0.5, 1], orient="bottom", direction="horizontal",
                                         gradientLength=200))
    tooltip = [alt.Tooltip("layer"), alt.Tooltip("head"),
               alt.Tooltip("low:Q", format=".1%", title=f"low band (k < {tau})"),
               alt.Tooltip("high:Q", format=".1%", title=f"high band (k ≥ {tau})")]
    chart = head_grid(bands, colour, tooltip)
    caption = (f"Each cell is one attention head (column) of one layer (row): the share of its logits' Fourier energy "
               f"at frequencies below tau = {tau} (dark: mostly low-frequency, magnitude; pale: mostly high-frequency, "
               "the last digit's periods).")
    title = titled(f"Low-frequency share of each attention head's spectrum (k < {tau})", run_label)
    return styled(chart, title, height=None, row_step=row_step(int(bands["layer"].max()))), bands, caption


def head_locking_heatmap(grid: pd.DataFrame, period: float, run_label: str = "", threshold: float | None = None):
    """Per head and layer, the phase locking R of the head's wave of period `period` to the answer
    (`head_locking_grid`), cells above the family-wise chance threshold framed, those that lock framed in red.
    `threshold`: the one chance threshold the section quotes (the largest over its periods); the caption gives it as
    a bound ("at most R = 0.06") so the section names one number. Without it, this period's."""
    null = float(grid["null_95"].max())
    colour = alt.Color("locking:Q", title="locking R", scale=alt.Scale(domain=[0, 1], scheme="blues"),
                       legend=alt.Legend(orient="bottom", direction="horizontal", gradientLength=200))
    tooltip = [alt.Tooltip("layer"), alt.Tooltip("head"),
               alt.Tooltip("locking:Q", format=".2f", title="R"),
               alt.Tooltip("null_95:Q", format=".2f", title="chance threshold"),
               alt.Tooltip("energy_share:Q", format=".1%", title=f"energy at T = {period:g}"),
               alt.Tooltip("offset:Q", format=".2f", title="peak at answer + (numbers)"),
               alt.Tooltip("above_null", title="above chance"), alt.Tooltip("locks")]
    cells = head_grid(grid, colour, tooltip)
    above = cells.transform_filter("datum.above_null").mark_rect(fill=None, stroke="#222", strokeWidth=1,
                                                                  strokeDash=[3, 2])
    locks = cells.transform_filter("datum.locks").mark_rect(fill=None, stroke="#d62728", strokeWidth=2.5)
    shuffles = int(grid["shuffles"].iloc[0]) if "shuffles" in grid else 0
    bound = f" (R > {null:.2f})" if threshold is None else f", at most R = {max(threshold, null):.2f} at any period"
    caption = (f"Locking R (0 to 1, no unit) of each head's period-{period:g} wave to the answer, over "
               f"{int(grid['n'].iloc[0]):,} questions. Dashed frame: above chance, R above the 95% family-wise "
               f"threshold over every head{bound}, from {shuffles:,} shuffles; red frame: it locks.")
    title = titled(f"Which attention heads follow the answer mod {period:g}", run_label)
    chart = alt.layer(cells, above, locks)
    return styled(chart, title, height=None, row_step=row_step(int(grid["layer"].max()))), grid, caption


def opening_reason(ranked: pd.DataFrame) -> str:
    """Why the heads' heatmap opens at the period it does, from `periods_by_locking`'s ranking (best first)."""
    first, rest = ranked.iloc[0], ranked.iloc[1:]
    at, heads = f"period {first['period']:g}", int(first["heads"])
    locks, above = int(first["locks"]), int(first["above_null"])
    counts = ", ".join(f"{r.period:g}: {int(r.locks)}" for r in rest.itertuples())
    if locks:
        why = f"Opens at {at}, where the most heads lock: {locks} of {heads}"
        tied = rest[rest["locks"] == locks]
        if len(tied):
            others = " and ".join(f"{T:g}" for T in tied["period"])
            longest = " and the longest period" if (tied["above_null"] == above).any() else ""
            why += (f", as at period{'s' if len(tied) > 1 else ''} {others}; of these it has the most heads above "
                    f"chance ({above}){longest}")
        return why + (f" (heads that lock at the other periods: {counts})." if counts else ".")
    if above:
        return f"No head locks at any period; opens at {at}, where the most heads are above chance: {above} of {heads}."
    return f"No head locks or is above chance at any period; opens at {at}, the longest of them."


def head_spectrum(head_spectra: pd.DataFrame, basis: str, layer: int, head: int, tau: int, task: str = "addition",
                  run_label: str = "", module_spectra: pd.DataFrame | None = None):
    """One head's mean spectrum, drawn as a module's (`app.figures.logits.layer_spectrum`): bars by band, the top
    periods labelled, the cutoff tau dashed, the task's periods dotted; with the run's `module_spectra`, the whole
    layer's attention spectrum as a grey line beside it."""
    sub = head_spectra[(head_spectra["head"] == head)].assign(module="attn")
    if not ((sub["layer"] == layer) & (sub["basis"] == basis)).any():
        raise CoreError(f"no {basis} spectrum of head {head} at layer {layer} in the head table")
    data = summaries.layer_spectrum(sub, basis, "attn", layer, tau)
    k_max = int(data["k"].max())
    span = int(round(float(data["period"].iloc[0] * data["k"].iloc[0])))
    base = alt.Chart(data).encode(
        x=alt.X("k:Q", title="frequency k", scale=alt.Scale(domain=[0, k_max + 1], nice=False), axis=k_axis(k_max)))
    bars = base.mark_bar(width=2).encode(
        y=alt.Y("magnitude:Q", title="mean |Fourier| of the logits"),
        color=alt.Color("band:N", title="band",
                        scale=alt.Scale(domain=["low (k < tau)", "high (k ≥ tau)"], range=["#ff7f0e", "#1f77b4"])),
        tooltip=[alt.Tooltip("k"), alt.Tooltip("period:Q", format=".3g", title="period T"),
                 alt.Tooltip("magnitude:Q", format=".3f"), alt.Tooltip("band")],
    )
    labels = base.mark_text(dy=-6, dx=2, angle=315, align="left", fontWeight="bold").encode(
        y=alt.Y("magnitude:Q"), text=alt.Text("label:N"))
    cut = alt.Chart(pd.DataFrame({"k": [tau]})).mark_rule(strokeDash=[6, 3], color="gray").encode(x=alt.X("k:Q"))
    layers = [bars, labels, cut]
    top = float(data["magnitude"].max())
    caption = (f"Tall labelled bars are the frequencies head {head} of layer {layer} writes most (period T), read "
               f"through the unembedding as a whole module is. Dashed line: tau = {tau}. Dotted: the paper's periods.")
    if module_spectra is not None:
        whole = summaries.spectrum_heatmap(module_spectra, basis, "attn")
        whole = whole[whole["layer"] == layer]
        layers.append(alt.Chart(whole).mark_line(color="#555", strokeWidth=1, opacity=0.7).encode(
            x=alt.X("k:Q"), y=alt.Y("magnitude:Q")))
        top = max(top, float(whole["magnitude"].max()))
        caption += f" Grey line: the spectrum of layer {layer}'s whole attention (magnitudes do not add over heads)."
    layers.append(period_marks(task_periods(task), span, top * 1.25, labelled=data.loc[data["label"] != "", "k"]))
    title = titled(f"Attention {layer}, head {head}: Fourier spectrum of the head's logits", run_label)
    return styled(alt.layer(*layers), title), data, caption


def head_bands_figure(run: RunReader, basis: str, tau: int, run_label: str = ""):
    """`head_band_heatmap` of the run's heads (`head_bands` of its head_spectra table)."""
    return head_band_heatmap(head_bands(run.table(Table.HEAD_SPECTRA), basis, tau), tau, run_label)


def head_locking_figure(run: RunReader, period: float, run_label: str = "", threshold: float | None = None):
    """`head_locking_heatmap` of the run's heads at `period` (`head_locking_grid` of its head_locking table)."""
    return head_locking_heatmap(head_locking_grid(run.table(Table.HEAD_LOCKING), period), period, run_label,
                                threshold)


def one_head_figure(run: RunReader, basis: str, layer: int, head: int, tau: int, run_label: str = ""):
    """`head_spectrum` of one head of the run, beside its layer's whole attention."""
    return head_spectrum(run.table(Table.HEAD_SPECTRA), basis, layer, head, tau, run.task, run_label,
                         run.table(Table.MODULE_SPECTRA))


share_figures(globals(), names=["head_bands_figure", "head_locking_figure", "one_head_figure"])
