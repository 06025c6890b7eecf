"""Activation patching: which layer and module carries what tells two prompts apart (the `patching` table, read by
core.claims.patching). Heatmaps of layers (y) by site (stream, attention, MLP), of layers by heads and of layers by
tokens (the `position_patching` table); each returns
(chart, data, caption), as the other figures do, and reads at 1024 x 768 for 2 layers as for 30."""

from __future__ import annotations

import altair as alt

from app.figures.heads import head_grid, layer_ticks, row_step
from app.figures.style import styled
from app.state import large
from core.claims.patching import example_pair, heads_patched, patching_grid, position_grid
from core.runs.reader import RunReader

#: The colour scale of a recovered share: 0 (white) to 1 (dark blue); a share below 0 (the patch pushes the other
#: way) shows as the palest red.
#: Diverging scales interpolate in Lab: Vega-Lite's default (hcl) turns a share of -0.00001 as pink as one of -0.1 (hue
#: is undefined at white), so a site that restores nothing looked as if it hurt.
SHARE_SCALE = alt.Scale(domain=[-0.2, 0, 1], range=["#f4a582", "#ffffff", "#08306b"], clamp=True, interpolate="lab")


#: Every patching heatmap's colour (the share restored) and tooltip (the site, its interval, the answers moved).
SHARE_COLOUR = alt.Color("recovered:Q", title="restored", scale=SHARE_SCALE,
                         legend=alt.Legend(orient="bottom", direction="horizontal", gradientLength=200, format="%"))
SHARE_TOOLTIP = [alt.Tooltip("site:N", title="patched"), alt.Tooltip("recovered:Q", format=".1%", title="restored"),
                 alt.Tooltip("recovered_low:Q", format=".1%", title="95% interval from"),
                 alt.Tooltip("recovered_high:Q", format=".1%", title="to"),
                 alt.Tooltip("moved:Q", format=".0%", title="answers moved back"), alt.Tooltip("n:Q", title="pairs")]


def stream_ticks(n_layers: int) -> list[int]:
    """Layer ticks from 0 (the stream before layer 1): the heatmaps' ticks, without 1 where 0 and 5 are beside it."""
    ticks = layer_ticks(n_layers)
    return [0, *[t for t in ticks if t != 1 or 5 not in ticks]]


def site_heatmap(run: RunReader):
    """Layers x (stream, attention, MLP): the share of the logit difference each site restores when patched."""
    data = patching_grid(run)
    n_layers = int(data["layer"].max())
    chart = alt.Chart(data).mark_rect(stroke="#ddd", strokeWidth=0.5).encode(
        x=alt.X("where:N", title=None, sort=["Stream", "Attention", "MLP"], axis=alt.Axis(labelAngle=0, orient="top")),
        y=alt.Y("layer:O", title="layer (0: the stream before layer 1)", sort="ascending",
                axis=alt.Axis(values=stream_ticks(n_layers))),
        color=SHARE_COLOUR, tooltip=SHARE_TOOLTIP,
    ).properties(width=260 if large() else 240)
    n = int(data["n"].iloc[0])
    clean, _, corrupt, _ = example_pair(run)
    caption = (f"Each cell: one site copied from the clean prompt (as \"{clean}\") into the corrupted one (\"{corrupt}"
               f"\") at the answer position; its colour, the share of the logit difference that comes back (0: none, "
               f"100%: all), over {n:,} pairs ({run.split} split).")
    title = f"Where the difference between two questions lives — {run.label}"
    return styled(chart, title, height=None, row_step=row_step(n_layers + 1)), data, caption


def head_heatmap(run: RunReader):
    """Layers x heads: the share each head restores when its output alone is patched."""
    data = heads_patched(run)
    n_layers, n_heads = int(data["layer"].max()), int(data["head"].max()) + 1
    chart = head_grid(data, SHARE_COLOUR, SHARE_TOOLTIP).properties(width=min(320, 28 * n_heads))
    caption = (f"Each cell: one attention head's output copied from the clean prompt into the corrupted one, the "
               f"other heads left alone; the share of the logit difference that comes back, over "
               f"{int(data['n'].iloc[0]):,} pairs ({run.split} split).")
    title = f"Which attention heads carry the difference — {run.label}"
    return styled(chart, title, height=None, row_step=row_step(n_layers)), data, caption


#: The position x layer heatmap's tooltip: the token, its role, the layer, then the share as every heatmap gives it.
POSITION_TOOLTIP = [alt.Tooltip("label:N", title="token"), alt.Tooltip("what:N", title="role"),
                    alt.Tooltip("layer:O", title="after layer"), *SHARE_TOOLTIP[1:]]


def position_heatmap(run: RunReader):
    """Tokens (x, each with its text) x layers (y, 0: the embeddings): the share each cell restores when the stream
    at that token after that layer is patched; the colour scale centred on zero, fitted to the shares shown."""
    data = position_grid(run)
    n_layers = int(data["layer"].max())
    reach = float(max(data["recovered"].abs().max(skipna=True), 1e-6))
    scale = alt.Scale(domain=[-reach, 0, reach], range=["#b2182b", "#ffffff", "#08306b"], interpolate="lab")
    order = list(data.drop_duplicates("position").sort_values("position")["label"])
    chart = alt.Chart(data).mark_rect(stroke="#ddd", strokeWidth=0.5).encode(
        x=alt.X("label:N", title="token of the clean prompt, first to last (its place: its text)", sort=order,
                axis=alt.Axis(labelAngle=0, labelLimit=90)),
        y=alt.Y("layer:O", title="layer (0: the embeddings)", sort="descending",
                axis=alt.Axis(values=stream_ticks(n_layers))),
        color=alt.Color("recovered:Q", title="restored", scale=scale,
                        legend=alt.Legend(orient="bottom", direction="horizontal", gradientLength=200, format="%")),
        tooltip=POSITION_TOOLTIP,
    ).properties(width=min(640, 48 * len(order)))
    caption = (f"Each cell: the stream at one token after one layer copied from the clean prompt into the corrupted "
               f"one; its colour, the share of the logit difference that comes back, over {int(data['n'].iloc[0]):,} "
               f"pairs of one phrasing and token layout ({run.split} split).")
    title = f"Where the operands move into the answer position — {run.label}"
    return styled(chart, title, height=None, row_step=row_step(n_layers + 1)), data, caption
