"""The phase-locking figure: which attention or MLP layer's wave follows the answer mod T, over every example.

Data come from `core.runs.summaries.locking_grid` (the run's `phase_locking` table); here only the drawing.
"""

from __future__ import annotations

import textwrap

import altair as alt

from app.shared import share_figures
from app.sidebar import short_label
from app.state import large
from core.runs import summaries
from core.runs.reader import RunReader, Table


def locking_heatmap(run: RunReader):
    data = summaries.locking_grid(run.table(Table.PHASE_LOCKING))
    n_layers = int(data["layer"].max())
    big = large()
    order = sorted(data["T"].unique(), key=float)
    base = alt.Chart(data).encode(
        x=alt.X("T:O", title="period T", sort=order, axis=alt.Axis(labelAngle=0, labelFontSize=12 if big else 11)),
        y=alt.Y("layer:O", title="layer", sort="ascending", axis=alt.Axis(labelOverlap="parity")),
    )
    cells = base.mark_rect().encode(
        color=alt.Color(
            "locking:Q",
            title="locking R",
            scale=alt.Scale(domain=[0, 1], scheme="blues"),
            legend=alt.Legend(orient="bottom", direction="horizontal", gradientLength=220),
        ),
        tooltip=[
            "module",
            "layer",
            "T",
            alt.Tooltip("locking:Q", format=".2f", title="R"),
            alt.Tooltip("null_95:Q", format=".2f", title="chance threshold"),
            alt.Tooltip("energy_share:Q", format=".1%", title="energy at T"),
            alt.Tooltip("offset:Q", format=".2f", title="peak at answer + (numbers)"),
            "locks",
        ],
    )
    frames = base.transform_filter("datum.locks").mark_rect(fill=None, stroke="#d62728", strokeWidth=2.5)
    # fits a 1024x768 projector beside the step's text: about 10 px a layer there, 15 on a desktop
    height = max(80, min(280, 10 * n_layers)) if big else max(90, min(440, 15 * n_layers))
    chart = (
        alt.layer(cells, frames, data=data)
        .properties(height=height, width=150 if big else 190)
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
                subtitle=textwrap.wrap(short_label(run.label), 46),
                fontSize=20 if big else 15,
                subtitleFontSize=16 if big else 12,
                anchor="start",
            )
        )
        .configure_axis(labelFontSize=16 if big else 11, titleFontSize=18 if big else 12)
        .configure_legend(labelFontSize=16 if big else 11, titleFontSize=16 if big else 12)
    )
    n, shuffles = int(data["n"].iloc[0]), int(data["shuffles"].iloc[0])
    caption = (
        f"Locking R over {n} examples: 0 = the wave ignores the answer, 1 = its peak always sits at the same distance "
        f"from the answer mod T. Red frame = locks: R above chance ({shuffles:,} shuffles of the answers, 5% over all "
        "modules and periods) and at least 0.3, a phase that moves with the question, and 5% of the module's wave "
        "energy at that period. At T = 104 and 520 a module that copies an operand can lock too."
    )
    return chart, data, caption


# Built once per process for a run version and shared by all sessions, like app.figures (app/shared.py).

share_figures(globals())
