"""Null models of the filters and module spectra: the rank tolerance, the random-subspace control of
each band filter, and the baseline spectrum W_U gives to random vectors."""

import numpy as np
import pandas as pd
import pytest
import torch

from core.analysis.ablations import Ablation
from core.analysis.filters import high_pass, low_pass, random_subspace_filter, rank_tolerance
from core.analysis.fourier import band_frequencies, fourier_basis, frequency_magnitudes
from core.models.unembed import Unembed
from core.runs import summaries
from core.runs.measure import module_spectra_baseline

P = 521


TRUE_RANK = 12


def tied_low_rank_unembedding(width: int, freqs=(1, 5, 52, 104, 208, 260), scale: float = 1.0) -> np.ndarray:
    """Number rows built from sinusoids of six frequencies (like the fourier-frozen demo, whose periods
    2, 2.5, 5, 10, 100, 520 lie near k = 260, 208, 104, 52, 5, 1): a cosine and a sine each, rank 12
    at any width, and rank 2 for each of those frequencies a band filter removes."""
    rng = np.random.default_rng(0)
    n = np.arange(P)[:, None]
    cols = []
    for k in freqs:
        cols += [np.cos(2 * np.pi * k * n / P), np.sin(2 * np.pi * k * n / P)]
    features = np.hstack(cols)  # (P, 12)
    mix = np.linalg.qr(rng.standard_normal((width, features.shape[1])))[0].T  # orthonormal rows: equal singular values
    return scale * features @ mix


@pytest.mark.parametrize("width,dtype", [(640, np.float32), (256, np.float16), (256, np.float32)])
def test_filter_rank_is_the_true_rank_of_a_tied_low_rank_unembedding(width, dtype):
    W = tied_low_rank_unembedding(width).astype(dtype)
    assert np.linalg.matrix_rank(tied_low_rank_unembedding(width)) == TRUE_RANK  # float64
    basis = fourier_basis(P, "dft")  # orthonormal rows: each removed frequency of W adds exactly 2 to the rank
    for tau in (5, 50, 200):
        for flt, band in ((low_pass(W, basis, tau), "high"), (high_pass(W, basis, tau), "low")):
            removed = set(band_frequencies(basis, band, tau).tolist())
            assert flt.rank == 2 * len(removed & {1, 5, 52, 104, 208, 260})  # the true rank, not rounding noise
            assert not flt.erased
    # the paper's basis is not exactly orthogonal (frequencies leak into each other a little): at least the
    # frequencies in the band, never more than W_U's rank (the old 1e-9 tolerance counted rounding noise)
    paper = fourier_basis(P, "paper")
    for tau in (5, 50, 200):
        inside = 2 * len(set(band_frequencies(paper, "low", tau).tolist()) & {1, 5, 52, 104, 208, 260})
        assert inside <= high_pass(W, paper, tau).rank <= TRUE_RANK
    # the same through a torch tensor in float16: the dtype the weights are stored in sets the tolerance
    t = torch.as_tensor(tied_low_rank_unembedding(width)).to(torch.float16)
    assert high_pass(t, basis, 50).rank == 4  # k = 1, 5 removed


def test_rank_tolerance_follows_numpys_matrix_rank_convention():
    assert rank_tolerance(2.0, (10, 30), np.float32) == pytest.approx(2.0 * 30 * np.finfo(np.float32).eps)
    assert rank_tolerance(1.0, (5, 4), "float16") == pytest.approx(5 * np.finfo(np.float16).eps)
    assert rank_tolerance(1.0, (5, 4), torch.bfloat16) == pytest.approx(5 * 2.0**-7)
    # a full-rank random W_U is still full rank (nothing real is discarded)
    W = np.random.default_rng(1).standard_normal((P, 64)).astype(np.float16)
    assert high_pass(W, fourier_basis(P), 50).rank == 64


def test_random_control_matches_the_band_filters_rank_in_w_us_row_space():
    W = tied_low_rank_unembedding(256)
    basis = fourier_basis(P, "dft")
    for removed, band in (("random-low", "low"), ("random-high", "high")):
        spec = Ablation("both", removed, 5)
        ctrl = spec.build(W, basis)
        band_filter = Ablation("both", band, 5).build(W, basis)
        assert ctrl.rank == band_filter.rank and not ctrl.erased
        q = ctrl.q
        assert np.allclose(q.T @ q, np.eye(ctrl.rank), atol=1e-10)  # orthonormal
        # inside the row space of W_U: projecting onto that space changes nothing
        _, s, vt = np.linalg.svd(W, full_matrices=False)
        row = vt[: np.linalg.matrix_rank(W)].T
        assert np.allclose(row @ (row.T @ q), q, atol=1e-8)
        # seeded: the same spec gives the same subspace; not the band filter's subspace
        assert np.allclose(spec.build(W, basis).q, q)
        if band_filter.rank < TRUE_RANK:
            overlap = np.linalg.svd(band_filter.q.T @ q, compute_uv=False)
            assert overlap.min() < 0.99
    assert "random subspace of the low band's rank" in Ablation("mlp", "random-low", 5).label()


