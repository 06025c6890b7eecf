"""Altair figures of training: accuracy curves over epochs and the fine-tuning stages next to the
paper's accuracy. Each takes a table from `core.runs.training_summaries` and returns (chart, data, caption).
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.figures.style import PCT_AXIS, PCT_SCALE, styled
from app.shared import share_figures
from app.state import large
from core.paper import ACCURACY

#: A split as a sentence names it.
SPLIT_NAMES = {"val": "validation", "train": "training", "test": "test"}


def training_curves(curves: pd.DataFrame, split: str):
    said = SPLIT_NAMES.get(split, split)
    base = alt.Chart(curves).encode(
        x=alt.X("epoch:Q", title="epoch", axis=alt.Axis(tickMinStep=1)),
        color=alt.Color(
            "run:N",
            title="model",
            # on a projector in two columns: the plot keeps its height in a Tour step of one screen
            legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0, symbolOpacity=1,
                              columns=2 if large() else 1),
        ),
    )
    band = base.mark_area(opacity=0.2).encode(
        y=alt.Y("low:Q", title=f"{said} accuracy", axis=PCT_AXIS, scale=PCT_SCALE), y2=alt.Y2("high:Q")
    )
    line = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q"),
        tooltip=[
            alt.Tooltip("run"),
            alt.Tooltip("epoch"),
            alt.Tooltip("mean:Q", format=".1%"),
            alt.Tooltip("low:Q", format=".1%"),
            alt.Tooltip("high:Q", format=".1%"),
            alt.Tooltip("seeds"),
        ],
    )
    caption = (
        "Lines: mean over seeds; shaded: lowest to highest seed. Compare how fast and how high each model gets "
        "(the paper's figure 7b: frozen pre-trained embeddings "
        f"{ACCURACY['GPT-2-small, frozen pre-trained embeddings']:g}%, "
        f"from scratch {ACCURACY['GPT-2-small from scratch']:g}%)."
    )
    return styled(band + line, f"{said.capitalize()} accuracy during training", height=360), curves, caption


def fine_tuning_stages(stages: pd.DataFrame, split: str, paper_accuracy: float):
    """Accuracy epoch by epoch over the stages of a fine-tuning, end to end, with the paper's figure as a rule."""
    line = (
        alt.Chart(stages)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "epoch:Q",
                title="epoch (counted from the pre-trained model, over all stages)",
                axis=alt.Axis(tickMinStep=1),
            ),
            y=alt.Y("accuracy:Q", title=f"{SPLIT_NAMES.get(split, split)} accuracy", axis=PCT_AXIS, scale=PCT_SCALE),
            color=alt.Color(
                "run:N",
                title="stage",
                sort=alt.SortField("stage"),
                legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0),
            ),
            tooltip=[
                alt.Tooltip("run"),
                alt.Tooltip("stage"),
                alt.Tooltip("epoch"),
                alt.Tooltip("stage_epoch"),
                alt.Tooltip("device"),
                alt.Tooltip("accuracy:Q", format=".2%"),
                alt.Tooltip("loss:Q", format=".3f"),
            ],
        )
    )
    paper = pd.DataFrame(
        {"accuracy": [paper_accuracy], "what": [f"paper: GPT-2-XL fine-tuned, {paper_accuracy:.2%} test"]}
    )
    rule = alt.Chart(paper).mark_rule(strokeDash=[6, 3], color="gray").encode(y=alt.Y("accuracy:Q"))
    text = (
        alt.Chart(paper)
        .mark_text(align="left", dx=4, dy=-7, color="gray")
        .encode(y=alt.Y("accuracy:Q"), x=alt.XValue(0), text=alt.Text("what:N"))
    )
    caption = (
        "The current model, and the earlier models and variants it replaced (their training logs). A later stage "
        "starts from the delta the stage before it wrote (cut to low rank there, so it may start below where that "
        "one ended); the dashed line is the paper's fine-tuned GPT-2-XL."
    )
    title = f"Fine-tuning the real LLM: {SPLIT_NAMES.get(split, split)} accuracy by epoch"
    return styled(line + rule + text, title, height=380, shrink_on_projector=False), stages, caption


# Built once per process for a run version and its choices, and shared by all sessions (app/shared.py).
share_figures(globals())
