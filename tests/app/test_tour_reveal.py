"""Predict, then reveal, on every Tour step (streamlit.testing, the shipped default run and a 2-layer run).

In presentation mode with the switch on, a step shows its question, the paper's finding and the class's choices,
and neither this run's measurement, nor its verdict, nor a figure; Reveal shows the measurement and verdict that
core.claims.registry computes from the run's tables, and the figure.
"""

from __future__ import annotations

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from app.tour.handout_export import listed_runs, pick_run
from app.tour.lines import run_line
from app.tour.steps import OVER_RUNS, STEPS, trained_here
from core.claims.base import VERDICT_LABELS
from core.claims.features import claim_training
from core.claims.operations import claim_operations, operation_runs
from core.claims.registry import run_claims
from core.files import PROJECT_ROOT

CACHE = PROJECT_ROOT / "cache"
RUNS, _ = listed_runs(CACHE) if CACHE.is_dir() else ([], [])

pytestmark = pytest.mark.skipif(not RUNS, reason="no shipped cache")


def texts(at) -> str:
    return " ".join(m.value for m in at.markdown) + " " + " ".join(c.value for c in at.caption)


@pytest.mark.parametrize("asked", [None, "fourier-frozen-tied"], ids=["default-run", "two-layer-run"])
def test_each_step_hides_its_measurement_until_reveal(asked, monkeypatch):
    run = pick_run(RUNS, asked)
    runs = [r for r in RUNS if r.split == run.split]
    claims = run_claims(run)
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(CACHE))
    st.cache_data.clear()
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"run": run.name, "large": "1", "reveal": "1", "step": "1"})
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert next(t for t in at.toggle if t.key == "reveal").value is True
    for number, step in enumerate(STEPS, start=1):
        claim = (claim_training(trained_here(runs)) if step.key == "training"
                 else claim_operations(operation_runs(runs, run), run_claims) if step.key == "operations"
                 else claims[step.key])
        line = claim.short if step.key in OVER_RUNS else run_line(step, claim, run)
        who = {"training": "The small models trained here", "operations": "These runs"}.get(step.key, "This run")
        assert at.subheader[0].value == step.title
        # before: the question, the paper and the choices; no measurement, no verdict, no figure
        radio = next(r for r in at.radio if r.key == f"predict-{step.key}")
        assert list(radio.options) == list(step.choices) and radio.value is None
        assert "**The paper:**" in texts(at)
        assert line not in texts(at) and f"**{who}:**" not in texts(at)
        assert not any("-badge[" in m.value for m in at.markdown)
        assert len(at.get("vega_lite_chart")) == 0
        # the class marks its prediction, the lecturer reveals
        radio.set_value(step.choices[0]).run()
        next(b for b in at.button if b.key == "reveal-button").click().run()
        assert not at.exception, [e.message for e in at.exception]
        shown = texts(at)
        assert f"**{who}:** {line}" in shown
        assert any(f"badge[{VERDICT_LABELS[claim.verdict]}]" in m.value for m in at.markdown)
        assert f"The class predicted: **{step.choices[0]}**" in shown
        drawable = step.table is None or run.has(step.table)
        assert (len(at.get("vega_lite_chart")) >= 1) == drawable, step.key
        assert not any(b.key == "reveal-button" for b in at.button)
        if number < len(STEPS):
            next(b for b in at.button if "Next" in b.label).click().run()
    # back to a revealed step: it stays revealed
    next(b for b in at.button if "Back" in b.label).click().run()
    assert not any(b.key == "reveal-button" for b in at.button)


def test_the_switch_is_only_in_presentation_mode(monkeypatch):
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(CACHE))
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"reveal": "1", "step": "2"})
    at.run()
    assert not any(t.key == "reveal" for t in at.toggle)
    assert len(at.get("vega_lite_chart")) >= 1 and not any(b.key == "reveal-button" for b in at.button)
