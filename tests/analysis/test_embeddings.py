import numpy as np
import pytest

from core.analysis.behaviour import error_histogram, error_summary, read_answers_csv
from core.analysis.clusters import embedding_clusters
from core.analysis.embeddings import (
    embedding_spectrum,
    permutation_null,
    shuffled_spectra,
    spectrum_table,
    top_periods,
)
from core.analysis.fourier import fourier_basis
from core.errors import CoreError


def planted_embedding(p=521, D=48, periods=(10, 5, 2), noise=0.3, seed=0):
    rng = np.random.default_rng(seed)
    x = np.arange(p)
    W = noise * rng.normal(size=(p, D))
    for j, T in enumerate(periods):
        W[:, 2 * j] += np.cos(2 * np.pi * x / T)
        W[:, 2 * j + 1] += np.sin(2 * np.pi * x / T)
    return W


def test_planted_sinusoids_peak_at_their_periods():
    basis = fourier_basis(521, "paper")
    table = spectrum_table(planted_embedding(), basis, n_permutations=200)
    assert sorted(top_periods(table, 3)) == [2.0, 5.0, 10.0]
    assert set(table.loc[table["outlier"], "period"]) == {2.0, 5.0, 10.0}
    # away from the planted periods, magnitudes look like the shuffled baseline
    quiet = table[~table["period"].isin([2.0, 5.0, 10.0])]
    assert quiet["magnitude"].median() < 2 * quiet["null_mean"].median()


@pytest.mark.parametrize("basis_name", ["paper", "dft"])
def test_null_model_controls_the_family_wise_error(basis_name):
    """Pure-noise embeddings: at most about 5% of them show any outlier at all (a per-frequency 95th
    percentile would flag about 5% of the frequencies of every one of them)."""
    basis = fourier_basis(61, basis_name)
    rng = np.random.default_rng(7)
    trials = 120
    any_outlier = sum(
        bool(spectrum_table(rng.normal(size=(61, 12)), basis, n_permutations=400, seed=s)["outlier"].any())
        for s in range(trials)
    )
    assert any_outlier / trials <= 0.10, f"{any_outlier} of {trials} noise embeddings had an outlier"
    # the threshold is a family-wise one: far above a per-frequency 95th percentile
    W = rng.normal(size=(61, 12))
    mean, threshold = permutation_null(W, basis, n_permutations=400)
    assert (threshold > mean).all()


def test_null_model_ignores_columns_outside_the_row_space():
    """The spectrum needs only W W^T: a low-rank W padded to many columns gives the same null."""
    basis = fourier_basis(61, "dft")
    rng = np.random.default_rng(3)
    low = rng.normal(size=(61, 3)) @ rng.normal(size=(3, 40))
    a = permutation_null(low, basis, n_permutations=50, seed=1)
    q, _ = np.linalg.qr(rng.normal(size=(40, 40)))  # rotate the columns: same geometry
    b = permutation_null(low @ q, basis, n_permutations=50, seed=1)
    assert np.allclose(a[0], b[0]) and np.allclose(a[1], b[1])
    assert np.allclose(embedding_spectrum(low, basis), embedding_spectrum(low @ q, basis))


@pytest.mark.parametrize("basis_name", ["paper", "dft"])
@pytest.mark.parametrize("p, D", [(61, 12), (60, 90), (521, 8), (114, 3)])
def test_shuffled_spectra_are_the_spectra_of_the_shuffled_rows(basis_name, p, D):
    """The Gram-matrix route gives, for every permutation, the definition: the spectrum of W with its rows relabelled
    (odd and even p, fewer and more columns than rows, a rank-deficient W, the identity permutation)."""
    basis = fourier_basis(p, basis_name)
    rng = np.random.default_rng(p + D)
    W = rng.normal(size=(p, D)) * np.linspace(0.2, 2.0, D)
    if D > 3:
        W[:, -1] = W[:, 0] - W[:, 1]  # rank-deficient
    perms = [np.arange(p)] + [rng.permutation(p) for _ in range(6)]
    fast = shuffled_spectra(W, basis, perms)
    slow = np.array([embedding_spectrum(W[perm], basis) for perm in perms])
    assert fast.shape == (len(perms), basis.n_freq)
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-9 * slow.max())
    # a shuffle that is not a relabelling of the original rows gives another spectrum: the check can fail
    assert not np.allclose(shuffled_spectra(W, basis, perms[1:2]), slow[2:3])


def test_spectrum_is_norm_of_transformed_rows():
    basis = fourier_basis(41, "dft")
    W = np.random.default_rng(1).normal(size=(41, 7))
    mags = embedding_spectrum(W, basis)
    coeff = basis.matrix @ W
    k = 3
    rows = basis.rows_of([k])
    assert np.isclose(mags[k - 1], np.sqrt((np.linalg.norm(coeff[rows], axis=1) ** 2).sum()))
    with pytest.raises(CoreError, match="41 number rows"):
        embedding_spectrum(W[:40], basis)


def test_clusters_have_coordinates_and_labels():
    table = embedding_clusters(planted_embedding(p=101, D=16), n_clusters=10, seed=0)
    assert list(table["number"]) == list(range(101))
    assert table["cluster"].nunique() == 10
    assert np.isfinite(table[["x", "y"]].to_numpy()).all()
    assert (table["last_digit"] == table["number"] % 10).all()


def test_error_summary_counts_multiples_of_ten():
    s = error_summary([10, 20, 30, 40, 50], [10, 30, 29, 140, 52])
    assert s.n == 5 and s.n_wrong == 4 and s.accuracy == 0.2
    assert s.share_multiple_of_10 == 0.5 and s.share_within_2 == 0.5
    hist = error_histogram([10, 20, 30, 40, 50], [10, 30, 29, 140, 52])
    assert dict(zip(hist["error"], hist["count"])) == {-1: 1, 2: 1, 10: 1, 100: 1}


def test_uploaded_csv_is_checked():
    ok = read_answers_csv(b"a,b,answer_given\n15,93,108\n1,2,13\n")
    assert list(ok["answer"]) == [108, 3] and list(ok["answer_given"]) == [108, 13]
    with pytest.raises(CoreError, match="lacks the column"):
        read_answers_csv("a,b,answer\n1,2,3\n")
    with pytest.raises(CoreError, match=r"row 2 of the file has '3.5'$"):
        read_answers_csv("a,b,answer_given\n1,2,3.5\n")
    with pytest.raises(CoreError, match="between"):
        read_answers_csv("a,b,answer_given\n1,2,99999999999999999999999\n")
    with pytest.raises(CoreError, match="row 3 of the file has 'x'"):
        read_answers_csv("a,b,answer_given\n1,2,3\n1,2,x\n")
    with pytest.raises(CoreError, match="at most 2"):
        read_answers_csv("a,b,answer_given\n1,2,3\n1,2,3\n1,2,3\n", max_rows=2)
    with pytest.raises(CoreError, match="UTF-8"):
        read_answers_csv(b"\xff\xfe\x00a")
    with pytest.raises(CoreError, match="no rows"):
        read_answers_csv("a,b,answer_given\n")
