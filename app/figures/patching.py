"""Activation patching: which layer and module carries what tells two prompts apart (the `patching` table, read by
core.claims.patching). Heatmaps of layers (y) by site (stream, attention, MLP), of layers by heads and of layers by
tokens (the `position_patching` table); each returns
(chart, data, caption), as the other figures do, and reads at 1024 x 768 for 2 layers as for 30."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from app.figures.heads import head_grid, layer_ticks, row_step
from app.figures.style import styled
from app.shared import share_figures
from app.state import large
from core.analysis.patch_table import DENOISE, NOISE
from core.claims.patching import groups_patched, heads_patched, patching_grid, position_grid
from core.runs.patch_groups import trained_layers_of
from core.runs.reader import RunReader

#: The diverging colours of a share: red where the patch pushes the other way, white at 0, blue where it moves the
#: answer. Scales interpolate in Lab: Vega-Lite's default (hcl) turns a share of -0.00001 as pink as one of -0.1 (hue
#: is undefined at white), so a site that moves nothing looked as if it hurt.
DIVERGING = ["#b2182b", "#ffffff", "#08306b"]
#: The smallest reach of a colour scale (a map of shares all near 0 is not stretched to noise).
MIN_REACH = 0.02
#: The colour of a frozen (never trained) layer's label.
FROZEN_GREY = "#9a9a9a"
#: Each direction's word for its share, on a legend and a tooltip.
SHARE_WORD = {DENOISE: "restored", NOISE: "taken away"}


def share_colour(data: pd.DataFrame, direction: str = DENOISE) -> alt.Color:
    """The share's colour on a diverging scale centred on zero and fitted to the shares shown: -r..r, r the largest
    |share| in `data` (at least `MIN_REACH`), so the strongest site shown is the darkest, whatever its size."""
    values = data["recovered"].to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    reach = max(float(np.abs(values).max()) if len(values) else 0.0, MIN_REACH)
    scale = alt.Scale(domain=[-reach, 0, reach], range=DIVERGING, interpolate="lab")
    return alt.Color("recovered:Q", title=SHARE_WORD[direction], scale=scale,
                     legend=alt.Legend(orient="bottom", direction="horizontal", gradientLength=200, format="%"))


def share_tooltip(direction: str = DENOISE) -> list:
    """Every patching heatmap's tooltip: the site, its share with its interval, the answers moved, the pairs."""
    word = SHARE_WORD[direction]
    return [alt.Tooltip("site:N", title="patched"), alt.Tooltip("recovered:Q", format=".1%", title=word),
            alt.Tooltip("recovered_low:Q", format=".1%", title="95% interval from"),
            alt.Tooltip("recovered_high:Q", format=".1%", title="to"),
            alt.Tooltip("moved:Q", format=".0%",
                        title="answers moved to the clean one" if direction == DENOISE else
                        "answers moved to the corrupted one"),
            alt.Tooltip("n:Q", title="pairs", format=",")]


def stream_ticks(n_layers: int) -> list[int]:
    """Layer ticks from 0 (the stream before layer 1): the heatmaps' ticks, without 1 where 0 and 5 are beside it."""
    ticks = layer_ticks(n_layers)
    return [0, *[t for t in ticks if t != 1 or 5 not in ticks]]


def layer_axis(run: RunReader, title: str, values: list[int]) -> alt.Axis:
    """The layer axis, its frozen layers' labels grey (core.runs.patch_groups: the recipe's blocks never trained),
    the title short enough for a heatmap's height (`frozen_words` says the rest in the caption)."""
    first, _, from_recipe = trained_layers_of(run.manifest)
    if not from_recipe:
        return alt.Axis(values=values, title=title)
    return alt.Axis(values=values, title=f"{title} (grey: frozen)",
                    labelColor={"condition": {"test": f"datum.value < {first}", "value": FROZEN_GREY},
                                "value": "#000"})


def frozen_words(run: RunReader) -> str:
    """The caption's words on the frozen layers ("" for a model trained in every layer)."""
    first, _, from_recipe = trained_layers_of(run.manifest)
    return f" Layers 1-{first - 1} (grey labels) were never trained: frozen." if from_recipe else ""


def reading_words(direction: str, contrast: int) -> str:
    """A reading in a caption's words."""
    how = ("one site copied from the clean prompt into the corrupted one" if direction == DENOISE else
           "one site copied from the corrupted prompt into the clean one")
    return f"{how}, the second operand {contrast} more"


