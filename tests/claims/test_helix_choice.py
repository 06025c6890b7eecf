"""The helix summary's causal sentences (core.claims.helix.patch_sentences): the layer it reads is chosen from the fit
before any outcome (re-derived here on every shipped run, and shown on built tables to ignore where the helix
restores most), and each share is stated against the floor with PCA of the same rank beside it."""

import pandas as pd
import pytest

from core.claims.helix import chosen_patch_layer, clock_sentence, helix_summary, patch_sentences, points
from core.runs.cache import list_runs
from core.runs.reader import RunReader, Table

RUNS = [r.name for r in list_runs("cache") if r.ok and "helix_patching" in (r.manifest.get("tables") or {})]


def fit_table(best: int, layers=range(0, 21)) -> pd.DataFrame:
    return pd.DataFrame([{"layer": x, "model": m, "rank": 8, "explained_mean": (0.9 if x == best else 0.2)
                          if m == "helix" else 0.1, "explained_sd": 0.01} for x in layers
                         for m in ("helix", "pca", "line", "helix_shuffled")])


def patch_table(helix_by_layer: dict) -> pd.DataFrame:
    rows = []
    for layer, h in helix_by_layer.items():
        for c, v in (("activation", 0.95), ("helix", h), ("line", 0.45), ("pca", 0.85), ("mean", 0.40)):
            rows.append({"layer": layer, "condition": c, "draw": 0, "rank": 8, "n": 100, "recovered": v,
                         "recovered_low": v - 0.02, "recovered_high": v + 0.02, "moved": 0.0})
        rows += [{**rows[-1], "condition": "random", "draw": d, "recovered": 0.41} for d in range(3)]
    return pd.DataFrame(rows)


def test_the_layer_is_chosen_by_the_fit_not_by_the_outcome():
    patched = patch_table({0: 0.5, 5: 0.55, 10: 0.9, 15: 0.6})
    assert chosen_patch_layer(fit_table(best=6), patched) == 5  # nearest the fit's best, not 10 where it restores most
    assert chosen_patch_layer(fit_table(best=13), patched) == 15
    assert chosen_patch_layer(fit_table(best=0), patched) == 0
    first, over = patch_sentences(fit_table(best=6), patched)
    assert "at layer 5 " in first and "restores 40% of the logit difference: that is the floor" in first
    assert "The helix restores 55% (53% to 57%), 15 points above the floor" in first
    assert "PCA of the same rank 8, read from the vector itself, 85% (45 points above)" in first
    assert "above a floor of 40%: the helix adds 10 to 50 points, PCA of rank 8 45 points" in over
    assert points(-0.031) == "3 points below" and points(0.001) == "level with"


@pytest.mark.parametrize("name", RUNS)
def test_each_runs_helix_summary_reads_the_layer_the_fit_chose(name):
    run = RunReader("cache", name)
    fit, patched = run.table(Table.HELIX_FIT), run.table(Table.HELIX_PATCHING)
    helix = fit[fit["model"] == "helix"]
    best = int(helix.loc[helix["explained_mean"] == helix["explained_mean"].max(), "layer"].min())
    layers = sorted(int(x) for x in patched["layer"].unique())
    layer = min(layers, key=lambda x: (abs(x - best), x))
    at = patched[(patched["layer"] == layer) & (patched["draw"] == 0)].set_index("condition")["recovered"]
    text = helix_summary(run)
    assert f"Put in for the first operand at layer {layer} (" in text
    assert f"already restores {100 * at['mean']:.0f}% of the logit difference: that is the floor" in text
    assert f"The helix restores {100 * at['helix']:.0f}% (" in text
    assert f"read from the vector itself, {100 * at['pca']:.0f}% (" in text


def test_the_clock_sentence_reads_every_layer_in_order():
    clock = patch_table({15: 0.3, 20: 0.5, 30: 0.7})
    words = clock_sentence(clock)
    assert "at layers 15, 20, 30, the helix of a + b restores 30%, 50%, 70% of the logit difference" in words
    assert "PCA of the same rank 8 85%, 85%, 85%" in words and "(the floor: no number in it) 40%, 40%, 40%" in words
    assert "100 pairs" in words


@pytest.mark.parametrize("name", [n for n in RUNS if "helix_clock" in (RunReader("cache", n).manifest.get("tables")
                                                                           or {})])
def test_each_runs_clock_sentence_is_its_table(name):
    run = RunReader("cache", name)
    clock = run.table(Table.HELIX_CLOCK)
    helix = clock[clock["condition"] == "helix"].sort_values("layer")["recovered"]
    assert f"restores {', '.join(f'{100 * v:.0f}%' for v in helix)} of the logit difference" in helix_summary(run)
