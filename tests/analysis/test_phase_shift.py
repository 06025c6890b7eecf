"""The phase shift (core.analysis.phase_shift) against its definition, solved independently."""

import numpy as np
import pytest

from core.analysis.fourier import fourier_basis
from core.analysis.phase import wave_coefficients
from core.analysis.phase_shift import (
    EDIT_CAP,
    PERIOD_SETS,
    phase_shift,
    random_direction,
    shift_decomposition,
    shift_outcomes,
)
from core.errors import CoreError

P = 521
KS = [260, 208, 104, 52]  # periods 2, 2.5, 5, 10


def kkt_solution(W_U, basis, ks, d, x):
    """The least-norm edit from the KKT system of the constrained problem, solved with lstsq: an independent
    computation of the definition (no pseudo-inverse of the stacked constraints)."""
    W = W_U - W_U.mean(0, keepdims=True)
    A = basis.matrix @ W
    rows_s = [int(np.flatnonzero((basis.freq == k) & (basis.kind == kind))[0]) for k in ks for kind in ("sin", "cos")]
    rows_o = [i for i in range(len(basis.freq)) if basis.freq[i] > 0 and i not in rows_s]
    c = A[rows_s] @ x
    target = []
    for j, k in enumerate(ks):
        s, co = c[2 * j], c[2 * j + 1]
        a = 2 * np.pi * k * d / (P - 1)
        target += [s * np.cos(a) + co * np.sin(a) - s, co * np.cos(a) - s * np.sin(a) - co]
    C = np.vstack([A[rows_s], A[rows_o]])
    b = np.concatenate([target, np.zeros(len(rows_o))])
    D = W.shape[1]
    K = np.block([[np.eye(D), C.T], [C, np.zeros((len(C), len(C)))]])
    sol = np.linalg.lstsq(K, np.concatenate([np.zeros(D), b]), rcond=None)[0]
    return sol[:D], C, b


@pytest.mark.parametrize("d", [1, 2, 5])
def test_the_edit_is_the_least_norm_solution_and_moves_every_wave_by_d(d):
    rng = np.random.default_rng(d)
    W_U = rng.standard_normal((P, 560))
    basis = fourier_basis(P, "paper")
    shift = phase_shift(W_U, basis, PERIOD_SETS["all"], d)
    x = rng.standard_normal(560)
    delta = shift.delta(x)
    expected, C, b = kkt_solution(W_U, basis, KS, d, x)
    assert np.allclose(C @ delta, b, atol=1e-8) and shift.misfit < 1e-10
    assert np.allclose(delta, expected, atol=1e-8)
    before = wave_coefficients(P, W_U @ x, KS)
    after = wave_coefficients(P, W_U @ (x + delta), KS)
    w = 2 * np.pi * np.array(KS) / (P - 1)
    moved = np.angle(np.exp(1j * (np.arctan2(after[:, 0], after[:, 1]) - np.arctan2(before[:, 0], before[:, 1]))))
    assert np.allclose(np.angle(np.exp(1j * (moved - w * d))), 0, atol=1e-8)  # each peak moved by d (mod T)
    assert np.allclose(np.linalg.norm(after, axis=1), np.linalg.norm(before, axis=1))


def test_a_planted_answer_moves_by_d_and_the_control_has_the_same_norm():
    """Logits = a broad bump at y plus short waves peaked at y: shifting the short waves by d moves the argmax to y + d;
    the random-direction control changes x by exactly the edit's norm."""
    rng = np.random.default_rng(0)
    basis = fourier_basis(P, "paper")
    W_U = rng.standard_normal((P, 600))
    xs = np.arange(P)
    for y in (108, 260, 33):
        logits = -((xs - y) / 40.0) ** 2 + sum(np.cos(2 * np.pi * (xs - y) / t) for t in (2, 2.5, 5, 10))
        x = np.linalg.lstsq(W_U, logits, rcond=None)[0]
        for d in (1, 2):
            shift = phase_shift(W_U, basis, PERIOD_SETS["all"], d)
            assert int(np.argmax(W_U @ shift.apply(x))) == y + d
            control = shift.control(random_direction(W_U, seed=d))
            assert np.linalg.norm(control.apply(x) - x) == pytest.approx(np.linalg.norm(shift.delta(x)))


def test_outcomes_and_bad_periods():
    out = shift_outcomes(np.array([10, 20, 30, 520]), np.array([11, 20, 41, 0]), 1, P, 10)
    assert out["n"] == 3 and out["moved"] == pytest.approx(1 / 3) and out["stayed"] == pytest.approx(1 / 3)
    assert out["residue_moved"] == pytest.approx(2 / 3)  # 30 -> 41: the last digit moved by 1, the size did not
    with pytest.raises(CoreError, match="not frequencies"):
        phase_shift(np.ones((P, 8)), fourier_basis(P, "paper"), (3.0,), 1)


def ill_conditioned_unembedding(rng, width: int = 120) -> np.ndarray:
    """W_U whose singular values fall over five decades: its weak directions make the least-norm edit large."""
    u, _ = np.linalg.qr(rng.standard_normal((P, width)))
    v, _ = np.linalg.qr(rng.standard_normal((width, width)))
    return (u * np.logspace(0, -5, width)) @ v.T


def test_the_capped_edit_keeps_the_most_directions_whose_median_size_is_within_the_cap():
    """Each size is recomputed from the truncated edit itself (delta_k(x) = left_k right x): it grows with the
    directions kept, the capped edit is the largest k within the cap, and one more direction would break it."""
    rng = np.random.default_rng(3)
    W_U = ill_conditioned_unembedding(rng)
    basis = fourier_basis(P, "paper")
    dec = shift_decomposition(W_U, basis, PERIOD_SETS["all"], 1)
    outputs = rng.standard_normal((40, W_U.shape[1]))

    def median_size(k):
        edit = dec.edit(k)
        return float(np.median(np.linalg.norm(edit.delta(outputs), axis=1) / np.linalg.norm(outputs, axis=1)))

    sizes = [median_size(k) for k in range(1, dec.rank + 1)]
    assert np.all(np.diff(sizes) >= -1e-9)  # more directions, a larger edit
    assert sizes[-1] > 10 * EDIT_CAP  # uncapped, this W_U's edit dwarfs the output it edits
    capped = dec.capped_edit(outputs)
    assert capped.kept < capped.full_rank == dec.rank
    assert capped.edit_size == pytest.approx(sizes[capped.kept - 1]) and capped.edit_size <= EDIT_CAP
    assert sizes[capped.kept] > EDIT_CAP  # the next direction would pass the cap
    assert 0 < capped.misfit < 1 and dec.edit().misfit < capped.misfit  # what the dropped directions leave unmet
    control = capped.control(random_direction(W_U, seed=1))  # the control keeps the capped edit's size
    x = outputs[0]
    assert np.linalg.norm(control.apply(x) - x) == pytest.approx(np.linalg.norm(capped.delta(x)))


def test_a_well_conditioned_unembedding_keeps_every_direction_and_the_uncapped_edit():
    rng = np.random.default_rng(4)
    W_U = rng.standard_normal((P, 560))
    dec = shift_decomposition(W_U, fourier_basis(P, "paper"), PERIOD_SETS["all"], 2)
    outputs = rng.standard_normal((30, 560))
    capped = dec.capped_edit(outputs, cap=10.0)
    full = phase_shift(W_U, fourier_basis(P, "paper"), PERIOD_SETS["all"], 2)
    assert capped.kept == capped.full_rank and np.allclose(capped.delta(outputs), full.delta(outputs))
