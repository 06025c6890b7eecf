"""The phase-locking figure: which attention or MLP layer's wave follows the answer mod T, over every example.

Data come from `core.runs.summaries.locking_grid` (the run's `phase_locking` table); here only the drawing.
"""

from __future__ import annotations

import textwrap

import altair as alt
import pandas as pd

from app.figures.style import run_subtitle, wrapped_title
from app.shared import share_figures
from app.sidebar import short_label
from app.state import large
from core.claims.last_digit import headline_groups
from core.claims.shift_rule import group_summary, shift_summary
from core.runs import summaries
from core.runs.reader import RunReader, Table


def locking_heatmap(run: RunReader):
    data = summaries.locking_grid(run.table(Table.PHASE_LOCKING))
    n_layers = int(data["layer"].max())
    big = large()
    order = sorted(data["T"].unique(), key=float)
    # every layer where they fit, else 1 and every 5th: 16 px labels on a 10 px row would overlap
    step = 1 if n_layers <= (12 if big else 24) else 5
    layer_ticks = sorted({1, *range(step, n_layers + 1, step)})
    base = alt.Chart(data).encode(
        x=alt.X("T:O", title="period T", sort=order, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("layer:O", title="layer", sort="ascending", axis=alt.Axis(values=layer_ticks)),
    )
    cells = base.mark_rect().encode(
        color=alt.Color(
            "locking:Q",
            title="locking R",
            scale=alt.Scale(domain=[0, 1], scheme="blues"),
            legend=alt.Legend(orient="bottom", direction="horizontal", gradientLength=220),
        ),
        tooltip=[
            alt.Tooltip("module"),
            alt.Tooltip("layer"),
            alt.Tooltip("T"),
            alt.Tooltip("locking:Q", format=".2f", title="R"),
            alt.Tooltip("null_95:Q", format=".2f", title="chance threshold"),
            alt.Tooltip("energy_share:Q", format=".1%", title="energy at T"),
            alt.Tooltip("offset:Q", format=".2f", title="peak at answer + (numbers)"),
            alt.Tooltip("locks"),
        ],
    )
    frames = base.transform_filter("datum.locks").mark_rect(fill=None, stroke="#d62728", strokeWidth=2.5)
    # fits a 1024x768 projector beside the step's text: about 10 px a layer there, 15 on a desktop
    height = max(80, min(280, 10 * n_layers)) if big else max(90, min(440, 15 * n_layers))
    chart = (
        alt.layer(cells, frames, data=data)
        .properties(height=height, width=200 if big else 190)  # six period labels at 16 px on a projector
        .facet(
            column=alt.Column(
                "module:N",
                title=None,
                sort=["Attention", "MLP"],
                header=alt.Header(labelFontSize=18 if big else 13, labelFontWeight="bold"),
            )
        )
        .properties(
            title=alt.TitleParams(
                "Which layers follow the answer mod T",
                subtitle=textwrap.wrap(run_subtitle(short_label(run.label)), 46),
                fontSize=20 if big else 15,
                subtitleFontSize=16 if big else 12,
                anchor="start",
            )
        )
        .configure(  # in one copy of the chart, as app.figures.style.styled
            axis=alt.AxisConfig(labelFontSize=16 if big else 11, titleFontSize=18 if big else 12),
            legend=alt.LegendConfig(labelFontSize=16 if big else 11, titleFontSize=16 if big else 12),
        )
    )
    shuffles = int(data["shuffles"].iloc[0])
    caption = (
        f"Locking R: 1 = the wave's peak always sits at the same distance from the answer. Red frame: it locks "
        f"(beyond {shuffles:,} shuffles)."
    )
    return chart, data, caption


#: The causal figure shows at most this many modules (a deep model: the strongest attention and MLP layers and the
#: whole stream), two bars each, so it fits a projector's screen.
SHIFT_BARS_MAX = 9
#: ... and beside the groups (the stream, one group of each kind, the strongest single layers)
SHIFT_BARS_WITH_GROUPS = 5


def shift_bars(run: RunReader):
    """The causal figure of step 3: per module, the share of questions whose last digit moved when its short waves
    were shifted, beside the random edits of the same size (core.claims.last_digit.shift_summary)."""
    design = run.manifest.get("design")
    sample_note = f" · {design['sample']}-question sample" if design else ""
    full = shift_summary(run)
    relative = bool((full["read_of"] == "stream").all())
    current = bool((full["rule"] == "relative").all())
    summary = full
    silent = 0
    groups = shown_groups(run)
    # the stream, the groups, then the strongest single layers: fewer bars beside groups, to keep a Tour step one screen
    room = SHIFT_BARS_WITH_GROUPS - len(groups) if len(groups) else SHIFT_BARS_MAX
    if len(full) > room:
        ranked = full[full["kind"] != "resid"].sort_values("read", ascending=False)
        moved = ranked[(ranked["read"] > 0) | (ranked["read_control"] > 0)]  # a module that moved nothing: no bar
        modules = (moved if len(moved) else ranked).head(room - 1)
        silent = len(ranked) - len(modules) if len(moved) < room - 1 else 0
        summary = full[full.index.isin(modules.index) | (full["kind"] == "resid")]
    names = {"attn": "attention", "mlp": "MLP", "resid": "whole stream"}
    rows = []
    singles = [(f"{names[r.kind]} {r.layer}", r) for r in summary.itertuples()]
    sites = ([s for s in singles if s[1].kind == "resid"]  # the positive control, then the groups, then single layers
             + [(f"{names[r.kind]} {r.first_layer}-{r.layer}", r) for r in groups.itertuples()]  # a range: all at once
             + [s for s in singles if s[1].kind != "resid"])
    for module, r in sites:
        rows.append(
            {
                "module": module,
                "edit": "shift its short waves",
                "share": r.read,
                "low": r.read_low,
                "high": r.read_high,
                "n": r.n,
            }
        )
        rows.append(
            {
                "module": module,
                "edit": "random edit, same size",
                "share": r.read_control,
                "low": None,
                "high": None,
                "n": r.n,
            }
        )
    data = pd.DataFrame(rows)
    big = large()
    order = list(dict.fromkeys(data["module"]))
    bars = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y("module:N", sort=order, title=None),
            yOffset=alt.YOffset("edit:N", sort=["shift its short waves", "random edit, same size"]),
            x=alt.X(
                "share:Q",
                title="last digit moved (stream = 100%)" if relative
                else "questions whose last digit moved (share)",
                scale=alt.Scale(domain=[0, max(1.0, float(data["share"].max()))], clamp=True),
                axis=alt.Axis(format="%"),
            ),
            color=alt.Color(
                "edit:N",
                title=None,
                sort=["shift its short waves", "random edit, same size"],
                scale=alt.Scale(range=["#1f77b4", "#bbbbbb"]),
                # a narrow column fits it; on a projector the Tour's figure column takes it in one line
                legend=alt.Legend(orient="bottom", direction="horizontal" if big else "vertical", labelLimit=0),
            ),
            tooltip=[
                alt.Tooltip("module"),
                alt.Tooltip("edit"),
                alt.Tooltip("share:Q", format=".1%"),
                alt.Tooltip("low:Q", format=".1%"),
                alt.Tooltip("high:Q", format=".1%"),
                alt.Tooltip("n"),
            ],
        )
    )
    spread = (  # the 95% interval of each module's shift, over questions
        alt.Chart(data.dropna(subset=["low", "high"]))
        .mark_rule(color="black", strokeWidth=1.5)
        .encode(
            y=alt.Y("module:N", sort=order, title=None),
            yOffset=alt.YOffset("edit:N", sort=["shift its short waves", "random edit, same size"]),
            x=alt.X("low:Q"),
            x2=alt.X2("high:Q"),
        )
    )
    half = alt.Chart(pd.DataFrame({"x": [0.5]})).mark_rule(strokeDash=[4, 3], color="black").encode(x=alt.X("x:Q"))
    chart = (
        alt.layer(bars, spread, half)
        .properties(
            # two bars a module, readable at 16 px, and room for the title, axis and legend, which a page's stretched
            # chart counts in its height (two modules drawn in 128 px left them no room at all); on a projector a
            # little closer, so that the Tour step fits one screen
            height=min(420, max(258, 40 * len(order) + 98) if big else 64 * len(order) + 130),
            width=260 if big else 320,
            title=alt.TitleParams(
                wrapped_title("Does the answer follow a shifted wave?", 18 if big else 14),
                # on a projector the rows need the room: the step names the run, the caption the sample
                subtitle=alt.Undefined if big and len(order) > 2 else textwrap.wrap(
                    run_subtitle(short_label(run.label)) + sample_note, 46),
                fontSize=18 if big else 14,
                subtitleFontSize=14 if big else 12,
                anchor="start",
            ),
        )
        .configure(
            axis=alt.AxisConfig(labelFontSize=16 if big else 11, titleFontSize=16 if big else 12),
            legend=alt.LegendConfig(labelFontSize=16 if big else 11),
        )
    )
    read = (f"on a fixed sample of {design['sample']} questions" if design
            else f"over all {len(run.table(Table.EXAMPLES))} questions")
    if relative:
        caption = (
            f"Short waves (periods 2, 2.5, 5, 10) of each module moved by d = 1, 2 or 5 {read}. Blue: last digit "
            "moved, as a share of the whole stream's shift (100%; black: 95% interval). Grey: a random edit of the "
            "same size. "
            "Dashed: 50%."
        )
    else:
        caption = (
            f"Short waves (periods 2, 2.5, 5, 10) of each module moved by d = 1, 2 or 5 {read}. Blue: share whose last "
            "digit moved by d. Grey: a random edit of the same size. Dashed: 50%. "
            + ("Nothing is judged: the whole stream's own shift has no hold here." if current else
               "Read by the earlier rule: this run's weights are not here.")
        )
    if len(summary) < len(full):  # a deep run: the bars are the stream and the layers that moved it most
        caption = ("Blue: last digit moved by shifting a layer's short waves (stream = 100%; black: 95% interval). "
                   "Grey: a random edit of the same size. The strongest layers"
                   + (f"; the other {silent} moved none." if silent else "."))
    if len(groups):  # the groups first, over every question
        first = groups.iloc[0]
        caption = (f"Blue: last digit moved by shifting short waves (95% interval in black); "
                   f"{int(first['first_layer'])}-{int(first['layer'])}: those layers at once. Grey: same-size random "
                   "edits.")
    return chart, data, caption


def shown_groups(run: RunReader) -> pd.DataFrame:
    """The groups step 3's figure draws, those its headline quotes (core.claims.last_digit.headline_groups); empty
    without the group tables."""
    groups = group_summary(run)
    if groups is None:
        return pd.DataFrame(columns=["kind", "first_layer", "layer", "n"])
    return headline_groups(groups)


# Built once per process for a run version and shared by all sessions, like app.figures.logits (app/shared.py).

share_figures(globals())
