"""The `module_bands` constraint (core.training.module_bands): a trained model's module outputs carry nothing of the
band each module is kept out of, read the way a run reads them (the project's own filters on W_U from the files),
and the recipe refuses the constraint where it could not hold."""

import numpy as np
import pytest

from core.analysis.ablations import Condition
from core.analysis.evaluation import evaluate_conditions
from core.analysis.filters import high_pass, low_pass, removed_energy_share
from core.analysis.fourier import fourier_basis
from core.errors import CoreError
from core.models.loading import load_model, prompt_texts
from core.models.names import ATTN, MLP
from core.runs.ablation_grid import module_second_moments
from core.tasks import build_examples, number_space, select_split
from core.training.recipe import ModuleBands, Recipe
from core.training.train import train

TAU = 8  # the cutoff of the tiny task (frequencies 1..20 on 41 numbers)


def tiny_recipe(tmp_path, name, bands=None, **kw):
    spec = dict(name=name, label=name, out=str(tmp_path / name), width=48, heads=4, max_operand=20, epochs=3,
                batch_size=32, lr=3e-3, warmup_steps=2, eval_train_subset=50, precision="float32",
                save_dtype="float32",
                # frozen rows with waves in both bands: k = 1..5 below the cutoff, 10, 15, 20 above it
                freeze={"kind": "fourier", "frequencies": [1, 2, 3, 4, 5, 10, 15, 20]}, module_bands=bands)
    spec.update(kw)
    r = Recipe(**spec)
    r.check()
    return r


def band_shares(folder, p: int) -> dict:
    """{(module, band): the share of its answer-position output energy the band's filter removes}, over the test
    split, every filter built as a run builds it (W_U read from the files, the paper's basis)."""
    loaded = load_model(str(folder))
    loaded.select_numbers(p, "the test")
    W_U = loaded.unembedding(p)
    basis = fourier_basis(p, "paper")
    texts = prompt_texts(loaded, [e.prompt for e in select_split(build_examples("addition", 20), "test")])
    moments = module_second_moments(loaded, texts, 32, progress=False)
    filters = {"low": high_pass(W_U, basis, TAU), "high": low_pass(W_U, basis, TAU)}  # each removes its band
    return {(m, band): removed_energy_share(flt, moments[m]) for m in (ATTN, MLP) for band, flt in filters.items()}


def test_the_trained_module_outputs_have_no_energy_in_the_removed_band(tmp_path):
    p = number_space("addition", 20)
    bands = {"attn": "high", "mlp": "low", "tau": TAU}
    kept = train(tiny_recipe(tmp_path, "kept", bands), log=lambda *_: None)
    free = train(tiny_recipe(tmp_path, "free"), log=lambda *_: None)
    shares, free_shares = band_shares(kept.out, p), band_shares(free.out, p)
    # the band each module is kept out of: no energy (float32 rounding of the projected maps only)
    assert shares[(ATTN, "low")] < 1e-9 and shares[(MLP, "high")] < 1e-9
    # the band it keeps carries its output (the filter is not a no-op), and the same model trained free has
    # energy in both bands of both modules: the check could fail
    assert shares[(ATTN, "high")] > 0.05 and shares[(MLP, "low")] > 0.05
    assert min(free_shares.values()) > 1e-3

    # the ablation that removes the band from the trained model changes no answer
    loaded = load_model(str(kept.out))
    loaded.select_numbers(p, "the test")
    W_U = loaded.unembedding(p)
    basis = fourier_basis(p, "paper")
    test = select_split(build_examples("addition", 20), "test")
    texts = prompt_texts(loaded, [e.prompt for e in test])
    answers = np.array([e.answer for e in test])
    none, attn_low, mlp_high = evaluate_conditions(
        loaded, texts, answers, p,
        [Condition(None), Condition(high_pass(W_U, basis, TAU), ATTN), Condition(low_pass(W_U, basis, TAU), MLP)],
        "last", 32, progress=False)
    assert np.array_equal(none.predictions, attn_low.predictions)
    assert np.array_equal(none.predictions, mlp_high.predictions)


def test_the_bands_removed_follow_the_bands_kept():
    bands = ModuleBands.parse({"attn": "high", "mlp": "low"})
    assert (bands.removed("attn"), bands.removed("mlp"), bands.tau) == ("low", "high", 50)
    assert ModuleBands.parse({}).removed("attn") is None


@pytest.mark.parametrize("change, words", [
    ({"tied": False}, "tied number rows"),
    ({"freeze": None}, "tied number rows"),
    ({"module_bands": {"attn": "middle"}}, "module_bands.attn"),
    ({"module_bands": {"attn": "high", "tau": 1}}, "module_bands.tau"),
    ({"module_bands": {"attn": "high", "cutoff": 50}}, "unknown keys"),
])
def test_module_bands_is_refused_where_it_cannot_hold(tmp_path, change, words):
    spec = {"module_bands": {"attn": "high", "mlp": "low", "tau": TAU}, **change}
    with pytest.raises(CoreError, match=words):
        tiny_recipe(tmp_path, "bad", **{"bands": spec.pop("module_bands")}, **spec)