def site_heatmap(run: RunReader, direction: str = DENOISE, contrast: int = 1, table: pd.DataFrame | None = None,
                 pair: str | None = None):
    """Layers x (stream, attention, MLP): the share of the logit difference each site moves when patched, in one
    reading of the run's table (or of `table`, one pair computed now: `pair` says which)."""
    data = patching_grid(run, direction, contrast, table)
    n_layers = int(data["layer"].max())
    colour, tooltip = share_colour(data, direction), share_tooltip(direction)
    chart = alt.Chart(data).mark_rect(stroke="#ddd", strokeWidth=0.5).encode(
        x=alt.X("where:N", title=None, sort=["Stream", "Attention", "MLP"], axis=alt.Axis(labelAngle=0, orient="top")),
        y=alt.Y("layer:O", sort="ascending", axis=layer_axis(run, "layer", stream_ticks(n_layers))),
        color=colour, tooltip=tooltip,
    ).properties(width=260 if large() else 240)
    n = int(data["n"].iloc[0])
    word = SHARE_WORD[direction]
    over = f"for the one pair {pair}" if pair else f"over {n:,} pairs ({run.split} split)"
    caption = (f"Each cell: {reading_words(direction, contrast)}, at the answer position; its colour, the share of the "
               f"logit difference {word} (the scale runs to the largest shown), {over}. Layer 0: the stream before "
               f"layer 1.{frozen_words(run)}")
    title = f"Where the difference between two questions lives — {run.label}"
    return styled(chart, title, height=None, row_step=row_step(n_layers + 1)), data, caption


def head_heatmap(run: RunReader, direction: str = DENOISE, contrast: int = 1, table: pd.DataFrame | None = None,
                 pair: str | None = None):
    """Layers x heads: the share each head moves when its output alone is patched, coloured on a scale fitted to
    the heads shown (the strongest head is the darkest)."""
    data = heads_patched(run, direction, contrast, table)
    n_layers, n_heads = int(data["layer"].max()), int(data["head"].max()) + 1
    chart = head_grid(data, share_colour(data, direction), share_tooltip(direction)).encode(
        y=alt.Y("layer:O", sort="ascending", axis=layer_axis(run, "layer", layer_ticks(n_layers))),
    ).properties(width=min(320, 28 * n_heads))
    over = f"for the one pair {pair}" if pair else f"over {int(data['n'].iloc[0]):,} pairs ({run.split} split)"
    reach = float(np.nanmax(np.abs(data["recovered"].to_numpy(dtype=float))))
    how = "from the clean prompt into the corrupted one" if direction == DENOISE else \
        "from the corrupted prompt into the clean one"
    caption = (f"Each cell: one attention head's output copied {how} (second operand {contrast} more), the other heads "
               f"left alone; the share of the logit difference {SHARE_WORD[direction]}, {over}. The colours run to "
               f"the strongest head shown ({reach:.0%}).{frozen_words(run)}")
    title = f"Which attention heads carry the difference — {run.label}"
    return styled(chart, title, height=None, row_step=row_step(n_layers)), data, caption


def group_bars(run: RunReader, table: pd.DataFrame | None = None, pair: str | None = None):
    """The groups (the trained layers' attention together, their MLPs together) in every reading: each group's share
    with its interval, a tick at the sum of its layers' single shares."""
    data = groups_patched(run, table)
    data["label"] = [f"{r}: {site}" for r, site in zip(data["reading"], data["site"])]
    bars = alt.Chart(data).mark_bar(color="#4c78a8").encode(
        x=alt.X("recovered:Q", title="share of the logit difference moved (%)", axis=alt.Axis(format="%")),
        y=alt.Y("label:N", title=None, sort=list(data["label"]), axis=alt.Axis(labelLimit=400)),
        tooltip=[alt.Tooltip("site:N", title="patched"), alt.Tooltip("reading:N"),
                 alt.Tooltip("recovered:Q", format=".1%", title="moved"),
                 alt.Tooltip("recovered_low:Q", format=".1%", title="95% interval from"),
                 alt.Tooltip("recovered_high:Q", format=".1%", title="to"),
                 alt.Tooltip("single_sum:Q", format=".1%", title="its layers one at a time, summed"),
                 alt.Tooltip("n:Q", title="pairs", format=",")],
    )
    sums = alt.Chart(data).mark_tick(color="#000", thickness=2, size=18).encode(x=alt.X("single_sum:Q"), y=alt.Y(
        "label:N", sort=list(data["label"])))
    chart = (bars + sums).properties(width=260 if large() else 300)
    over = f"for the one pair {pair}" if pair else f"over the {run.split} split's pairs (how many: the tooltip)"
    caption = ("Each bar: a group of layers patched together in one pass, in each reading (denoise: restored; noise: "
               f"taken away; +1 or +10: how much more the second operand is), {over}; the black tick: the same layers "
               "patched one at a time, added up.")
    title = f"Layers patched together — {run.label}"
    return styled(chart, title, height=None, row_step=26), data, caption


#: The position x layer heatmap's tooltip: the token, its role, the layer, then the share as every heatmap gives it.
POSITION_TOOLTIP = [alt.Tooltip("label:N", title="token"), alt.Tooltip("what:N", title="role"),
                    alt.Tooltip("layer:O", title="after layer"), *share_tooltip()[1:]]


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


share_figures(globals(), names=["site_heatmap", "head_heatmap", "group_bars", "position_heatmap"])
