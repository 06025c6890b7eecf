"""Step 5's figure: the strongest waves of the final logits and their sum over the whole number line, with the
answer and the sum's peak over that line marked, so the figure shows the peak its sentence names; and a zoom to the
answer beside it, titled as a zoom. Each returns (chart, data, caption) as app.figures.logits' figures do."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.figures.style import ANSWER_COLOUR, styled
from core.runs import summaries
from core.runs.reader import RunReader, Table
from core.tasks import expression

#: What the sum of the strongest waves is called in step 5's figures' data and legend.
WAVE_SUM = "sum of the waves"


def wave_frames(run: RunReader, example: pd.Series, basis: str, top: int) -> pd.DataFrame:
    """The `top` strongest waves of the final logits of `example` and their sum, over the whole number line, in one
    long frame: wave ("T = 52", ..., WAVE_SUM), period (NaN for the sum), number, value (what the wave adds to that
    number's final logit)."""
    comps, total = summaries.waves_for(run.table(Table.FINAL_WAVES), example.name, basis, top)
    comps = comps.assign(wave=[f"T = {t:.3g}" for t in comps["period"]])[["wave", "period", "number", "value"]]
    total = total.assign(wave=WAVE_SUM, period=float("nan"))[["wave", "period", "number", "value"]]
    return pd.concat([comps, total], ignore_index=True)


def sum_peak(frame: pd.DataFrame) -> int:
    """The number where the sum of the waves (`wave_frames`) is highest, over the numbers the frame holds."""
    total = frame[frame["wave"] == WAVE_SUM]
    return int(total.loc[total["value"].idxmax(), "number"])


def _wave_layers(frame: pd.DataFrame, lo: int, hi: int, answer: int, peak: int, faint: bool, peak_words: str):
    """The waves (coloured; `faint` where 521 numbers make the short ones a band), their sum (black), the answer (red
    dashed rule, named at the bottom) and the sum's highest point over the numbers lo..hi (a dot, named
    `peak_words` and the number)."""
    x = alt.X("number:Q", title=f"number on the number line ({lo}..{hi})", scale=alt.Scale(domain=[lo, hi], nice=False))
    waves_only = frame[frame["wave"] != WAVE_SUM]
    total = frame[frame["wave"] == WAVE_SUM]
    comp = alt.Chart(waves_only).mark_line(strokeWidth=0.8 if faint else 1.2, opacity=0.45 if faint else 0.8).encode(
        x=x,
        y=alt.Y("value:Q", title="added to the number's logit"),
            # the legend under the plot in rows of two: beside it, it takes the width a narrow column cannot spare
        color=alt.Color("wave:N", title="wave (period T)", sort=list(dict.fromkeys(waves_only["wave"])),
                        legend=alt.Legend(orient="bottom", direction="horizontal", columns=2)),
        tooltip=[alt.Tooltip("wave"), alt.Tooltip("number"), alt.Tooltip("value:Q", format=".3f")],
    )
    line = alt.Chart(total).mark_line(color="black", strokeWidth=2 if faint else 2.5).encode(
        x=x, y=alt.Y("value:Q"), tooltip=[alt.Tooltip("number"), alt.Tooltip("value:Q", format=".3f")])
    low = float(frame["value"].min())
    # a name is written away from the nearer end of the plot (centred above its mark in the middle third), so that it
    # stays inside the plot however narrow the column
    def side(n: int) -> dict:
        at = (n - lo) / max(hi - lo, 1)
        return (dict(align="right", dx=-8) if at > 2 / 3 else dict(align="left", dx=8) if at < 1 / 3
                else dict(align="center", dy=-14))
    at_peak = total[total["number"] == peak].assign(
        label=f"{peak_words} {peak}" + (", the answer" if peak == answer else ""))
    dot = alt.Chart(at_peak).mark_point(size=140, filled=True, color="black").encode(x=x, y=alt.Y("value:Q"))
    named = alt.Chart(at_peak).mark_text(fontWeight="bold", **side(peak)).encode(
        x=x, y=alt.Y("value:Q"), text=alt.Text("label:N"))
    marks = pd.DataFrame({"number": [answer], "value": [low], "label": [f"answer {answer}"]})
    rule = alt.Chart(marks).mark_rule(color=ANSWER_COLOUR, strokeDash=[4, 3]).encode(x=x)
    layers = [comp, line, rule, dot, named]
    if peak != answer:  # the answer named at the bottom, apart from the peak's name
        layers.append(alt.Chart(marks).mark_text(color=ANSWER_COLOUR, baseline="bottom", **side(answer)).encode(
            x=x, y=alt.Y("value:Q"), text=alt.Text("label:N")))
    return alt.layer(*layers)


def waves_line(run: RunReader, example: pd.Series, basis: str, top: int, window: int = 25):
    """Step 5: the `top` strongest waves of the final logits and their sum over the whole number line 0..p-1, the
    answer and the sum's peak over that line marked, so the figure shows the peak its caption names; and a zoom of
    the answer ± `window` beside it, titled as a zoom. Returns ((chart, data, caption) of the whole line, the same of
    the zoom); each data holds the waves and their sum (`wave_frames`) over the numbers drawn."""
    frame = wave_frames(run, example, basis, top)
    answer, said = int(example["answer"]), int(example["prediction"])
    peak, last = sum_peak(frame), run.p - 1
    periods = ", ".join(dict.fromkeys(frame.loc[frame["wave"] != WAVE_SUM, "wave"].str.removeprefix("T = ")))
    where = "peaks at the answer" if peak == answer else f"peaks at {peak}, not at the answer"
    model = "" if said == answer else f" The model itself answered {said}."
    question = expression(run.task, example["a"], example["b"])
    caption = (
        f"Coloured: the {top} strongest waves of the final scores (periods {periods}). Black: their sum over "
        f"0..{last}; it {where} {answer} (red dashed line).{model}"
    )
    whole = styled(_wave_layers(frame, 0, last, answer, peak, True, "sum peaks at"),
                   f"The {top} strongest waves and their sum over 0..{last}, for {question} — {run.label}", height=280)
    lo, hi = summaries.number_window(answer, window, run.p)
    near = frame[frame["number"].between(lo, hi)].reset_index(drop=True)
    local = sum_peak(near)
    inside = "the answer" if local == answer else f"{local}, not the answer {answer}"
    zoom_caption = (
        f"The figure above between {lo} and {hi} (the answer ± {window}): here the sum is highest at {inside}; over "
        f"the whole line 0..{last} it peaks at {peak}."
    )
    zoom = styled(_wave_layers(near, lo, hi, answer, local, False, "highest here:"),
                  f"Zoom: numbers {lo}..{hi} around the answer {answer} — {run.label}", height=280)
    return (whole, frame, caption), (zoom, near, zoom_caption)