def test_random_subspace_is_haar_distributed_within_the_row_space():
    """Averaged over seeds, the projector onto a random r-subspace of an m-dim space is (r/m) I there."""
    W = tied_low_rank_unembedding(64)
    _, s, vt = np.linalg.svd(W, full_matrices=False)
    row = vt[:TRUE_RANK].T
    mean = np.zeros((64, 64))
    for seed in range(400):
        q = random_subspace_filter(W, 3, seed).q
        mean += q @ q.T / 400
    assert np.allclose(mean, (3 / TRUE_RANK) * row @ row.T, atol=0.03)


def test_module_spectra_baseline_is_what_w_u_gives_random_vectors():
    p, width = 61, 32
    basis = fourier_basis(p, "dft")
    K = basis.n_freq
    # W_U whose columns hold only frequencies 7 and 11: any vector read through it has a spectrum there alone
    n = np.arange(p)[:, None]
    waves = np.hstack(
        [np.cos(2 * np.pi * 7 * n / p), np.sin(2 * np.pi * 7 * n / p), 2 * np.cos(2 * np.pi * 11 * n / p)]
    )
    W = waves @ np.random.default_rng(0).standard_normal((3, width))
    unembed = Unembed(torch.as_tensor(W, dtype=torch.float32), None, None)
    rms = {"attn": np.array([1.0, 3.0]), "mlp": np.array([2.0, 0.5]), "resid": np.array([1.0, 1.0, 1.0])}
    means = {}
    rng = np.random.default_rng(1)
    for m, r in rms.items():
        means[(m, "dft")] = rng.uniform(0.1, 1.0, size=(len(r), K))
    table = module_spectra_baseline(unembed, {"dft": basis}, means, rms, draws=4000, seed=0)
    assert len(table) == (2 + 2 + 3) * K
    one = table[(table["module"] == "attn") & (table["layer"] == 1)].set_index("k")
    # the shape is W_U's: only k = 7 and 11 carry anything
    assert one.loc[[7, 11], "magnitude"].min() > 0.1
    assert one.drop(index=[7, 11])["magnitude"].max() < 1e-4 * one.loc[7, "magnitude"]
    # the definition: mean over isotropic Gaussian vectors of |(F W_U x)_k|, scaled to the module's total energy
    x = np.random.default_rng(5).standard_normal((20000, width)) / np.sqrt(width)
    shape = frequency_magnitudes(basis, x @ W.T).mean(0)
    module = means[("attn", "dft")][0]
    expected = shape * np.sqrt((module**2).sum() / (shape**2).sum())
    assert one["magnitude"].to_numpy() == pytest.approx(expected, rel=0.05, abs=1e-6)
    assert (one["magnitude"] ** 2).sum() == pytest.approx((module**2).sum())
    assert (table["magnitude_p95"] >= table["magnitude"]).all() and set(table["match"]) == {"energy"}
    assert set(table.loc[(table["module"] == "attn"), "rms_norm"]) == {1.0, 3.0}


def test_views_compare_spectra_with_the_baseline_and_filters_with_their_controls():
    spectra = pd.DataFrame(
        {
            "basis": "dft",
            "module": "mlp",
            "layer": 1,
            "k": [1, 2, 3],
            "period": [9.0, 4.5, 3.0],
            "magnitude": [5.0, 1.0, 0.2],
        }
    )
    baseline = pd.DataFrame(
        {
            "basis": "dft",
            "module": "mlp",
            "layer": 1,
            "k": [1, 2, 3],
            "period": [9.0, 4.5, 3.0],
            "magnitude": [1.0, 1.0, 1.0],
            "magnitude_p95": [2.0, 2.0, 2.0],
            "rms_norm": 1.0,
            "match": "norm",
        }
    )
    ex = summaries.spectrum_excess(spectra, baseline, "dft", "mlp", 1)
    assert ex["excess"].tolist() == [4.0, 0.0, -0.8] and ex["above_p95"].tolist() == [True, False, False]
    assert ex["ratio"].tolist() == pytest.approx([5.0, 1.0, 0.2]) and ex["above"].tolist() == [True, False, False]
    with pytest.raises(Exception, match="no spectrum or baseline"):
        summaries.spectrum_excess(spectra, baseline, "dft", "attn", 1)
    ab = pd.DataFrame(
        {
            "modules": ["both"] * 4,
            "removed": ["low", "high", "random-low", "random-high"],
            "tau": [5] * 4,
            "rank": [8, 40, 8, 40],
            "accuracy": [0.1, 0.5, 0.9, 0.6],
            "loss": [3.0, 1.0, 0.2, 0.9],
        }
    )
    cmp = summaries.control_comparison(ab).set_index("band")
    assert (
        cmp.loc["low", "accuracy"] == 0.1 and cmp.loc["low", "control_accuracy"] == 0.9 and cmp.loc["low", "rank"] == 8
    )
    assert summaries.control_comparison(ab[ab["removed"].isin(["low", "high"])]).empty
