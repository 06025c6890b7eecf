"""Number representations (core.analysis.numbers): probes and spectra against their definitions, and the
representations themselves against the model's own hidden states."""

from __future__ import annotations

import numpy as np
import pandas.testing as pd_testing
import pytest
import torch

from core.analysis.numbers import (
    CONTROL_MODULI,
    TARGET_MODULI,
    choose_context,
    number_probes_table,
    number_representations,
    number_spectrum_table,
    probe_kappas,
    transplant_matrix,
)
from core.errors import CoreError
from core.models.loading import load_model
from core.models.random_models import save_random_model
from core.models.vocab import digit_tokenizer


def planted(period: float, n: int = 521, noise_dims: int = 24, noise: float = 0.05, seed: int = 0) -> np.ndarray:
    x = np.arange(n)[:, None]
    rng = np.random.default_rng(seed)
    wave = np.hstack([np.cos(2 * np.pi * x / period), np.sin(2 * np.pi * x / period)])
    return np.hstack([wave, noise * rng.normal(size=(n, noise_dims))])


def test_planted_period_is_read_by_its_modulus_and_not_by_the_controls():
    X = planted(10)
    k10 = probe_kappas(X, 10)
    assert k10.shape == (5,) and k10.min() > 0.9
    for control in CONTROL_MODULI:
        assert abs(probe_kappas(X, control).mean()) < 0.15, control
    # a period-10 circle does not make n mod 2 linearly separable (alternate vertices of a decagon)
    assert probe_kappas(X, 2).mean() < 0.5


def test_pure_noise_gives_kappa_near_zero_and_probe_table_has_every_modulus():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(2, 200, 16))  # two "layers" of noise
    table = number_probes_table(X, moduli=(2, 5), controls=(3,), n_splits=3, progress=False)
    assert len(table) == 2 * 3
    assert set(table["role"]) == {"paper period", "control"}
    assert (table["kappa_mean"].abs() < 0.25).all()
    assert (table["kappa_sd"] >= 0).all() and (table["n_splits"] == 3).all()


def test_probe_splits_hold_out_numbers_and_are_seeded():
    X = planted(5, n=200)
    assert np.array_equal(probe_kappas(X, 5, seed=3), probe_kappas(X, 5, seed=3))
    with pytest.raises(CoreError, match="modulus"):
        probe_kappas(X, 150)


def test_number_spectrum_flags_the_planted_period_in_its_layer_only():
    rng = np.random.default_rng(2)
    noise = rng.normal(size=(521, 26))
    layers = np.stack([noise, planted(10, noise=0.3)])
    table = number_spectrum_table(layers, n_permutations=200)
    assert set(table["basis"]) == {"paper", "dft"} and set(table["layer"]) == {0, 1}
    paper1 = table[(table["layer"] == 1) & (table["basis"] == "paper")]
    top = paper1.sort_values("magnitude", ascending=False).iloc[0]
    assert top["period"] == pytest.approx(10) and top["outlier"]
    assert not table[(table["layer"] == 0)]["outlier"].any()


def test_spectra_and_probes_computed_side_by_side_give_the_same_tables():
    """The number stage's worker processes (one per thread a run may use) change nothing but the time."""
    layers = np.stack([planted(10, n=120, noise=0.3, seed=s) for s in range(3)]).astype(np.float32)
    kw = dict(moduli=(2, 10), controls=(3,), n_splits=3, progress=False)
    pd_testing.assert_frame_equal(number_probes_table(layers, **kw), number_probes_table(layers, workers=2, **kw))
    pd_testing.assert_frame_equal(number_spectrum_table(layers, n_permutations=60),
                                  number_spectrum_table(layers, n_permutations=60, workers=2))


def test_transplant_matrix_is_an_isometry_of_the_centred_unit_rows():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 12)) + 3.0
    R = transplant_matrix(X, 20, seed=1)
    assert R.shape == (50, 20)
    C = X - X.mean(axis=0)
    C = C / np.linalg.norm(C, axis=1, keepdims=True)
    assert np.allclose(R @ R.T, C @ C.T, atol=1e-5)
    assert np.allclose(np.linalg.norm(R, axis=1), 1, atol=1e-5)
    assert np.array_equal(R, transplant_matrix(X, 20, seed=1))
    with pytest.raises(CoreError, match="width"):
        transplant_matrix(X, 8)


def test_single_token_representations_are_the_embedding_rows_then_the_hidden_states(loaded_model):
    lm = loaded_model("gpt2")
    reps = number_representations(lm, 40, progress=False)
    assert reps.context == "{n}" and reps.single_token  # the word-level demo vocabulary has no "number"
    assert reps.vectors.shape == (lm.n_layers + 1, 40, lm.width)
    assert np.allclose(reps.vectors[0], lm.number_embedding(40).numpy(), atol=0)
    ids = torch.as_tensor(lm.numbers.ids_for(40))[:, None]
    with torch.no_grad():
        hidden = lm.model(ids, output_hidden_states=True).hidden_states
    # block outputs before the last (transformers applies the final norm to its last hidden state)
    for layer in range(1, lm.n_layers):
        assert np.allclose(reps.vectors[layer], hidden[layer][:, -1].numpy(), atol=1e-5)


def test_digit_tokenizer_representations_read_the_last_digit(tmp_path):
    lm = load_model(str(save_random_model(tmp_path / "d", "llama", tokenizer=digit_tokenizer())))
    reps = number_representations(lm, 120, progress=False)
    assert not reps.single_token
    assert list(reps.tokens_per_number[[0, 9, 10, 99, 100, 119]]) == [1, 1, 2, 2, 3, 3]
    digit_rows = lm.model.get_input_embeddings().weight.detach()[torch_ids(lm, [str(n % 10) for n in range(120)])]
    assert np.allclose(reps.vectors[0], digit_rows.numpy())


def torch_ids(lm, words):
    return torch.as_tensor([lm.tokenizer.convert_tokens_to_ids(w) for w in words])


def test_context_rules(loaded_model):
    tok = loaded_model("gpt2").tokenizer
    assert choose_context(tok, "Count to {n}") == "Count to {n}"
    with pytest.raises(CoreError, match="end with"):
        choose_context(tok, "{n} apples")
    assert TARGET_MODULI == (2, 5, 10, 100)
