"""Attribution patching drawn beside the exact patching it approximates (the tables `attribution` and `patching`, read
side by side by core.claims.attribution): one dot per site both measured, its exact recovered share across, its
first-order estimate up, coloured by kind of site, with the line on which the two agree. Returns (chart, data,
caption), as the other figures do."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.figures.style import styled
from app.shared import share_figures
from core.claims.attribution import attribution_agreement
from core.runs.reader import RunReader

#: Each kind of site's colour (named as core.claims.patching.SITE_NAMES names them); attention and MLP as on every page.
KIND_COLOURS = alt.Scale(domain=["Stream", "Attention", "MLP", "Head"],
                         range=["#555555", "#1f77b4", "#ff7f0e", "#2ca02c"])
#: Room around the dots, as a share of their span.
PAD = 0.05


def attribution_scatter(run: RunReader):
    """Exact (x) against attributed (y) recovered share, one dot per site, with y = x."""
    found = attribution_agreement(run)
    data = found.sites[["where", "site", "layer", "head", "recovered", "attributed", "rank_exact", "rank_attributed",
                        "n_exact", "n_attributed"]].copy()
    low = min(0.0, float(data["recovered"].min()), float(data["attributed"].min()))
    high = max(1.0, float(data["recovered"].max()), float(data["attributed"].max()))
    pad = PAD * (high - low)
    scale = alt.Scale(domain=[low - pad, high + pad], nice=False)
    axis = alt.Axis(format="%")
    exact_title = "exact patching: share of the logit difference restored (%)"
    estimate_title = "attribution patching: estimated share (%)"
    agree = alt.Chart(pd.DataFrame({"recovered": [low, high], "attributed": [low, high]})).mark_line(
        color="#999999", strokeDash=[4, 4]).encode(
        x=alt.X("recovered:Q", title=exact_title, scale=scale, axis=axis),
        y=alt.Y("attributed:Q", title=estimate_title, scale=scale, axis=axis),
    )
    dots = alt.Chart(data).mark_circle(size=60, opacity=0.85).encode(
        x=alt.X("recovered:Q", title=exact_title, scale=scale, axis=axis),
        y=alt.Y("attributed:Q", title=estimate_title, scale=scale, axis=axis),
        color=alt.Color("where:N", title="site", scale=KIND_COLOURS, legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("site:N", title="patched"), alt.Tooltip("recovered:Q", format=".1%", title="exact"),
                 alt.Tooltip("attributed:Q", format=".1%", title="estimated"),
                 alt.Tooltip("rank_exact:Q", title="rank, exact"),
                 alt.Tooltip("rank_attributed:Q", title="rank, estimated"),
                 alt.Tooltip("n_exact:Q", title="pairs, exact"),
                 alt.Tooltip("n_attributed:Q", title="pairs, estimated")],
    )
    caption = (f"Each dot: one site at the answer position; across, the share of the logit difference exact patching "
               f"restores; up, attribution patching's estimate of it from one forward and backward pass per pair (over "
               f"{found.pairs_attributed:,} pairs, {run.split} split); on the dashed line the two agree.")
    title = f"Attribution patching against exact patching — {run.label}"
    return styled(agree + dots, title, height=360), data, caption


share_figures(globals(), names=["attribution_scatter"])
