"""Number-embedding spectra (docs/method.md, "Embedding spectrum") with a permutation null model.

Embedding spectrum: W_E (p x D) holds the input-embedding rows of the numbers 0..p-1. Apply the
Fourier transform along the number axis to every column (F W_E) and take the L2 norm of each
row: one magnitude per Fourier row; per frequency k, sqrt(|sin_k row|^2 + |cos_k row|^2).
A pre-trained model shows outliers at periods 2, 2.5, 5, 10; a model trained from scratch none.

There is no null model in the paper: "outlier" is judged by eye. Here the spectrum comes with a
permutation null model: the same spectrum with the rows of W_E shuffled (numbers relabelled at
random), which keeps every row but destroys any order along the number line. A frequency is an
outlier when it exceeds a threshold that controls the family-wise error over all K frequencies at
5%: each permutation's spectrum is divided by the permutations' mean spectrum (so frequencies with
one Fourier row and frequencies with two are on one scale), its maximum over frequencies is taken,
and the threshold at k is the 95th percentile of those maxima times the mean at k. A pure-noise
embedding then has any outlier at all in about 5% of cases (a per-frequency 95th percentile would
flag about 5% of its frequencies, 13 of 260, every time).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.fourier import FourierBasis, as_array, magnitudes_from_coefficients
from core.errors import CoreError


def embedding_spectrum(embedding, basis: FourierBasis) -> np.ndarray:
    """Magnitude per frequency k = 1..K of the number embedding (p x D)."""
    W = _matrix(embedding, basis.p)
    coefficients = basis.matrix @ W  # (rows, D)
    row_norms = np.linalg.norm(coefficients, axis=1)
    return magnitudes_from_coefficients(basis, row_norms)


#: Permutations of the null model (at least 1,000: the 95th percentile of a maximum needs them).
N_PERMUTATIONS = 1000
FAMILY_WISE_ALPHA = 0.05


def shuffled_spectra(embedding, basis: FourierBasis, permutations) -> np.ndarray:
    """`embedding_spectrum` of the embedding with its rows relabelled by each permutation (row x of the shuffled
    matrix is row perm[x]): an (n_permutations, K) array, computed from the Gram matrix alone.

    A frequency's magnitude squared is a^2 |sum_x e^{-i w x} W_perm[x]|^2 (a: the amplitude of its rows, sqrt(2 /
    span), or 1/sqrt(p) for an even DFT's last row), and |...|^2 = sum_{x,y} e^{-i w (x - y)} G[perm[x], perm[y]]
    with G = W W^T. Every basis frequency is periodic on n points (n = p for the DFT, p - 1 for the paper's basis,
    whose last point x = p - 1 coincides with x = 0 on every wave), so that is the real DFT of the circular
    autocorrelation c(d) = sum of G[u, v] over the pairs whose positions differ by d mod n: O(p^2) work a
    permutation instead of the O(p^2 rank) of transforming the shuffled matrix. The same numbers to about 1e-14
    (tests/analysis/test_embeddings.py checks them against the definition), unless the rows share a mean far
    larger than their spread, where G's rounding shows: about 1e-8 relative at 1,000 times.
    """
    W = _matrix(embedding, basis.p)
    p = basis.p
    n = p - 1 if basis.name == "paper" else p
    G = W @ W.T
    cos_rows = np.flatnonzero(basis.kind == "cos")
    amplitude_sq = np.zeros(basis.n_freq)
    amplitude_sq[basis.freq[cos_rows] - 1] = basis.matrix[cos_rows, 0] ** 2
    first, second = (i.astype(np.int32) for i in np.triu_indices(p, 1))
    pair_weights = G[first, second]
    trace = float(np.trace(G))
    reflect = (-np.arange(n)) % n
    spectra = []
    for perm in permutations:
        position = np.empty(p, np.int32)
        position[np.asarray(perm)] = np.arange(p, dtype=np.int32)
        if n != p:
            position[position == n] = 0  # the paper's last point is its first
        lag = position[second] - position[first]
        lag += np.where(lag < 0, n, 0).astype(np.int32)
        half = np.bincount(lag, weights=pair_weights, minlength=n)  # pairs u < v; G is symmetric
        autocorrelation = half + half[reflect]
        autocorrelation[0] += trace
        power = np.fft.rfft(autocorrelation).real[1 : basis.n_freq + 1]
        spectra.append(np.sqrt(np.maximum(amplitude_sq * power, 0.0)))
    return np.array(spectra).reshape(-1, basis.n_freq)


def permutation_null(
    embedding,
    basis: FourierBasis,
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
    alpha: float = FAMILY_WISE_ALPHA,
) -> tuple[np.ndarray, np.ndarray]:
    """(mean, family-wise threshold) per frequency k = 1..K, from row-shuffled embeddings (`shuffled_spectra`).

    The threshold controls the chance that a shuffled embedding has *any* frequency above it at
    `alpha`: it is the (1 - alpha) quantile of max_k (spectrum_k / mean_k) over the permutations,
    times mean_k.
    """
    if n_permutations < 1:
        raise CoreError(f"the null model needs at least one permutation, got {n_permutations}")
    rng = np.random.default_rng(seed)
    spectra = shuffled_spectra(embedding, basis, (rng.permutation(basis.p) for _ in range(n_permutations)))
    mean = spectra.mean(axis=0)
    safe = np.where(mean > 0, mean, 1.0)
    max_ratio = (spectra / safe).max(axis=1)
    return mean, np.quantile(max_ratio, 1 - alpha) * safe


def spectrum_table(embedding, basis: FourierBasis, n_permutations: int = N_PERMUTATIONS, seed: int = 0) -> pd.DataFrame:
    """Long table: k, period, magnitude, null_mean, null_threshold (family-wise 5% over all
    frequencies, see `permutation_null`), outlier (magnitude above the threshold)."""
    mags = embedding_spectrum(embedding, basis)
    null_mean, threshold = permutation_null(embedding, basis, n_permutations, seed)
    ks = basis.frequencies
    return pd.DataFrame(
        {
            "k": ks,
            "period": basis.period(ks),
            "magnitude": mags,
            "null_mean": null_mean,
            "null_threshold": threshold,
            "outlier": mags > threshold,
        }
    )


def top_periods(table: pd.DataFrame, top: int = 6) -> list[float]:
    """Periods of the `top` largest magnitudes (k > 0), largest first."""
    return [float(x) for x in table.sort_values("magnitude", ascending=False)["period"].head(top)]


def _matrix(embedding, p: int) -> np.ndarray:
    W = as_array(embedding)
    if W.ndim != 2 or W.shape[0] != p:
        raise CoreError(f"expected an embedding of {p} number rows, got shape {W.shape}")
    return W
