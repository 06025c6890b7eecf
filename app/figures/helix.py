"""Altair figures of the helix (core.analysis.helix, Kantamneni & Tegmark 2025): the held-out variance a helix explains
by layer, against PCA of the same rank and the helix with the numbers shuffled; and a view of the helix on one layer,
its 3-D coordinates projected at a chosen angle (Altair draws no 3-D). Each takes a table of the run (`helix_fit`,
`helix_points`) and returns (chart, data, caption).
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from app.figures.style import styled
from app.shared import share_figures

MODEL_NAMES = {
    "helix": "helix, from n alone",
    "pca": "PCA of the same rank, read from the vector",
    "helix_shuffled": "helix, numbers shuffled (null)",
    "line": "the line alone, no circles",
}
MODEL_COLOURS = alt.Scale(domain=list(MODEL_NAMES.values()), range=["#d62728", "#1f77b4", "#7f7f7f", "#ff7f0e"])


def fit_curves(fit: pd.DataFrame) -> pd.DataFrame:
    """The helix_fit table with each model's legend name and its band (mean +- sd)."""
    data = fit.copy()
    data["series"] = data["model"].map(MODEL_NAMES)
    data["low"] = data["explained_mean"] - data["explained_sd"]
    data["high"] = data["explained_mean"] + data["explained_sd"]
    return data


def helix_fit_chart(fit: pd.DataFrame, label: str = "", layer: int | None = None):
    """Held-out variance explained by layer: the helix, PCA of the same rank and the shuffled helix, each a line with
    a band of one standard deviation over the splits; `layer`: a dotted mark on one layer (the one shown)."""
    data = fit_curves(fit)
    n_layers = int(data["layer"].max()) + 1
    bottom = min(-0.05, float(data["low"].min()) - 0.03)
    base = alt.Chart(data).encode(
        x=alt.X("layer:Q", title="layer (0 = embedding)", scale=alt.Scale(domain=[0, n_layers - 1], nice=False),
                axis=alt.Axis(tickMinStep=1, labelAngle=0)),
    )
    # the legend is the lines' (a stroke swatch in each line's colour), never the pale bands'
    legend = alt.Legend(orient="bottom", direction="vertical", labelLimit=0, symbolType="stroke", symbolStrokeWidth=3,
                        symbolSize=300)
    scale = alt.Scale(domain=[bottom, 1.03], nice=False)
    y = alt.Y("explained_mean:Q", title="held-out variance explained (%)", scale=scale, axis=alt.Axis(format="%"))
    band = base.mark_area(opacity=0.15).encode(
        y=alt.Y("low:Q", scale=scale), y2=alt.Y2("high:Q"),
        color=alt.Color("series:N", scale=MODEL_COLOURS, legend=None),
    )
    line = base.mark_line(point=alt.OverlayMarkDef(size=25 if n_layers > 12 else 50)).encode(
        y=y, color=alt.Color("series:N", title="fit", scale=MODEL_COLOURS, legend=legend),
        tooltip=[alt.Tooltip("series:N", title="fit"), alt.Tooltip("layer:Q"),
                 alt.Tooltip("explained_mean:Q", format=".1%", title="explained"),
                 alt.Tooltip("explained_sd:Q", format=".1%", title="sd"), alt.Tooltip("rank:Q")],
    )
    zero = alt.Chart(pd.DataFrame({"y": [0.0]})).mark_rule(color="black", opacity=0.4).encode(y=alt.Y("y:Q"))
    layers = [band, line, zero]
    if layer is not None:
        layers.append(alt.Chart(pd.DataFrame({"layer": [layer]})).mark_rule(color="black", strokeDash=[2, 2])
                      .encode(x=alt.X("layer:Q")))
    rank = int(data.loc[data["model"] == "helix", "rank"].iloc[0])
    caption = (f"Share of held-out numbers' variance a rank-{rank} helix predicts from n alone, against {rank} PCA "
               "directions read from the vector itself, the line alone and the helix with numbers shuffled (the null); "
               f"pale bands: one standard deviation over the {int(data['n_splits'].iloc[0])} splits.")
    title = "Does a helix hold the numbers? Held-out variance by layer" + (f" — {label}" if label else "")
    return styled(alt.layer(*layers).resolve_scale(color="independent"), title, height=340), data, caption


