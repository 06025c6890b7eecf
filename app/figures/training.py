"""Altair figures of training: accuracy curves over epochs and the fine-tuning stages next to the
paper's accuracy. Each takes a table from `core.runs.training_summaries` and returns (chart, data, caption).
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from app.figures.style import PCT_AXIS, PCT_SCALE, styled
from app.shared import share_figures
from core.paper import ACCURACY
from core.runs import training_summaries

#: A split as a sentence names it.
SPLIT_NAMES = {"val": "validation", "train": "training", "test": "test"}


def training_curves(curves: pd.DataFrame, split: str, height: int = 265):
    said = SPLIT_NAMES.get(split, split)
    base = alt.Chart(curves).encode(
        x=alt.X("epoch:Q", title="epoch", axis=alt.Axis(tickMinStep=1)),
        color=alt.Color(
            "run:N",
            title="model",
            # one column: two columns of labels such as "Fourier-frozen, untied control (1 seed)" at a projector's
            # 16 px run past the right edge of a Tour step's figure column at 1024 px
            legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0, symbolOpacity=1, columns=1),
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
        "Mean over seeds; shaded: lowest to highest seed (the paper's figure 7b: frozen pre-trained embeddings "
        f"{ACCURACY['GPT-2-small, frozen pre-trained embeddings']:g}%, "
        f"from scratch {ACCURACY['GPT-2-small from scratch']:g}%)."
    )
    return styled(band + line, f"{said.capitalize()} accuracy during training", height=height), curves, caption


#: The colours of the fine-tunings' roles (`training_summaries.fine_tuning_roles`): the default run blue, other
#: shipped runs in colour, the models and stages they replaced in grey.
ROLE_COLOURS = {
    training_summaries.ROLE_DEFAULT: ["#1f77b4"],
    training_summaries.ROLE_SHIPPED: ["#ff7f0e", "#2ca02c", "#d62728", "#9467bd"],
    training_summaries.ROLE_REPLACED: ["#9a9a9a"],
    training_summaries.ROLE_EARLIER: ["#c7c7c7"],
}


def _line_names(frame: pd.DataFrame) -> pd.Series:
    """What the legend calls each row: a shipped run by its short name and role, the others by their role alone
    (one grey entry for every line it stands for)."""
    shipped = frame["role"].isin([training_summaries.ROLE_DEFAULT, training_summaries.ROLE_SHIPPED])
    return frame["role"].where(~shipped, frame["short"] + " (" + frame["role"] + ")")


def _role_colour(frame: pd.DataFrame, title: str | None = None) -> alt.Color:
    """Colour by `_line_names` (column `line`), in the order and colours of ROLE_COLOURS, legend below the plot."""
    domain, colours = [], []
    for role, palette in ROLE_COLOURS.items():
        names = list(dict.fromkeys(frame.loc[frame["role"] == role, "line"]))
        domain += names
        colours += [palette[i % len(palette)] for i in range(len(names))]
    return alt.Color("line:N", title=title, scale=alt.Scale(domain=domain, range=colours),
                     legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0))


def fine_tuning_finals(finals: pd.DataFrame, split: str, paper_accuracy: float):
    """Where each fine-tuning ended: one row a model or stage (`training_summaries.fine_tuning_finals`), a dot at
    its accuracy on `split` at its last epoch, a diamond at a shipped run's one test score, the paper's fine-tuned
    GPT-2-XL as a dashed rule; the shipped runs in colour, what they replaced in grey."""
    said = SPLIT_NAMES.get(split, split)
    order = list(finals["short"])
    logged, scored = finals.dropna(subset=["accuracy"]), finals.dropna(subset=["test_once"])
    lowest = float(pd.concat([logged["accuracy"], scored["test_once"]]).min())
    lo = max(0.0, np.floor((lowest - 0.03) * 20) / 20)  # a 5-point step below the lowest, room for its label
    kinds = [f"{said}, last epoch", "test, scored once after training"]
    marks = pd.concat([logged.assign(value=logged["accuracy"], score=kinds[0]),
                       scored.assign(value=scored["test_once"], score=kinds[1])], ignore_index=True)
    marks["line"] = _line_names(marks)
    marks["label"] = [
        " · ".join(([] if np.isnan(r.accuracy) else [f"{said} {r.accuracy:.1%}"])
                   + ([] if np.isnan(r.test_once) else [f"test {r.test_once:.2%}"]))
        for r in marks.itertuples()
    ]
    marks["left"] = marks.groupby("short")["value"].transform("min")
    y = alt.Y("short:N", title=None, sort=order, axis=alt.Axis(labelLimit=0))
    x = alt.X("value:Q", title="accuracy", scale=alt.Scale(domain=[lo, 1.006], nice=False),  # a dot at 100% whole
              axis=alt.Axis(format="%", values=list(np.round(np.arange(lo, 1.0001, 0.05 if lo < 0.8 else 0.02), 2))))
    colour = _role_colour(marks, "what it is")
    points = alt.Chart(marks).mark_point(filled=True, size=150, opacity=1).encode(
        x=x, y=y, color=colour,
        shape=alt.Shape("score:N", title="score", scale=alt.Scale(domain=kinds, range=["circle", "diamond"]),
                        legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0)),
        tooltip=[alt.Tooltip("short", title="model"), alt.Tooltip("role"), alt.Tooltip("score"),
                 alt.Tooltip("value:Q", format=".2%", title="accuracy"), alt.Tooltip("last_epoch", title="epochs")],
    )
    labels = alt.Chart(marks.drop_duplicates("short")).mark_text(
        align="right", dx=-10, color="#333").encode(x=alt.X("left:Q"), y=y, text=alt.Text("label:N"))
    paper = pd.DataFrame({"value": [paper_accuracy]})
    rule = alt.Chart(paper).mark_rule(strokeDash=[6, 3], color="gray").encode(x=alt.X("value:Q"))
    best = finals[finals["role"] == training_summaries.ROLE_REPLACED].head(1)
    caption = (
        f"One row per fine-tuning of SmolLM2-135M: dot, its {said} accuracy at its last epoch; diamond, a shipped "
        "run's one test score, taken after training. Dashed: the paper's fine-tuned GPT-2-XL, "
        f"{paper_accuracy:.2%} on its test split."
        + ("" if best.empty else
           f" The best of the replaced ones reached {best['accuracy'].iloc[0]:.1%} ({best['short'].iloc[0]}).")
    )
    title = "Where each fine-tuning of the real LLM ended: the shipped runs and the ones they replaced"
    chart = alt.layer(points, labels, rule).resolve_scale(color="shared")
    return styled(chart, title, height=None, row_step=30), finals, caption


def fine_tuning_stages(stages: pd.DataFrame, split: str, paper_accuracy: float):
    """Accuracy epoch by epoch over the stages of a fine-tuning, end to end (`training_summaries.fine_tuning_roles`):
    the shipped runs in colour, each model or stage they replaced a grey line; the paper's figure as a rule."""
    data = stages.assign(line=_line_names(stages))
    colour = _role_colour(data)
    line = (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "epoch:Q",
                title="epoch (counted from the pre-trained model, over all stages)",
                axis=alt.Axis(tickMinStep=1),
            ),
            y=alt.Y("accuracy:Q", title=f"{SPLIT_NAMES.get(split, split)} accuracy", axis=PCT_AXIS, scale=PCT_SCALE),
            color=colour,
            detail=alt.Detail("run:N"),
            strokeWidth=alt.StrokeWidth("role:N", legend=None, scale=alt.Scale(
                domain=list(ROLE_COLOURS), range=[3, 3, 1.5, 1.5])),  # the shipped runs bold
            order=alt.Order("epoch:Q"),
            tooltip=[
                alt.Tooltip("short", title="model"),
                alt.Tooltip("role"),
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
        .mark_text(align="left", dx=4, dy=-9, color="gray")
        .encode(y=alt.Y("accuracy:Q"), x=alt.XValue(0), text=alt.Text("what:N"))
    )
    replaced = stages.loc[stages["role"].isin([training_summaries.ROLE_REPLACED, training_summaries.ROLE_EARLIER]),
                          "run"].nunique()
    shipped = stages["role"].isin([training_summaries.ROLE_DEFAULT, training_summaries.ROLE_SHIPPED]).any()
    said = SPLIT_NAMES.get(split, split)
    caption = (
        ("The shipped runs in colour" if shipped else
         f"The shipped runs' logs never read the {said} split (each was scored on it once, after training: the chart "
         "above)")
        + f"; grey: the {replaced} earlier models, variants and stages they replaced (their "
        "training logs; hover a line for its name). A later stage starts from the delta the stage before it wrote (cut "
        "to low rank there, so it may start below where that one ended); the dashed line is the paper's fine-tuned "
        "GPT-2-XL."
    )
    title = f"Fine-tuning the real LLM: {SPLIT_NAMES.get(split, split)} accuracy by epoch"
    return styled(line + rule + text, title, height=380, shrink_on_projector=False), stages, caption


# Built once per process for a run version and its choices, and shared by all sessions (app/shared.py).
share_figures(globals())
