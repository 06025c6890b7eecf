"""The look every figure shares: the answer's colour, the module colours, the percentage axis and
readable frequency ticks."""

from __future__ import annotations

import altair as alt
import pandas as pd

from core.paper import paper_findings

ANSWER_COLOUR = "#d62728"
#: Shares 0..100%: the domain has a little room beyond both ends, so a line or point at 0% or 100%
#: is drawn whole inside the plot instead of overshooting its frame; ticks stay at round values.
PCT_SCALE = alt.Scale(domain=[-0.03, 1.03], nice=False)
PCT_AXIS = alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1.0])
MODULE_COLOURS = alt.Scale(domain=["Attention", "MLP"], range=["#1f77b4", "#ff7f0e"])


def k_axis(k_max: int) -> alt.Axis:
    """Frequency ticks far enough apart to stay readable at a projector's width and type size."""
    step = 50 if k_max > 150 else 20 if k_max > 60 else 10 if k_max > 20 else 2
    return alt.Axis(values=list(range(0, int(k_max) + 1, step)), labelAngle=0)


def task_periods(task: str) -> tuple[float, ...]:
    """The periods the paper finds in the module logits of a task (core.paper): 2, 2.5, 5, 10, and for
    multiplication 3.33 too; the figures mark and name them."""
    return paper_findings(task).module_periods


def period_marks(periods, span: int, top: float, labelled=()) -> alt.LayerChart:
    """A dotted line at each of `periods` on a frequency-k axis (k = span / T), named "T = 3.33" at the height `top`
    (the top of the plot), so the periods a task's paper finding names are marked whatever the bars do; a period
    whose bar already carries its label (k in `labelled`) is not named twice."""
    data = pd.DataFrame({"k": [round(span / t) for t in periods], "label": [f"T = {t:.3g}" for t in periods],
                         "y": float(top)})
    rules = alt.Chart(data).mark_rule(color="#777", strokeDash=[2, 3]).encode(x="k:Q")
    named = data[~data["k"].isin([int(k) for k in labelled])]
    text = alt.Chart(named).mark_text(color="#444", angle=270, align="right", baseline="middle", dx=0, dy=-7).encode(
        x="k:Q", y="y:Q", text="label:N")
    return rules + text
