"""Steps 4 and 6 draw what their verdicts rest on (issue 66 item 4, issue 67 items 2 and 3): step 4 opens with its
layer-by-layer chart, which puts exactly the layers the sentence counts above the line at 1, and its folded mean
chart carries the W_U bar its reason cites; step 6 opens with the narrow test where that test gives the badge. On
every shipped run."""

from __future__ import annotations

import numpy as np
import pytest

from app.tour.steps import StepInputs, ablation_panels, spectrum_panels
from core.claims.registry import run_claims
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.reader import RunReader

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [r for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []
WITH_BASELINE = [r for r in SHIPPED if "module_spectra_baseline" in r.manifest.get("tables", {})
                 and r.manifest.get("task", {}).get("task", "addition") != "multiplication"]


@pytest.mark.parametrize("run", WITH_BASELINE, ids=[r.name for r in WITH_BASELINE])
def test_step_4_draws_the_bar_and_the_layers_it_counts(run):
    reader = RunReader(CACHE, run.name, run.manifest)
    claims = run_claims(reader)
    panels = spectrum_panels(reader, StepInputs("paper", claims, [reader]))
    assert panels[0].key == "tour-spec-layers" and panels[0].folded is None  # the figure shown: the layers counted
    by_key = {p.key: p for p in panels}
    bars = by_key["tour-spec"].data  # the mean spectrum, folded as the second reading
    assert "W_U bar" in bars.columns and bars["W_U bar"].notna().all()  # a tick on every bar drawn
    assert "Black tick" in by_key["tour-spec"].caption
    gaps = by_key["tour-spec-gaps"].data  # the low band: MLP minus attention, in points, per layer
    assert sorted(int(x) for x in gaps.loc[gaps["gap"] >= 10 - 1e-9, "layer"]) == claims["spectra"].numbers[
        "mlp_low_layers"]
    layers = by_key["tour-spec-layers"].data
    drawn_above = sorted(int(x) for x in layers.loc[(layers["module"] == "Attention")
                                                    & (layers["short_over_bar"] >= 1 - 1e-9), "layer"])
    assert drawn_above == claims["spectra"].numbers["attn_short_layers"]
    assert np.isfinite(layers["short_over_bar"]).all()


@pytest.mark.parametrize("run", [r for r in SHIPPED if "period_ablation" in r.manifest.get("tables", {})],
                         ids=lambda r: r.name)
def test_step_6_opens_with_the_test_that_gives_its_badge(run):
    reader = RunReader(CACHE, run.name, run.manifest)
    claims = run_claims(reader)
    panels = ablation_panels(reader, StepInputs("paper", claims, [reader]))
    if claims["ablations"].numbers.get("decided_by") == "the narrow test":
        assert panels[0].key == "tour-periods" and panels[0].folded is None
    else:
        assert panels[0].key == "tour-ablate"
