import numpy as np
import pytest

from core.analysis.ablations import Ablation
from core.analysis.filters import high_pass, keep_frequency, low_pass, projection_filter
from core.analysis.fourier import band_frequencies, fourier_basis, frequency_magnitudes
from core.errors import CoreError


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(0)
    p, D = 41, 96  # wider than the 40 non-constant rows, so no filter erases everything
    return fourier_basis(p, "paper"), rng.normal(size=(p, D)), rng.normal(size=(5, D))


@pytest.mark.parametrize("band", ["low", "high"])
def test_filter_meets_constraint_and_is_idempotent(setup, band):
    basis, W_U, x = setup
    flt = high_pass(W_U, basis, 8) if band == "low" else low_pass(W_U, basis, 8)
    removed_rows = basis.rows_of(band_frequencies(basis, band, 8))
    y = flt.apply(x)
    assert np.abs(y @ W_U.T @ basis.matrix[removed_rows].T).max() < 1e-9
    assert np.allclose(flt.apply(y), y, atol=1e-10)
    nonzero_rows = int((np.abs(basis.matrix[removed_rows]).max(axis=1) > 1e-9).sum())  # sin(pi x) is a zero row
    assert not flt.erased and flt.rank == nonzero_rows
    # the kept rows of the logits are untouched only where the basis is orthogonal; the change is minimal:
    rng = np.random.default_rng(1)
    for _ in range(5):
        z = flt.apply(rng.normal(size=x.shape[1]) * 3)  # any other vector meeting the constraint
        assert np.all(np.linalg.norm(x - y, axis=1) <= np.linalg.norm(x - z, axis=1) + 1e-9)


def test_removed_part_lies_in_constraint_row_space(setup):
    basis, W_U, x = setup
    flt = low_pass(W_U, basis, 5)
    removed = x - flt.apply(x)
    A = basis.matrix[basis.rows_of(band_frequencies(basis, "high", 5))] @ W_U
    coef, *_ = np.linalg.lstsq(A.T, removed.T, rcond=None)
    assert np.allclose(A.T @ coef, removed.T, atol=1e-8)


def test_logits_of_filtered_output_have_no_removed_frequencies(setup):
    basis, W_U, x = setup
    y = high_pass(W_U, basis, 10).apply(x)
    mags = frequency_magnitudes(basis, y @ W_U.T)
    assert mags[:, :9].max() < 1e-8 and mags[:, 9:].min() > 1e-3


def test_keep_one_frequency(setup):
    basis, W_U, x = setup
    flt = keep_frequency(W_U, basis, 20)
    mags = frequency_magnitudes(basis, flt.apply(x) @ W_U.T)
    assert np.argmax(mags[0]) == 19
    mags[:, 19] = 0
    assert mags.max() < 1e-8
    with pytest.raises(CoreError, match="1..20"):
        keep_frequency(W_U, basis, 0)


def test_narrow_model_is_erased_and_flagged():
    basis = fourier_basis(521, "paper")
    W_U = np.random.default_rng(2).normal(size=(521, 64))
    flt = low_pass(W_U, basis, 50)  # removes 2*(260-50+1) = 422 rows (421 nonzero) > 64
    assert flt.erased and flt.rank == 64
    assert np.all(flt.apply(np.ones((2, 64))) == 0)
    flt2 = high_pass(W_U, basis, 10)  # 18 rows: fine
    assert not flt2.erased and flt2.rank == 18


def test_nothing_removed_is_identity(setup):
    basis, W_U, x = setup
    flt = projection_filter(W_U, basis, [])
    assert flt.rank == 0 and np.allclose(flt.apply(x), x)


def test_ablation_spec_checks_its_inputs(setup):
    basis, W_U, _ = setup
    assert Ablation().build(W_U, basis) is None
    assert Ablation("mlp", "low", 5).label() == "MLP: low frequencies removed (tau = 5)"
    with pytest.raises(CoreError, match="tau"):
        Ablation("mlp", "low")
    with pytest.raises(CoreError, match="modules"):
        Ablation("ffn", "low", 5)
    with pytest.raises(CoreError, match="tau"):
        Ablation("both", "high", 99).build(W_U, basis)
    with pytest.raises(CoreError, match="number rows"):
        low_pass(W_U[:10], basis, 5)
