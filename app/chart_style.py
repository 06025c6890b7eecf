"""The look every figure shares: the answer's colour, the module colours, the percentage axis and
readable frequency ticks."""

from __future__ import annotations

import altair as alt

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
