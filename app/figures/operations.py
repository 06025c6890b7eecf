"""Altair figures of the Tour's last step, one run of each operation side by side: their accuracy, the periods their
modules carry against the W_U baseline, and which module carries the short waves. Each takes the runs (one per
task, core.claims.operations.operation_runs) and returns (chart, data, caption); the frames are core's."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from app.figures.style import PCT_AXIS, PCT_SCALE, styled
from app.shared import share_figures
from core.analysis.fourier import BASELINE_RATIO
from core.claims.base import task_of
from core.claims.operations import COMPARED_PERIODS, module_carriers, operation_accuracy, period_ratios, short_name
from core.claims.shift_rule import causal_test
from core.runs.reader import RunReader
from core.tasks import task_name

#: One colour per operation, the same in every figure of the step.
OPERATION_COLOURS = alt.Scale(
    domain=[task_name(t) for t in ("addition", "multiplication", "reverse-polish")],
    range=["#1f77b4", "#d62728", "#2ca02c"],
)


def _legend(title: str | None = None) -> alt.Legend:
    """A legend on one line above the chart, its title (if any) to the left of its entries; "reverse-Polish
    addition" reads "reverse-Polish" there, so the line fits a half-width chart at 1024x768."""
    return alt.Legend(orient="top", direction="horizontal", title=title, titleOrient="left", labelLimit=0,
                      symbolType="square",
                      labelExpr="replace(datum.label, 'reverse-Polish addition', 'reverse-Polish')")


def operation_accuracy_bars(runs: tuple[RunReader, ...]):
    """Each run's accuracy on validation (where it was chosen) and on its own split, with the commonest answer's
    share (a model that always says it) as a grey tick and the paper's accuracy for the task as a black one."""
    data = operation_accuracy({task_of(r): r for r in runs})
    order = [o for o in OPERATION_COLOURS.domain if o in set(data["operation"])]
    # on two lines: three names side by side overlap in a half-width column at 16 px (the sidebar open on a projector)
    x = alt.X("operation:N", title=None, sort=order,
              axis=alt.Axis(labelAngle=0, labelLimit=0, labelExpr=(
                  "datum.label == 'multiplication' ? ['multipli-', 'cation'] : "
                  "datum.label == 'reverse-Polish addition' ? ['reverse-', 'Polish'] : datum.label")))
    offset = alt.XOffset("split:N", sort=["validation", "test"])
    bars = alt.Chart(data).mark_bar().encode(
        x=x, xOffset=offset,
        y=alt.Y("accuracy:Q", title="answered right", axis=PCT_AXIS, scale=PCT_SCALE),
        color=alt.Color("operation:N", scale=OPERATION_COLOURS, legend=None),
        opacity=alt.Opacity("split:N", scale=alt.Scale(domain=["validation", "test"], range=[1.0, 0.5]),
                            legend=_legend("split")),
        tooltip=[alt.Tooltip("operation"), alt.Tooltip("run"), alt.Tooltip("split"),
                 alt.Tooltip("accuracy:Q", format=".1%"), alt.Tooltip("commonest answer"),
                 alt.Tooltip("commonest share:Q", format=".1%", title="always the commonest answer")],
    )
    common = alt.Chart(data).mark_tick(color="#666", thickness=3).encode(
        x=x, xOffset=offset, y=alt.Y("commonest share:Q"))
    paper = alt.Chart(data.drop_duplicates("operation")).mark_tick(color="black", thickness=3, size=60).encode(
        x=x, y=alt.Y("paper accuracy:Q"),
        tooltip=[alt.Tooltip("operation"), alt.Tooltip("paper accuracy:Q", format=".2%", title="the paper's GPT-2-XL"),
                 alt.Tooltip("paper split")],
    )
    caption = (
        "Each run's accuracy on validation (where its epoch was chosen) and on test (pale). Grey ticks: always the "
        "commonest answer (multiplication's 0); black: the paper's GPT-2-XL (multiplication: validation; addition: "
        "test)."
    )
    return styled(bars + common + paper, "Accuracy, one run per operation", height=210), data, caption