def view_projection(points: pd.DataFrame, azimuth: float, elevation: float) -> pd.DataFrame:
    """The 3-D points (x, y, z) and fit (fit_x, fit_y, fit_z) seen from `azimuth` degrees around the z axis (the linear
    direction) and `elevation` degrees above the circle's plane, orthographic: columns h, v (data), fit_h, fit_v
    (fit) on the screen, depth (toward the viewer), digit (n mod 10). Elevation 90 looks down the helix's axis (the
    circle), 0 from its side."""
    a, e = np.radians(azimuth), np.radians(elevation)
    out = points.copy()
    for pre in ("", "fit_"):
        x, y, z = (points[f"{pre}{c}"].to_numpy() for c in ("x", "y", "z"))
        toward = x * np.cos(a) + y * np.sin(a)
        out[f"{pre}h"] = -x * np.sin(a) + y * np.cos(a)
        out[f"{pre}v"] = z * np.cos(e) - toward * np.sin(e)
        if not pre:
            out["depth"] = toward * np.cos(e) + z * np.sin(e)
    out["digit"] = (points["number"] % 10).astype(int)
    return out


def helix_view_chart(points: pd.DataFrame, period: float = 10, azimuth: float = 30.0, elevation: float = 20.0,
                     label: str = "", numbers: tuple[int, int] | None = None):
    """One period's helix on its layer (`helix_points`), seen from (`azimuth`, `elevation`) degrees: every number a
    dot coloured by its last digit, the fitted helix a line through the numbers in order. `numbers`: (first, last) to
    show a stretch of the number line only. The shown numbers are centred on their own mean (3-D) before the view
    turns them, and both screen axes keep one scale, fixed whatever the angle (the largest 3-D length from that
    centre), so turning the view turns the helix about its middle and never rescales it."""
    chosen = points[points["period"] == float(period)]
    if numbers is not None:
        chosen = chosen[chosen["number"].between(*numbers)]
    centre = chosen[["x", "y", "z"]].mean().to_numpy() if len(chosen) else np.zeros(3)
    chosen = chosen.assign(**{f"{pre}{c}": chosen[f"{pre}{c}"] - centre[i] for pre in ("", "fit_")
                              for i, c in enumerate("xyz")})
    data = view_projection(chosen, azimuth, elevation)
    lengths = np.sqrt(np.concatenate([(chosen[list(cols)] ** 2).sum(axis=1).to_numpy()
                                      for cols in (("x", "y", "z"), ("fit_x", "fit_y", "fit_z"))]))
    reach = float(lengths.max() if len(lengths) else 1.0) * 1.05
    domain = alt.Scale(domain=[-reach, reach], nice=False)
    # the model's own units of length: the same scale on both axes, so distances on screen compare
    h_title, v_title = "sideways (length in the model's vector space)", "up (length in the model's vector space)"
    curve = alt.Chart(data).mark_line(color="#444", strokeWidth=1.2, opacity=0.7).encode(
        x=alt.X("fit_h:Q", title=h_title, scale=domain), y=alt.Y("fit_v:Q", title=v_title, scale=domain),
        order=alt.Order("number:Q"),
    )
    dots = alt.Chart(data).mark_circle(size=26, opacity=0.85).encode(
        x=alt.X("h:Q", title=h_title, scale=domain), y=alt.Y("v:Q", title=v_title, scale=domain),
        color=alt.Color("digit:N", title="n mod 10", scale=alt.Scale(scheme="category10")),
        order=alt.Order("depth:Q"),  # the nearer dots drawn last, on top
        tooltip=[alt.Tooltip("number:Q"), alt.Tooltip("digit:N", title="n mod 10")],
    )
    layer = int(chosen["layer"].iloc[0]) if len(chosen) else 0
    where = "the embedding" if layer == 0 else f"after block {layer}"
    caption = (f"Each dot is a number's vector at layer {layer} ({where}) in the plane of the period-{period:g} circle "
               f"and the linear direction, seen from azimuth {azimuth:g}°, elevation {elevation:g}°; the line, the "
               "fitted helix.")
    title = f"The period-{period:g} helix at layer {layer}" + (f" — {label}" if label else "")
    return styled(curve + dots, title, height=380), data, caption


# The fit by layer is built once per process for its table and choices (app/shared.py); the view is not kept, as every
# angle of its slider would be another entry.
share_figures(globals(), names=["helix_fit_chart"])
