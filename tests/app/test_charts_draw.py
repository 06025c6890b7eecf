"""Every figure of every Tour step draws what its data holds, on every shipped run: rendered by vl-convert as the
handout renders it and read back (tests/app/drawn.py). A chart whose data has rows must draw every mark layer
with some size and label each axis; the check is first shown to fail on charts made empty on purpose."""

from __future__ import annotations

import altair as alt
import pandas as pd
import pytest
from drawn import undrawn

from app.tour.handout import sized
from app.tour.handout_export import listed_runs
from app.tour.steps import STEPS, StepInputs
from core.claims import registry
from core.files import PROJECT_ROOT

CACHE = PROJECT_ROOT / "cache"
RUNS, _ = listed_runs(CACHE) if CACHE.is_dir() else ([], [])
RATIOS = pd.DataFrame({"period": ["10", "5"], "ratio": [0.39, 1.68]})


def test_the_check_fails_on_charts_drawn_empty_on_purpose():
    log_bars = alt.Chart(RATIOS).mark_bar().encode(x="period:N", y=alt.Y("ratio:Q", scale=alt.Scale(type="log")))
    problems = undrawn(log_bars.to_dict())
    assert any("no size" in p for p in problems) and any("label" in p for p in problems), problems
    hidden = alt.Chart(RATIOS).mark_bar().encode(x="period:N", y="ratio:Q") + alt.Chart(RATIOS).mark_point().encode(
        x="period:N", y="ratio:Q").transform_filter("datum.ratio > 100")
    assert any("draws nothing" in p for p in undrawn(hidden.to_dict()))
    drawn = alt.Chart(RATIOS).mark_bar().encode(x="period:N", y="ratio:Q")
    assert undrawn(drawn.to_dict()) == []


@pytest.mark.slow
@pytest.mark.skipif(not RUNS, reason="no shipped cache")
@pytest.mark.parametrize("run", RUNS, ids=[r.name[:40] for r in RUNS])
def test_every_tour_figure_draws_its_data(run):
    runs = [r for r in RUNS if r.split == run.split]
    inputs = StepInputs("paper", registry.run_claims(run), runs)
    checked, problems = 0, []
    for step in STEPS:
        if step.table is not None and not run.has(step.table):
            continue
        for panel in step.panels(run, inputs):
            if panel.chart is None or len(panel.data) == 0:
                continue
            checked += 1
            problems += [f"{step.key} {panel.key}: {p}" for p in undrawn(sized(panel.chart))]
    assert checked, "no figure was checked"
    assert not problems, problems