def period_ratio_bars(runs: tuple[RunReader, ...]):
    """At periods 10, 5, 3.33, 2.5 and 2: how far above what W_U alone gives random vectors each run's modules go
    (the larger of attention's and the MLPs' ratio, mean over the last layers), with each period's bar the claims read
    (a tick: 2x, or less where W_U leaves less room, core.analysis.fourier.ratio_bar)."""
    frames = []
    for r in runs:
        ratios = period_ratios(r)
        best = ratios.sort_values("ratio", ascending=False).drop_duplicates("period")
        best = best.assign(operation=task_name(task_of(r)), run=short_name(r))
        frames.append(best)
    data = pd.concat(frames, ignore_index=True).sort_values("period", ascending=False)
    order = [f"{t:.3g}" for t in COMPARED_PERIODS]
    # bars grow from the 1x line (a log scale has no zero to grow from: bars from zero draw nothing), with ticks at
    # powers of two that cover the data (sparser on a wide range), so that a range within one decade (0.4 to 1.7)
    # still has labels
    drawn = data["ratio"][(data["ratio"] > 0) & data["ratio"].map(math.isfinite)]  # a log scale shows these only
    low = min(float(drawn.min()), 1.0) if len(drawn) else 1.0
    high = max(float(drawn.max()), BASELINE_RATIO) if len(drawn) else BASELINE_RATIO
    first, last = math.floor(math.log2(low)), math.ceil(math.log2(high))
    stride = max(1, math.ceil((last - first + 1) / 5))  # at most about five labels on a short chart
    ticks = [2.0**k for k in range(first, last + stride, stride)]
    bars = alt.Chart(data).mark_bar().encode(
        x=alt.X("period T:N", title="period T (numbers per repetition)", sort=order, axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("operation:N", sort=list(OPERATION_COLOURS.domain)),
        y=alt.Y("ratio:Q", title="× what W_U gives random vectors",
                scale=alt.Scale(type="log", domain=[ticks[0], ticks[-1]], nice=False),
                axis=alt.Axis(values=ticks, format="~g")),
        y2=alt.Y2Datum(1.0),
        color=alt.Color("operation:N", scale=OPERATION_COLOURS, legend=_legend()),
        tooltip=[alt.Tooltip("operation"), alt.Tooltip("run"), alt.Tooltip("module"),
                 alt.Tooltip("period:Q", format=".3g", title="period T"),
                 alt.Tooltip("ratio:Q", format=".2f", title="× the W_U baseline"),
                 alt.Tooltip("magnitude:Q", format=".3f"), alt.Tooltip("baseline:Q", format=".3f")],
    )
    line = alt.Chart(data).mark_tick(color="black", thickness=2, size=18).encode(  # each period's own bar
        x=alt.X("period T:N", sort=order), xOffset=alt.XOffset("operation:N", sort=list(OPERATION_COLOURS.domain)),
        y=alt.Y("bar:Q"))
    one = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(color="#999").encode(y=alt.Y("y:Q"))
    caption = (
        f"Each run's strongest module at each period, in multiples of what W_U alone gives random vectors (log "
        f"scale). A bar reaching its black tick carries the period ({BASELINE_RATIO:g}x, less where W_U leaves less "
        "room). 3.33 is multiplication's new one."
    )
    # the title, axes and bars in this height, the legend below them (at 190 for all four, the bars had no room left
    # in presentation mode)
    return styled(bars + one + line, "The same waves? Short periods in each operation's module logits",
                  height=320), data, caption


def carrier_bars(runs: tuple[RunReader, ...]):
    """Which modules carry the short waves in each run: the phase shift's share of questions whose last digit
    moves (every run with its weights), else the strongest locking R at a short period."""
    shift = all(causal_test(r) for r in runs)  # one measure for every run
    frames = []
    for r in runs:
        frame, measure = module_carriers(r, causal=shift)
        frames.append(frame.assign(operation=task_name(task_of(r)), run=short_name(r), measure=measure))
    data = pd.concat(frames, ignore_index=True)
    title = ("share of questions whose last digit moves" if shift else "strongest locking R at a short period")
    bars = alt.Chart(data).mark_bar().encode(
        y=alt.Y("module:N", title=None, sort=alt.EncodingSortField("value", op="max", order="descending")),
        yOffset=alt.YOffset("operation:N", sort=list(OPERATION_COLOURS.domain)),
        x=alt.X("value:Q", title=title, axis=PCT_AXIS if shift else alt.Axis(), scale=PCT_SCALE if shift else
                alt.Scale(domain=[0, 1])),
        color=alt.Color("operation:N", scale=OPERATION_COLOURS, legend=_legend()),
        tooltip=[alt.Tooltip("operation"), alt.Tooltip("run"), alt.Tooltip("module"), alt.Tooltip("measure"),
                 alt.Tooltip("value:Q", format=".2f"),
                 alt.Tooltip("control:Q", format=".2f", title="random edits" if shift else "chance threshold")],
    )
    caption = (
        "Shift one module's waves of periods 2, 2.5, 5 and 10 by a few numbers: the bar is the share of questions "
        "whose last digit follows; the black tick, random edits of the same size."
        if shift else
        "Phase locking: 1 when a module's short wave always peaks at the answer mod T, about 0 by chance (black "
        "tick: the chance threshold; not every run here has its weights, so the phase shift is not shown)."
    )
    control = alt.Chart(data).mark_tick(color="black", thickness=2).encode(
        y=alt.Y("module:N", sort=alt.EncodingSortField("value", op="max", order="descending")),
        yOffset=alt.YOffset("operation:N", sort=list(OPERATION_COLOURS.domain)), x=alt.X("control:Q"))
    return (styled(bars + control, "Which module carries the short waves?", height=48 * data["module"].nunique()),
            data, caption)


# Built once per process for the runs' versions and shared by all sessions (app/shared.py).
share_figures(globals())
