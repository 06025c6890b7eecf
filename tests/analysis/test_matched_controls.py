"""The energy-matched random control (`core.analysis.filters.energy_matched_filter`) against its definition:
a subspace of W_U's row space, of the band's rank, removing the band's share of the outputs' energy, computed
here independently from the vectors themselves (not from the second moment the code reads)."""

import numpy as np
import pytest

from core.analysis.ablations import Ablation
from core.analysis.filters import (
    energy_matched_filter,
    projection_filter,
    random_subspace_filter,
    removed_energy_share,
)
from core.analysis.fourier import band_frequencies, fourier_basis
from core.errors import CoreError

P, D = 61, 96


@pytest.fixture(scope="module")
def setting():
    rng = np.random.default_rng(3)
    W_U = rng.standard_normal((P, D))
    # outputs far from isotropic: a few strong directions, as module outputs are
    X = rng.standard_normal((400, D)) * np.geomspace(0.05, 5.0, D)
    return W_U, X, X.T @ X, fourier_basis(P)


def share_from_vectors(q: np.ndarray, X: np.ndarray) -> float:
    """sum ||Q Q^T x||^2 / sum ||x||^2, straight from the vectors."""
    removed = X @ q @ q.T
    return float((removed**2).sum() / (X**2).sum())


def test_the_share_is_the_energy_the_projection_takes_away(setting):
    W_U, X, C, basis = setting
    band = projection_filter(W_U, basis, band_frequencies(basis, "low", 8))
    assert removed_energy_share(band, C) == pytest.approx(share_from_vectors(band.q, X), rel=1e-10)
    assert removed_energy_share(band, C) == pytest.approx(
        1 - (band.apply(X) ** 2).sum() / (X**2).sum(), rel=1e-10)


@pytest.mark.parametrize("target", [0.02, 0.10, 0.30])
def test_a_matched_draw_has_the_band_s_rank_and_the_target_energy(setting, target):
    W_U, X, C, _ = setting
    draw = energy_matched_filter(W_U, 12, seed=5, second_moment=C, target_share=target)
    q = draw.flt.q
    assert draw.matched and q.shape == (D, 12)
    assert np.allclose(q.T @ q, np.eye(12), atol=1e-10)  # orthonormal: a projection of rank 12
    _, s, vt = np.linalg.svd(W_U, full_matrices=False)
    row_space = vt[: int((s > 1e-9 * s.max()).sum())].T
    assert np.allclose(row_space @ (row_space.T @ q), q, atol=1e-10)  # only directions W_U reads
    assert share_from_vectors(q, X) == pytest.approx(target, abs=1e-9)


def test_tilt_zero_is_the_rank_only_draw(setting):
    """With the target the rank-only draw already removes, the matched control is that very draw."""
    W_U, _, C, _ = setting
    plain = random_subspace_filter(W_U, 12, seed=5)
    draw = energy_matched_filter(W_U, 12, 5, C, removed_energy_share(plain, C))
    assert abs(draw.tilt) < 1e-6
    assert np.allclose(draw.flt.q @ draw.flt.q.T, plain.q @ plain.q.T, atol=1e-8)


def test_an_unreachable_target_says_so(setting):
    """No 3 directions of the row space carry 99% of the energy: the draw keeps the nearest end, unmatched, and
    removes no more than the top 3 eigen-directions of the outputs (within the row space) could."""
    W_U, X, C, _ = setting
    draw = energy_matched_filter(W_U, 3, 5, C, 0.99)
    assert not draw.matched and draw.share < 0.99
    _, s, vt = np.linalg.svd(W_U, full_matrices=False)
    V = vt[: int((s > 1e-9 * s.max()).sum())].T
    top3 = np.sort(np.linalg.eigvalsh(V.T @ C @ V))[-3:].sum() / np.trace(C)
    assert draw.share <= top3 + 1e-9


@pytest.mark.parametrize("rank", [18, 168])
def test_outputs_of_lower_rank_than_the_band_are_matched_anywhere_between_the_least_and_the_most(rank):
    """Fewer outputs than the width (a run cached on 40 prompts): most eigen-directions carry no energy and are
    weighted 1e-12 ** (tilt / 2), far below the rest. The share must still rise steadily with the tilt, from the
    least any `rank` directions of the row space can remove to the most, so every target between is matched
    (computed through U first, the weak directions were lost to rounding: the share fell again towards
    negative tilts and a band removing 87% of a 2-layer Llama's energy went unmatched by 0.5 points)."""
    rng = np.random.default_rng(0)
    W_U = rng.standard_normal((186, 192))  # the shape of a width-192 model's W_U over 0..185
    X = rng.standard_normal((40, 192)) * np.linspace(3, 0.1, 192)  # 40 outputs: rank 40 < 168
    C = X.T @ X
    V = np.linalg.svd(W_U, full_matrices=False)[2].T
    eig = np.sort(np.linalg.eigvalsh(V.T @ C @ V)) / np.trace(C)
    least, most = eig[:rank].sum(), eig[-rank:].sum()
    for target in np.linspace(least, most, 9)[1:-1]:
        assert energy_matched_filter(W_U, rank, 5, C, target).share == pytest.approx(target, abs=0.005), target
    assert energy_matched_filter(W_U, rank, 5, C, 0.0).share == pytest.approx(least, abs=0.01)


def test_different_draws_differ_but_match_alike(setting):
    W_U, _, C, _ = setting
    a = energy_matched_filter(W_U, 12, 5, C, 0.2)
    b = energy_matched_filter(W_U, 12, 6, C, 0.2)
    assert a.share == pytest.approx(b.share, abs=1e-9)
    assert not np.allclose(a.flt.q @ a.flt.q.T, b.flt.q @ b.flt.q.T, atol=1e-3)


def test_the_ablation_matches_its_band_and_needs_the_outputs(setting):
    W_U, _, C, basis = setting
    band = Ablation("mlp", "low", 8).build(W_U, basis)
    ctrl = Ablation("mlp", "matched-low", 8, draw=2).build(W_U, basis, C)
    assert ctrl.rank == band.rank
    assert removed_energy_share(ctrl, C) == pytest.approx(removed_energy_share(band, C), abs=0.005)
    assert "rank and energy" in Ablation("mlp", "matched-low", 8).label()
    with pytest.raises(CoreError, match="second moment"):
        Ablation("mlp", "matched-low", 8).build(W_U, basis)
